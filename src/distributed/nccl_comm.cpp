// The NCCL engine of forge::dist (src/distributed/comm.h), for CUDA tensors:
//   - one ncclComm_t per group, on the context's device: rank 0's
//     ncclUniqueId reaches the others over the bootstrap MPI comm (no
//     bootstrap: a job of one), then ncclCommInitRank, which blocks until
//     every rank has joined;
//   - each collective is queued on the context's current stream (read at
//     start(), so a StreamGuard is honoured), followed by a CUDA event that
//     the waiter polls (Note [Work completion] in comm.h); nothing here waits;
//   - dtypes f32, f64, f16, bf16, i32, i64, u8, i8; bool moves (broadcast,
//     all_gather) as bytes and is never reduced; mean is ncclAvg, floating
//     dtypes only; barrier is an all-reduce of one float the comm owns;
//   - every NCCL or CUDA failure is ErrorCode::distributed naming the
//     collective and NCCL's (or CUDA's) message; the destructor never throws.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "backend/cuda/cuda_runtime.h"
#include "distributed/comm.h"
#include "forge/error.h"

// Note [NCCL work outlives its comm]
// A WorkState can outlive the group (a Work the user keeps, a wait after the
// group was destroyed), so its poll must not reach into a destroyed
// ncclComm_t. The comm handle lives in a Handle shared by the Comm and every
// poll: the destructor clears it under the Handle's mutex before destroying
// the communicator, and a poll reads the async error under the same mutex,
// skipping it once the handle is cleared. The CUDA event is owned by the poll
// itself (a shared_ptr whose deleter destroys it), so it dies with the
// WorkState; destroying an event whose work is still queued is allowed (CUDA
// releases it when the work completes).

namespace forge::dist::detail {
namespace {

using forge::detail::cat;

constexpr const char* kConstruct = "ProcessGroup";

// The communicator, shared with the polls of queued work (Note [NCCL work
// outlives its comm]).
struct Handle {
  std::mutex m;
  ncclComm_t comm = nullptr;
};

// ErrorCode::distributed: "[op] call failed: NCCL's message (NCCL's last
// error) in what".
[[noreturn]] void fail_nccl(ncclResult_t result, ncclComm_t comm, const char* op, const char* call,
                            const std::string& what) {
  std::string detail;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  if (const char* last = ncclGetLastError(comm); last != nullptr && *last != '\0') detail = cat(" (", last, ")");
#else
  (void)comm;
#endif
  FORGE_FAIL(distributed, op, call, " failed: ", ncclGetErrorString(result), detail,
             what.empty() ? "" : cat(" in ", what));
}

void check_nccl(ncclResult_t result, ncclComm_t comm, const char* op, const char* call, const std::string& what) {
  if (result != ncclSuccess) [[unlikely]]
    fail_nccl(result, comm, op, call, what);
}

[[noreturn]] void fail_cuda(cudaError_t error, const char* op, const char* call, const std::string& what) {
  cudaGetLastError();
  FORGE_FAIL(distributed, op, call, " failed on CUDA: ", cudaGetErrorName(error), ": ", cudaGetErrorString(error),
             what.empty() ? "" : cat(" in ", what));
}

void check_cuda(cudaError_t error, const char* op, const char* call, const std::string& what) {
  if (error != cudaSuccess) [[unlikely]]
    fail_cuda(error, op, call, what);
}

// Throws when the communicator has failed asynchronously (a peer's network
// error, a failed kernel); no-op once the handle is cleared.
void check_async(Handle& handle, const char* op, const std::string& what) {
  std::lock_guard lock(handle.m);
  if (handle.comm == nullptr) return;
  ncclResult_t async = ncclSuccess;
  check_nccl(ncclCommGetAsyncError(handle.comm, &async), handle.comm, op, "ncclCommGetAsyncError", what);
  if (async != ncclSuccess && async != ncclInProgress) fail_nccl(async, handle.comm, op, "the communicator", what);
}

// The NCCL type of `dtype`; bool as bytes (only ever moved, never reduced).
ncclDataType_t nccl_type(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
    case DType::boolean:
      return ncclUint8;
    case DType::i8:
      return ncclInt8;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::mean:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  return ncclSum;
}

class NcclComm final : public Comm {
 public:
  NcclComm(ExecContext& ctx, const ProcessGroupOptions& options, Comm* bootstrap)
      : ctx_(ctx),
        ordinal_(ctx.device().index),
        bootstrap_(bootstrap),
        rank_(bootstrap != nullptr ? bootstrap->rank() : 0),
        size_(bootstrap != nullptr ? bootstrap->size() : 1),
        handle_(std::make_shared<Handle>()) {
    make_current();
    try {
      check_cuda(cudaMalloc(&barrier_, sizeof(float)), kConstruct, "cudaMalloc", "the barrier's buffer");
      check_cuda(cudaMemset(barrier_, 0, sizeof(float)), kConstruct, "cudaMemset", "the barrier's buffer");
      ncclUniqueId id{};
      if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), nullptr, kConstruct, "ncclGetUniqueId", "");
      if (bootstrap_ != nullptr) exchange(id, options);
      ncclComm_t comm = nullptr;
      check_nccl(ncclCommInitRank(&comm, size_, id, rank_), nullptr, kConstruct, "ncclCommInitRank",
                 cat("rank ", rank_, " of ", size_, " on cuda:", ordinal_));
      handle_->comm = comm;
    } catch (const std::exception& e) {
      release();
      // The peers may be inside the id's broadcast or ncclCommInitRank, which
      // no timeout ends: a job of more than one process stops here.
      if (bootstrap_ != nullptr && size_ > 1)
        bootstrap_->abort(cat("forge::dist: rank ", rank_, " of ", size_, " could not set up NCCL: ", e.what()));
      throw;
    }
  }

