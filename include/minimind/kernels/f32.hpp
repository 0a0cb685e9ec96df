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

// y[r] = W[r, :] . x for r in [begin, end). Each pass over four rows also prefetches the same
// bytes of the next four: more loads in flight than the hardware prefetcher keeps on its own.
inline void matvec(const float* w, Index cols, const float* x, float* y, Index begin, Index end) {
  Index r = begin;
#if MINIMIND_AVX2
  if (cols % 16 == 0) {
    for (; r + 4 <= end; r += 4) {
      const float* w0 = w + r * cols;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (Index c = 0; c < cols; c += 16) {
        const __m256 xa = _mm256_loadu_ps(x + c), xb = _mm256_loadu_ps(x + c + 8);
        auto row = [&](const float* wr, __m256 a) {
          _mm_prefetch(reinterpret_cast<const char*>(wr + 4 * cols), _MM_HINT_T0);
          a = _mm256_fmadd_ps(_mm256_loadu_ps(wr), xa, a);
          return _mm256_fmadd_ps(_mm256_loadu_ps(wr + 8), xb, a);
        };
        a0 = row(w0 + c, a0);
        a1 = row(w0 + cols + c, a1);
        a2 = row(w0 + 2 * cols + c, a2);
        a3 = row(w0 + 3 * cols + c, a3);
      }
      _mm_storeu_ps(y + r, hsum4(a0, a1, a2, a3));
    }
  }
#endif
  for (; r < end; ++r) y[r] = dot(w + r * cols, x, cols);
}

}  // namespace minimind::kernels::f32
