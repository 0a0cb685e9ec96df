// The int8 GEMM: prefill's products of weights held as small integer codes with a float scale per
// group of columns (ggml's Q4_0, Q5_0, Q4_K and Q6_K: ggml.hpp unpacks them), times activations
// quantized to int8 in blocks of 32 exactly as the decode products take them
// (q4::quantize_activations): prefill computes what decode computes, in integer dot products, where
// widening the weights to float ran at the float32 FMA rate (a quarter of vpdpbusd's byte rate).
//
// X is quantized once for all the products of a set and laid out in panels of kPanel positions
// (pack): per block of 32 columns, 8 steps of 4 columns, each step kPanel dwords (position p's 4
// bytes in lane p); per block the positions' scales d_x and the sums s_x of each half block's codes.
// The weight rows are unpacked from the file's blocks, kRows at a time, into a panel of unsigned
// codes (a byte each, in column order) and float scales (RowPanel), which every panel of X reuses.
// A tile of those rows x kPanel positions keeps its int32 sums and float accumulators in registers:
// per step, each row's 4 codes broadcast times the step's activations (vpdpbusd where the CPU has
// AVX512-VNNI; else vpmaddubsw into int16, as many steps as int16 holds, then vpmaddwd into int32);
// per group of columns that share a weight scale (32, or 16 for Q6_K) the sums go to float:
//   y[r, p] += a[r, g] d_x[p] (sum_c q[r, c] q_x[p, c] - offset s_x[p, g])   (types with an offset)
//   y[r, p] += a[r, g] d_x[p] sum_c q[r, c] q_x[p, c] - m[r, g] d_x[p] s_x[p, g]   (with a minimum)
// The kernels are the target section at the end, compiled once per target (simd.hpp); the x86
// targets have them.
#ifndef MINIMIND_DETAIL_KERNELS_GEMM_INT8_HPP
#define MINIMIND_DETAIL_KERNELS_GEMM_INT8_HPP
#include "minimind/detail/kernels/q4.hpp"
#include "minimind/detail/kernels/simd.hpp"
#include "minimind/detail/line_aligned.hpp"
#include "minimind/tensor.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace minimind::kernels::int8_gemm {

inline constexpr Index kBlock = 32;               // columns per activation scale (q4's blocks)
inline constexpr Index kStep = 4;                 // columns per int32 lane per product
inline constexpr Index kSteps = kBlock / kStep;   // steps per block
inline constexpr Index kChunk = 256;              // a RowPanel's rows lie kChunk codes apart
inline constexpr Index kChunkBlocks = kChunk / kBlock;

// How a type's unpacked codes q make its values, for a weight's group of columns:
//   Groups   weight scales per block of 32 columns: 1, or 2 (sub-blocks of 16)
//   Offset   value = a * (q - Offset); 0: value = a * q - m, with a minimum m per group
//   MaxCode  the largest code: how many vpmaddubsw results an int16 sum holds
template <int Groups, int Offset, int MaxCode>
struct Codes {
  static constexpr int kGroups = Groups, kOffset = Offset, kMaxCode = MaxCode;
};

// `rows` weight rows unpacked over all their columns, in chunks of kChunk columns: chunk c of row
// i at codes + (c * rows + i) * kChunk, so the kernel finds each row of a tile at a fixed offset
// from one pointer; each group's scale a (and minimum m, for types without an offset) at
// scales / mins + ((c * rows + i) * kChunkBlocks + block in chunk) * groups + g.
struct RowPanel {
  uint8_t* codes;
  float* scales;
  float* mins;
  Index rows;
  int groups;
  uint8_t* codes_of(Index i, Index block) const {
    return codes + (block / kChunkBlocks * rows + i) * kChunk + block % kChunkBlocks * kBlock;
  }
  Index scale_index(Index i, Index block) const {
    return ((block / kChunkBlocks * rows + i) * kChunkBlocks + block % kChunkBlocks) * groups;
  }
  // Bytes a panel of `rows` rows of `blocks` blocks takes, in floats (it lives in the GEMM's
  // per-thread float buffer).
  static Index floats(Index rows, Index blocks) {
    const Index chunks = (blocks + kChunkBlocks - 1) / kChunkBlocks;
    return chunks * rows * (kChunk / 4 + 2 * 2 * kChunkBlocks);
  }
  static RowPanel in(float* buffer, Index rows, Index blocks, int groups) {
    const Index chunks = (blocks + kChunkBlocks - 1) / kChunkBlocks;
    float* scales = buffer + chunks * rows * kChunk / 4;
    float* mins = scales + chunks * rows * kChunkBlocks * groups;
    return {reinterpret_cast<uint8_t*>(buffer), scales, mins, rows, groups};
  }
};

