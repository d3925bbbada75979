#pragma once
// ExecScope: while open, every tensor an op produces on its context is also
// held by the scope, until the scope closes (RAII). Nested scopes release only
// their own suffix, newest first. See docs/MEMORY.md.

#include <cstddef>
#include <cstdint>

#include "forge/ref.h"

namespace forge {

class Runtime;

struct ExecScopeStats {
  std::size_t buffers = 0;          // buffers the scope held
  std::size_t bytes = 0;            // their block bytes
  std::size_t peak_live_bytes = 0;  // the pool's peak live bytes while the scope was open
};

class ExecScope {
 public:
  explicit ExecScope(Runtime& runtime);
  ~ExecScope();
  ExecScope(ExecScope&& other) noexcept;
  ExecScope& operator=(ExecScope&&) = delete;
  ExecScope(const ExecScope&) = delete;
  ExecScope& operator=(const ExecScope&) = delete;

  // Releases what the scope holds (and any scope opened inside it). Idempotent.
  void close() noexcept;
  bool is_open() const noexcept;
  // What the scope holds now, or held when it closed (zeros for a scope that
  // an enclosing scope closed first).
  ExecScopeStats stats() const noexcept;

 private:
  Ref<Runtime> runtime_;
  std::uint64_t id_ = 0;
  mutable ExecScopeStats closed_stats_{};
};

}  // namespace forge
