#pragma once
// forge's own GEMMs for AVX-512 cores: packed panels and register-blocked
// micro-kernels, f32 (sgemm.cpp says how and why), bf16 (bf16_gemm.cpp) and int8
// (int8_gemm.cpp). gemm.cpp calls it for every f32
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

// bf16 GEMM with f32 accumulation (AVX512_BF16's VDPBF16PS, bf16_gemm.cpp):
// C (f32, row-major) = alpha * A B + beta * C with A, B bf16 of any
// strides. VDPBF16PS treats subnormal bf16 inputs as zero and flushes
// subnormal results. False without AVX512_BF16 at compile time.
bool bf16_gemm_available() noexcept;
std::size_t bf16_gemm_scratch_floats(std::int64_t m, std::int64_t n, std::int64_t k) noexcept;
void bf16_gemm(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const std::uint16_t* a, std::int64_t a_rs,
               std::int64_t a_cs, const std::uint16_t* b, std::int64_t b_rs, std::int64_t b_cs, float beta, float* c,
               std::int64_t c_rs, float* scratch) noexcept;

// int8 GEMM with i32 accumulation (AVX512_VNNI's VPDPBUSD, int8_gemm.cpp):
// C (i32, row-major) = A B, or C += A B when `accumulate`, with B s8 and A
// u8, or s8 when `a_signed` (passed as its bytes), of any strides. Sums wrap
// modulo 2^32. Without AVX512_VNNI at compile time int8_gemm_available() is
// false and int8_gemm runs a portable loop nest (no scratch).
bool int8_gemm_available() noexcept;
std::size_t int8_gemm_scratch_bytes(std::int64_t m, std::int64_t n, std::int64_t k) noexcept;
void int8_gemm(std::int64_t m, std::int64_t n, std::int64_t k, bool a_signed, const std::uint8_t* a, std::int64_t a_rs,
               std::int64_t a_cs, const std::int8_t* b, std::int64_t b_rs, std::int64_t b_cs, bool accumulate,
               std::int32_t* c, std::int64_t c_rs, void* scratch) noexcept;

}  // namespace forge::cpu
