// q4: 18 bytes per 32 weights: 4-bit weights in blocks of 32 along each row, one float16 scale per
// block (ggml's Q4_0 in spirit): w[r, c] ~ d[r, c / 32] * (q[r, c] - 8), q in [0, 15]. The scale is
// the block's value of largest magnitude over -8, so that value is stored exactly as q = 0 and the
// 16 levels all serve the block. A row of `cols` weights takes ceil(cols / 32) blocks, the last
// padded with zeros (q = 8).
// Why this layout: on the trained demo model (the golden prompts and four random ones, fake-quantized
// in PyTorch), KL divergence of the next token from f32 was 2.9e-2 with these blocks against 4.4e-2
// with a float16 minimum per block as well (ggml's Q4_1, 20 bytes) and 4.2e-2 with that minimum over
// 64 weights; the extra bytes bought nothing there.
// A matrix-vector product first quantizes the activations in the same blocks to int8 with a float
// scale d_x and the integer sum s_x of the block's q_x (quantize_activations), then each block is
// an integer dot product of the unsigned nibbles with the int8 activations (vpmaddubsw or, with
// VNNI, vpdpbusd), less 8 s_x, exact in int32, scaled by d_w d_x and summed in float32:
//   W[r, :] . x = sum_b d_w[b] d_x[b] (sum_c q[c] q_x[c] - 8 s_x[b]).
// Why int8 and not int16 activations (q8 multiplies int16): next to 4-bit weights the activations'
// rounding is lost in the weights' (same model and prompts: KL 2.92e-2 with int8, 2.96e-2 with
// int16; top-1 agreement 97.3% and 96.9%), and int8 takes one byte-wise multiply where int16
// would take the nibbles widened to 16 bits first.
// Nibble order: byte j of a block holds weight j (low nibble) and weight j + 16 (high), so one
// mask and one shift give the block's first and second 16 weights in order, as the activations lie.
// The kernels are the target section at the end, compiled once per target (simd.hpp).
#ifndef MINIMIND_DETAIL_KERNELS_Q4_HPP
#define MINIMIND_DETAIL_KERNELS_Q4_HPP
#include "minimind/detail/kernels/format.hpp"
#include "minimind/detail/kernels/q8.hpp"
#include "minimind/detail/kernels/simd.hpp"
#include "minimind/detail/weight_arena.hpp"
#include "minimind/tensor.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

