#pragma once
// The oneTBB task arena a Runtime runs its parallel kernels in.

#include <tbb/task_arena.h>

namespace forge::detail {

class Threading {
 public:
  explicit Threading(int threads) : arena_(threads) {}
  tbb::task_arena& arena() noexcept { return arena_; }

 private:
  tbb::task_arena arena_;
};

}  // namespace forge::detail
