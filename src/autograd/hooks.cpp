// Tensor hooks, post-accumulate hooks, retain_grad and their handles
// (docs/AUTOGRAD.md "Hooks"; storage: Note [Where hooks live] in hooks.h).
//
// - register_hook: needs a tensor that requires grad. A hook sees the
//   gradient of its tensor (all contributions summed) before it is used: a
//   leaf's before it is accumulated or captured by grad(), a non-leaf's
//   before its node's VJP runs. An undefined return keeps the gradient; a
//   defined one must have its shape and dtype. Hooks run in registration
//   order, with grad mode as the engine's, under backward() and grad().
// - register_post_accumulate_grad_hook: leaves that require grad only;
//   called by backward() (never grad()) once per pass, when the leaf's .grad
//   is final for it (Note [Leaf hooks] in engine.cpp).
// - retain_grad: a non-leaf's gradient, after its hooks, lands in its .grad
//   under backward() (a fresh tensor the first time, out-of-place sums after).
//   An in-place op that gives the tensor a new node moves it there.

#include "autograd/hooks.h"

#include <algorithm>

#include "autograd/meta.h"
#include "autograd/node.h"
#include "core/tensor_internal.h"
#include "forge/autograd.h"
#include "forge/ops.h"

namespace forge {

namespace detail {

void HookEntry::remove() noexcept {
  active = false;
  if (running) return;  // the engine drops it when the call returns
  pre = nullptr;
  post = nullptr;
}

TensorHooks::~TensorHooks() {
  for (auto& e : pre) e->remove();
  for (auto& e : post) e->remove();
}

namespace {

// Marks `e` running for the call, and drops it afterwards if the call removed it.
template <typename Call>
void call_entry(HookEntry& e, Call&& call) {
  e.running = true;
  struct Done {
    HookEntry& e;
    ~Done() {
      e.running = false;
      if (!e.active) e.remove();
    }
  } done{e};
  call();
}

// Adds a hook to `list`, first dropping the entries whose handles removed them.
autograd::HookHandle add_entry(std::vector<Ref<HookEntry>>& list, Ref<HookEntry> entry) {
  std::erase_if(list, [](const Ref<HookEntry>& e) { return !e->active; });
  list.push_back(entry);
  return autograd::HookHandle(entry.release());
}

TensorHooks& hooks_of(const Tensor& t) {
  if (autograd::Node* fn = grad_fn_of(t)) return fn->ensure_hooks();
  AutogradMeta& meta = AutogradAccess::ensure_meta(*t.impl());
  if (!meta.hooks) meta.hooks = std::make_unique<TensorHooks>();
  return *meta.hooks;
}

}  // namespace

Tensor run_pre_hooks(TensorHooks& hooks, Tensor grad) {
  // By index, holding the entry: a hook may register or remove hooks.
  for (std::size_t i = 0; i < hooks.pre.size(); ++i) {
    Ref<HookEntry> e = hooks.pre[i];
    if (!e->active) continue;
    Tensor replaced;
    call_entry(*e, [&] { replaced = e->pre(grad); });
    if (!replaced.defined()) continue;
    FORGE_CHECK(replaced.shape() == grad.shape(), shape, "register_hook", "a hook returned a gradient of shape ",
                replaced.shape(), " for a gradient of shape ", grad.shape());
    FORGE_CHECK(replaced.dtype() == grad.dtype(), dtype, "register_hook", "a hook returned a gradient of dtype ",
                dtype_name(replaced.dtype()), " for a gradient of dtype ", dtype_name(grad.dtype()));
    check_same_runtime("register_hook", replaced, grad);
    grad = std::move(replaced);
  }
  return grad;
}

void run_post_hooks(TensorHooks& hooks, TensorImpl& leaf) {
  const Tensor tensor(Ref<TensorImpl>::share(&leaf));
  for (std::size_t i = 0; i < hooks.post.size(); ++i) {
    Ref<HookEntry> e = hooks.post[i];
    if (e->active) call_entry(*e, [&] { e->post(tensor); });
  }
}

Tensor run_node_hooks(TensorHooks& hooks, Tensor grad, bool to_grad) {
  grad = run_pre_hooks(hooks, std::move(grad));
  if (to_grad && hooks.retain) {
    Tensor& kept = hooks.retain->grad;
    kept = kept.defined() ? add(kept, grad) : grad.clone();
  }
  return grad;
}

void move_retain(TensorImpl& t, autograd::Node* node) noexcept {
  AutogradMeta* meta = AutogradAccess::meta(t);
  if (autograd::Node* old = AutogradAccess::grad_fn(t))
    if (TensorHooks* h = old->hooks(); h && h->retain == meta) h->retain = nullptr;
  meta->retains_grad = false;
  if (!node) return;
  try {
    node->ensure_hooks().retain = meta;
    meta->retains_grad = true;
  } catch (const std::bad_alloc&) {
    // Out of memory while recording an in-place op: the gradient is no longer retained.
  }
}

}  // namespace detail

namespace autograd {

HookHandle& HookHandle::operator=(HookHandle&& other) noexcept {
  if (this != &other) {
    if (entry_) entry_->release_ref();
    entry_ = std::exchange(other.entry_, nullptr);
  }
  return *this;
}

HookHandle::~HookHandle() {
  if (entry_) entry_->release_ref();
}

void HookHandle::remove() noexcept {
  if (entry_) entry_->remove();
}

bool HookHandle::active() const noexcept { return entry_ && entry_->active; }

}  // namespace autograd

using detail::AutogradAccess;

autograd::HookHandle Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) try {
  detail::check_input("register_hook", *this, "tensor");
  FORGE_CHECK(hook != nullptr, invalid_argument, "register_hook", "the hook is empty");
  FORGE_CHECK(requires_grad(), backward, "register_hook",
              "cannot register a hook on a tensor that does not require grad (shape ", shape(), ")");
  auto entry = Ref<detail::HookEntry>::adopt(new detail::HookEntry());
  entry->pre = std::move(hook);
  return detail::add_entry(detail::hooks_of(*this).pre, std::move(entry));
}
FORGE_CATCH_OOM("register_hook")