namespace minimind::kernels::q4 {

// q4's blocks are q8's: 32 weights along a row, a float16 scale each, rows interleaved in groups of four.
using q8::blocks_for;
using q8::half_from_float;
using q8::half_to_float;
using q8::kBlock;
using q8::kGroup;
inline constexpr Index kBlockBytes = kBlock / 2;  // a block's nibbles

// A quantized matrix as the kernels see it: `q` [rows, blocks * 16] bytes of nibbles, `d` [rows,
// blocks] scales. Both in q8's order (q8.hpp says why): rows in groups of four interleaved block by
// block, [r0 b0][r1 b0][r2 b0][r3 b0][r0 b1]..., rows after the last full group one by one. So the
// four-row kernel reads its 4 x 16 bytes of a block as one 64-byte line, and its 4 scales of a
// block as one 8-byte load.
struct View {
  const uint8_t* q = nullptr;
  const uint16_t* d = nullptr;
  Index rows = 0, cols = 0, blocks = 0;
};

// Which block of the matrix, in storage order, block b of row r is: its nibbles at q + 16 index,
// its scale at d + index.
inline Index block_index(Index rows, Index blocks, Index r, Index b) { return q8::block_offset(rows, blocks, r, b) / kBlock; }
inline Index block_index(const View& w, Index r, Index b) { return block_index(w.rows, w.blocks, r, b); }

// Quantizes one block of x[begin, end) (zero beyond): its 16 bytes of nibbles and its scale.
// The scale is rounded to float16 first and q is computed against the rounded scale.
inline void quantize_block(const float* x, Index begin, Index end, uint8_t* q, uint16_t* d) {
  float peak = 0;  // the value of largest magnitude
  for (Index c = begin; c < end; ++c)
    if (std::abs(x[c]) > std::abs(peak)) peak = x[c];
  *d = half_from_float(peak / -8.0f);
  const float scale = half_to_float(*d);
  const float inv = scale != 0 ? 1.0f / scale : 0.0f;
  uint8_t levels[kBlock];
  for (Index j = 0; j < kBlock; ++j) {
    const float v = begin + j < end ? std::nearbyint(x[begin + j] * inv) : 0.0f;
    levels[j] = static_cast<uint8_t>(std::clamp(v, -8.0f, 7.0f) + 8.0f);
  }
  for (Index j = 0; j < kBlockBytes; ++j) q[j] = static_cast<uint8_t>(levels[j] | levels[j + kBlockBytes] << 4);
}

// Level j (0..31) of a block's nibbles.
inline int level(const uint8_t* q, Index j) { return j < kBlockBytes ? q[j] & 0xF : q[j - kBlockBytes] >> 4; }

// Row r widened to float: out [cols].
inline void dequantize_row(const View& w, Index r, float* out) {
  for (Index b = 0; b < w.blocks; ++b) {
    const Index i = block_index(w, r, b);
    const float scale = half_to_float(w.d[i]);
    const uint8_t* q = w.q + i * kBlockBytes;
    for (Index j = 0; j < kBlock && b * kBlock + j < w.cols; ++j) out[b * kBlock + j] = scale * static_cast<float>(level(q, j) - 8);
  }
}

// Activations are int8 in [-127, 127] with a float scale per block (and the float sum of the block,
// d_x sum q_x). A block below kSmallest is zeros with scale 0 (q8.hpp says why).
inline constexpr float kActivationMax = 127.0f;
inline constexpr float kSmallest = kActivationMax / std::numeric_limits<float>::max();

// The plain reference: y[r] = sum_b d_w[r, b] d_x[b] sum_{c in b} (q_w[r, c] - 8) q_x[c], each
// block's sum exact in integers.
inline void matvec_reference(const View& w, const int8_t* xq, const float* xd, float* y, Index begin, Index end) {
  for (Index r = begin; r < end; ++r) {
    double sum = 0;
    for (Index b = 0; b < w.blocks; ++b) {
      const Index i = block_index(w, r, b);
      int32_t dot = 0;
      for (Index j = 0; j < kBlock; ++j) dot += (level(w.q + i * kBlockBytes, j) - 8) * int32_t{xq[b * kBlock + j]};
      sum += static_cast<double>(half_to_float(w.d[i])) * xd[b] * dot;
    }
    y[r] = static_cast<float>(sum);
  }
}

// q4 in the table of formats (format.hpp).
struct Format {
  static constexpr WeightFormat id = WeightFormat::Q4;
  static constexpr const char* name = "q4";
  static constexpr bool kQuantizedInput = false;
  static constexpr bool kInt8Input = true;
  static constexpr bool kKMajorInput = false;
  static constexpr bool kPairedInput = false;
  using View = q4::View;

  static size_t bytes(Index rows, Index cols) {
    return static_cast<size_t>(rows * blocks_for(cols)) * (kBlockBytes + sizeof(uint16_t));
  }
  static View convert(const float* data, Index rows, Index cols, WeightArena& arena, std::shared_ptr<const void>& owner) {
    const Index blocks = blocks_for(cols);
    auto storage = arena.allocate(bytes(rows, cols));  // q, then the scales d
    auto* q = static_cast<uint8_t*>(storage.get());
    auto* d = reinterpret_cast<uint16_t*>(q + rows * blocks * kBlockBytes);
    for (Index r = 0; r < rows; ++r) {
      for (Index b = 0; b < blocks; ++b) {
        const Index i = block_index(rows, blocks, r, b);
        quantize_block(data + r * cols, b * kBlock, std::min(cols, (b + 1) * kBlock), q + i * kBlockBytes, d + i);
      }
    }
    owner = std::move(storage);
    return {q, d, rows, cols, blocks};
  }
  static void row_to(const View& w, Index r, float* out) { dequantize_row(w, r, out); }
  // Rows in whole groups of four hold the block's columns as one run per group; other rows are
  // left to the hardware.
  static BlockLines lines(const View& w, Index r, Index mr, Index k0, Index kc) {
    if (r % kGroup != 0 || mr % kGroup != 0 || r + mr > w.rows / kGroup * kGroup) return {};
    const Index run = kGroup * (kc + 1) / 2;  // bytes of one group's blocks in [k0, k0 + kc)
    return {reinterpret_cast<const char*>(w.q + block_index(w, r, k0 / kBlock) * kBlockBytes),
            kGroup * w.blocks * kBlockBytes, mr / kGroup, (run + 63) / 64 + 1};
  }
};

}  // namespace minimind::kernels::q4

