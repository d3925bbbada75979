#pragma once
// The seam between ProcessGroup and an engine (Open MPI, NCCL): one Comm per
// group, given packed buffers that ProcessGroup has already validated. The
// pattern of the CUDA backend: mpi_comm.cpp / nccl_comm.cpp where the engine
// is built, no_mpi.cpp / no_nccl.cpp stubs where it is not.
//
// Note [Work completion]
// A collective's WorkState is completed by the engine (the MPI thread when
// its call returns; NCCL: the CUDA event recorded after the call is polled by
// the waiter through `poll`). The engine touches only raw pointers: the
// tensors that own them are kept in WorkState::keep and released on the
// user's thread (wait(), or ProcessGroup reaping finished work), never on the
// engine's, so the pools are only ever touched by their own threads.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "forge/distributed/process_group.h"

namespace forge::dist::detail {

enum class Kind : std::uint8_t { all_reduce, broadcast, all_gather, reduce_scatter, barrier };
const char* to_string(Kind kind) noexcept;

// One collective on packed buffers of the engine's memory (host or device).
// count is the elements each rank contributes: all_reduce and broadcast read
// and write `count` at `recv` (send == recv); all_gather reads `count` at send
// and writes size * count at recv; reduce_scatter reads size * count at send
// and writes `count` at recv. barrier has no buffers.
struct Collective {
  Kind kind = Kind::barrier;
  const void* send = nullptr;
  void* recv = nullptr;
  std::int64_t count = 0;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
};

struct WorkState {
  // A state for `what` with the group's timeout; `broken` is the group's flag
  // (null: a wait outside any group, such as a group's own construction).
  static std::shared_ptr<WorkState> make(std::string what, std::chrono::milliseconds timeout,
                                         std::shared_ptr<std::atomic<bool>> broken = nullptr) {
    auto state = std::make_shared<WorkState>();
    state->what = std::move(what);
    state->timeout = timeout;
    state->broken = broken ? std::move(broken) : std::make_shared<std::atomic<bool>>(false);
    return state;
  }

  std::string what;  // "all_reduce #12 of [4, 5] f32", for errors
  std::chrono::milliseconds timeout{0};
  std::shared_ptr<std::atomic<bool>> broken;  // the group's
  std::vector<Tensor> keep;                   // released on the user's thread (Note [Work completion])
  std::function<void()> finish;               // run once by the first wait, on the user's thread

  // NCCL: whether the device work is done (null for engines that call complete()).
  std::function<bool()> poll;

  void complete(std::exception_ptr error = nullptr);  // engine side
  bool done() const;
  // Whether a wait() already threw the engine's error to the user.
  bool delivered() const {
    std::lock_guard lock(m_);
    return delivered_;
  }
  // Waits up to `timeout`, then runs finish; throws the engine's error or a timeout.
  void wait();

 private:
  mutable std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  bool finished_ = false;
  bool delivered_ = false;
  std::exception_ptr error_;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual Backend backend() const noexcept = 0;
  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  // Whether the engine reads and writes host memory (MPI) or device memory.
  virtual bool on_device() const noexcept = 0;
  // Empty when the engine can run `kind` with `op` on `dtype`; else why not
  // (the text of the dtype error).
  virtual std::string unsupported(Kind kind, DType dtype, ReduceOp op) const = 0;
  // Queues `c`; completes `state` when it is done (Note [Work completion]).
  // Errors found before queueing are thrown.
  virtual void start(const Collective& c, const std::shared_ptr<WorkState>& state) = 0;
  // Ends the whole job after a failure the peers cannot see (a timeout, a rank
  // unwinding with the group alive): prints `why` and does not return.
  [[noreturn]] virtual void abort(const std::string& why) noexcept = 0;
};

// Open MPI: the world of mpirun's job (or a singleton), duplicated so that
// each group has its own communicator, with its own thread for the calls.
// Throws not_implemented in a build without MPI (no_mpi.cpp).
std::unique_ptr<Comm> make_mpi_comm(const ProcessGroupOptions& options);
bool mpi_built() noexcept;

// NCCL on the context's CUDA device: ncclUniqueId from rank 0, exchanged over
// `bootstrap` (an MPI comm of the same job; null: a job of one process).
// Collectives are queued on the context's current stream. Throws
// not_implemented in a build without NCCL (no_nccl.cpp).
std::unique_ptr<Comm> make_nccl_comm(ExecContext& ctx, const ProcessGroupOptions& options, Comm* bootstrap);
bool nccl_built() noexcept;

}  // namespace forge::dist::detail
