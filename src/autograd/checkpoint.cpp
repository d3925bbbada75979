// Activation checkpointing (forge/autograd/checkpoint.h): one node stands for
// a recorded stretch of the tape and recomputes it during backward.
//
// - Forward: fn runs recording, as without checkpointing. A walk from its
//   output over the nodes recorded since it started finds the stretch's
//   boundary (Note [Checkpoint boundary]). One "checkpoint" node is recorded
//   with an edge per input and per leaf read, saving those tensors (views:
//   no copies); the output is re-attached to it, so fn's nodes and the
//   activations they saved are freed. The peak during a checkpoint's forward
//   is therefore its own activations, not the whole step's.
// - Backward: the node's VJP reruns fn with grad mode on over detached
//   inputs, with the context's random generator as it was when the forward
//   started (restored afterwards), and with exec scopes not holding what it
//   makes (ScopeStack::Suspend). It then takes autograd::grad of the rerun's
//   output with respect to the detached inputs and the leaves, seeded with
//   the node's gradient, and hands those gradients to its edges. So the
//   gradients reach the leaves through the outer pass, which commits them
//   (Note [All-or-nothing .grad] in engine.cpp): no nested backward writes a
//   .grad, and a failing recompute leaves none behind.
// - The rerun's nodes are new and reach only its detached inputs and the
//   known leaves (checked by the same walk), so the nested pass never
//   touches the outer pass's nodes and their scratch.
//
// Note [Checkpoint boundary]
// Sequence numbers grow in recording order on a thread, so the nodes fn
// recorded are those numbered from peek_sequence_nr() at its start. An edge
// leaving them goes to: an input (its node, or its impl when a leaf), a leaf
// that requires grad (a parameter: becomes an edge of the checkpoint), or a
// node recorded before fn that is not an input's. That last one is refused:
// the recompute could not reach its value, so its gradient would be lost.

#include "autograd/checkpoint.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>
#include <unordered_set>

#include "autograd/hooks.h"
#include "autograd/meta.h"
#include "autograd/node.h"
#include "autograd/record.h"
#include "core/tensor_internal.h"
#include "forge/autograd.h"
#include "forge/exec_context.h"
#include "forge/ops.h"
#include "runtime/runtime_internal.h"

namespace forge::autograd {

namespace {

// Walks the nodes numbered `first` or above that root reaches (Note
// [Checkpoint boundary]); calls on_leaf(edge) for each edge to a leaf and
// on_outer(edge) for each edge to an earlier node.
template <typename OnLeaf, typename OnOuter>
void walk_stretch(Node* root, std::uint64_t first, OnLeaf&& on_leaf, OnOuter&& on_outer) {
  std::unordered_set<const Node*> seen{root};
  std::vector<Node*> stack{root};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->edges()) {
      if (e.leaf) {
        on_leaf(e);
      } else if (Node* child = e.node.get()) {
        if (child->sequence_nr() < first)
          on_outer(e);
        else if (seen.insert(child).second)
          stack.push_back(child);
      }
    }
  }
}

// Whether the output of fn was recorded by fn (else there is nothing to drop).
bool recorded_since(const Tensor& out, std::uint64_t first) {
  if (!out.defined() || !out.requires_grad()) return false;
  const Node* root = detail::grad_fn_of(out);
  return root != nullptr && root->sequence_nr() >= first;
}

// The edge naming this tensor as a leaf (for leaves found by the walk).
Edge leaf_edge(const Tensor& leaf) {
  Edge e;
  e.leaf = Ref<TensorImpl>::share(leaf.impl());
  e.shape = leaf.shape();
  e.dtype = leaf.dtype();
  return e;
}

Runtime& runtime_of(const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs)
    if (t.defined()) return t.runtime();
  return ExecContext::current_or_throw("checkpoint").runtime();
}

// Restores a generator's state when it dies (it holds the lease meanwhile).
class RestoreGenerator {
 public:
  RestoreGenerator(std::mt19937_64& rng, const std::mt19937_64& replay) : rng_(rng), now_(rng) { rng_ = replay; }
  ~RestoreGenerator() { rng_ = now_; }
  RestoreGenerator(const RestoreGenerator&) = delete;
  RestoreGenerator& operator=(const RestoreGenerator&) = delete;

 private:
  std::mt19937_64& rng_;
  std::mt19937_64 now_;
};

