// DataParallel: the module's gradients averaged over the ranks during
// backward, in buckets that overlap with the pass.
//
// Note [Buckets]
// The Reducer packs the trainable parameters, newest first (backward reaches
// the last layers first), into buckets of up to bucket_cap_mb bytes of one
// dtype, each a flat tensor of the context's pool kept for the module's
// life. Each parameter has a post-accumulate hook (Note [Leaf hooks] in
// engine.cpp): it copies the final .grad into its bucket's slice, and once
// every slice of a bucket is in, the bucket's mean all-reduce starts on the
// group's thread while backward goes on. Buckets start in their index order
// only (a ready bucket waits for the ones before it), because collectives
// match by order across ranks and readiness order can differ between ranks.
// The first hook of a pass queues the pass's end (autograd::queue_callback):
// there the buckets that never filled (unused parameters) are zero-filled
// and started, every reduction is waited for, and the means are copied back
// into .grad. The copies cost one pass over the gradients each way; libtorch
// avoids the second by making .grad a view of the bucket, which forge's
// optimizers (which may replace .grad) do not promise to keep.
//
// Note [Armed passes]
// The hooks sit on the parameters, so they see every backward through them,
// also one of a forward that called the module directly (an evaluation with
// gradients, a rank's private pass). As in libtorch, only a backward after a
// forward through DataParallel reduces: forward() arms the reducer (a
// forward under no_sync() or with grad mode off, an evaluation, leaves it as
// it is), and the pass's end disarms it. A pass whose forward
// ran under no_sync() accumulates locally.

#include "forge/distributed/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/tensor_internal.h"
#include "forge/autograd.h"
#include "forge/error.h"
#include "forge/runtime.h"

namespace forge::dist {

namespace {

struct Slot {
  std::string name;
  Tensor param;
  std::size_t bucket = 0;
  std::int64_t offset = 0;  // elements into the bucket
  Tensor view;              // its gradient's place in the bucket (the parameter's shape)
  bool ready = false;       // its gradient is in the bucket this pass
  bool used = false;        // it had a gradient this pass
};

struct Bucket {
  DType dtype = DType::f32;
  std::int64_t numel = 0;
  Tensor flat;
  std::vector<std::size_t> slots;
  std::size_t pending = 0;
  Work work;
};

}  // namespace

struct DataParallel::Reducer {
  DataParallel& ddp;
  std::vector<Slot> slots;
  std::vector<Bucket> buckets;
  std::vector<autograd::HookHandle> hooks;
  bool armed = false;      // a forward through DataParallel ran with sync on (Note [Armed passes])
  std::uint64_t pass = 0;  // the pass being reduced (0: none)
  std::size_t next_launch = 0;
  bool rebuilt = false;                  // Note [Buckets in the order backward finishes them]
  std::vector<std::size_t> ready_order;  // the first reduced pass's hook order
  Tensor used_mask;                      // find_unused_parameters, during a pass's end: i32 [slots], max over the ranks
  Work used_work;

  explicit Reducer(DataParallel& d) : ddp(d) {}
  ~Reducer() {
    for (auto& h : hooks) h.remove();
  }

  void build(const nn::NamedTensors& params) {
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      if (!it->second.requires_grad()) continue;
      slots.push_back(Slot{.name = it->first, .param = it->second});
    }
    std::vector<std::size_t> order(slots.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    layout(order);
    for (std::size_t i = 0; i < slots.size(); ++i)
      hooks.push_back(slots[i].param.register_post_accumulate_grad_hook([this, i](const Tensor&) { on_ready(i); }));
  }

