#pragma once
// bfloat16 weights: the top 16 bits of a float32, so widening is a 16-bit shift and the products
// are ordinary float32 FMAs. Half the bytes of f32 per token; rounding to bf16 keeps 8 bits of
// mantissa (relative error below 2^-9).
#include "minimind/detail/kernels/simd.hpp"
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

// y[r] = Dot(float(W[r, :]), x) for r in [begin, end), row after row as f32::matvec (from DRAM:
// 11.7 GB/s, against 7-8 for four rows side by side).
template <float (*Dot)(const uint16_t*, const float*, Index)>
inline void matvec_rows(const uint16_t* w, Index cols, const float* x, float* y, Index begin, Index end) {
  for (Index r = begin; r < end; ++r) y[r] = Dot(w + r * cols, x, cols);
}

namespace scalar {
inline float dot(const uint16_t* w, const float* x, Index cols) {
  float sum = 0;
  for (Index c = 0; c < cols; ++c) sum += to_float(w[c]) * x[c];
  return sum;
}
}  // namespace scalar

#if MINIMIND_AVX2
namespace avx2 {
inline float dot(const uint16_t* w, const float* x, Index cols) {
  Index c = 0;
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
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; c < cols; ++c) sum += to_float(w[c]) * x[c];
  return sum;
}
}  // namespace avx2
#endif

#if MINIMIND_AVX512
namespace avx512 {
// 16 bf16 widened exactly (zero-extend, shift into the top half); lanes outside `m` are 0.
inline __m512 load16(const uint16_t* p, __mmask16 m = 0xFFFF) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
inline float dot(const uint16_t* w, const float* x, Index cols) {
  Index c = 0;
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (; c + 64 <= cols; c += 64) {
    prefetch_ahead(w + c, 1024);
    prefetch_ahead(w + c, 1024 + 64);
    a0 = _mm512_fmadd_ps(load16(w + c), _mm512_loadu_ps(x + c), a0);
    a1 = _mm512_fmadd_ps(load16(w + c + 16), _mm512_loadu_ps(x + c + 16), a1);
    a2 = _mm512_fmadd_ps(load16(w + c + 32), _mm512_loadu_ps(x + c + 32), a2);
    a3 = _mm512_fmadd_ps(load16(w + c + 48), _mm512_loadu_ps(x + c + 48), a3);
  }
  for (; c + 16 <= cols; c += 16) a0 = _mm512_fmadd_ps(load16(w + c), _mm512_loadu_ps(x + c), a0);
  if (c < cols) {  // the last 1-15: masked lanes load nothing (and never fault)
    const __mmask16 m = static_cast<__mmask16>((1u << (cols - c)) - 1);
    a1 = _mm512_fmadd_ps(load16(w + c, m), _mm512_maskz_loadu_ps(m, x + c), a1);
  }
  return hsum(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}
}  // namespace avx512
#endif

#if MINIMIND_NEON || MINIMIND_WASM_SIMD
// A 128-bit target (kernels/neon.hpp, kernels/wasm_simd128.hpp): its kernel over whole vectors
// of 8, the plain loop for the rest.
template <float (*Vectors)(const uint16_t*, const float*, Index)>
inline float dot_128(const uint16_t* w, const float* x, Index cols) {
  Index c = cols / 8 * 8;
  float sum = Vectors(w, x, c);
  for (; c < cols; ++c) sum += to_float(w[c]) * x[c];
  return sum;
}
#endif

// The best target this build has (kernels::name()).
inline void matvec(const uint16_t* w, Index cols, const float* x, float* y, Index begin, Index end) {
#if MINIMIND_AVX512
  matvec_rows<avx512::dot>(w, cols, x, y, begin, end);
#elif MINIMIND_AVX2
  matvec_rows<avx2::dot>(w, cols, x, y, begin, end);
#elif MINIMIND_NEON
  matvec_rows<dot_128<kernels::neon::bf16_dot>>(w, cols, x, y, begin, end);
#elif MINIMIND_WASM_SIMD
  matvec_rows<dot_128<kernels::wasm::bf16_dot>>(w, cols, x, y, begin, end);
#else
  matvec_rows<scalar::dot>(w, cols, x, y, begin, end);
#endif
}

}  // namespace minimind::kernels::bf16
