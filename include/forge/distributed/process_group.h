#pragma once
// A group of processes that reduce, gather and broadcast tensors together
// (docs/DISTRIBUTED.md), on an existing engine: Open MPI for host tensors,
// NCCL for CUDA tensors. Launch with mpirun; every process constructs the
// group in the same order:
//
//   // mpirun -np 2 build/release/examples/train_fashion_mnist --distributed
//   ExecContext ctx;
//   dist::ProcessGroup group(ctx);             // rank and size from mpirun
//   Tensor g = ...;                            // the same shape on every rank
//   group.all_reduce(g, dist::ReduceOp::mean); // in place
//
// Policy:
//   - Collectives match by order: every rank issues the same collectives, with
//     the same shapes and dtypes, in the same order (as torch.distributed and
//     MPI). ProcessGroupOptions::debug (or FORGE_DIST_DEBUG=1) exchanges each
//     call's shape and dtype first and refuses a mismatch on every rank, naming
//     both shapes.
//   - In-place collectives write into the tensor's bytes (views included: a
//     non-contiguous tensor is staged through a packed copy) and are not
//     recorded by autograd.
//   - The *_async calls return a Work at once; the tensors must not be read or
//     written until wait(). Host collectives run in order on the group's own
//     thread; device collectives are queued on the context's current stream.
//   - No wait is silent forever: one that takes longer than the group's
//     timeout throws ErrorCode::distributed naming the collective, and the
//     group is broken: later calls throw, and destroying it ends the job
//     (MPI_Abort), so that the peers stop too. A group destroyed while an
//     exception unwinds, in a job of more than one process, ends the job the
//     same way. A rank that dies ends the job through mpirun.
//   - Without the engine (FORGE_MPI=OFF, or no MPI found at configure time)
//     the constructor throws not_implemented saying how to build it.

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <memory>

#include "forge/exec_context.h"
#include "forge/tensor.h"

namespace forge::dist {

enum class ReduceOp : std::uint8_t { sum, mean, max, min };

// Which engine carries the collectives. automatic: NCCL for a CUDA context
// (when built), MPI otherwise.
enum class Backend : std::uint8_t { automatic, mpi, nccl };

const char* to_string(ReduceOp op) noexcept;
const char* to_string(Backend backend) noexcept;

// Whether this build has the engine (automatic: whether it has any).
bool available(Backend backend) noexcept;

struct ProcessGroupOptions {
  Backend backend = Backend::automatic;
  // How long a wait (and the group's construction) may take before it throws;
  // FORGE_DIST_TIMEOUT (seconds) overrides it when set.
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
  // Check every collective's shape, dtype and arguments across ranks first
  // (one small all-gather each); FORGE_DIST_DEBUG=1 turns it on.
  bool debug = false;
};

namespace detail {
struct WorkState;
class GroupImpl;
}  // namespace detail

// The handle of an asynchronous collective.
class Work {
 public:
  Work() = default;
  // Blocks until the collective is done and its results are in place; throws
  // what it failed with, or ErrorCode::distributed after the group's timeout.
  // A second wait returns at once.
  void wait();
  bool is_completed() const;
  bool defined() const noexcept { return state_ != nullptr; }

 private:
  friend class detail::GroupImpl;
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}
  std::shared_ptr<detail::WorkState> state_;
};

class ProcessGroup {
 public:
  // Joins the job mpirun started (rank and size from its environment; a
  // process started without mpirun is a group of one). Collective: every
  // rank constructs its groups in the same order.
  explicit ProcessGroup(ExecContext& ctx, ProcessGroupOptions options = {});
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const noexcept;
  int size() const noexcept;
  bool is_main() const noexcept { return rank() == 0; }
  Backend backend() const noexcept;  // mpi or nccl
  ExecContext& context() const noexcept;
  std::chrono::milliseconds timeout() const noexcept;
  bool debug() const noexcept;

  // `t` reduced over the ranks, in place. mean is sum / size() (floating
  // dtypes only).
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum);
  Work all_reduce_async(const Tensor& t, ReduceOp op = ReduceOp::sum);
  // `root`'s `t` copied into every rank's `t`.
  void broadcast(const Tensor& t, int root = 0);
  Work broadcast_async(const Tensor& t, int root = 0);
  // Rank r's `in` into elements [r * n, (r + 1) * n) of `out` (n = in.numel(),
  // out.numel() = size() * n, in row-major order, same dtype).
  void all_gather(const Tensor& out, const Tensor& in);
  Work all_gather_async(const Tensor& out, const Tensor& in);
  Tensor all_gather(const Tensor& in);  // shape [size(), *in.shape()]
  // `in` (size() * n elements) reduced over the ranks; rank r keeps elements
  // [r * n, (r + 1) * n) of the result in `out` (n = out.numel()).
  void reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::sum);
  Work reduce_scatter_async(const Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::sum);
  Tensor reduce_scatter(const Tensor& in, ReduceOp op = ReduceOp::sum);  // dim 0 split: [in.size(0) / size(), ...]
  // Returns when every rank has called it.
  void barrier();

 private:
  std::unique_ptr<detail::GroupImpl> impl_;
};

// std::cout on rank 0 and a stream that drops what it is given on the others:
// `dist::out0(group) << "epoch " << e << '\n';` logs once per job.
std::ostream& out0(const ProcessGroup& group);

}  // namespace forge::dist