// The checkpoint node's VJP: saved(0..inputs-1) are the inputs,
// saved(inputs + j) the leaf leaves[j]; edges in the same order.
struct Recompute {
  CheckpointFn fn;
  std::size_t inputs = 0;
  // Per input, the input itself when it is a leaf that requires grad: fn may
  // also read it directly (a parameter passed as an input), and the rerun
  // reaches it then, not its detached copy.
  std::vector<Tensor> leaf_inputs;
  std::vector<Tensor> leaves;
  Shape shape;
  std::optional<std::mt19937_64> rng;  // the generator when the forward began, if fn drew from it
  Ref<Runtime> runtime;
  std::uint64_t scope_id = 0;

  void operator()(Vjp& v);
  Tensor rerun(const std::vector<Tensor>& in) const;
};

Tensor Recompute::rerun(const std::vector<Tensor>& in) const {
  GradModeGuard grad_on(true);
  if (!rng) return fn(in);
  const detail::Generator::Lease lease = runtime->generator().lease("checkpoint");
  RestoreGenerator replay(*lease, *rng);
  return fn(in);
}

void Recompute::operator()(Vjp& v) {
  // A VJP runs with grad mode off unless backward records itself
  // (create_graph); the nested grad() below would not record.
  FORGE_CHECK(!GradMode::is_enabled(), not_implemented, "checkpoint",
              "a backward that records (create_graph) through a checkpoint is not supported");
  std::vector<Tensor> in(inputs), wrt;
  std::vector<std::size_t> slot;  // per wrt: its edge; an input may have two (its copy and itself)
  std::unordered_set<const TensorImpl*> known;
  const auto want = [&](const Tensor& t, std::size_t edge) {
    known.insert(t.impl());
    if (!v.needs(edge)) return;
    wrt.push_back(t);
    slot.push_back(edge);
  };
  for (std::size_t i = 0; i < inputs; ++i) {
    if (!v.saved(i).defined()) continue;
    in[i] = v.saved(i).detach();
    if (v.needs(i)) in[i].requires_grad_(true);
    want(in[i], i);
    if (leaf_inputs[i].defined()) want(leaf_inputs[i], i);
  }
  for (std::size_t j = 0; j < leaves.size(); ++j) want(leaves[j], inputs + j);
  if (wrt.empty()) return;

  detail::ScopeStack::Suspend unheld(runtime->scopes());
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t first = peek_sequence_nr();
  const Tensor out = rerun(in);
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
  if (detail::ScopeStack::Frame* frame = runtime->scopes().find(scope_id)) {  // Note [Checkpoint stats]
    ++frame->recomputes;
    frame->recompute_ns += static_cast<std::uint64_t>(ns.count());
  }
  FORGE_CHECK(recorded_since(out, first) && out.shape() == shape, backward, "checkpoint",
              "recomputing the checkpointed function gave ",
              out.defined() ? detail::cat("an output of shape ", out.shape()) : std::string("no output"),
              out.defined() && !out.requires_grad() ? " that needs no gradient" : "", " where the forward gave shape ",
              shape, "; the function must compute the same thing when run again");
  walk_stretch(
      detail::grad_fn_of(out), first,
      [&](const Edge& e) {
        FORGE_CHECK(known.count(e.leaf.get()) > 0, backward, "checkpoint",
                    "recomputing the checkpointed function read a leaf of shape ", e.shape,
                    " that its forward did not read; the function must read the same tensors when run again");
      },
      [&](const Edge& e) {
        FORGE_FAIL(backward, "checkpoint", "recomputing the checkpointed function read a tensor of shape ", e.shape,
                   " made by ", e.node->name(), " outside it; pass it in the inputs");
      });

  GradOptions options;
  options.grad_outputs = {v.grad()};
  options.allow_unused = true;
  std::vector<Tensor> grads;
  {
    detail::LeafHooksPause pause;  // the outer pass runs the leaves' hooks on what this hands it
    grads = grad({out}, wrt, options);
  }
  for (std::size_t k = 0; k < grads.size(); ++k) {
    if (!grads[k].defined()) continue;
    Tensor g = grads[k];
    // An input read both through `in` and directly: the sum of both.
    if (k + 1 < grads.size() && slot[k + 1] == slot[k] && grads[k + 1].defined()) g = add(g, grads[++k]);
    v.set(slot[k], std::move(g));
  }
}

}  // namespace

