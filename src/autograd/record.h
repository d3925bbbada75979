#pragma once
// How an op records itself on the tape (private to forge). An op computes its
// output, then, when needs_grad() says one of its inputs requires grad and
// grad mode is on, calls its rule in src/autograd/rules/, which calls record():
//
//   record(out, "mul", inputs(a, b), saves(a, b), [](Vjp& v) {
//     if (v.needs(0)) v.set(0, mul(v.grad(), v.saved(1)));
//     if (v.needs(1)) v.set(1, mul(v.grad(), v.saved(0)));
//   });
//
// The VJP runs with grad mode off; Vjp::set reduces broadcast dimensions and
// casts to the input's dtype, so a rule returns the gradient in the output's shape.

#include <array>
#include <utility>
#include <vector>

#include "autograd/meta.h"
#include "autograd/node.h"
#include "forge/autograd.h"

namespace forge::autograd {

template <typename T>
bool wants_grad(const T&) noexcept {  // scalars, dims, options
  return false;
}
inline bool wants_grad(const Tensor& t) noexcept { return t.defined() && t.impl()->requires_grad(); }
inline bool wants_grad(const std::vector<Tensor>& ts) noexcept {
  for (const Tensor& t : ts)
    if (wants_grad(t)) return true;
  return false;
}

// Whether an op over these arguments must record (any of them requires grad, grad mode on).
template <typename... Ts>
bool needs_grad(const Ts&... args) noexcept {
  return GradMode::is_enabled() && (wants_grad(args) || ...);
}

// In an op, after computing `out` from args...: records it when needed.
//   FORGE_RECORD(mul, out, a, b);  ->  rules::mul(out, a, b)
#define FORGE_RECORD(rule, out, ...) \
  if (::forge::autograd::needs_grad(__VA_ARGS__)) ::forge::autograd::rules::rule(out, __VA_ARGS__)

template <typename... Ts>
std::array<const Tensor*, sizeof...(Ts)> inputs(const Ts&... ts) noexcept {
  return {&ts...};
}
template <typename... Ts>
std::array<const Tensor*, sizeof...(Ts)> saves(const Ts&... ts) noexcept {
  return {&ts...};
}

// The edge to t's gradient: its node, itself as a leaf, or none.
Edge edge_to(const Tensor& t);
// Makes `out` the output of `node` (requires grad, not a leaf).
void attach(const Tensor& out, Ref<Node> node);
// Which of the op's tensors a saved value is (SavedTensor::source): its
// output, input i, or neither. Only a value with a history needs one.
inline std::int16_t saved_source(const Tensor& t, const Tensor& out, const Tensor* const* in, std::size_t n) noexcept {
  if (!t.defined()) return SavedTensor::kOther;
  if (t.is_same(out)) return SavedTensor::kOutput;
  if (!t.impl()->requires_grad()) return SavedTensor::kOther;
  for (std::size_t i = 0; i < n; ++i)
    if (in[i]->is_same(t)) return static_cast<std::int16_t>(i);
  return SavedTensor::kOther;
}

template <std::size_t NIn, std::size_t NSaved, typename F>
void record(const Tensor& out, const char* name, const std::array<const Tensor*, NIn>& in,
            const std::array<const Tensor*, NSaved>& saved, F fn) {
  auto* node = new RuleNode<F, NIn, NSaved>(name, std::move(fn));
  Ref<Node> ref = Ref<Node>::adopt(node);
  for (std::size_t i = 0; i < NIn; ++i) node->edges_store_[i] = edge_to(*in[i]);
  for (std::size_t i = 0; i < NSaved; ++i)
    node->saved_store_[i] = SavedTensor(*saved[i], saved_source(*saved[i], out, in.data(), NIn));
  attach(out, std::move(ref));
}

// For ops over a list of tensors (cat, stack).
template <typename F>
void record_list(const Tensor& out, const char* name, const std::vector<Tensor>& in, F fn) {
  std::vector<Edge> edges;
  edges.reserve(in.size());
  for (const Tensor& t : in) edges.push_back(edge_to(t));
  attach(out, Ref<Node>::adopt(new ListNode<F>(name, std::move(edges), {}, std::move(fn))));
}

// Hooks of Tensor::fill_/zero_/copy_ (Note [In-place writes under autograd]).
void before_fill(Tensor& self, const char* op);
void before_copy(const Tensor& self, const Tensor& src);
void after_copy(const Tensor& self, const Tensor& src);

// grad summed over the dimensions that broadcasting added or stretched, to `shape`.
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace forge::autograd
