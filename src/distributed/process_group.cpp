// ProcessGroup: validates each collective, packs what is not packed, checks
// the ranks agree (debug), and hands packed buffers to its engine (comm.h).
//
// Policy:
//   - Every check that can fail runs before anything is queued: a refused call
//     leaves the tensors, the pool and the group as they were.
//   - A tensor is given to the engine as it is when it is packed; a view is
//     copied to a packed tensor first and, for what the collective writes,
//     copied back by the first wait (WorkState::finish). A write bumps the
//     tensor's version, so a value autograd saved is not read stale.
//   - Finished work is dropped on the user's thread at the next call
//     (Note [Work completion] in comm.h).
//   - A timeout breaks the group (Note [A broken group]).

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <streambuf>
#include <thread>

#include "core/tensor_internal.h"
#include "distributed/comm.h"
#include "forge/autograd.h"
#include "forge/error.h"
#include "forge/runtime.h"

namespace forge::dist {

const char* to_string(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::mean:
      return "mean";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

const char* to_string(Backend backend) noexcept {
  switch (backend) {
    case Backend::automatic:
      return "automatic";
    case Backend::mpi:
      return "mpi";
    case Backend::nccl:
      return "nccl";
  }
  return "?";
}

bool available(Backend backend) noexcept {
  switch (backend) {
    case Backend::automatic:
      return detail::mpi_built() || detail::nccl_built();
    case Backend::mpi:
      return detail::mpi_built();
    case Backend::nccl:
      return detail::nccl_built();
  }
  return false;
}

namespace detail {

const char* to_string(Kind kind) noexcept {
  switch (kind) {
    case Kind::all_reduce:
      return "all_reduce";
    case Kind::broadcast:
      return "broadcast";
    case Kind::all_gather:
      return "all_gather";
    case Kind::reduce_scatter:
      return "reduce_scatter";
    case Kind::barrier:
      return "barrier";
  }
  return "?";
}

// ---- WorkState ----

void WorkState::complete(std::exception_ptr error) {
  {
    std::lock_guard lock(m_);
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

bool WorkState::done() const {
  {
    std::lock_guard lock(m_);
    if (done_) return true;
  }
  if (poll) {
    try {
      return poll();
    } catch (...) {
      return true;  // wait() polls again and throws
    }
  }
  return false;
}

// Note [A broken group]
// A wait that times out cannot take its collective back: the engine may be
// inside it (an MPI call blocked on a peer that will never come), holding the
// buffers. So the timeout throws, the group is marked broken, its later calls
// throw at once, and destroying it ends the job (Comm::abort: MPI_Abort makes
// mpirun stop every rank), which is also what stops the peers that wait on
// this rank. The buffers of a broken group's work are never released.
void WorkState::wait() {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  if (broken && broken->load() && !done())
    FORGE_FAIL(distributed, what.c_str(), "cannot complete: the group is broken by an earlier timeout");
  if (poll) {
    // Device work: poll the engine's event, backing off to 1 ms.
    auto pause = std::chrono::microseconds(1);
    for (;;) {
      {
        std::lock_guard lock(m_);
        if (done_) break;
      }
      bool ready = false;
      try {
        ready = poll();
      } catch (...) {
        complete(std::current_exception());
        break;
      }
      if (ready) {
        complete();
        break;
      }
      if (Clock::now() >= deadline) break;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
  std::unique_lock lock(m_);
  if (!cv_.wait_until(lock, deadline, [&] { return done_; })) {
    lock.unlock();
    if (broken) broken->store(true);
    FORGE_FAIL(distributed, what.c_str(), "did not complete within ", timeout.count(),
               " ms; a peer rank may have failed, or be running a different collective. The group is broken: "
               "destroying it ends the job (raise ProcessGroupOptions::timeout or FORGE_DIST_TIMEOUT for "
               "longer steps)");
  }
  if (error_) {
    delivered_ = true;
    std::rethrow_exception(error_);
  }
  if (finished_) return;
  finished_ = true;
  lock.unlock();
  if (finish) {
    auto run = std::move(finish);
    finish = nullptr;
    run();
  }
  keep.clear();
}

// ---- GroupImpl ----

namespace {

// Longer timeouts (milliseconds::max() for "never") are this: a deadline
// past it would overflow the clock's nanoseconds.
constexpr std::chrono::milliseconds kLongestTimeout = std::chrono::hours(24 * 365 * 10);

std::chrono::milliseconds resolved_timeout(std::chrono::milliseconds requested) {
  if (const char* env = std::getenv("FORGE_DIST_TIMEOUT"); env && *env) {
    char* end = nullptr;
    const double seconds = std::strtod(env, &end);
    FORGE_CHECK(end && *end == '\0' && seconds > 0 && std::isfinite(seconds), invalid_argument, "ProcessGroup",
                "FORGE_DIST_TIMEOUT must be a positive number of seconds, got \"", env, "\"");
    if (seconds > kLongestTimeout.count() / 1000.0) return kLongestTimeout;
    return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
  }
  FORGE_CHECK(requested.count() > 0, invalid_argument, "ProcessGroup", "the timeout must be positive, got ",
              requested.count(), " ms");
  return std::min(requested, kLongestTimeout);
}

bool env_debug(bool requested) {
  const char* env = std::getenv("FORGE_DIST_DEBUG");
  if (env && *env) return std::string_view(env) != "0";
  return requested;
}

// What the debug check exchanges: one call's arguments, as int64 words.
constexpr int kMaxSignatureDims = 8;
constexpr std::int64_t kSignatureWords = 8 + kMaxSignatureDims;

std::string describe(const std::int64_t* sig) {
  std::string s = std::string(dtype_name(static_cast<DType>(sig[1]))) + " [";
  const std::int64_t rank = std::min<std::int64_t>(sig[5], kMaxSignatureDims);
  for (std::int64_t d = 0; d < rank; ++d) s += (d ? ", " : "") + std::to_string(sig[8 + d]);
  if (sig[5] > kMaxSignatureDims) s += ", ...";
  s += "]";
  if (sig[0] == static_cast<std::int64_t>(Kind::broadcast)) s += " from root " + std::to_string(sig[3]);
  if (sig[0] == static_cast<std::int64_t>(Kind::all_reduce) ||
      sig[0] == static_cast<std::int64_t>(Kind::reduce_scatter))
    s += std::string(" (") + dist::to_string(static_cast<ReduceOp>(sig[2])) + ")";
  return std::string(to_string(static_cast<Kind>(sig[0]))) + " of " + s;
}

}  // namespace

class GroupImpl {
 public:
  GroupImpl(ExecContext& ctx, ProcessGroupOptions options) : ctx_(ctx), options_(options) {
    options_.timeout = resolved_timeout(options.timeout);
    options_.debug = env_debug(options.debug);
    Backend want = options.backend;
    if (want == Backend::automatic) want = ctx.device().is_cuda() && nccl_built() ? Backend::nccl : Backend::mpi;
    if (want == Backend::mpi) {
      mpi_ = make_mpi_comm(options_);
      comm_ = mpi_.get();
    } else {
      FORGE_CHECK(ctx.device().is_cuda() || !nccl_built(), device, "ProcessGroup",
                  "the NCCL backend needs a CUDA context, got one on ", ctx.device().str());
      if (mpi_built()) mpi_ = make_mpi_comm(options_);
      nccl_ = make_nccl_comm(ctx, options_, mpi_.get());
      comm_ = nccl_.get();
    }
    control_ = mpi_.get();
  }

  ~GroupImpl() {
    if (broken_->load()) abort_job("a collective timed out");
    if (std::uncaught_exceptions() > 0 && comm_->size() > 1)
      abort_job("the process group is being destroyed by an exception");
    // Work the user dropped without waiting: wait for it, within the timeout.
    for (auto& w : pending_) {
      if (w->delivered()) continue;
      try {
        w->wait();
      } catch (const std::exception& e) {
        abort_job(e.what());
      }
    }
    pending_.clear();
    nccl_.reset();  // before its bootstrap
    mpi_.reset();
  }

  [[noreturn]] void abort_job(const std::string& why) noexcept {
    comm_->abort("forge::dist: rank " + std::to_string(comm_->rank()) + " of " + std::to_string(comm_->size()) +
                 " ends the job: " + why);
    std::abort();  // abort() does not return; this keeps [[noreturn]] visible to the compiler
  }

  int rank() const noexcept { return comm_->rank(); }
  int size() const noexcept { return comm_->size(); }
  Backend backend() const noexcept { return comm_->backend(); }
  ExecContext& context() const noexcept { return ctx_; }
  const ProcessGroupOptions& options() const noexcept { return options_; }

  // One collective: checks, staging, debug agreement, start. `written` is
  // the user's tensor the collective writes (undefined for none).
  Work launch(Kind kind, const Tensor& written, const Tensor& read, std::int64_t count, ReduceOp op, int root) {
    const std::string name = std::string(to_string(kind));
    const char* opname = name.c_str();
    FORGE_CHECK(!broken_->load(), distributed, opname,
                "the group is broken by an earlier timeout; destroy it to end the job");
    reap();
    // Before any local refusal, so that a call one rank refuses is refused on every rank.
    if (options_.debug && size() > 1) agree(kind, read.defined() ? read : written, op, root, opname);
    if (written.defined()) forge::detail::check_writable(opname, written, "the output");
    if (written.defined() && read.defined())
      forge::detail::check_no_partial_overlap(opname, written, read, "the input");
    Collective c{.kind = kind, .count = count, .op = op, .root = root};
    auto state = WorkState::make("", options_.timeout, broken_);
    Tensor shape_of = read.defined() ? read : written;
    if (kind != Kind::barrier) {
      c.dtype = shape_of.dtype();
      // What every engine refuses, then what this one does.
      FORGE_CHECK(
          op != ReduceOp::mean || is_floating(c.dtype) || (kind != Kind::all_reduce && kind != Kind::reduce_scatter),
          dtype, opname, "mean needs a floating dtype, got ", dtype_name(c.dtype), " (reduce with sum and divide)");
      const std::string why = comm_->unsupported(kind, c.dtype, op);
      FORGE_CHECK(why.empty(), dtype, opname, why);
      Tensor in = read.defined() ? forge::detail::packed_where_it_is(read, opname) : Tensor();
      Tensor out = written.defined() ? forge::detail::packed_where_it_is(written, opname) : Tensor();
      if (kind == Kind::all_reduce || kind == Kind::broadcast) in = out;
      // Host or device addresses: the engine's memory (check_tensor made sure).
      c.send = in.defined() && in.numel() ? forge::detail::first_element(in) : nullptr;
      c.recv = out.defined() && out.numel() ? forge::detail::first_element(out) : nullptr;
      state->keep = {in, out, written};
      const bool copy_back = written.defined() && out.buffer() != written.buffer();
      Tensor target = written;
      state->finish = [target, out, copy_back] {
        autograd::NoGradGuard no_grad;
        if (copy_back)
          const_cast<Tensor&>(target).copy_(out);
        else
          target.buffer()->bump_version();
      };
    }
    const std::int64_t seq = ++sequence_;
    state->what = name + " #" + std::to_string(seq) + " on rank " + std::to_string(rank()) + " of " +
                  std::to_string(size()) + (shape_of.defined() ? " (" + describe_tensor(shape_of) + ")" : "");
    comm_->start(c, state);
    pending_.push_back(state);
    return Work(state);
  }

 private:
  static std::string describe_tensor(const Tensor& t) {
    std::ostringstream s;
    s << dtype_name(t.dtype()) << ' ' << t.shape();
    return s.str();
  }

  // Drops finished work nobody else holds (Note [Work completion]), after
  // its results are in place: a dropped Work still copies back and bumps
  // versions, and its failure is reported here.
  void reap() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->use_count() == 1 && (*it)->done()) {
        const std::shared_ptr<WorkState> w = std::move(*it);
        it = pending_.erase(it);
        if (!w->delivered()) w->wait();  // an error the user was given is not thrown again
      } else {
        ++it;
      }
    }
  }

  // The debug check: every rank's arguments, gathered over the control comm
  // (or the data comm), compared with rank 0's.
  void agree(Kind kind, const Tensor& t, ReduceOp op, int root, const char* opname) {
    Comm* via = control_ ? control_ : comm_;
    FORGE_CHECK(!via->on_device(), not_implemented, opname,
                "the debug check needs the MPI engine to exchange shapes (this build has none)");
    // Owned by the state too: after a timeout the engine may still write them.
    auto mine_owned = std::make_shared<std::vector<std::int64_t>>(kSignatureWords, 0);
    auto all_owned = std::make_shared<std::vector<std::int64_t>>(kSignatureWords * size(), 0);
    std::vector<std::int64_t>& mine = *mine_owned;
    std::vector<std::int64_t>& all = *all_owned;
    mine[0] = static_cast<std::int64_t>(kind);
    mine[1] = t.defined() ? static_cast<std::int64_t>(t.dtype()) : 0;
    mine[2] = static_cast<std::int64_t>(op);
    mine[3] = root;
    mine[4] = t.defined() ? t.numel() : 0;
    mine[5] = t.defined() ? t.dim() : 0;
    for (int d = 0; d < std::min(kMaxSignatureDims, static_cast<int>(mine[5])); ++d) mine[8 + d] = t.size(d);
    auto state = WorkState::make(std::string(opname) + " (its debug check)", options_.timeout, broken_);
    state->finish = [mine_owned, all_owned] {};
    via->start(Collective{.kind = Kind::all_gather,
                          .send = mine.data(),
                          .recv = all.data(),
                          .count = kSignatureWords,
                          .dtype = DType::i64},
               state);
    state->wait();
    for (int r = 1; r < size(); ++r) {
      const std::int64_t* theirs = all.data() + r * kSignatureWords;
      if (std::equal(theirs, theirs + kSignatureWords, all.data())) continue;
      const std::string text = cat_ranks(all.data(), theirs, r);
      const bool same_call = theirs[0] == all[0] && theirs[2] == all[2] && theirs[3] == all[3];
      if (same_call && theirs[1] != all[1]) FORGE_FAIL(dtype, opname, "the ranks disagree: ", text);
      if (same_call) FORGE_FAIL(shape, opname, "the ranks disagree: ", text);
      FORGE_FAIL(invalid_argument, opname, "the ranks disagree: ", text);
    }
  }

  static std::string cat_ranks(const std::int64_t* first, const std::int64_t* other, int r) {
    return "rank 0 has " + describe(first) + ", rank " + std::to_string(r) + " has " + describe(other);
  }

  ExecContext& ctx_;
  ProcessGroupOptions options_;
  std::unique_ptr<Comm> mpi_;
  std::unique_ptr<Comm> nccl_;
  Comm* comm_ = nullptr;     // the engine of the data
  Comm* control_ = nullptr;  // MPI when built: the debug check's exchange
  std::shared_ptr<std::atomic<bool>> broken_ = std::make_shared<std::atomic<bool>>(false);
  std::vector<std::shared_ptr<WorkState>> pending_;
  std::int64_t sequence_ = 0;
};

}  // namespace detail

// ---- Work ----

void Work::wait() {
  FORGE_CHECK(state_, invalid_argument, "Work::wait", "an empty Work (default-constructed)");
  state_->wait();
}

bool Work::is_completed() const { return state_ && state_->done(); }

// ---- ProcessGroup ----

ProcessGroup::ProcessGroup(ExecContext& ctx, ProcessGroupOptions options)
    : impl_(std::make_unique<detail::GroupImpl>(ctx, options)) {}

ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::rank() const noexcept { return impl_->rank(); }
int ProcessGroup::size() const noexcept { return impl_->size(); }
Backend ProcessGroup::backend() const noexcept { return impl_->backend(); }
ExecContext& ProcessGroup::context() const noexcept { return impl_->context(); }
std::chrono::milliseconds ProcessGroup::timeout() const noexcept { return impl_->options().timeout; }
bool ProcessGroup::debug() const noexcept { return impl_->options().debug; }

namespace {

using detail::Kind;

void check_tensor(const ProcessGroup& g, const char* op, const Tensor& t, const char* name) {
  forge::detail::check_readable(op, t, name);
  const bool device = g.backend() == Backend::nccl;
  if (device)
    FORGE_CHECK(t.device() == g.context().device(), device, op, name, " is on ", t.device().str(),
                "; the NCCL group works on ", g.context().device().str());
  else
    FORGE_CHECK(t.device().is_cpu(), device, op, name, " is on ", t.device().str(),
                "; the MPI group works on host tensors (a CUDA context's collectives take the NCCL group)");
}

}  // namespace

Work ProcessGroup::all_reduce_async(const Tensor& t, ReduceOp op) try {
  check_tensor(*this, "all_reduce", t, "tensor");
  return impl_->launch(Kind::all_reduce, t, Tensor(), t.numel(), op, 0);
}
FORGE_CATCH_OOM("all_reduce")

void ProcessGroup::all_reduce(const Tensor& t, ReduceOp op) { all_reduce_async(t, op).wait(); }

Work ProcessGroup::broadcast_async(const Tensor& t, int root) try {
  check_tensor(*this, "broadcast", t, "tensor");
  FORGE_CHECK(root >= 0 && root < size(), out_of_range, "broadcast", "root ", root, " of a group of ", size());
  return impl_->launch(Kind::broadcast, t, Tensor(), t.numel(), ReduceOp::sum, root);
}
FORGE_CATCH_OOM("broadcast")

void ProcessGroup::broadcast(const Tensor& t, int root) { broadcast_async(t, root).wait(); }

Work ProcessGroup::all_gather_async(const Tensor& out, const Tensor& in) try {
  check_tensor(*this, "all_gather", out, "output");
  check_tensor(*this, "all_gather", in, "input");
  FORGE_CHECK(out.dtype() == in.dtype(), dtype, "all_gather", "output of dtype ", dtype_name(out.dtype()),
              " for an input of dtype ", dtype_name(in.dtype()));
  FORGE_CHECK(out.numel() == in.numel() * size(), shape, "all_gather", "output of shape ", out.shape(), " (",
              out.numel(), " elements) for ", size(), " ranks' inputs of shape ", in.shape(), ": it needs ",
              in.numel() * size());
  return impl_->launch(Kind::all_gather, out, in, in.numel(), ReduceOp::sum, 0);
}
FORGE_CATCH_OOM("all_gather")

void ProcessGroup::all_gather(const Tensor& out, const Tensor& in) { all_gather_async(out, in).wait(); }

namespace {

Tensor fresh_like_device(const Tensor& like, const Shape& shape, const char* op) {
  Runtime& rt = like.runtime();
  if (like.device() == rt.device()) return forge::detail::allocate(rt, shape, like.dtype(), op);
  return forge::detail::allocate_in(rt, rt.pool(like.device(), op), shape, like.dtype(), op);
}

}  // namespace

Tensor ProcessGroup::all_gather(const Tensor& in) try {
  check_tensor(*this, "all_gather", in, "input");
  std::vector<std::int64_t> dims{size()};
  for (int d = 0; d < in.dim(); ++d) dims.push_back(in.size(d));
  Tensor out = fresh_like_device(in, Shape(dims), "all_gather");
  all_gather(out, in);
  return out;
}
FORGE_CATCH_OOM("all_gather")

Work ProcessGroup::reduce_scatter_async(const Tensor& out, const Tensor& in, ReduceOp op) try {
  check_tensor(*this, "reduce_scatter", out, "output");
  check_tensor(*this, "reduce_scatter", in, "input");
  FORGE_CHECK(out.dtype() == in.dtype(), dtype, "reduce_scatter", "output of dtype ", dtype_name(out.dtype()),
              " for an input of dtype ", dtype_name(in.dtype()));
  FORGE_CHECK(in.numel() == out.numel() * size(), shape, "reduce_scatter", "input of shape ", in.shape(), " (",
              in.numel(), " elements) for ", size(), " ranks' outputs of shape ", out.shape(), ": it needs ",
              out.numel() * size());
  return impl_->launch(Kind::reduce_scatter, out, in, out.numel(), op, 0);
}
FORGE_CATCH_OOM("reduce_scatter")

void ProcessGroup::reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) {
  reduce_scatter_async(out, in, op).wait();
}

Tensor ProcessGroup::reduce_scatter(const Tensor& in, ReduceOp op) try {
  check_tensor(*this, "reduce_scatter", in, "input");
  FORGE_CHECK(in.dim() >= 1 && in.size(0) % size() == 0, shape, "reduce_scatter", "input of shape ", in.shape(),
              ": dim 0 must split evenly over ", size(), " ranks");
  std::vector<std::int64_t> dims{in.size(0) / size()};
  for (int d = 1; d < in.dim(); ++d) dims.push_back(in.size(d));
  Tensor out = fresh_like_device(in, Shape(dims), "reduce_scatter");
  reduce_scatter(out, in, op);
  return out;
}
FORGE_CATCH_OOM("reduce_scatter")

void ProcessGroup::barrier() { impl_->launch(Kind::barrier, Tensor(), Tensor(), 0, ReduceOp::sum, 0).wait(); }

// ---- rank-0 output ----

namespace {

struct NullBuffer : std::streambuf {
  int overflow(int c) override { return c == EOF ? 0 : c; }
};

}  // namespace

std::ostream& out0(const ProcessGroup& group) {
  static thread_local NullBuffer sink;
  static thread_local std::ostream null_stream(&sink);
  return group.is_main() ? std::cout : null_stream;
}

}  // namespace forge::dist