// X [n, cols] quantized in panels of `panel` positions (cols a multiple of kBlock). Panel p:
// codes + p * blocks * kBlock * panel: for block b and step t, `panel` runs of 4 bytes at
// ((b * kSteps + t) * panel + lane) * 4; scales + p * blocks * panel: d_x at b * panel + lane;
// sums + p * blocks * 2 * panel: s_x of half h of block b at (2 b + h) * panel + lane. Positions
// past n are zeros with scale 0.
struct Int8Panels {
  LineVector<int8_t> codes;
  LineVector<float> scales;
  LineVector<int32_t> sums;
  // The positions as q4::quantize_activations gives them, row by row, before they go to panels.
  std::vector<int8_t> rows;
  std::vector<float> row_scales;
  std::vector<int32_t> row_sums;
  Index panel = 0, blocks = 0, panels = 0;

  const int8_t* codes_of(Index p) const { return codes.data() + p * blocks * kBlock * panel; }
  const float* scales_of(Index p) const { return scales.data() + p * blocks * panel; }
  const int32_t* sums_of(Index p) const { return sums.data() + p * blocks * 2 * panel; }
};

}  // namespace minimind::kernels::int8_gemm

#endif  // MINIMIND_DETAIL_KERNELS_GEMM_INT8_HPP