autograd::HookHandle Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) try {
  detail::check_input("register_post_accumulate_grad_hook", *this, "tensor");
  FORGE_CHECK(hook != nullptr, invalid_argument, "register_post_accumulate_grad_hook", "the hook is empty");
  FORGE_CHECK(requires_grad() && is_leaf(), backward, "register_post_accumulate_grad_hook",
              "only a leaf that requires grad accumulates a .grad; this tensor ",
              is_leaf() ? "does not require grad" : "is the output of ", is_leaf() ? "" : grad_fn_name());
  auto entry = Ref<detail::HookEntry>::adopt(new detail::HookEntry());
  entry->post = std::move(hook);
  return detail::add_entry(detail::hooks_of(*this).post, std::move(entry));
}
FORGE_CATCH_OOM("register_post_accumulate_grad_hook")

Tensor& Tensor::retain_grad() try {
  detail::check_input("retain_grad", *this, "tensor");
  FORGE_CHECK(requires_grad(), backward, "retain_grad",
              "cannot retain the gradient of a tensor that does not require grad (shape ", shape(), ")");
  if (is_leaf() || retains_grad()) return *this;  // a leaf keeps its .grad anyway
  detail::AutogradMeta& meta = AutogradAccess::ensure_meta(*impl());
  detail::grad_fn_of(*this)->ensure_hooks().retain = &meta;
  meta.retains_grad = true;
  return *this;
}
FORGE_CATCH_OOM("retain_grad")

bool Tensor::retains_grad() const {
  const detail::AutogradMeta* meta = AutogradAccess::meta(body());
  return meta && meta->retains_grad && !is_leaf();
}

}  // namespace forge
