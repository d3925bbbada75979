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

// The packed path with B built by the caller, for a B that is cheaper to
// write straight into panels than to copy (conv2d's column matrix: im2col
// writes B's panels itself), and optionally an A packed once for many
// calls (conv2d's weights, shared by every image).
//
// B is filled a block at a time by `fill_b(pc, kc, jc, nc, panels)`:
// B[pc + p, jc + q] for p < kc, q < nc goes to
//   panels[j0 * kc + p * width + (q - j0)],  j0 = q / 48 * 48,
// where width is 48, or min(48, round_up(nc - j0, 16)) for the last panel,
// whose lanes from nc up to its width must be zero. nc never exceeds
// nc_cap (a multiple of 48).
//
// A is either packed (sgemm_pack_a's layout: m * k floats, packed in pieces
// of rows if the caller wants it in parallel) or read from `data` with
// strides rs, cs and packed a block at a time.
inline constexpr std::int64_t kSgemmPanelCols = 48;
struct SgemmA {
  const float* packed = nullptr;
  const float* data = nullptr;
  std::int64_t rs = 0, cs = 0;
};
// A non-owning reference to the caller's fill (a std::function would
// allocate for a lambda of more than two captures, on whichever worker
// thread builds it, and Note [Worker scratch] keeps workers off the heap).
struct SgemmFillB {
  void (*fn)(const void* fill, std::int64_t pc, std::int64_t kc, std::int64_t jc, std::int64_t nc, float* panels);
  const void* fill;
  void operator()(std::int64_t pc, std::int64_t kc, std::int64_t jc, std::int64_t nc, float* panels) const {
    fn(fill, pc, kc, jc, nc, panels);
  }
};
// fill(pc, kc, jc, nc, panels) as an SgemmFillB; `fill` must outlive it.
template <typename Fill>
SgemmFillB sgemm_fill_ref(const Fill& fill) {
  return {[](const void* f, std::int64_t pc, std::int64_t kc, std::int64_t jc, std::int64_t nc, float* panels) {
            (*static_cast<const Fill*>(f))(pc, kc, jc, nc, panels);
          },
          &fill};
}
// Packs rows [r0, r1) of A [m, k] (r0 a multiple of 8; r1 a multiple of
// 8, or m) into their place in the packed A.
void sgemm_pack_a(std::int64_t m, std::int64_t k, const float* a, std::int64_t a_rs, std::int64_t a_cs, float* dst,
                  std::int64_t r0, std::int64_t r1) noexcept;
// Floats of scratch (64-byte aligned) an sgemm_fill_b of m' <= m rows and
// n' <= n columns takes.
std::size_t sgemm_fill_scratch_floats(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t nc_cap,
                                      bool a_packed) noexcept;
// C = alpha * A B + beta * C (beta applied on the first k block only), C
// row-major with row stride c_rs. m, n, k > 0.
void sgemm_fill_b(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const SgemmA& a,
                  const SgemmFillB& fill_b, std::int64_t nc_cap, float beta, float* c, std::int64_t c_rs,
                  float* scratch);

// The packed loop nest over operands the caller packed whole: A in
// sgemm_pack_a's layout, B in the layout sgemm_fill_b's fill writes for
// one block (pc = jc = 0, kc = k, nc = n), for products small enough to be
// one block: k <= kSgemmMaxKc, n <= kSgemmMaxNc. A longer k runs as
// several calls, one per sgemm_k_step(k) rows of B, the later ones at
// beta 1, with A at a_packed + m * pc (Winograd's transformed tiles, built
// for all 16 products at once, then multiplied in turn). No scratch.
inline constexpr std::int64_t kSgemmMaxKc = 512, kSgemmMaxNc = 768;
// How sgemm_pack_a cuts a k this long into blocks (at most kSgemmMaxKc).
std::int64_t sgemm_k_step(std::int64_t k) noexcept;
// Where A[r, p] of an [m, k] A goes in sgemm_pack_a's layout, for callers
// that compute A's values straight into it.
std::int64_t sgemm_packed_a_index(std::int64_t m, std::int64_t k, std::int64_t r, std::int64_t p) noexcept;
void sgemm_prepacked(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a_packed,
                     const float* b_panels, float beta, float* c, std::int64_t c_rs) noexcept;

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
