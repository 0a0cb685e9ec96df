// The instruction sets ("targets") the kernels are compiled for, and simd.hpp's target section:
// each target's float vector operations and the decode dot-product loop over them.
//
// The kernels that differ per target are the target sections at the end of simd.hpp, f32.hpp,
// bf16.hpp, q8.hpp, q4.hpp and gemm.hpp. targets.hpp compiles them once per target, each time in that
// target's namespaces (kernels::avx2 and, for the formats' own, kernels::f32::avx2, ...) with:
//   MINIMIND_TARGET     the namespace: avx512, avx2, neon, wasm_simd128 or scalar
//   MINIMIND_AVX512     AVX-512 F/BW/VL (with AVX2, FMA, F16C): 512-bit decode kernels for f32
//                       and bf16 (q8 keeps the 256-bit one), a 12 x 32 GEMM tile
//   MINIMIND_AVX2       AVX2, FMA and F16C (set for avx512 too): 256-bit kernels, a 6 x 16 tile
//   MINIMIND_NEON       aarch64 NEON: 128-bit decode kernels (neon.hpp)
//   MINIMIND_WASM_SIMD  WebAssembly SIMD128 (-msimd128): 128-bit decode kernels (wasm_simd128.hpp)
//   MINIMIND_SIMD       any of these. scalar has none: plain loops and Eigen's GEMM, the same
//                       results up to summation order
// Which targets a build compiles (MINIMIND_HAS_<target> below), and which one runs
// (kernels::active(), targets.hpp):
//   by default scalar and those the compiler's flags allow (-march=native; -mavx2 -mfma -mf16c;
//     aarch64; -msimd128); the best of them runs, chosen at compile time.
//   with MINIMIND_DISPATCH defined, on x86-64 with GCC or clang: avx512, avx2 and scalar whatever
//     the flags, the x86 sections compiled for their instruction sets by target pragmas; the best
//     target this CPU has (cpu_features) runs, chosen at run time. A program built for plain
//     x86-64 then runs on any x86-64 CPU and executes AVX2 or AVX-512 only in those kernels.
// Everything outside the sections (the formats' traits and references, linear(), every std and
// Eigen function) is compiled once, for the compiler's flags: targets.hpp includes all of it
// before the first section, and templates defined outside a section are compiled for those flags
// wherever they are instantiated.
#ifndef MINIMIND_DETAIL_KERNELS_SIMD_HPP
#define MINIMIND_DETAIL_KERNELS_SIMD_HPP

#if defined(MINIMIND_DISPATCH) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MINIMIND_X86_DISPATCH 1
#else
#define MINIMIND_X86_DISPATCH 0
#endif
#if MINIMIND_X86_DISPATCH || (defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
                              defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#define MINIMIND_HAS_AVX512 1
#else
#define MINIMIND_HAS_AVX512 0
#endif
#if MINIMIND_X86_DISPATCH || (defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
#define MINIMIND_HAS_AVX2 1
#else
#define MINIMIND_HAS_AVX2 0
#endif
// aarch64 always has NEON; WebAssembly SIMD128 needs -msimd128.
#if defined(__aarch64__) && defined(__ARM_NEON)
#define MINIMIND_HAS_NEON 1
#else
#define MINIMIND_HAS_NEON 0
#endif
#if defined(__wasm_simd128__)
#define MINIMIND_HAS_WASM_SIMD 1
#else
#define MINIMIND_HAS_WASM_SIMD 0
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif
#if MINIMIND_HAS_NEON
#include "minimind/detail/kernels/neon.hpp"
#endif
#if MINIMIND_HAS_WASM_SIMD
#include "minimind/detail/kernels/wasm_simd128.hpp"
#endif
#include "minimind/tensor.hpp"

#include <cstdint>

namespace minimind::kernels {

// Which of the x86 targets' instruction sets a CPU runs.
struct CpuFeatures {
  bool avx2 = false;    // AVX2, FMA and F16C; the OS saves ymm
  bool avx512 = false;  // those and AVX-512 F, BW and VL; the OS saves zmm and the mask registers
  bool avx512vnni = false;  // those and AVX512-VNNI (vpdpbusd: q4's byte products)
};

// How many bytes ahead the AVX-512 decode kernels (one sequence's matrix-vector products, which
// stream every weight once per token) ask for the weights' cache lines. The best distance depends
// on the CPU's prefetcher: Intel and AMD family 0x1A (Zen 5) stream faster with software prefetch
// (2 KiB measured best on a Sapphire Rapids Xeon; Zen 5 wants 8 KiB, below), while on earlier AMD
// CPUs it slowed the stream, so they leave it to the hardware (docs/performance.md, "Design
// choices"; commits 7b0a108, 83b245b). An address past the matrix is harmless: a prefetch never
// faults.
inline constexpr uintptr_t kDecodePrefetchAhead = 2048;
// AMD family 0x1A (Zen 5) asks 8 KiB ahead: at 2 KiB its decode products streamed well below what
// the core reads from DRAM (commit 83b245b).
inline constexpr uintptr_t kDecodePrefetchAheadZen5 = 8192;

#if defined(__x86_64__)
// This CPU's, from cpuid, with the operating system's consent to the wider registers (xgetbv:
// it saves them on a context switch).
inline CpuFeatures cpu_features() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = c >> 12 & 1, osxsave = c >> 27 & 1, avx = c >> 28 & 1, f16c = c >> 29 & 1;
  if (!(fma && osxsave && avx && f16c)) return f;
  unsigned xcr0 = 0, xcr0_high = 0;  // xgetbv is not an intrinsic without -mxsave
  __asm__("xgetbv" : "=a"(xcr0), "=d"(xcr0_high) : "c"(0));
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = (xcr0 & 0x6) == 0x6 && (b >> 5 & 1);
  f.avx512 = f.avx2 && (xcr0 & 0xE0) == 0xE0 && (b >> 16 & 1) && (b >> 30 & 1) && (b >> 31 & 1);
  f.avx512vnni = f.avx512 && (c >> 11 & 1);
  return f;
}

