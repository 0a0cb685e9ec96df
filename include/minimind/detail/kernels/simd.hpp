#pragma once
// What the fast kernels may assume about the CPU, decided at compile time from the compiler's
// target flags (-march=native, or -mavx2 -mfma -mf16c, ...):
//   MINIMIND_AVX512  AVX-512 F/BW/VL (with AVX2, FMA, F16C): 512-bit decode kernels for f32 and
//                    bf16 (q8 keeps the AVX2 one).
//   MINIMIND_AVX2    AVX2, FMA and F16C: 256-bit kernels (also compiled, and tested, beside the
//                    AVX-512 ones).
//   MINIMIND_NEON    aarch64: 128-bit decode kernels (kernels/neon.hpp).
//   MINIMIND_WASM_SIMD  WebAssembly SIMD128 (-msimd128): 128-bit decode kernels (kernels/wasm_simd128.hpp).
// Without either, the kernels fall back to plain loops that give the same results up to
// summation order. Each format's matvec calls the best target compiled; kernels::name() says which.
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

#if MINIMIND_AVX2 && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define MINIMIND_AVX512 1
#else
#define MINIMIND_AVX512 0
#endif

#include "minimind/tensor.hpp"

#include <array>
#include <cstdint>
#include <string_view>

namespace minimind::kernels {

// The instruction set the decode kernels of this build run on: "avx512", "avx2", "neon",
// "wasm_simd128" or "scalar".
inline const char* name() {
#if MINIMIND_AVX512
  return "avx512";
#elif MINIMIND_AVX2
  return "avx2";
#elif MINIMIND_NEON
  return "neon";
#elif MINIMIND_WASM_SIMD
  return "wasm_simd128";
#else
  return "scalar";
#endif
}

// Every target the kernels know, and whether this build compiled it (tests run each compiled one
// against the references; the CPU must then run them all, as it runs the build's best).
struct Target {
  std::string_view name;
  bool compiled;
};
inline constexpr std::array<Target, 5> kTargets{{
    {"avx512", MINIMIND_AVX512 != 0},
    {"avx2", MINIMIND_AVX2 != 0},
    {"neon", MINIMIND_NEON != 0},
    {"wasm_simd128", MINIMIND_WASM_SIMD != 0},
    {"scalar", true},
}};

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

#if MINIMIND_AVX512
// The two 256-bit halves of v added. Both through the zero-masked extract: GCC 12 reports the
// plain one (and the cast to 256 bits and _mm512_reduce_add_ps, built on it) as reading an
// uninitialized value.
inline __m256 fold(__m512 v) {
  const __m512d d = _mm512_castps_pd(v);
  return _mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, d, 0)),
                       _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, d, 1)));
}
// Sum of the 16 lanes.
inline float hsum(__m512 v) { return hsum(fold(v)); }
// The four lane sums of a, b, c, d (16 lanes each) as [sum a, sum b, sum c, sum d].
inline __m128 hsum4(__m512 a, __m512 b, __m512 c, __m512 d) { return hsum4(fold(a), fold(b), fold(c), fold(d)); }
#endif

// The float vector operations of one x86 target, for the decode dot products (dot() below):
// V the vector, load of floats and of bf16 (widened exactly: zero-extend, shift into the top
// half), madd(acc, a, b) = acc + a b, sum of the lanes. Targets with kMasked load the last
// partial vector under a mask (masked lanes read nothing, and never fault); the others finish
// with a plain loop. neon.hpp and wasm_simd128.hpp define theirs the same way.
#if MINIMIND_AVX2
struct Avx2 {
  using V = __m256;
  static constexpr Index kLanes = 8;
  static constexpr bool kMasked = false;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V load(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  }
  static V madd(V acc, V a, V b) { return _mm256_fmadd_ps(a, b, acc); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static float sum(V v) { return hsum(v); }
  static void prefetch(const void* p, uintptr_t ahead) { prefetch_ahead(p, ahead); }
};
#endif
#if MINIMIND_AVX512
struct Avx512 {
  using V = __m512;
  static constexpr Index kLanes = 16;
  static constexpr bool kMasked = true;
  static __mmask16 mask(Index n) { return static_cast<__mmask16>((1u << n) - 1); }
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load(const float* p, Index n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  static V load(const uint16_t* p, Index n = kLanes) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask(n), p)), 16));
  }
  static V madd(V acc, V a, V b) { return _mm512_fmadd_ps(a, b, acc); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static float sum(V v) { return hsum(v); }
  static void prefetch(const void* p, uintptr_t ahead) { prefetch_ahead(p, ahead); }
};
#endif

// sum_c widen(w[c]) x[c] for c in [0, cols), w float or bf16, on target S: four independent
// chains over 4 vectors a step, then steps of TailVectors vectors (the 128-bit bf16 kernels take
// 8 values, two vectors, at a time), then the masked or plain tail; widen(w) is the scalar
// widening of one weight. Prefetch asks for the lines a step reads, `ahead` bytes early (bf16:
// decode from DRAM got 6-7% faster with 1 KiB, paired runs, median; slower at 2 KiB and more, and
// for f32 at any distance).
template <class S, int TailVectors, uintptr_t Prefetch, class W, class Widen>
inline float dot(const W* w, const float* x, Index cols, Widen widen) {
  constexpr Index L = S::kLanes;
  typename S::V a0 = S::zero(), a1 = a0, a2 = a0, a3 = a0;
  Index c = 0;
  for (; c + 4 * L <= cols; c += 4 * L) {
    if constexpr (Prefetch > 0) {
      for (uintptr_t line = 0; line < 4 * L * sizeof(W); line += 64) S::prefetch(w + c, Prefetch + line);
    }
    a0 = S::madd(a0, S::load(w + c), S::load(x + c));
    a1 = S::madd(a1, S::load(w + c + L), S::load(x + c + L));
    a2 = S::madd(a2, S::load(w + c + 2 * L), S::load(x + c + 2 * L));
    a3 = S::madd(a3, S::load(w + c + 3 * L), S::load(x + c + 3 * L));
  }
  for (; c + TailVectors * L <= cols; c += TailVectors * L) {
    a0 = S::madd(a0, S::load(w + c), S::load(x + c));
    if constexpr (TailVectors == 2) a1 = S::madd(a1, S::load(w + c + L), S::load(x + c + L));
  }
  if constexpr (S::kMasked) {
    if (c < cols) a1 = S::madd(a1, S::load(w + c, cols - c), S::load(x + c, cols - c));
    return S::sum(S::add(S::add(a0, a1), S::add(a2, a3)));
  } else {
    float sum = S::sum(S::add(S::add(a0, a1), S::add(a2, a3)));
    for (; c < cols; ++c) sum += widen(w[c]) * x[c];
    return sum;
  }
}

}  // namespace minimind::kernels

#if MINIMIND_NEON
#include "minimind/detail/kernels/neon.hpp"
#endif
#if MINIMIND_WASM_SIMD
#include "minimind/detail/kernels/wasm_simd128.hpp"
#endif

namespace minimind::kernels {
// The vector operations of the best target this build has, for kernels::dot (none: plain loops).
#if MINIMIND_AVX2 || MINIMIND_NEON || MINIMIND_WASM_SIMD
#define MINIMIND_SIMD 1
#endif
#if MINIMIND_AVX512
using Simd = Avx512;
#elif MINIMIND_AVX2
using Simd = Avx2;
#elif MINIMIND_NEON
using Simd = neon::Ops;
#elif MINIMIND_WASM_SIMD
using Simd = wasm::Ops;
#endif
}  // namespace minimind::kernels