#endif  // MINIMIND_DETAIL_KERNELS_Q4_HPP

#ifdef MINIMIND_TARGET
namespace minimind::kernels::q4::MINIMIND_TARGET {
namespace simd = kernels::MINIMIND_TARGET;

#if MINIMIND_AVX2
// F16C, not Eigen's conversion (q8.hpp).
inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }
#endif

// Activations: x [cols] in q4's blocks as int8 q, float scales d and the integer sums s of each
// block's q (the offset of 8 comes back as 8 s, exactly, in the block's integer sum).
inline void quantize_activations(const float* x, Index cols, int8_t* q, float* d, int32_t* s) {
  const Index blocks = blocks_for(cols);
  for (Index b = 0; b < blocks; ++b) {
    const Index begin = b * kBlock, end = std::min(cols, begin + kBlock);
    // A non-finite activation makes the block's scale NaN, so the product comes out NaN as in f32
    // (q8.hpp: converting NaN to an integer would be undefined behaviour).
    uint32_t non_finite = 0;
    float amax = 0;
    for (Index c = begin; c < end; ++c) {
      non_finite |= (Eigen::numext::bit_cast<uint32_t>(x[c]) & 0x7F800000u) == 0x7F800000u;
      amax = std::max(amax, std::abs(x[c]));
    }
    int8_t* qb = q + begin;
    s[b] = 0;
    if (non_finite != 0 || amax < kSmallest) {
      std::fill(qb, qb + kBlock, int8_t{0});
      d[b] = non_finite != 0 ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
      continue;
    }
    d[b] = amax / kActivationMax;
    const float inv = kActivationMax / amax;
#if MINIMIND_AVX2
    if (end - begin == kBlock) {
      const __m256 v = _mm256_set1_ps(inv);
      const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + begin), v));
      const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + begin + 8), v));
      const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + begin + 16), v));
      const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + begin + 24), v));
      // Summed before packing (the values are within int8 already); the packs interleave
      // 128-bit lanes, the permute restores order.
      const __m256i all = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
      const __m128i half = _mm_add_epi32(_mm256_castsi256_si128(all), _mm256_extracti128_si256(all, 1));
      const __m128i pair = _mm_add_epi32(half, _mm_shuffle_epi32(half, 0x4E));
      s[b] = _mm_cvtsi128_si32(_mm_add_epi32(pair, _mm_shuffle_epi32(pair, 0xB1)));
      const __m256i s01 = _mm256_packs_epi32(i0, i1), s23 = _mm256_packs_epi32(i2, i3);
      const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(s01, s23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), bytes);
      continue;
    }
#endif
    for (Index j = 0; j < kBlock; ++j) {
      const float v = begin + j < end ? std::clamp(std::nearbyint(x[begin + j] * inv), -kActivationMax, kActivationMax) : 0.0f;
      qb[j] = static_cast<int8_t>(v);
      s[b] += qb[j];
    }
  }
}

// Row r: W[r, :] . x, x given quantized (one row at a time: rows outside whole groups, and the
// targets without a group kernel).
inline float dot(const View& w, Index r, const int8_t* xq, const float* xd, const int32_t* xs) {
  const Index first = block_index(w, r, 0);
  const Index stride = w.blocks > 1 ? block_index(w, r, 1) - first : 1;  // blocks apart
#if MINIMIND_NEON || MINIMIND_WASM_SIMD
  (void)xs;
  return simd::q4_dot(w.q + first * kBlockBytes, w.d + first, stride, xq, xd, w.blocks);
#else
  float sum = 0;
  for (Index b = 0; b < w.blocks; ++b) {
    const uint8_t* q = w.q + (first + b * stride) * kBlockBytes;
    int32_t acc = -8 * xs[b];
    for (Index j = 0; j < kBlockBytes; ++j)
      acc += (q[j] & 0xF) * int32_t{xq[b * kBlock + j]} + (q[j] >> 4) * int32_t{xq[b * kBlock + kBlockBytes + j]};
    sum += half_to_float(w.d[first + b * stride]) * xd[b] * static_cast<float>(acc);
  }
  return sum;
#endif
}

