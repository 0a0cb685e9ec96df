#pragma once
// float32 weights: y = W x for a row-major W [rows, cols], one row range at a time so a thread
// pool can split the rows. Decode reads every weight once per token from memory: the loop is a
// stream of loads with four independent FMA chains.
#include "minimind/kernels/simd.hpp"
#include "minimind/tensor.hpp"

namespace minimind::kernels::f32 {

// The plain reference: y[r] = sum_c W[r, c] x[c] for r in [begin, end).
inline void matvec_reference(const float* w, Index cols, const float* x, float* y, Index begin, Index end) {
  for (Index r = begin; r < end; ++r) {
    double sum = 0;
    for (Index c = 0; c < cols; ++c) sum += static_cast<double>(w[r * cols + c]) * x[c];
    y[r] = static_cast<float>(sum);
  }
}

inline float dot(const float* w, const float* x, Index cols) {
  Index c = 0;
  float sum = 0;
#if MINIMIND_AVX2
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (; c + 32 <= cols; c += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + c), _mm256_loadu_ps(x + c), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + c + 8), _mm256_loadu_ps(x + c + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + c + 16), _mm256_loadu_ps(x + c + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + c + 24), _mm256_loadu_ps(x + c + 24), a3);
  }
  for (; c + 8 <= cols; c += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + c), _mm256_loadu_ps(x + c), a0);
  sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
#elif MINIMIND_NEON
  c = cols / 4 * 4;
  sum = neon::f32_dot(w, x, c);
#elif MINIMIND_WASM_SIMD
  c = cols / 4 * 4;
  sum = wasm::f32_dot(w, x, c);
#endif
  for (; c < cols; ++c) sum += w[c] * x[c];
  return sum;
}

// y[r] = W[r, :] . x for r in [begin, end), one row after another: the weights are then one
// sequential stream, which the hardware prefetcher follows best (from DRAM: 14 GB/s, against 12
// for four rows read side by side); x stays in L1.
inline void matvec(const float* w, Index cols, const float* x, float* y, Index begin, Index end) {
  for (Index r = begin; r < end; ++r) y[r] = dot(w + r * cols, x, cols);
}

}  // namespace minimind::kernels::f32
