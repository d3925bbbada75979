// The native linear kernels (AVX-512), compiled where the build's -march
// has the instructions (FORGE_NATIVE: -march=native); elsewhere available()
// is false and linear runs the portable kernel.

#include "infer/quant_kernels.h"

namespace forge::infer::detail::native {

bool available(WeightFormat) noexcept { return false; }
std::size_t scratch_bytes(const LinearProblem&) noexcept { return 0; }
void prepare_activations(const LinearProblem&, std::byte*) noexcept {}
void compute_rows(const LinearProblem&, const std::byte*, std::int64_t, std::int64_t) noexcept {}

}  // namespace forge::infer::detail::native