#if MINIMIND_AVX512
// vpdpbusd (AVX512-VNNI): acc plus, in each int32 lane, the four products of u's unsigned bytes by
// s's signed ones. Inline assembly, so that it compiles inside the avx512 target's section (whose
// instruction sets leave VNNI out: not every AVX-512 CPU has it); run only where the CPU has it.
inline __m512i dpbusd(__m512i acc, __m512i u, __m512i s) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
}
inline __m512i broadcast_x(const int8_t* x) {
  return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
}
// Block b of a group of four rows, its 64 bytes of nibbles at q: 16 int32 lanes, the four of row
// i (lanes 4i..4i+3) summing to sum_c (q[i][c] - 8) q_x[c] (the first lane of each row starts at
// -8 s_x). With VNNI two vpdpbusd, else two vpmaddubsw (pairs of products of at most 15 x 127 in
// int16), an add, a vpmaddwd and an add.
template <bool Vnni>
inline __m512i block_sums(const uint8_t* q, const int8_t* xq, const int32_t* xs, Index b) {
  const __m512i mask = _mm512_set1_epi8(0x0F);
  const __m512i v = _mm512_loadu_si512(q);
  const __m512i w_lo = _mm512_and_si512(v, mask), w_hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), mask);
  const __m512i lo = broadcast_x(xq + b * kBlock), hi = broadcast_x(xq + b * kBlock + 16);
  const __m512i offset = _mm512_maskz_set1_epi32(0x1111, -8 * xs[b]);
  if constexpr (Vnni) return dpbusd(dpbusd(offset, w_lo, lo), w_hi, hi);
  const __m512i pairs = _mm512_add_epi16(_mm512_maddubs_epi16(w_lo, lo), _mm512_maddubs_epi16(w_hi, hi));
  return _mm512_add_epi32(_mm512_madd_epi16(pairs, _mm512_set1_epi16(1)), offset);
}
// The four row sums of acc's 128-bit lanes (the zero-masked forms: simd.hpp's fold says why).
inline __m128 lane_sums(__m512 acc) {
  __m512 t = _mm512_add_ps(acc, _mm512_maskz_permute_ps(0xFFFF, acc, _MM_SHUFFLE(2, 3, 0, 1)));
  t = _mm512_add_ps(t, _mm512_maskz_permute_ps(0xFFFF, t, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512i first = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_maskz_extractf32x4_ps(0xF, _mm512_maskz_permutexvar_ps(0xFFFF, first, t), 0);
}

// Rows [r, r + 4) of a whole group: y[r + i] = W[r + i, :] . x, the group's blocks in order, one
// 64-byte line each, asked for `ahead` bytes early unless 0. Four blocks a step: their 16 scales
// d_w d_x are one vector (one load of float16, one product), each block's spread over its rows'
// lanes by one permute; two accumulators. The integer sums are the same with and without VNNI,
// so is every bit of y.
template <bool Vnni>
inline void group_of(const View& w, Index r, const int8_t* xq, const float* xd, const int32_t* xs, float* y, uintptr_t ahead) {
  const uint8_t* q = w.q + r * w.blocks * kBlockBytes;  // block b of row r + i at q + (4 b + i) * 16
  const uint16_t* d = w.d + r * w.blocks;               // its scale at d + 4 b + i
  // Lane 4i + l of block j's scales: element 4j + i of the step's 16.
  const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i next = _mm512_set1_epi32(4);
  const __m512i spread1 = _mm512_add_epi32(spread, next), spread2 = _mm512_add_epi32(spread1, next),
                spread3 = _mm512_add_epi32(spread2, next);
  __m512 a0 = _mm512_setzero_ps(), a1 = a0;
  Index b = 0;
  for (; b + 4 <= w.blocks; b += 4, q += 4 * kGroup * kBlockBytes) {
    if (ahead > 0) {
      for (uintptr_t line = 0; line < 4 * 64; line += 64) simd::prefetch_ahead(q, ahead + line);
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + b * kGroup)));
    const __m512 dx = _mm512_maskz_permutexvar_ps(0xFFFF, spread, _mm512_broadcast_f32x4(_mm_loadu_ps(xd + b)));
    const __m512 scales = _mm512_mul_ps(dw, dx);  // [block j, row i] at 4j + i
    a0 = _mm512_fmadd_ps(_mm512_maskz_permutexvar_ps(0xFFFF, spread, scales), _mm512_cvtepi32_ps(block_sums<Vnni>(q, xq, xs, b)), a0);
    a1 = _mm512_fmadd_ps(_mm512_maskz_permutexvar_ps(0xFFFF, spread1, scales),
                         _mm512_cvtepi32_ps(block_sums<Vnni>(q + 64, xq, xs, b + 1)), a1);
    a0 = _mm512_fmadd_ps(_mm512_maskz_permutexvar_ps(0xFFFF, spread2, scales),
                         _mm512_cvtepi32_ps(block_sums<Vnni>(q + 128, xq, xs, b + 2)), a0);
    a1 = _mm512_fmadd_ps(_mm512_maskz_permutexvar_ps(0xFFFF, spread3, scales),
                         _mm512_cvtepi32_ps(block_sums<Vnni>(q + 192, xq, xs, b + 3)), a1);
  }
  for (; b < w.blocks; ++b, q += kGroup * kBlockBytes) {
    const __m128 s = _mm_mul_ps(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(d + b * kGroup))), _mm_set1_ps(xd[b]));
    const __m512 scales = _mm512_maskz_permutexvar_ps(0xFFFF, spread, _mm512_broadcast_f32x4(s));
    a0 = _mm512_fmadd_ps(scales, _mm512_cvtepi32_ps(block_sums<Vnni>(q, xq, xs, b)), a0);
  }
  _mm_storeu_ps(y + r, lane_sums(_mm512_add_ps(a0, a1)));
}