// Whether the CPU is AMD's ("AuthenticAMD" in cpuid leaf 0).
inline bool cpu_is_amd() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(0, &a, &b, &c, &d) && b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;
}

// The CPU's family from cpuid leaf 1: the base family, plus the extended one when the base is 0xF.
inline unsigned cpu_family() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  const unsigned base = a >> 8 & 0xF;
  return base == 0xF ? base + (a >> 20 & 0xFF) : base;
}

// The AVX-512 decode kernels' prefetch distance on this CPU, 0 for none; decided once.
inline uintptr_t decode_prefetch_ahead() {
  static const uintptr_t ahead = !cpu_is_amd()           ? kDecodePrefetchAhead
                                 : cpu_family() < 0x1A ? 0
                                                       : kDecodePrefetchAheadZen5;
  return ahead;
}

// Whether the AVX-512 bf16 decode widens its weights by zero-extension (16 a vector, vpmovzxwd and
// a shift: bf16::dot_extended) rather than in pair order (32 a vector, a shift and a mask:
// bf16::dot); decided once. Which streams faster differs by CPU: zero-extension on AMD Zen 5
// (family 0x1A), pair order on earlier AMD and on Intel (commit 91424aa; docs/performance.md).
inline bool decode_bf16_extended() {
  static const bool extended = cpu_is_amd() && cpu_family() >= 0x1A;
  return extended;
}

// Whether f32 models are held in f32_panels (f32_panels.hpp) on a CPU of this vendor and family,
// where the AVX-512 kernels have them: only where that was measured faster. AMD Zen 5 (family
// 0x1A) prefills and decodes faster with them; an Intel Sapphire Rapids class Xeon prefilled
// slower and an AMD Zen 4 no faster (docs/performance.md, "Design choices"). Those CPUs, and every
// one not measured, keep f32 row-major.
inline bool f32_panels_measured_faster(bool amd, unsigned family) { return amd && family >= 0x1A; }
// The same for this CPU; decided once.
inline bool f32_panels_on_this_cpu() {
  static const bool faster = f32_panels_measured_faster(cpu_is_amd(), cpu_family());
  return faster;
}
#endif

}  // namespace minimind::kernels

#endif  // MINIMIND_DETAIL_KERNELS_SIMD_HPP

