#pragma once
// float32 weights: y = W x for a row-major W [rows, cols], one row range at a time so a thread
// pool can split the rows. Decode reads every weight once per token from memory, so the loop
// streams four rows at once with independent FMA chains and keeps x in L1.
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
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  for (; c + 16 <= cols; c += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + c), _mm256_loadu_ps(x + c), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + c + 8), _mm256_loadu_ps(x + c + 8), a1);
  }
  sum = hsum(_mm256_add_ps(a0, a1));
#endif
  for (; c < cols; ++c) sum += w[c] * x[c];
  return sum;
}

// y[r] = W[r, :] . x for r in [begin, end).
inline void matvec(const float* w, Index cols, const float* x, float* y, Index begin, Index end) {
  Index r = begin;
#if MINIMIND_AVX2
  if (cols % 8 == 0) {
    for (; r + 4 <= end; r += 4) {
      const float* w0 = w + r * cols;
      const float* w1 = w0 + cols;
      const float* w2 = w1 + cols;
      const float* w3 = w2 + cols;
      __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
      for (Index c = 0; c < cols; c += 8) {
        const __m256 xv = _mm256_loadu_ps(x + c);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + c), xv, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + c), xv, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + c), xv, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + c), xv, a3);
      }
      _mm_storeu_ps(y + r, hsum4(a0, a1, a2, a3));
    }
  }
#endif
  for (; r < end; ++r) y[r] = dot(w + r * cols, x, cols);
}

}  // namespace minimind::kernels::f32
