#pragma once
// What the fast kernels may assume about the CPU. With AVX2, FMA and F16C (compile with
// -march=native or -mavx2 -mfma -mf16c) they use 256-bit intrinsics; without, they fall back to
// plain loops that give the same results up to summation order.
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define MINIMIND_AVX2 1
#include <immintrin.h>

#include <cstdint>
#else
#define MINIMIND_AVX2 0
#endif
// aarch64 always has NEON (kernels/neon.hpp); WebAssembly SIMD128 needs -msimd128 (kernels/wasm_simd128.hpp).
#if defined(__aarch64__) && defined(__ARM_NEON)
#define MINIMIND_NEON 1
#else
#define MINIMIND_NEON 0
#endif
#if defined(__wasm_simd128__)
#define MINIMIND_WASM_SIMD 1
#else
#define MINIMIND_WASM_SIMD 0
#endif

namespace minimind::kernels {

#if MINIMIND_AVX2
// Sum of the 8 lanes.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
// Asks for the cache line `ahead` bytes past p, for a decode kernel reading a matrix from DRAM
// (bf16, q8). An address, not a pointer: near the end of the matrix it lies past the array, and a
// prefetch never faults.
inline void prefetch_ahead(const void* p, uintptr_t ahead) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + ahead), _MM_HINT_T0);
}
// The four lane sums of a, b, c, d as one 128-bit vector [sum a, sum b, sum c, sum d].
inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_hadd_ps(a, b);  // a01 a23 b01 b23 | a45 a67 b45 b67
  const __m256 cd = _mm256_hadd_ps(c, d);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);  // a0123 b0123 c0123 d0123 | a4567 ...
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}
#endif

}  // namespace minimind::kernels

#if MINIMIND_NEON
#include "minimind/kernels/neon.hpp"
#endif
#if MINIMIND_WASM_SIMD
#include "minimind/kernels/wasm_simd128.hpp"
#endif