  // Never throws (Note [NCCL work outlives its comm]): a communicator with
  // an async error is aborted, since finalizing it could wait forever for a
  // peer that is gone.
  ~NcclComm() override {
    cudaSetDevice(ordinal_);
    ncclComm_t comm = take_comm();
    if (comm != nullptr) {
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &async) != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
        ncclCommAbort(comm);
      } else {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
        if (ncclCommFinalize(comm) == ncclSuccess)
          ncclCommDestroy(comm);
        else
          ncclCommAbort(comm);
#else
        ncclCommDestroy(comm);
#endif
      }
    }
    release();
  }

  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  Backend backend() const noexcept override { return Backend::nccl; }
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  bool on_device() const noexcept override { return true; }

  std::string unsupported(Kind kind, DType dtype, ReduceOp) const override {
    if (kind != Kind::all_reduce && kind != Kind::reduce_scatter) return {};
    if (dtype == DType::boolean) return "NCCL has no reduction for bool";
    return {};
  }

  void start(const Collective& c, const std::shared_ptr<WorkState>& state) override {
    const char* op = to_string(c.kind);
    const std::string& what = state->what;
    make_current();
    check_async(*handle_, op, what);
    ncclComm_t comm = handle_->comm;
    FORGE_ASSERT(comm != nullptr, "NCCL comm used after its destruction");
    FORGE_ASSERT(unsupported(c.kind, c.dtype, c.op).empty(), "unchecked collective ", op, " on ", dtype_name(c.dtype));
    const auto stream = static_cast<cudaStream_t>(ctx_.stream().native());
    // Made before the call: a failure here queues nothing.
    cudaEvent_t raw_event = nullptr;
    check_cuda(cudaEventCreateWithFlags(&raw_event, cudaEventDisableTiming), op, "cudaEventCreateWithFlags", what);
    std::shared_ptr<CUevent_st> event(raw_event, [](cudaEvent_t e) { cudaEventDestroy(e); });

    const auto count = static_cast<std::size_t>(c.count);
    const ncclDataType_t type = nccl_type(c.dtype);
    switch (c.kind) {
      case Kind::all_reduce:
        check_nccl(ncclAllReduce(c.send, c.recv, count, type, nccl_op(c.op), comm, stream), comm, op, "ncclAllReduce",
                   what);
        break;
      case Kind::broadcast:
        check_nccl(ncclBroadcast(c.send, c.recv, count, type, c.root, comm, stream), comm, op, "ncclBroadcast", what);
        break;
      case Kind::all_gather:
        check_nccl(ncclAllGather(c.send, c.recv, count, type, comm, stream), comm, op, "ncclAllGather", what);
        break;
      case Kind::reduce_scatter:
        check_nccl(ncclReduceScatter(c.send, c.recv, count, type, nccl_op(c.op), comm, stream), comm, op,
                   "ncclReduceScatter", what);
        break;
      case Kind::barrier:
        check_nccl(ncclAllReduce(barrier_, barrier_, 1, ncclFloat32, ncclSum, comm, stream), comm, op, "ncclAllReduce",
                   what);
        break;
    }
    check_cuda(cudaEventRecord(event.get(), stream), op, "cudaEventRecord", what);

    // The waiter polls; nothing here completes the state (Note [Work completion]).
    state->poll = [handle = handle_, event = std::move(event), op, what = state->what]() -> bool {
      check_async(*handle, op, what);
      const cudaError_t status = cudaEventQuery(event.get());
      if (status == cudaSuccess) return true;
      if (status == cudaErrorNotReady) {
        cudaGetLastError();  // so that no later launch check reports it
        return false;
      }
      fail_cuda(status, op, "cudaEventQuery", what);
    };
  }

  [[noreturn]] void abort(const std::string& why) noexcept override {
    std::fprintf(stderr, "%s\n", why.c_str());
    std::fflush(stderr);
    cudaSetDevice(ordinal_);
    if (ncclComm_t comm = take_comm(); comm != nullptr) ncclCommAbort(comm);
    if (bootstrap_ != nullptr) bootstrap_->abort(why);
    std::abort();
  }

 private:
  // Rank 0's id to every rank, as 128 bytes over the bootstrap comm (host
  // memory). The bytes the MPI thread writes live as long as the WorkState,
  // not this frame: a wait that times out leaves the broadcast queued there.
  void exchange(ncclUniqueId& id, const ProcessGroupOptions& options) {
    auto bytes = std::make_shared<ncclUniqueId>(id);
    auto state =
        WorkState::make(cat("broadcast of the NCCL unique id (rank ", rank_, " of ", size_, ")"), options.timeout);
    state->finish = [bytes, out = &id] { *out = *bytes; };  // run by wait(), on this thread
    bootstrap_->start(Collective{.kind = Kind::broadcast,
                                 .send = bytes.get(),
                                 .recv = bytes.get(),
                                 .count = static_cast<std::int64_t>(sizeof(ncclUniqueId)),
                                 .dtype = DType::u8,
                                 .root = 0},
                      state);
    state->wait();
  }

  void make_current() const { cuda::runtime_of(ctx_.runtime().compute()).make_current(); }

  ncclComm_t take_comm() noexcept {
    std::lock_guard lock(handle_->m);
    return std::exchange(handle_->comm, nullptr);
  }

  void release() noexcept {
    if (barrier_ != nullptr) cudaFree(barrier_);
    barrier_ = nullptr;
    cudaGetLastError();
  }

  ExecContext& ctx_;
  int ordinal_;
  Comm* bootstrap_;  // outlives this comm (comm.h)
  int rank_;
  int size_;
  std::shared_ptr<Handle> handle_;
  float* barrier_ = nullptr;  // one device float: the barrier's all-reduce
};

}  // namespace

bool nccl_built() noexcept { return true; }

std::unique_ptr<Comm> make_nccl_comm(ExecContext& ctx, const ProcessGroupOptions& options, Comm* bootstrap) {
  FORGE_CHECK(ctx.device().is_cuda(), device, kConstruct, "the NCCL backend needs a CUDA context, got one on ",
              ctx.device().str());
  return std::make_unique<NcclComm>(ctx, options, bootstrap);
}

}  // namespace forge::dist::detail
