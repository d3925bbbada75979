#pragma once
// Eigen, as the cpu kernels include it. GCC 12 reports Eigen's AVX-512
// packing, transposes and exp as reading uninitialised lanes (false
// positives on _mm512_undefined_ps, _mm512_extract* and _mm512_insert*):
// the warnings are about the intrinsics, and are off in the files that
// include this.

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <Eigen/Core>