  // The buckets over the slots in `order`: one open bucket per dtype, closed
  // when the next slot would pass the cap; numbered by their first slot.
  void layout(const std::vector<std::size_t>& order) {
    ExecContext& ctx = ddp.group_.context();
    const auto cap = static_cast<std::int64_t>(ddp.options_.bucket_cap_mb * 1024 * 1024);
    buckets.clear();
    std::vector<std::pair<DType, std::size_t>> open;
    for (std::size_t i : order) {
      Slot& s = slots[i];
      const DType dt = s.param.dtype();
      auto found = std::find_if(open.begin(), open.end(), [&](const auto& o) { return o.first == dt; });
      const auto bytes = static_cast<std::int64_t>(s.param.nbytes());
      if (found != open.end()) {
        Bucket& b = buckets[found->second];
        if (b.numel && (b.numel * static_cast<std::int64_t>(dtype_size(dt)) + bytes > cap)) {
          open.erase(found);
          found = open.end();
        }
      }
      if (found == open.end()) {
        buckets.push_back(Bucket{.dtype = dt});
        open.emplace_back(dt, buckets.size() - 1);
        found = open.end() - 1;
      }
      Bucket& b = buckets[found->second];
      s.bucket = found->second;
      s.offset = b.numel;
      b.numel += s.param.numel();
      b.slots.push_back(i);
    }
    // Held for the module's life, as an optimizer's state: outside the pool.
    for (Bucket& b : buckets) {
      b.flat = forge::detail::allocate_owned(ctx.runtime(), {b.numel}, b.dtype, "DataParallel");
      b.flat.zero_();
      b.pending = b.slots.size();
      for (std::size_t i : b.slots) {
        Slot& s = slots[i];
        s.view = b.flat.narrow(0, s.offset, s.param.numel()).view(s.param.shape());
      }
    }
    ddp.stats_.buckets = static_cast<std::int64_t>(buckets.size());
  }

  // Note [Buckets in the order backward finishes them]
  // Reverse registration order is only a guess at the order gradients become
  // ready (a parameter registered on the module itself comes before its
  // children's, yet may be used last in forward). The first reduced pass
  // records the order its hooks ran in; at its end the buckets are laid out
  // again in rank 0's order (broadcast, so every rank lays them out alike;
  // parameters that got no gradient follow), as libtorch rebuilds its buckets
  // after the first iteration.
  void rebuild() {
    std::vector<std::int64_t> order;
    std::vector<bool> seen(slots.size(), false);
    for (std::size_t i : ready_order)
      if (!seen[i]) {
        seen[i] = true;
        order.push_back(static_cast<std::int64_t>(i));
      }
    for (std::size_t i = 0; i < slots.size(); ++i)
      if (!seen[i]) order.push_back(static_cast<std::int64_t>(i));
    Tensor shared = ddp.group_.context().from_vector(order);
    ddp.group_.broadcast(shared, 0);
    const std::vector<std::int64_t> agreed = shared.to_vector<std::int64_t>();
    std::vector<std::size_t> layout_order;
    for (std::int64_t i : agreed) {
      FORGE_CHECK(i >= 0 && static_cast<std::size_t>(i) < slots.size(), distributed, "DataParallel",
                  "rank 0's bucket order names parameter ", i, " of ", slots.size(), ": the ranks' models differ");
      layout_order.push_back(static_cast<std::size_t>(i));
    }
    layout(layout_order);
    ready_order.clear();
  }

  // A pass that failed before its end: its started reductions are waited for
  // (the peers may be in them), and the state starts over.
  void reset() {
    // Every started reduction is waited for; a failed one was this pass's
    // error, already thrown, and does not fail the next pass.
    for (Bucket& b : buckets) {
      if (Work w = std::exchange(b.work, Work()); w.defined()) try {
          w.wait();
        } catch (const Error&) {
        }
      b.pending = b.slots.size();
    }
    if (Work w = std::exchange(used_work, Work()); w.defined()) try {
        w.wait();
      } catch (const Error&) {
      }
    clear_pass();
    ready_order.clear();  // a failed pass's order is not a pass's order
  }

  // The per-pass bookkeeping back to "no pass".
  void clear_pass() {
    for (Slot& s : slots) s.ready = s.used = false;
    next_launch = 0;
    pass = 0;
  }

  void on_ready(std::size_t i) {
    if (!armed) return;
    const std::uint64_t now = autograd::current_pass();
    if (now != pass) {
      if (pass != 0) reset();
      for (Bucket& b : buckets) b.pending = b.slots.size();
      pass = now;
      autograd::queue_callback([this] { finish(); });
    }
    Slot& s = slots[i];
    if (s.ready) return;  // a second hook call in one pass cannot happen; keep the count right regardless
    if (!rebuilt) ready_order.push_back(i);
    autograd::NoGradGuard no_grad;
    const Tensor grad = s.param.grad();
    if (grad.defined())
      s.view.copy_(grad);
    else
      s.view.zero_();
    s.ready = true;
    s.used = true;
    if (--buckets[s.bucket].pending == 0) launch_ready(true);
  }

