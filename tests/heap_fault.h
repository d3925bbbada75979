#pragma once
// Heap fault injection for the test binary: heap_fault.cpp replaces the
// global operator new and delete of forge_tests with malloc-based ones that
// count the calling thread's allocations and can be told to make its nth
// one fail (std::bad_alloc, or nullptr for the nothrow forms). Only the
// thread that armed the hook is affected: the counts of a walked call are
// then those of the thread that made it, whatever the context's workers do.

#include <cstdint>

namespace forge_test::heap {

// Makes this thread's nth heap allocation from now fail (n >= 1); 0 disarms.
void fail_after(std::uint64_t n) noexcept;
// Heap allocations this thread has made (operator new, every form).
std::uint64_t allocations() noexcept;
// Allocations this thread was made to fail.
std::uint64_t injected_failures() noexcept;

// Disarms the hook for its lifetime and re-arms it with what was left; what
// it allocates meanwhile is not counted: for test code that must allocate
// while a walked call runs.
class Pause {
 public:
  Pause() noexcept;
  ~Pause();
  Pause(const Pause&) = delete;
  Pause& operator=(const Pause&) = delete;

 private:
  std::uint64_t left_;
  std::uint64_t counted_;
};

}  // namespace forge_test::heap