// Whether this CPU runs vpdpbusd; decided once.
inline bool has_vnni() {
  static const bool vnni = cpu_features().avx512vnni;
  return vnni;
}

inline void group(const View& w, Index r, const int8_t* xq, const float* xd, const int32_t* xs, float* y, uintptr_t ahead) {
  if (has_vnni()) group_of<true>(w, r, xq, xd, xs, y, ahead);
  else group_of<false>(w, r, xq, xd, xs, y, ahead);
}
#elif MINIMIND_AVX2
// Block b of two rows of a group, their 32 bytes of nibbles at q: 8 int32 lanes, lanes 0-3
// summing row one's sum_c (q[c] - 8) q_x[c], lanes 4-7 row two's. lo and hi: the activations'
// first and second 16 in each 128-bit lane; offset: -8 s_x in lanes 0 and 4.
inline __m256i block_sums(const uint8_t* q, __m256i lo, __m256i hi, __m256i offset) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m256i w_lo = _mm256_and_si256(v, mask), w_hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
  const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(w_lo, lo), _mm256_maddubs_epi16(w_hi, hi));
  return _mm256_add_epi32(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)), offset);
}
inline __m256i broadcast_x(const int8_t* x) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
}

// Rows [r, r + 4) of a whole group: y[r + i] = W[r + i, :] . x, the group's blocks in order, each
// 64-byte line asked for `ahead` bytes early unless 0.
inline void group(const View& w, Index r, const int8_t* xq, const float* xd, const int32_t* xs, float* y, uintptr_t ahead) {
  const uint8_t* q = w.q + r * w.blocks * kBlockBytes;  // block b of row r + i at q + (4 b + i) * 16
  const uint16_t* d = w.d + r * w.blocks;               // its scale at d + 4 b + i
  __m256 a01 = _mm256_setzero_ps(), a23 = a01;
  const __m256i low_pair = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), high_pair = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
  for (Index b = 0; b < w.blocks; ++b, q += kGroup * kBlockBytes, d += kGroup) {
    if (ahead > 0) simd::prefetch_ahead(q, ahead);
    const __m256i lo = broadcast_x(xq + b * kBlock), hi = broadcast_x(xq + b * kBlock + 16);
    const __m256i offset = _mm256_blend_epi32(_mm256_setzero_si256(), _mm256_set1_epi32(-8 * xs[b]), 0x11);
    const __m256i s01 = block_sums(q, lo, hi, offset), s23 = block_sums(q + 32, lo, hi, offset);
    const __m128 d4 = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(d)));
    const __m256 scales = _mm256_castps128_ps256(_mm_mul_ps(d4, _mm_set1_ps(xd[b])));
    a01 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(scales, low_pair), _mm256_cvtepi32_ps(s01), a01);
    a23 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(scales, high_pair), _mm256_cvtepi32_ps(s23), a23);
  }
  // hadd twice: lane 0 row 0, lane 1 row 2 (low half), lane 4 row 1, lane 5 row 3 (high half).
  const __m256 h = _mm256_hadd_ps(a01, a23);
  const __m256 h2 = _mm256_hadd_ps(h, h);
  _mm_storeu_ps(y + r, _mm_unpacklo_ps(_mm256_castps256_ps128(h2), _mm256_extractf128_ps(h2, 1)));
}
#else
// Rows [r, r + 4) of a whole group, one row after another (no prefetch).
inline void group(const View& w, Index r, const int8_t* xq, const float* xd, const int32_t* xs, float* y, uintptr_t) {
  for (Index i = 0; i < kGroup; ++i) y[r + i] = dot(w, r + i, xq, xd, xs);
}
#endif

