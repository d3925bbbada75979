#pragma once
// The host's executor (a oneTBB task arena) and device runtime.

#include <cstddef>
#include <memory>

#include "backend/device_runtime.h"

namespace forge::cpu {

std::unique_ptr<detail::Executor> host_executor(int threads);

// The host's DeviceRuntime: the cpu backend, host blocks, a task arena of
// `threads` threads.
std::unique_ptr<detail::DeviceRuntime> host_runtime(int threads, std::size_t max_cached_bytes);

}  // namespace forge::cpu
