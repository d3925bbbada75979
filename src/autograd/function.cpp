// Custom autograd functions (include/forge/autograd/function.h): the node a
// Function records, its context, and the checks on what backward returns.
//
// The node is made before forward runs (the context lives in it) and holds
// an edge per tensor input; once forward returned, the tensors it saved
// become SavedTensors, so the engine checks their versions as it does for
// every built-in rule (Note [Saved tensor versions] in engine.cpp).

#include "forge/autograd/function.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

#include "autograd/meta.h"
#include "autograd/node.h"
#include "autograd/record.h"
#include "core/tensor_internal.h"

namespace forge {

namespace detail {

using autograd::AutogradContext;
using autograd::Edge;
using autograd::Node;
using autograd::SavedTensor;
using autograd::Vjp;

class FunctionNode final : public Node {
 public:
  FunctionNode(const char* name, FunctionBackward backward, std::vector<Edge> edges,
               std::vector<bool> is_tensor_argument)
      : Node(name, {}, {}),
        backward_(backward),
        edges_store_(std::move(edges)),
        is_tensor_argument_(std::move(is_tensor_argument)) {
    bind(edges_store_, saved_store_);
    ctx_.node_ = this;
  }

  AutogradContext& ctx() noexcept { return ctx_; }

  // After forward: what it saved becomes SavedTensors (versions taken now).
  void save() {
    saved_store_.reserve(ctx_.to_save_.size());
    for (const Tensor& t : ctx_.to_save_) saved_store_.emplace_back(t);
    ctx_.to_save_.clear();
    bind(edges_store_, saved_store_);
    ctx_.forward_done_ = true;
  }

  std::vector<Tensor> saved_values() const {
    if (!ctx_.forward_done_) return ctx_.to_save_;
    std::vector<Tensor> out;
    out.reserve(saved_store_.size());
    for (const SavedTensor& s : saved_store_) {
      FORGE_CHECK(!s.modified(), backward, name(),
                  "a tensor saved for the backward pass was modified in place after it was saved (version ",
                  s.value().version(), "); compute into a new tensor instead");
      out.push_back(s.value());
    }
    return out;
  }

 private:
  void run(Vjp& vjp) override {
    std::vector<Tensor> grads = backward_(&ctx_, {vjp.grad()});
    const std::size_t inputs = edges_store_.size();
    const std::size_t arguments = is_tensor_argument_.size();
    const bool per_argument = grads.size() == arguments;
    FORGE_CHECK(per_argument || grads.size() == inputs, backward, name(), "backward returned ", grads.size(),
                " gradients; forward took ", inputs, " tensor inputs",
                arguments != inputs ? " (return one per tensor input, or one per argument)" : "");
    std::size_t input = 0;
    for (std::size_t k = 0; k < grads.size(); ++k) {
      if (per_argument && !is_tensor_argument_[k]) {
        FORGE_CHECK(!grads[k].defined(), backward, name(), "backward returned a gradient at position ", k,
                    " where forward took an argument that is not a tensor; return an undefined Tensor there");
        continue;
      }
      set_gradient(vjp, input++, std::move(grads[k]));
    }
  }

  void set_gradient(Vjp& vjp, std::size_t i, Tensor g) {
    if (!g.defined() || !vjp.needs(i)) return;
    FORGE_CHECK(g.shape() == vjp.input_shape(i), backward, name(), "backward returned a gradient of shape ", g.shape(),
                " for input ", i, " of shape ", vjp.input_shape(i));
    FORGE_CHECK(is_floating(g.dtype()), backward, name(), "backward returned a gradient of dtype ",
                dtype_name(g.dtype()), " for input ", i);
    vjp.set(i, std::move(g));
  }

  void drop_state() noexcept override {
    ctx_.saved_data.clear();
    ctx_.to_save_.clear();
    ctx_.non_differentiable_.clear();
  }

  FunctionBackward backward_;
  std::vector<Edge> edges_store_;
  std::vector<SavedTensor> saved_store_;
  std::vector<bool> is_tensor_argument_;
  AutogradContext ctx_;

  friend class FunctionCall;
};

FunctionCall::FunctionCall(const char* name, FunctionBackward backward, std::vector<Tensor> inputs,
                           std::vector<bool> is_tensor_argument) {
  const bool record = autograd::GradMode::is_enabled() && autograd::wants_grad(inputs);
  std::vector<Edge> edges;
  std::vector<bool> needs;
  edges.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    edges.push_back(record ? autograd::edge_to(t) : Edge());
    needs.push_back(edges.back().wants_grad());
  }
  node_ = new FunctionNode(name, backward, std::move(edges), std::move(is_tensor_argument));
  node_->ctx().needs_input_grad_ = std::move(needs);
}

FunctionCall::~FunctionCall() {
  if (node_) node_->release_ref();
}

AutogradContext* FunctionCall::ctx() const noexcept { return &node_->ctx(); }

Tensor FunctionCall::finish(Tensor out) {
  Ref<FunctionNode> node = Ref<FunctionNode>::adopt(std::exchange(node_, nullptr));
  FORGE_CHECK(out.defined(), invalid_argument, node->name(), "forward returned an undefined tensor");
  AutogradContext& ctx = node->ctx();
  bool differentiable = is_floating(out.dtype());
  for (const Tensor& t : ctx.non_differentiable_)
    if (t.is_same(out)) differentiable = false;
  bool record = false;
  for (const Edge& e : node->edges()) record = record || e.wants_grad();
  if (!record || !differentiable) return out;
  node->save();
  // The output must be a tensor nobody else holds (an input returned as is,
  // a tensor kept in saved_data): else the node goes on a view of it.
  if (out.impl()->ref_count() != 1 || out.requires_grad()) out = out.detach();
  autograd::attach(out, Ref<Node>::adopt(node.release()));
  return out;
}

std::string demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(mangled);
}

}  // namespace detail

namespace autograd {

void AutogradContext::save_for_backward(std::vector<Tensor> to_save) {
  FORGE_CHECK(!forward_done_, backward, node_->name(), "save_for_backward is called in forward, not after it");
  to_save_ = std::move(to_save);
}

std::vector<Tensor> AutogradContext::get_saved_variables() const { return node_->saved_values(); }

void AutogradContext::mark_non_differentiable(const std::vector<Tensor>& outputs) {
  non_differentiable_.insert(non_differentiable_.end(), outputs.begin(), outputs.end());
}

bool AutogradContext::needs_input_grad(std::size_t i) const {
  FORGE_CHECK(i < needs_input_grad_.size(), out_of_range, node_->name(), "needs_input_grad(", i, ") but forward took ",
              needs_input_grad_.size(), " tensor inputs");
  return needs_input_grad_[i];
}

[[noreturn]] void SavedValue::wrong_type(const char* wanted) const {
  FORGE_FAIL(invalid_argument, "saved_data", "holds a ", detail::demangle(value_.type().name()), ", not a ",
             detail::demangle(wanted));
}

double SavedValue::to_double() const {
  if (const auto* i = std::any_cast<std::int64_t>(&value_)) return static_cast<double>(*i);
  return get<double>();
}

std::int64_t SavedValue::to_int() const { return get<std::int64_t>(); }

bool SavedValue::to_bool() const { return get<bool>(); }

const Tensor& SavedValue::to_tensor() const { return get<Tensor>(); }

}  // namespace autograd
}  // namespace forge