// y[r] = W[r, :] . x for r in [begin, end), x given quantized (quantize_activations): whole
// groups of four rows through group(), the rows outside whole groups one by one.
inline void matvec(const View& w, const int8_t* xq, const float* xd, const int32_t* xs, float* y, Index begin, Index end) {
  Index r = begin;
  const Index grouped = std::min(end, w.rows / kGroup * kGroup);
  for (; r < begin + (kGroup - begin % kGroup) % kGroup && r < end; ++r) y[r] = dot(w, r, xq, xd, xs);
  const uintptr_t ahead = simd::decode_ahead(1024);
  for (; r + kGroup <= grouped; r += kGroup) group(w, r, xq, xd, xs, y, ahead);
  for (; r < end; ++r) y[r] = dot(w, r, xq, xd, xs);
}

// Rows [r, r + mr), columns [k0, k0 + kc) widened into out [mr, kc]; k0 and kc are multiples
// of 32 except at the end of the row.
inline void widen_block(const View& w, Index r, Index mr, Index k0, Index kc, float* out) {
  for (Index i = 0; i < mr; ++i) {
    for (Index c = 0; c < kc; c += kBlock) {
      const Index at = block_index(w, r + i, (k0 + c) / kBlock), len = std::min(kBlock, kc - c);
      const float scale = half_to_float(w.d[at]);
      const uint8_t* q = w.q + at * kBlockBytes;
      float* o = out + i * kc + c;
#if MINIMIND_AVX2
      if (len == kBlock) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
        const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(v, mask), eight);
        const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), mask), eight);
        const __m256 s = _mm256_set1_ps(scale);
        auto put = [&](__m128i bytes, float* to) {  // 8 levels from the low bytes of `bytes`
          _mm256_storeu_ps(to, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes))));
        };
        put(lo, o);
        put(_mm_srli_si128(lo, 8), o + 8);
        put(hi, o + 16);
        put(_mm_srli_si128(hi, 8), o + 24);
        continue;
      }
#endif
      for (Index j = 0; j < len; ++j) o[j] = scale * static_cast<float>(level(q, j) - 8);
    }
  }
}

}  // namespace minimind::kernels::q4::MINIMIND_TARGET

// The format's entry points on this target (as f32.hpp's).
namespace minimind::kernels::MINIMIND_TARGET {

inline void matvec(const q4::View& w, const DecodeInput& in, float* y, Index begin, Index end) {
  q4::MINIMIND_TARGET::matvec(w, in.x8, in.x8_scale, in.x8_sum, y, begin, end);
}

inline const float* block(const q4::View& w, Index r, Index mr, Index k0, Index kc, float* buf, Index& stride) {
  q4::MINIMIND_TARGET::widen_block(w, r, mr, k0, kc, buf);
  stride = kc;
  return buf;
}

}  // namespace minimind::kernels::MINIMIND_TARGET
#endif  // MINIMIND_TARGET