#ifdef MINIMIND_TARGET
namespace minimind::kernels::int8_gemm::MINIMIND_TARGET {

#if MINIMIND_AVX2
// The vector operations of the tiles, for 8 (ymm) and 16 (zmm) int32 lanes.
struct Ymm {
  using I = __m256i;
  using F = __m256;
  static constexpr int kLanes = 8;
  static I load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static I broadcast(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
  }
  static I zero() { return _mm256_setzero_si256(); }
  static I add32(I a, I b) { return _mm256_add_epi32(a, b); }
  static I add16(I a, I b) { return _mm256_add_epi16(a, b); }
  static I sub32(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I shift_left(I a, int s) { return _mm256_sllv_epi32(a, _mm256_set1_epi32(s)); }
  static I maddubs(I u, I s) { return _mm256_maddubs_epi16(u, s); }
  static I pairs(I a) { return _mm256_madd_epi16(a, _mm256_set1_epi16(1)); }
  static F loadf(const float* p) { return _mm256_loadu_ps(p); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F zerof() { return _mm256_setzero_ps(); }
  static F to_float(I a) { return _mm256_cvtepi32_ps(a); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }
  static F addf(F a, F b) { return _mm256_add_ps(a, b); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
};
#endif
#if MINIMIND_AVX512
struct Zmm {
  using I = __m512i;
  using F = __m512;
  static constexpr int kLanes = 16;
  static I load(const void* p) { return _mm512_loadu_si512(p); }
  static I broadcast(const uint8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
  }
  static I zero() { return _mm512_setzero_si512(); }
  static I add32(I a, I b) { return _mm512_add_epi32(a, b); }
  static I add16(I a, I b) { return _mm512_add_epi16(a, b); }
  static I sub32(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I shift_left(I a, int s) { return _mm512_sllv_epi32(a, _mm512_set1_epi32(s)); }
  static I maddubs(I u, I s) { return _mm512_maddubs_epi16(u, s); }
  static I pairs(I a) { return _mm512_madd_epi16(a, _mm512_set1_epi16(1)); }
  static I dpbusd(I acc, I u, I s) { return q4::MINIMIND_TARGET::dpbusd(acc, u, s); }
  static F loadf(const float* p) { return _mm512_loadu_ps(p); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F zerof() { return _mm512_setzero_ps(); }
  static F to_float(I a) { return _mm512_cvtepi32_ps(a); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static F addf(F a, F b) { return _mm512_add_ps(a, b); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
};
// 4 rows x 32 positions: 8 int32 sums, 8 float accumulators, the step's 2 vectors of activations.
using Lanes = Zmm;
inline constexpr Index kRows = 4;
#elif MINIMIND_AVX2
// 2 rows x 16 positions: 4 int32 (or int16) sums, 4 float accumulators in the 16 ymm registers.
using Lanes = Ymm;
inline constexpr Index kRows = 2;
#endif

#if MINIMIND_AVX2
inline constexpr int kVectors = 2;  // activation vectors per step
inline constexpr Index kPanel = kVectors * Lanes::kLanes;

inline constexpr int log2_of(int v) { return v <= 1 ? 0 : 1 + log2_of(v / 2); }

// One tile: ct[i * ct_stride + p] = sum over the row's columns for rows i < R of the panel w and
// positions p < kPanel of the panel x. Not inlined, so its accumulators keep the registers to
// themselves (gemm.hpp's micro-kernel says why).
template <int R, class C, bool Vnni, class O = Lanes>
[[gnu::noinline]] void tile(const RowPanel& w, Index blocks, const int8_t* xc, const float* xd, const int32_t* xs, float* ct,
                            Index ct_stride) {
  using I = typename O::I;
  using F = typename O::F;
  constexpr int G = C::kGroups, kGroupSteps = kSteps / G;
  // vpmaddubsw results an int16 lane holds: each is at most 2 * kMaxCode * 127.
  constexpr int kChain = std::min<int>(kGroupSteps, 32767 / (2 * 127 * C::kMaxCode));
  static_assert(kChain >= 1 && kGroupSteps % kChain == 0);
  F acc[R][kVectors];
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < kVectors; ++v) acc[i][v] = O::zerof();
  for (Index b = 0; b < blocks; ++b, xc += kSteps * kPanel * kStep, xd += kPanel, xs += 2 * kPanel) {
    const uint8_t* wc = w.codes_of(0, b);  // row i at wc + i * kChunk
    const Index s0 = w.scale_index(0, b);  // row i's at s0 + i * kChunkBlocks * G
    F dx[kVectors];
    for (int v = 0; v < kVectors; ++v) dx[v] = O::loadf(xd + v * O::kLanes);
    for (int g = 0; g < G; ++g) {
      // The group's activation sums: its half, or both halves.
      I s[kVectors];
      for (int v = 0; v < kVectors; ++v) {
        s[v] = O::load(xs + g * kPanel + v * O::kLanes);
        if constexpr (G == 1) s[v] = O::add32(s[v], O::load(xs + kPanel + v * O::kLanes));
      }
      I sum[R][kVectors];
      for (int v = 0; v < kVectors; ++v) {
        const I init = C::kOffset > 0 ? O::sub32(O::zero(), O::shift_left(s[v], log2_of(C::kOffset))) : O::zero();
        for (int i = 0; i < R; ++i) sum[i][v] = init;
      }
      for (int t0 = 0; t0 < kGroupSteps; t0 += kChain) {
        I pairs[R][kVectors];
        for (int i = 0; i < R; ++i)
          for (int v = 0; v < kVectors; ++v) pairs[i][v] = O::zero();
#pragma GCC unroll 8
        for (int t = t0; t < t0 + kChain; ++t) {
          const int step = g * kGroupSteps + t;
          I x[kVectors];
          for (int v = 0; v < kVectors; ++v) x[v] = O::load(xc + (step * kPanel + v * O::kLanes) * kStep);
          for (int i = 0; i < R; ++i) {
            const I u = O::broadcast(wc + i * kChunk + step * kStep);
            for (int v = 0; v < kVectors; ++v) {
              if constexpr (Vnni) {
                sum[i][v] = O::dpbusd(sum[i][v], u, x[v]);
              } else {
                pairs[i][v] = O::add16(pairs[i][v], O::maddubs(u, x[v]));
              }
            }
          }
        }
        if constexpr (!Vnni) {
          for (int i = 0; i < R; ++i)
            for (int v = 0; v < kVectors; ++v) sum[i][v] = O::add32(sum[i][v], O::pairs(pairs[i][v]));
        }
      }
      F xm[kVectors];
      for (int v = 0; v < kVectors; ++v) xm[v] = C::kOffset == 0 ? O::mul(O::to_float(s[v]), dx[v]) : O::zerof();
      for (int i = 0; i < R; ++i) {
        const Index at = s0 + i * kChunkBlocks * G + g;
        const F a = O::set1(w.scales[at]);
        for (int v = 0; v < kVectors; ++v) {
          acc[i][v] = O::fmadd(O::to_float(sum[i][v]), O::mul(a, dx[v]), acc[i][v]);
          if constexpr (C::kOffset == 0) acc[i][v] = O::fnmadd(O::set1(w.mins[at]), xm[v], acc[i][v]);
        }
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < kVectors; ++v) O::store(ct + i * ct_stride + v * O::kLanes, acc[i][v]);
}

#if MINIMIND_AVX512
// Whether this CPU runs vpdpbusd; decided once.
inline bool vnni() { return q4::MINIMIND_TARGET::has_vnni(); }
#else
inline constexpr bool vnni() { return false; }
#endif

// Sizes x8 for n positions of cols columns (a multiple of kBlock).
inline void reserve(Int8Panels& x8, Index n, Index cols) {
  x8.panel = kPanel;
  x8.blocks = cols / kBlock;
  x8.panels = (n + kPanel - 1) / kPanel;
  const size_t positions = static_cast<size_t>(x8.panels * kPanel), blocks = static_cast<size_t>(x8.blocks);
  auto grow = [](auto& v, size_t size) {
    if (v.size() < size) v.resize(size);
  };
  grow(x8.codes, positions * blocks * kBlock);
  grow(x8.scales, positions * blocks);
  grow(x8.sums, positions * blocks * 2);
  grow(x8.rows, positions * blocks * kBlock);
  grow(x8.row_scales, positions * blocks);
  grow(x8.row_sums, positions * blocks);
}

// Panels [begin, end) of x8 (after reserve): positions [0, n) of x (rows of cols, x_stride apart)
// quantized as q4::quantize_activations quantizes them, zeros past n.
inline void pack(const float* x, Index x_stride, Index n, Index cols, Index begin, Index end, Int8Panels& x8) {
  const Index blocks = x8.blocks;
  for (Index p = begin; p < end; ++p) {
    int8_t* codes = x8.codes.data() + p * blocks * kBlock * kPanel;
    float* scales = x8.scales.data() + p * blocks * kPanel;
    int32_t* sums = x8.sums.data() + p * blocks * 2 * kPanel;
    for (Index lane = 0; lane < kPanel; ++lane) {
      const Index i = p * kPanel + lane;
      int8_t* row = x8.rows.data() + i * blocks * kBlock;
      float* row_scales = x8.row_scales.data() + i * blocks;
      int32_t* row_sums = x8.row_sums.data() + i * blocks;
      if (i < n) {
        q4::MINIMIND_TARGET::quantize_activations(x + i * x_stride, cols, row, row_scales, row_sums);
      } else {
        std::fill(row, row + blocks * kBlock, int8_t{0});
        std::fill(row_scales, row_scales + blocks, 0.0f);
        std::fill(row_sums, row_sums + blocks, 0);
      }
      for (Index b = 0; b < blocks; ++b) {
        const int8_t* q = row + b * kBlock;
        for (Index t = 0; t < kSteps; ++t) std::memcpy(codes + ((b * kSteps + t) * kPanel + lane) * kStep, q + t * kStep, kStep);
        int32_t half = 0;
        for (Index c = 0; c < kBlock / 2; ++c) half += q[c];
        scales[b * kPanel + lane] = row_scales[b];
        sums[2 * b * kPanel + lane] = half;
        sums[(2 * b + 1) * kPanel + lane] = row_sums[b] - half;
      }
    }
  }
}

// Rows [r0, r1) of a matrix of `blocks` blocks per row times every panel of x8: their sums at
// ct [(r - r0) * ct_stride + position] (ct_stride >= x8.panels * kPanel). unpack(r, rows, panel)
// fills `panel` with rows [r, r + rows); buffer holds RowPanel::floats(kRows, blocks). With
// with_vnni (only where vnni() says the CPU has it) the tiles use vpdpbusd; the sums are the same.
template <class C, class Unpack>
void products(const Int8Panels& x8, Index blocks, Index r0, Index r1, float* buffer, float* ct, Index ct_stride,
              [[maybe_unused]] bool with_vnni, Unpack&& unpack) {
  auto run = [&]<int R>(Index r) {
    const RowPanel panel = RowPanel::in(buffer, R, blocks, C::kGroups);
    unpack(r, Index{R}, panel);
    for (Index p = 0; p < x8.panels; ++p) {
      float* c = ct + (r - r0) * ct_stride + p * kPanel;
#if MINIMIND_AVX512
      if (with_vnni) {
        tile<R, C, true>(panel, blocks, x8.codes_of(p), x8.scales_of(p), x8.sums_of(p), c, ct_stride);
        continue;
      }
#endif
      tile<R, C, false>(panel, blocks, x8.codes_of(p), x8.scales_of(p), x8.sums_of(p), c, ct_stride);
    }
  };
  Index r = r0;
  for (; r + kRows <= r1; r += kRows) run.template operator()<kRows>(r);
  for (; r < r1; ++r) run.template operator()<1>(r);
}
#endif

}  // namespace minimind::kernels::int8_gemm::MINIMIND_TARGET
#endif  // MINIMIND_TARGET
