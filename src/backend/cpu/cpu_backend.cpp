// The host backend: every entry of the kernel table, for every dtype the
// ops accept, and the host's device runtime (host blocks, a task arena).

#include "backend/backend.h"
#include "backend/cpu/host_executor.h"
#include "backend/cpu/tables.h"
#include "backend/kernels.h"
#include "memory/block_source.h"

namespace forge {
namespace {

backend::Kernels make_table() {
  backend::Kernels k;
  cpu::fill_copy_table(k.copy);
  cpu::fill_elementwise_table(k.elementwise);
  cpu::fill_reduce_table(k.reduce);
  cpu::fill_nn_table(k.nn);
  cpu::fill_conv_table(k.conv);
  cpu::fill_linalg_table(k.linalg);
  cpu::fill_indexing_table(k.indexing);
  cpu::fill_optim_table(k.optim);
  cpu::fill_sort_table(k.sort);
  return k;
}

}  // namespace

const backend::Backend& backend::cpu_backend() noexcept {
  static const Kernels table = make_table();
  static const Backend cpu{"cpu", DeviceType::cpu, &table};
  return cpu;
}

std::unique_ptr<detail::DeviceRuntime> cpu::host_runtime(int threads, std::size_t max_cached_bytes) {
  return std::make_unique<detail::DeviceRuntime>(backend::cpu_backend(), threads, detail::host_block_source(),
                                                 host_executor(threads), max_cached_bytes);
}

}  // namespace forge