#ifdef MINIMIND_TARGET
namespace minimind::kernels::MINIMIND_TARGET {

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
// The lane sums of v[0..N) (N <= 16; zeros past N, not computed) as one vector [sum v[0], sum
// v[1], ...], each summed exactly as hsum() sums it (lane i with i + 8, then i + 4, i + 2, i + 1),
// by one network over all of them: 31 shuffles and 15 additions where N hsums take 9 N
// operations, most of them shuffles on a port the FMAs use too.
template <int N>
inline __m512 hsum16(const __m512* v) {
  static_assert(N >= 1 && N <= 16);
  auto at = [&](int i) { return i < N ? v[i] : _mm512_setzero_ps(); };
  __m512 a[8], b[4], c[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {  // a[i]: the 8-lane folds of v[2i] | v[2i + 1]
    const __m512 x = at(2 * i), y = at(2 * i + 1);
    a[i] = 2 * i >= N ? _mm512_setzero_ps()
                      : _mm512_add_ps(_mm512_maskz_shuffle_f32x4(0xFFFF, x, y, 0x44),
                                      _mm512_maskz_shuffle_f32x4(0xFFFF, x, y, 0xEE));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {  // b[i]: the 4-lane folds of v[4i .. 4i + 4), one per 128 bits
    b[i] = 4 * i >= N ? _mm512_setzero_ps()
                      : _mm512_add_ps(_mm512_maskz_shuffle_f32x4(0xFFFF, a[2 * i], a[2 * i + 1], 0x88),
                                      _mm512_maskz_shuffle_f32x4(0xFFFF, a[2 * i], a[2 * i + 1], 0xDD));
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {  // c[i], 128 bits q: the 2-lane folds of v[8i + q], v[8i + 4 + q]
    const __m512d x = _mm512_castps_pd(b[2 * i]), y = _mm512_castps_pd(b[2 * i + 1]);
    c[i] = 8 * i >= N ? _mm512_setzero_ps()
                      : _mm512_add_ps(_mm512_castpd_ps(_mm512_maskz_unpacklo_pd(0xFF, x, y)),
                                      _mm512_castpd_ps(_mm512_maskz_unpackhi_pd(0xFF, x, y)));
  }
  // 128 bits q: the sums of v[q], v[4 + q], v[8 + q], v[12 + q]; then in order.
  const __m512 d = _mm512_add_ps(_mm512_maskz_shuffle_ps(0xFFFF, c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_maskz_shuffle_ps(0xFFFF, c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_maskz_permutexvar_ps(0xFFFF, order, d);
}
// A register tile's sums: y[p * y_stride + r] = hsum(acc[r][p]) for r < R, p < P, through
// hsum16 in groups of 16: the same additions in the same order as a lane sum per accumulator, in
// about a third of the instructions (commit 3e535ff).
template <int R, int P>
inline void store_sums(const __m512 (&acc)[R][P], float* y, Index y_stride) {
  constexpr int kGroups = (R * P + 15) / 16;
  alignas(64) float sums[kGroups * 16];
#pragma GCC unroll 2
  for (int g = 0; g < kGroups; ++g) {
    __m512 v[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      const int j = g * 16 + i;  // position-major, so each position's R sums lie together
      v[i] = j < R * P ? acc[j % R][j / R] : _mm512_setzero_ps();
    }
    constexpr int kLast = R * P - (kGroups - 1) * 16;
    _mm512_store_ps(sums + 16 * g, g + 1 < kGroups ? hsum16<16>(v) : hsum16<kLast>(v));
  }
#pragma GCC unroll 6
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) y[p * y_stride + r] = sums[p * R + r];
}
#endif

// The float vector operations of the x86 targets, for the decode dot products (dot() below):
// V the vector, load of floats and of bf16 (widened exactly: zero-extend, shift into the top
// half), madd(acc, a, b) = acc + a b, sum of the lanes. Targets with kMasked load the last
// partial vector under a mask (masked lanes read nothing, and never fault); the others finish
// with a plain loop. neon.hpp and wasm_simd128.hpp define their Ops the same way.
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
  // With a lane count, as the masked targets take it: here always kLanes (no masked tail).
  static V load(const float* p, Index) { return load(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void store(float* p, V v, Index) { store(p, v); }
  static V set1(float v) { return _mm256_set1_ps(v); }
  static V madd(V acc, V a, V b) { return _mm256_fmadd_ps(a, b, acc); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V min(V a, V b) { return _mm256_min_ps(a, b); }  // b where either is NaN
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static V round(V v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integral n in [-126, 127], in the exponent bits.
  static V pow2(V n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
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
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void store(float* p, V v, Index n) { _mm512_mask_storeu_ps(p, mask(n), v); }
  static V set1(float v) { return _mm512_set1_ps(v); }
  static V madd(V acc, V a, V b) { return _mm512_fmadd_ps(a, b, acc); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V min(V a, V b) { return _mm512_min_ps(a, b); }  // b where either is NaN
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static V round(V v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V pow2(V n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }
  static float sum(V v) { return hsum(v); }
  static void prefetch(const void* p, uintptr_t ahead) { prefetch_ahead(p, ahead); }
};
#endif
// This target's widest: dot()'s operations (neon.hpp and wasm_simd128.hpp define their own Ops).
#if MINIMIND_AVX512
using Ops = Avx512;
#elif MINIMIND_AVX2
using Ops = Avx2;
#endif

// How many bytes ahead this target's decode kernels ask for the weights' lines: on AVX-512 what
// this CPU wants (decode_prefetch_ahead), elsewhere `elsewhere`, what the format measured best on
// its target (0: none).
inline uintptr_t decode_ahead([[maybe_unused]] uintptr_t elsewhere) {
#if MINIMIND_AVX512
  return decode_prefetch_ahead();
#else
  return elsewhere;
#endif
}

#if MINIMIND_SIMD
// sum_c widen(w[c]) x[c] for c in [0, cols), w float or bf16, on vector operations S: four
// independent chains over 4 vectors a step, then steps of TailVectors vectors (the 128-bit bf16
// kernels take 8 values, two vectors, at a time), then the masked or plain tail; widen(w) is the
// scalar widening of one weight. A non-zero `ahead` asks for the lines a step reads that many
// bytes early, where the target's prefetcher needs the help (decode_ahead(); on AVX2, bf16 only:
// f32 measured no gain at any distance; docs/performance.md).
template <class S, int TailVectors, class W, class Widen>
inline float dot(const W* w, const float* x, Index cols, Widen widen, uintptr_t ahead = 0) {
  constexpr Index L = S::kLanes;
  typename S::V a0 = S::zero(), a1 = a0, a2 = a0, a3 = a0;
  Index c = 0;
  for (; c + 4 * L <= cols; c += 4 * L) {
    if (ahead > 0) {
      for (uintptr_t line = 0; line < 4 * L * sizeof(W); line += 64) S::prefetch(w + c, ahead + line);
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
#endif

}  // namespace minimind::kernels::MINIMIND_TARGET
#endif  // MINIMIND_TARGET
