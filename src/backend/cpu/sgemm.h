#pragma once
// forge's own f32 GEMM for AVX-512 cores: packed panels and register-blocked
// micro-kernels (sgemm.cpp says how and why). gemm.cpp calls it for every f32
// product it would otherwise hand to Eigen, and keeps Eigen as the portable
// path: without AVX-512 at compile time `sgemm_available()` is false and
// nothing here is called. Unchecked: callers validate shapes and aliasing.

#include <cstddef>
#include <cstdint>

namespace forge::cpu {

// Whether this build has the AVX-512 kernels.
bool sgemm_available() noexcept;

// Floats of scratch one sgemm of A [m, k] by B [k, n] with these strides
// needs (packing buffers; 0 when it packs nothing).
std::size_t sgemm_scratch_floats(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t a_rs, std::int64_t a_cs,
                                 std::int64_t b_rs, std::int64_t b_cs) noexcept;

// C = alpha * A B + beta * C on the calling thread, with C row-major (unit
// column stride, row stride c_rs) and A, B of any strides. beta == 0 ignores
// C's old contents. `scratch` holds sgemm_scratch_floats(...) floats, 64-byte
// aligned. m, n, k > 0.
void sgemm(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a, std::int64_t a_rs,
           std::int64_t a_cs, const float* b, std::int64_t b_rs, std::int64_t b_cs, float beta, float* c,
           std::int64_t c_rs, float* scratch) noexcept;

}  // namespace forge::cpu
