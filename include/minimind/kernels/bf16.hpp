#pragma once
// bfloat16 weights: the top 16 bits of a float32, so widening is a 16-bit shift and the products
// are ordinary float32 FMAs. Half the bytes of f32 per token; rounding to bf16 keeps 8 bits of
// mantissa (relative error below 2^-9).
#include "minimind/kernels/simd.hpp"
#include "minimind/tensor.hpp"

#include <cstdint>
#include <cstring>

namespace minimind::kernels::bf16 {

// Round to nearest even (NaN stays NaN).
inline uint16_t from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float to_float(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

#if MINIMIND_AVX2
inline __m256 load8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
#endif

// Widens `n` values.
inline void to_float(const uint16_t* in, float* out, Index n) {
  Index i = 0;
#if MINIMIND_AVX2
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, load8(in + i));
#endif
  for (; i < n; ++i) out[i] = to_float(in[i]);
}

// The plain reference: y[r] = sum_c float(W[r, c]) x[c] for r in [begin, end).
inline void matvec_reference(const uint16_t* w, Index cols, const float* x, float* y, Index begin, Index end) {
  for (Index r = begin; r < end; ++r) {
    double sum = 0;
    for (Index c = 0; c < cols; ++c) sum += static_cast<double>(to_float(w[r * cols + c])) * x[c];
    y[r] = static_cast<float>(sum);
  }
}

inline float dot(const uint16_t* w, const float* x, Index cols) {
  Index c = 0;
  float sum = 0;
#if MINIMIND_AVX2
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (; c + 32 <= cols; c += 32) {
    // The line 1 KiB ahead is asked for early: decode from DRAM got 6-7% faster (paired runs,
    // median; 2 KiB and more ahead was slower; for f32 weights it is slower at any distance).
    prefetch_ahead(w + c, 1024);
    a0 = _mm256_fmadd_ps(load8(w + c), _mm256_loadu_ps(x + c), a0);
    a1 = _mm256_fmadd_ps(load8(w + c + 8), _mm256_loadu_ps(x + c + 8), a1);
    a2 = _mm256_fmadd_ps(load8(w + c + 16), _mm256_loadu_ps(x + c + 16), a2);
    a3 = _mm256_fmadd_ps(load8(w + c + 24), _mm256_loadu_ps(x + c + 24), a3);
  }
  for (; c + 8 <= cols; c += 8) a0 = _mm256_fmadd_ps(load8(w + c), _mm256_loadu_ps(x + c), a0);
  sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
#elif MINIMIND_NEON
  c = cols / 8 * 8;
  sum = neon::bf16_dot(w, x, c);
#elif MINIMIND_WASM_SIMD
  c = cols / 8 * 8;
  sum = wasm::bf16_dot(w, x, c);
#endif
  for (; c < cols; ++c) sum += to_float(w[c]) * x[c];
  return sum;
}

// y[r] = float(W[r, :]) . x for r in [begin, end), row after row as f32::matvec (from DRAM:
// 11.7 GB/s, against 7-8 for four rows side by side).
inline void matvec(const uint16_t* w, Index cols, const float* x, float* y, Index begin, Index end) {
  for (Index r = begin; r < end; ++r) y[r] = dot(w + r * cols, x, cols);
}

}  // namespace minimind::kernels::bf16
