#pragma once
// ExecScope: the region of a training step (or any stretch of ops) that
// decides what the step's intermediates cost, by its ScopePolicy (RAII; see
// docs/MEMORY.md, "Exec scopes" and "Scope policies"):
// - hold: every tensor an op produces on the context while the scope is the
//   innermost open one is also held by the scope, until it closes.
// - release: holds nothing; what stays alive is what the tape saves and what
//   the caller keeps. The scope only keeps accounting.
// - recompute: as release, and run(fn, inputs) records fn as one checkpoint
//   (activation checkpointing, forge/autograd/checkpoint.h): the tape keeps
//   fn's inputs and backward recomputes fn's forward.
// - offload: saved tensors moved to host memory during a device step; not
//   built: refused (on the host there is nothing to offload to).
// Nested scopes release only their own suffix, newest first.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "forge/ref.h"
#include "forge/tensor.h"

namespace forge {

class Runtime;

enum class ScopePolicy { hold, release, recompute, offload };

const char* to_string(ScopePolicy policy) noexcept;

struct ExecScopeStats {
  ScopePolicy policy = ScopePolicy::hold;
  std::size_t buffers = 0;          // buffers the scope held (0 unless hold)
  std::size_t bytes = 0;            // their block bytes
  std::size_t peak_live_bytes = 0;  // the pool's peak live bytes while the scope was open
  // The pool's acquires while the scope was open (every op output and
  // temporary, held or not), and how many of them took a block from the system.
  std::uint64_t allocations = 0;
  std::uint64_t system_allocations = 0;
  // recompute: the checkpoints run() recorded, the bytes of the inputs they
  // keep for backward, and the recomputes backward ran while the scope was
  // open, with their forward time.
  std::size_t checkpoints = 0;
  std::size_t checkpoint_bytes = 0;
  std::size_t recomputes = 0;
  double recompute_seconds = 0.0;
};

class ExecScope {
 public:
  // offload: ErrorCode::device on a host context, not_implemented on a device
  // context (not built yet).
  explicit ExecScope(Runtime& runtime, ScopePolicy policy = ScopePolicy::hold);
  ~ExecScope();
  ExecScope(ExecScope&& other) noexcept;
  ExecScope& operator=(ExecScope&&) = delete;
  ExecScope(const ExecScope&) = delete;
  ExecScope& operator=(const ExecScope&) = delete;

  // Releases what the scope holds (and any scope opened inside it). Idempotent.
  void close() noexcept;
  bool is_open() const noexcept;
  ScopePolicy policy() const noexcept { return policy_; }
  // What the scope holds now, or held when it closed (zeros for a scope that
  // an enclosing scope closed first).
  ExecScopeStats stats() const noexcept;

  // fn(inputs). In a recompute scope, recorded as one checkpoint
  // (autograd::checkpoint): fn must read every tensor with history it uses
  // from `inputs` (parameters and other leaves it may read directly) and
  // stay valid until backward has run. Under any other policy it is a plain
  // call, so one step function serves every policy. invalid_argument when
  // the scope is closed.
  Tensor run(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs);

 private:
  Ref<Runtime> runtime_;
  std::uint64_t id_ = 0;
  ScopePolicy policy_ = ScopePolicy::hold;
  mutable ExecScopeStats closed_stats_{};
};

}  // namespace forge