Tensor checkpoint_in_scope(const CheckpointFn& fn, const std::vector<Tensor>& inputs, std::uint64_t scope_id) {
  FORGE_CHECK(static_cast<bool>(fn), invalid_argument, "checkpoint", "no function to run");
  for (const Tensor& t : inputs)
    if (t.defined()) detail::check_input("checkpoint", t, "input");
  if (!GradMode::is_enabled()) return fn(inputs);

  Runtime& rt = runtime_of(inputs);
  const std::mt19937_64 rng_at_start = *rt.generator().lease("checkpoint");
  std::vector<std::uint32_t> versions;
  for (const Tensor& t : inputs) versions.push_back(t.defined() ? t.version() : 0);
  const std::uint64_t first = peek_sequence_nr();
  Tensor out = fn(inputs);
  if (!recorded_since(out, first)) return out;
  FORGE_CHECK(&out.runtime() == &rt, device, "checkpoint", "the function's output belongs to another ExecContext (",
              static_cast<const void*>(&out.runtime()), ") than its inputs (", static_cast<const void*>(&rt), ")");

  // Keys by which an edge names input i: its node, or its impl when a leaf.
  std::vector<const void*> keys;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    FORGE_CHECK(!t.defined() || t.version() == versions[i], invalid_argument, "checkpoint",
                "the function wrote its input ", i, " of shape ", t.shape(),
                " in place; a recompute would read the written values: compute into a new tensor");
    const Node* fn_node = t.defined() ? detail::grad_fn_of(t) : nullptr;
    keys.push_back(fn_node ? static_cast<const void*>(fn_node) : t.defined() ? t.impl() : nullptr);
  }
  const auto is_input = [&](const void* key) { return std::find(keys.begin(), keys.end(), key) != keys.end(); };
  std::vector<Tensor> leaves;
  walk_stretch(
      detail::grad_fn_of(out), first,
      [&](const Edge& e) {
        if (is_input(e.leaf.get())) return;
        if (std::none_of(leaves.begin(), leaves.end(), [&](const Tensor& l) { return l.impl() == e.leaf.get(); }))
          leaves.emplace_back(e.leaf);
      },
      [&](const Edge& e) {
        FORGE_CHECK(is_input(e.node.get()), invalid_argument, "checkpoint", "the function reads a tensor of shape ",
                    e.shape, " made by ", e.node->name(),
                    " outside it; pass it in the inputs, so that backward's recompute reads it too");
      });

  std::vector<Edge> edges;
  std::vector<SavedTensor> saved;
  std::size_t bytes = 0;
  for (const Tensor& t : inputs) {
    edges.push_back(edge_to(t));
    saved.emplace_back(t);
    if (t.defined()) bytes += t.nbytes();
  }
  for (const Tensor& leaf : leaves) {
    edges.push_back(leaf_edge(leaf));
    saved.emplace_back(leaf);  // version-checked: the recompute reads it
  }
  std::vector<Tensor> leaf_inputs;
  for (const Tensor& t : inputs) leaf_inputs.push_back(t.defined() && t.requires_grad() && t.is_leaf() ? t : Tensor());
  Recompute replay{fn,          inputs.size(), std::move(leaf_inputs),   std::move(leaves),
                   out.shape(), std::nullopt,  Ref<Runtime>::share(&rt), scope_id};
  {
    const detail::Generator::Lease lease = rt.generator().lease("checkpoint");
    if (*lease != rng_at_start) replay.rng = rng_at_start;
  }
  auto* node = new ListNode<Recompute>("checkpoint", std::move(edges), std::move(saved), std::move(replay));
  Ref<Node> ref = Ref<Node>::adopt(node);
  Tensor result = out.detach();
  attach(result, std::move(ref));
  out = Tensor();  // drops fn's nodes and what they saved (unless fn kept some of its tensors)
  if (detail::ScopeStack::Frame* frame = rt.scopes().find(scope_id)) {  // Note [Checkpoint stats]
    ++frame->checkpoints;
    frame->checkpoint_bytes += bytes;
  }
  return result;
}

Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs) try {
  return checkpoint_in_scope(fn, inputs, 0);
}
FORGE_CATCH_OOM("checkpoint")

}  // namespace forge::autograd