  void launch_ready(bool early) {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      Bucket& b = buckets[next_launch++];
      b.work = ddp.group_.all_reduce_async(b.flat, ReduceOp::mean);
      (early ? ddp.stats_.early_launches : ddp.stats_.late_launches) += 1;
      ddp.stats_.bytes_reduced += b.numel * static_cast<std::int64_t>(dtype_size(b.dtype));
    }
  }

  // The pass's end (queued by its first hook).
  void finish() {
    const auto start = std::chrono::steady_clock::now();
    autograd::NoGradGuard no_grad;
    std::string unused;
    std::size_t unused_count = 0;
    for (Slot& s : slots) {
      if (s.ready) continue;
      s.ready = true;
      --buckets[s.bucket].pending;
      // A gradient accumulated under no_sync() is this rank's contribution.
      const Tensor accumulated = s.param.grad();
      if (ddp.options_.find_unused_parameters && accumulated.defined()) {
        s.view.copy_(accumulated);
        s.used = true;
        continue;
      }
      // Zeros keep the ranks in step: every rank starts every bucket.
      s.view.zero_();
      if (++unused_count <= 8) unused += (unused.empty() ? "" : ", ") + s.name;
    }
    launch_ready(false);
    if (ddp.options_.find_unused_parameters) {
      std::vector<std::int32_t> mask(slots.size());
      for (std::size_t i = 0; i < slots.size(); ++i) mask[i] = slots[i].used ? 1 : 0;
      used_mask = ddp.group_.context().from_vector(mask);  // on the context's device, as the buckets
      used_work = ddp.group_.all_reduce_async(used_mask, ReduceOp::max);
    }
    for (Bucket& b : buckets) std::exchange(b.work, Work()).wait();
    if (used_work.defined()) std::exchange(used_work, Work()).wait();
    clear_pass();
    armed = false;
    ddp.stats_.wait_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    ddp.stats_.reductions += 1;
    if (unused_count && !ddp.options_.find_unused_parameters) {
      ready_order.clear();
      FORGE_FAIL(backward, "DataParallel", unused_count, " parameter(s) got no gradient in this backward pass (",
                 unused, unused_count > 8 ? ", ..." : "",
                 "); construct DataParallel with find_unused_parameters = true if the model does not use every "
                 "parameter in every pass");
    }
    std::vector<std::int32_t> globally;
    if (used_mask.defined()) globally = used_mask.to_vector<std::int32_t>();
    used_mask = Tensor();
    for (std::size_t i = 0; i < slots.size(); ++i) {
      Slot& s = slots[i];
      if (!globally.empty() && globally[i] == 0) continue;
      Tensor grad = s.param.grad();
      if (grad.defined())
        grad.copy_(s.view);
      else
        s.param.set_grad(s.view.clone());
    }
    if (!rebuilt) {
      rebuilt = true;
      rebuild();
    }
  }
};

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, ProcessGroup& group, DataParallelOptions options)
    : module_(std::move(module)), group_(group), options_(options) {
  FORGE_CHECK(module_, invalid_argument, "DataParallel", "a null module");
  FORGE_CHECK(options_.bucket_cap_mb > 0, invalid_argument, "DataParallel", "bucket_cap_mb must be positive, got ",
              options_.bucket_cap_mb);
  {
    autograd::NoGradGuard no_grad;
    for (const Tensor& p : module_->parameters()) group_.broadcast(p, 0);
    for (const Tensor& b : module_->buffers()) group_.broadcast(b, 0);
  }
  reducer_ = std::make_unique<Reducer>(*this);
  reducer_->build(module_->named_parameters());
}

DataParallel::~DataParallel() = default;

Tensor DataParallel::forward(const Tensor& x) {
  if (options_.broadcast_buffers && group_.size() > 1) {
    autograd::NoGradGuard no_grad;
    for (const Tensor& b : module_->buffers()) group_.broadcast(b, 0);
  }
  if (sync_ && autograd::GradMode::is_enabled()) reducer_->armed = true;
  return module_->forward(x);
}

std::vector<std::vector<std::string>> DataParallel::bucket_names() const {
  std::vector<std::vector<std::string>> names;
  for (const Bucket& b : reducer_->buckets) {
    names.emplace_back();
    for (std::size_t i : b.slots) names.back().push_back(reducer_->slots[i].name);
  }
  return names;
}

}  // namespace forge::dist
