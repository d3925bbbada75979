// The replaceable global allocation functions of forge_tests (heap_fault.h).
// Every form allocates with malloc / posix_memalign and frees with free, so
// any new pairs with any delete. The counters are thread_local and trivial
// (no constructor or destructor), so they are usable at any point of a
// thread's life, including while the runtime starts or tears it down.

#include "heap_fault.h"

#include <execinfo.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <new>

namespace forge_test::heap {
namespace {

thread_local std::uint64_t t_countdown = 0;  // 0: disarmed
thread_local std::uint64_t t_allocations = 0;
thread_local std::uint64_t t_injected = 0;

// FORGE_HEAP_FAULT_TRACE=1 prints where each injected failure happens
// (symbolized with the binary's symbols: build with -rdynamic, or read the
// addresses with addr2line).
void trace() noexcept {
  static const bool enabled = std::getenv("FORGE_HEAP_FAULT_TRACE") != nullptr;
  if (!enabled) return;
  void* frames[48];
  const int n = ::backtrace(frames, 48);
  ::write(STDERR_FILENO, "heap fault injected at:\n", 24);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
}

// Counts one allocation; true when it must fail.
bool refuse() noexcept {
  ++t_allocations;
  if (t_countdown == 0 || --t_countdown != 0) return false;
  ++t_injected;
  trace();
  return true;
}

void* allocate(std::size_t n, std::size_t alignment) noexcept {
  if (refuse()) return nullptr;
  if (n == 0) n = 1;
  if (alignment <= alignof(std::max_align_t)) return std::malloc(n);
  void* p = nullptr;
  return ::posix_memalign(&p, alignment, n) == 0 ? p : nullptr;
}

void* allocate_or_throw(std::size_t n, std::size_t alignment) {
  void* p = allocate(n, alignment);
  if (!p) throw std::bad_alloc();
  return p;
}

}  // namespace

void fail_after(std::uint64_t n) noexcept { t_countdown = n; }
std::uint64_t allocations() noexcept { return t_allocations; }
std::uint64_t injected_failures() noexcept { return t_injected; }

Pause::Pause() noexcept : left_(t_countdown), counted_(t_allocations) { t_countdown = 0; }
Pause::~Pause() {
  t_countdown = left_;
  t_allocations = counted_;
}

}  // namespace forge_test::heap

using forge_test::heap::allocate;
using forge_test::heap::allocate_or_throw;

void* operator new(std::size_t n) { return allocate_or_throw(n, 0); }
void* operator new[](std::size_t n) { return allocate_or_throw(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return allocate_or_throw(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return allocate_or_throw(n, static_cast<std::size_t>(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate(n, 0); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate(n, static_cast<std::size_t>(a));
}

void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
