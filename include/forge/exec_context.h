#pragma once
// ExecContext: what a user creates first. It owns a Runtime (pool, threads,
// RNG, exec scopes) and is the thread-local current context while it lives,
// so the free creation functions (forge::zeros, ...) find it.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <type_traits>
#include <vector>

#include "forge/buffer_pool.h"
#include "forge/device.h"
#include "forge/dtype.h"
#include "forge/exec_scope.h"
#include "forge/ref.h"
#include "forge/runtime.h"
#include "forge/shape.h"
#include "forge/stream.h"
#include "forge/tensor.h"

namespace forge {

namespace detail {
class ContextSlot;
}

struct ExecContextOptions {
  Device device = Device::cpu();
  int threads = 0;                                             // 0: FORGE_NUM_THREADS, else all hardware threads
  std::optional<std::uint64_t> seed = std::nullopt;            // default: FORGE_SEED, else a fixed seed
  std::optional<std::size_t> max_cached_bytes = std::nullopt;  // default: FORGE_POOL_MAX_CACHED_BYTES, else 1 GiB
};

class ExecContext {
 public:
  static constexpr std::uint64_t kDefaultSeed = 67280421310721ULL;

  ExecContext();
  explicit ExecContext(const ExecContextOptions& options);
  ~ExecContext();
  ExecContext(const ExecContext&) = delete;
  ExecContext& operator=(const ExecContext&) = delete;

  // The innermost live context made on this thread, or nullptr. A context
  // belongs to the thread that made it; destroying it on another thread is
  // allowed (the creating thread then no longer sees it).
  static ExecContext* current() noexcept;
  // The same, throwing invalid_argument naming `op` when there is none.
  static ExecContext& current_or_throw(const char* op);

  Runtime& runtime() noexcept { return *runtime_; }
  BufferPool& pool() noexcept { return runtime_->pool(); }
  // The host pool's statistics; stats(device) gives one device's (each device
  // the context serves has its own pool). ErrorCode::device for a device the
  // context does not serve.
  PoolStats stats() const { return runtime_->pool().stats(); }
  PoolStats stats(Device device) const { return runtime_->pool(device, "stats").stats(); }
  Device device() const noexcept { return runtime_->device(); }
  int threads() const noexcept { return runtime_->threads(); }
  void manual_seed(std::uint64_t seed) { runtime_->manual_seed(seed); }

  // A scope with the given policy (forge/exec_scope.h, docs/MEMORY.md "Scope policies").
  ExecScope open_exec_scope(ScopePolicy policy = ScopePolicy::hold) { return ExecScope(*runtime_, policy); }

  // The stream its device's ops are queued on now (the context's own, or a
  // StreamGuard's); the host's placeholder for a CPU context.
  Stream stream() const;
  // A new stream of the context's device, destroyed with the context
  // (invalid_argument for a CPU context).
  Stream new_stream();
  // Waits for the work queued on the current stream.
  void synchronize() const { stream().synchronize(); }

  // Carries a value across steps: `old` takes `fresh`, releasing its old buffer.
  void replace(Tensor& old, Tensor fresh) noexcept { old = std::move(fresh); }

  // ---- creation ----
  Tensor empty(const Shape& shape, DType dtype = DType::f32);
  Tensor zeros(const Shape& shape, DType dtype = DType::f32);
  Tensor ones(const Shape& shape, DType dtype = DType::f32);
  // The value must fit the dtype (Note [Scalar conversion] in docs/OPS.md): out_of_range otherwise.
  Tensor full(const Shape& shape, Scalar value, DType dtype = DType::f32);
  Tensor arange(double end, DType dtype = DType::f32) { return arange(0, end, 1, dtype); }
  Tensor arange(double start, double end, double step = 1, DType dtype = DType::f32);
  Tensor linspace(double start, double end, std::int64_t steps, DType dtype = DType::f32);
  Tensor eye(std::int64_t n, std::int64_t m = -1, DType dtype = DType::f32);
  Tensor rand(const Shape& shape, DType dtype = DType::f32);   // uniform [0, 1)
  Tensor randn(const Shape& shape, DType dtype = DType::f32);  // standard normal
  // Integers uniform in [low, high), each value equally likely; every value
  // of the range must be exact in dtype (out_of_range otherwise).
  Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, DType dtype = DType::i64);
  // A random permutation of 0, ..., n - 1 (n - 1 must be exact in dtype).
  Tensor randperm(std::int64_t n, DType dtype = DType::i64);
  template <typename T>
  Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  template <typename T>
  Tensor from_vector(const std::vector<T>& values) {
    return from_vector(values, Shape{static_cast<std::int64_t>(values.size())});
  }
  // A tensor over memory the caller owns (contiguous, 64-byte alignment not
  // required); `on_release` runs once when the last view of it dies. A call
  // that throws never runs it: the memory stays the caller's.
  Tensor from_blob(void* data, const Shape& shape, DType dtype, std::function<void()> on_release = {});

 private:
  Tensor filled(const char* op, const Shape& shape, Scalar value, DType dtype);
  Tensor from_host_checked(const void* data, std::size_t count, const Shape& shape, DType dtype);
  Ref<Runtime> runtime_;
  detail::ContextSlot* slot_;  // this context's entry in its thread's stack of contexts
};

template <typename T>
Tensor ExecContext::from_vector(const std::vector<T>& values, const Shape& shape) try {
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<std::uint8_t> bytes(values.begin(), values.end());
    return from_host_checked(bytes.data(), bytes.size(), shape, DType::boolean);
  } else {
    return from_host_checked(values.data(), values.size(), shape, dtype_v<T>);
  }
}
FORGE_CATCH_OOM("from_vector")

// Free creation functions on the current context (ExecContext::current()).
Tensor empty(const Shape& shape, DType dtype = DType::f32);
Tensor zeros(const Shape& shape, DType dtype = DType::f32);
Tensor ones(const Shape& shape, DType dtype = DType::f32);
Tensor full(const Shape& shape, Scalar value, DType dtype = DType::f32);
Tensor arange(double start, double end, double step = 1, DType dtype = DType::f32);
Tensor linspace(double start, double end, std::int64_t steps, DType dtype = DType::f32);
Tensor eye(std::int64_t n, std::int64_t m = -1, DType dtype = DType::f32);
Tensor rand(const Shape& shape, DType dtype = DType::f32);
Tensor randn(const Shape& shape, DType dtype = DType::f32);
Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, DType dtype = DType::i64);
Tensor randperm(std::int64_t n, DType dtype = DType::i64);
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
  return ExecContext::current_or_throw("from_vector").from_vector(values, shape);
}
template <typename T>
Tensor from_vector(const std::vector<T>& values) {
  return ExecContext::current_or_throw("from_vector").from_vector(values);
}

}  // namespace forge
