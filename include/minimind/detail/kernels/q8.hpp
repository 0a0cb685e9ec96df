// q8: 34 bytes per 32 weights: int8 weights in blocks of 32 along each row, one float16 scale per block (ggml's Q8_0 in
// spirit): w[r, c] ~ d[r, c / 32] * q[r, c]. A row of `cols` weights takes ceil(cols / 32) blocks,
// the last padded with zeros. A matrix-vector product first quantizes the activation vector in
// the same blocks to int16 with a float scale, then each block is one integer dot product of 32
// int8 x int16 pairs (exact in int32), scaled by d_w * d_x and summed in float32.
// Why int16 and not int8 activations (as ggml's Q8_0 x Q8_0): rounding the activations to 8 bits
// costs as much accuracy as rounding the weights (on the golden cases top-1 agreement with f32
// fell from 95.6% to 91.7%), while the int16 dot product costs the same two multiplies per block
// as the u8 x s8 one (vpmaddwd twice against vpmaddubsw + vpmaddwd).
// The kernels are the target section at the end, compiled once per target (simd.hpp).
#ifndef MINIMIND_DETAIL_KERNELS_Q8_HPP
#define MINIMIND_DETAIL_KERNELS_Q8_HPP
#include "minimind/detail/kernels/format.hpp"
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

namespace minimind::kernels::q8 {

inline constexpr Index kBlock = 32;
inline Index blocks_for(Index cols) { return (cols + kBlock - 1) / kBlock; }

inline uint16_t half_from_float(float f) { return Eigen::numext::bit_cast<uint16_t>(Eigen::half(f)); }
inline float half_to_float(uint16_t h) { return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(h)); }

// A quantized matrix as the kernels see it: `q` [rows, blocks * 32], `d` [rows, blocks].
// In q, rows go in groups of four interleaved block by block, [r0 b0][r1 b0][r2 b0][r3 b0]
// [r0 b1]..., so that the four-row kernel reads one sequential stream: four streams of one short
// row each gave the hardware prefetcher too little to learn, and read markedly slower from DRAM.
// Rows after the last full group follow one by one. d stays row by row.
struct View {
  const int8_t* q = nullptr;
  const uint16_t* d = nullptr;
  Index rows = 0, cols = 0, blocks = 0;
};

inline constexpr Index kGroup = 4;

// Where block b of row r starts in q.
inline Index block_offset(Index rows, Index blocks, Index r, Index b) {
  const Index stride = blocks * kBlock;
  if (r < rows / kGroup * kGroup) return r / kGroup * kGroup * stride + (b * kGroup + r % kGroup) * kBlock;
  return r * stride + b * kBlock;
}
inline const int8_t* block_ptr(const View& w, Index r, Index b) { return w.q + block_offset(w.rows, w.blocks, r, b); }

// Quantizes one row of `cols` floats into q [blocks * 32] (zero padded) and float16 scales d.
// The scale is rounded to float16 first and q is computed against the rounded scale.
inline void quantize_row(const float* x, Index cols, int8_t* q, uint16_t* d) {
  for (Index b = 0; b * kBlock < cols; ++b) {
    const Index begin = b * kBlock, end = std::min(cols, begin + kBlock);
    float amax = 0;
    for (Index c = begin; c < end; ++c) amax = std::max(amax, std::abs(x[c]));
    d[b] = half_from_float(amax / 127.0f);
    const float scale = half_to_float(d[b]);
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    for (Index c = begin; c < begin + kBlock; ++c) {
      const float v = c < end ? std::round(x[c] * inv) : 0.0f;
      q[c] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
    }
  }
}

// Activations are int16 in [-kActivationMax, kActivationMax]: with |w| <= 127 a block's dot
// product stays below 32 * 127 * 32767 < 2^27, and each 8-lane partial sum below 2^24, exact
// in float.
inline constexpr float kActivationMax = 32767.0f;

// A block whose largest magnitude is below this (zero, or so small that 32767 / amax overflows to
// inf and 0 * inf would be NaN, undefined to convert to an integer) is stored as zeros with scale
// 0: such values add nothing a float32 sum could keep next to any normal activation.
inline constexpr float kSmallest = kActivationMax / std::numeric_limits<float>::max();

// Row r widened to float: out [cols].
inline void dequantize_row(const View& w, Index r, float* out) {
  const uint16_t* d = w.d + r * w.blocks;
  for (Index b = 0; b < w.blocks; ++b) {
    const float scale = half_to_float(d[b]);
    const Index begin = b * kBlock, end = std::min(w.cols, begin + kBlock);
    const int8_t* q = block_ptr(w, r, b) - begin;  // q[c] for c in the block
    for (Index c = begin; c < end; ++c) out[c] = scale * static_cast<float>(q[c]);
  }
}

// The plain reference: y[r] = sum_b d_w[r, b] d_x[b] sum_{c in b} q_w[r, c] q_x[c].
inline void matvec_reference(const View& w, const int16_t* xq, const float* xd, float* y, Index begin, Index end) {
  for (Index r = begin; r < end; ++r) {
    double sum = 0;
    for (Index b = 0; b < w.blocks; ++b) {
      int32_t dot = 0;
      const int8_t* q = block_ptr(w, r, b);
      for (Index c = 0; c < kBlock; ++c) dot += int32_t{q[c]} * xq[b * kBlock + c];
      sum += static_cast<double>(half_to_float(w.d[r * w.blocks + b])) * xd[b] * dot;
    }
    y[r] = static_cast<float>(sum);
  }
}

// q8 in the table of formats (format.hpp).
struct Format {
  static constexpr WeightFormat id = WeightFormat::Q8;
  static constexpr const char* name = "q8";
  static constexpr bool kQuantizedInput = true;
  static constexpr bool kInt8Input = false;
  static constexpr bool kKMajorInput = false;
  static constexpr bool kPairedInput = false;
  using View = q8::View;

  static size_t bytes(Index rows, Index cols) { return static_cast<size_t>(rows * blocks_for(cols)) * (kBlock + 2); }
  static View convert(const float* data, Index rows, Index cols, WeightArena& arena, std::shared_ptr<const void>& owner) {
    const Index blocks = blocks_for(cols);
    const auto q_bytes = static_cast<size_t>(rows * blocks * kBlock);
    auto storage = arena.allocate(bytes(rows, cols));  // q, then the scales d
    auto* q = static_cast<int8_t*>(storage.get());
    auto* d = reinterpret_cast<uint16_t*>(q + q_bytes);
    std::vector<int8_t> row(static_cast<size_t>(blocks * kBlock));
    for (Index r = 0; r < rows; ++r) {
      quantize_row(data + r * cols, cols, row.data(), d + r * blocks);
      for (Index b = 0; b < blocks; ++b) std::memcpy(q + block_offset(rows, blocks, r, b), row.data() + b * kBlock, kBlock);
    }
    owner = std::move(storage);
    return {q, d, rows, cols, blocks};
  }
  static void row_to(const View& w, Index r, float* out) { dequantize_row(w, r, out); }
  // Rows in whole groups of four hold the block's columns as one run per group; other rows are
  // left to the hardware.
  static BlockLines lines(const View& w, Index r, Index mr, Index k0, Index kc) {
    if (r % kGroup != 0 || mr % kGroup != 0 || r + mr > w.rows / kGroup * kGroup) return {};
    const Index run = kGroup * kc;  // bytes of one group's blocks in [k0, k0 + kc)
    return {reinterpret_cast<const char*>(block_ptr(w, r, k0 / kBlock)), kGroup * w.blocks * kBlock, mr / kGroup,
            (run + 63) / 64 + 1};
  }
};

}  // namespace minimind::kernels::q8

#endif  // MINIMIND_DETAIL_KERNELS_Q8_HPP

#ifdef MINIMIND_TARGET
namespace minimind::kernels::q8::MINIMIND_TARGET {
namespace simd = kernels::MINIMIND_TARGET;

#if MINIMIND_AVX2
// F16C, not Eigen's conversion (which is in software unless the whole build has F16C).
inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }
#endif

// The largest |x[c]| for c in [begin, end).
inline float block_amax(const float* x, Index begin, Index end) {
#if MINIMIND_AVX2
  if (end - begin == kBlock) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + begin));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + begin + 8)));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + begin + 16)));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + begin + 24)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
  }
#endif
  float amax = 0;
  for (Index c = begin; c < end; ++c) amax = std::max(amax, std::abs(x[c]));
  return amax;
}

// q[c] = round(x[c] * inv) for c in [begin, end), zero up to begin + kBlock; |x[c] * inv| <= 32767.
inline void quantize_block(const float* x, Index begin, Index end, float inv, int16_t* q) {
#if MINIMIND_AVX2
  if (end - begin == kBlock) {
    const __m256 v = _mm256_set1_ps(inv);
    const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + begin), v));
    const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + begin + 8), v));
    const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + begin + 16), v));
    const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + begin + 24), v));
    // Pack 32 int32 to int16; the packs interleave 128-bit lanes, the permutes restore order.
    const __m256i s01 = _mm256_permute4x64_epi64(_mm256_packs_epi32(i0, i1), 0xD8);
    const __m256i s23 = _mm256_permute4x64_epi64(_mm256_packs_epi32(i2, i3), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + begin), s01);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + begin + 16), s23);
    return;
  }
#endif
  for (Index c = begin; c < begin + kBlock; ++c) {
    q[c] = c < end ? static_cast<int16_t>(std::clamp(std::nearbyint(x[c] * inv), -kActivationMax, kActivationMax))
                   : int16_t{0};
  }
}

// Activations: the same blocks as int16 with float scales (only the weights are stored).
inline void quantize_activations(const float* x, Index cols, int16_t* q, float* d) {
  const Index blocks = blocks_for(cols);
  for (Index b = 0; b < blocks; ++b) {
    const Index begin = b * kBlock, end = std::min(cols, begin + kBlock);
    // A non-finite activation (extreme weights overflow) makes the block's scale NaN, so the
    // product comes out NaN as in f32; converting NaN to an integer would be undefined behaviour.
    // (On the exponent bits, so the loop vectorizes: a non-finite float has them all set.)
    uint32_t non_finite = 0;
    for (Index c = begin; c < end; ++c) non_finite |= (Eigen::numext::bit_cast<uint32_t>(x[c]) & 0x7F800000u) == 0x7F800000u;
    const bool finite = non_finite == 0;
    const float amax = finite ? block_amax(x, begin, end) : 0.0f;
    if (amax < kSmallest) {
      std::fill(q + begin, q + begin + kBlock, int16_t{0});
      d[b] = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    d[b] = amax / kActivationMax;
    quantize_block(x, begin, end, kActivationMax / amax, q);
  }
}

// Row r: W[r, :] . x, x given quantized.
inline float dot(const View& w, Index r, const int16_t* xq, const float* xd) {
  const uint16_t* d = w.d + r * w.blocks;
#if MINIMIND_NEON || MINIMIND_WASM_SIMD
  const Index stride = block_offset(w.rows, w.blocks, r, 1) - block_offset(w.rows, w.blocks, r, 0);
  return simd::q8_dot(block_ptr(w, r, 0), stride, d, xq, xd, w.blocks);
#else
  float sum = 0;
  for (Index b = 0; b < w.blocks; ++b) {
    const int8_t* q = block_ptr(w, r, b);
    int32_t acc = 0;
    for (Index c = 0; c < kBlock; ++c) acc += int32_t{q[c]} * xq[b * kBlock + c];
    sum += half_to_float(d[b]) * xd[b] * static_cast<float>(acc);
  }
  return sum;
#endif
}

#if MINIMIND_AVX2
// The sum of the 32 products of one block, as 8 int32 lanes converted to float; x0, x1 hold the
// block's 16 + 16 int16 activations.
inline __m256 block_dot(const int8_t* wq, __m256i x0, __m256i x1) {
  const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wq)));
  const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wq + 16)));
  return _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1)));
}
inline __m256i load_x(const int16_t* x) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)); }
// Rows [r, r + 4) of a whole group: y[r + i] = W[r + i, :] . x, reading the group's interleaved
// blocks in order, each step's two lines asked for `ahead` bytes early unless 0 (matvec: on AVX2
// 1 KiB, the distance that measured best; on AVX-512 simd::decode_ahead(), this CPU's). The
// combined scales d_w * d_x of 8 blocks stay in registers. AVX-512 runs this one too: decode is
// bound by the stream, and the 512-bit kernels tried (on vpdpwssd, or unpacking two rows a
// vector) were faster from L2 but not in decode (docs/performance.md, "Design choices").
inline void group(const View& w, Index r, const int16_t* xq, const float* xd, float* y, uintptr_t ahead) {
  const int8_t* q = w.q + r * w.blocks * kBlock;  // block b of row r + i at q + (4 b + i) * 32
  const uint16_t* d0 = w.d + r * w.blocks;
  // Named, not arrays: indexed arrays of vectors go through the stack.
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  Index b0 = 0;
  for (; b0 + 8 <= w.blocks; b0 += 8) {
    const __m256 xs = _mm256_loadu_ps(xd + b0);
    auto scales = [&](int i) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d0 + i * w.blocks + b0));
      return _mm256_mul_ps(_mm256_cvtph_ps(h), xs);
    };
    const __m256 s0 = scales(0), s1 = scales(1), s2 = scales(2), s3 = scales(3);
    for (int b = 0; b < 8; ++b, q += kGroup * kBlock) {
      if (ahead > 0) {
        simd::prefetch_ahead(q, ahead);
        simd::prefetch_ahead(q, ahead + 64);
      }
      const __m256i x0 = load_x(xq + (b0 + b) * kBlock), x1 = load_x(xq + (b0 + b) * kBlock + 16);
      const __m256i lane = _mm256_set1_epi32(b);
      a0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s0, lane), block_dot(q, x0, x1), a0);
      a1 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s1, lane), block_dot(q + kBlock, x0, x1), a1);
      a2 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s2, lane), block_dot(q + 2 * kBlock, x0, x1), a2);
      a3 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(s3, lane), block_dot(q + 3 * kBlock, x0, x1), a3);
    }
  }
  for (; b0 < w.blocks; ++b0, q += kGroup * kBlock) {
    const __m256i x0 = load_x(xq + b0 * kBlock), x1 = load_x(xq + b0 * kBlock + 16);
    auto scale = [&](int i) { return _mm256_set1_ps(half_to_float(d0[i * w.blocks + b0]) * xd[b0]); };
    a0 = _mm256_fmadd_ps(scale(0), block_dot(q, x0, x1), a0);
    a1 = _mm256_fmadd_ps(scale(1), block_dot(q + kBlock, x0, x1), a1);
    a2 = _mm256_fmadd_ps(scale(2), block_dot(q + 2 * kBlock, x0, x1), a2);
    a3 = _mm256_fmadd_ps(scale(3), block_dot(q + 3 * kBlock, x0, x1), a3);
  }
  _mm_storeu_ps(y + r, simd::hsum4(a0, a1, a2, a3));
}
#else
// Rows [r, r + 4) of a whole group, one row after another (no prefetch).
inline void group(const View& w, Index r, const int16_t* xq, const float* xd, float* y, uintptr_t) {
  for (Index i = 0; i < kGroup; ++i) y[r + i] = dot(w, r + i, xq, xd);
}
#endif

// y[r] = W[r, :] . x for r in [begin, end), x given quantized (quantize_activations): whole
// groups of four rows through group(), the rows outside whole groups one by one.
inline void matvec(const View& w, const int16_t* xq, const float* xd, float* y, Index begin, Index end) {
  Index r = begin;
  const Index grouped = std::min(end, w.rows / kGroup * kGroup);
  for (; r < begin + (kGroup - begin % kGroup) % kGroup && r < end; ++r) y[r] = dot(w, r, xq, xd);
  const uintptr_t ahead = simd::decode_ahead(1024);
  for (; r + kGroup <= grouped; r += kGroup) group(w, r, xq, xd, y, ahead);
  for (; r < end; ++r) y[r] = dot(w, r, xq, xd);
}

// Rows [r, r + mr), columns [k0, k0 + kc) widened into out [mr, kc]; k0 and kc are multiples
// of 32 except at the end of the row.
inline void widen_block(const View& w, Index r, Index mr, Index k0, Index kc, float* out) {
  for (Index i = 0; i < mr; ++i) {
    const uint16_t* d = w.d + (r + i) * w.blocks;
    for (Index c = 0; c < kc; c += kBlock) {
      const Index b = (k0 + c) / kBlock, len = std::min(kBlock, kc - c);
      const float scale = half_to_float(d[b]);
      const int8_t* q = block_ptr(w, r + i, b);
      float* o = out + i * kc + c;
      Index j = 0;
#if MINIMIND_AVX512
      const __m512 s16 = _mm512_set1_ps(scale);
      for (; j + 16 <= len; j += 16) {
        const __m128i b16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + j));
        _mm512_storeu_ps(o + j, _mm512_mul_ps(s16, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b16))));
      }
#endif
#if MINIMIND_AVX2
      const __m256 s = _mm256_set1_ps(scale);
      for (; j + 8 <= len; j += 8) {
        const __m128i b8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + j));
        _mm256_storeu_ps(o + j, _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b8))));
      }
#endif
      for (; j < len; ++j) o[j] = scale * static_cast<float>(q[j]);
    }
  }
}

}  // namespace minimind::kernels::q8::MINIMIND_TARGET

// The format's entry points on this target (as f32.hpp's).
namespace minimind::kernels::MINIMIND_TARGET {

inline void matvec(const q8::View& w, const DecodeInput& in, float* y, Index begin, Index end) {
  q8::MINIMIND_TARGET::matvec(w, in.xq, in.xd, y, begin, end);
}

inline const float* block(const q8::View& w, Index r, Index mr, Index k0, Index kc, float* buf, Index& stride) {
  q8::MINIMIND_TARGET::widen_block(w, r, mr, k0, kc, buf);
  stride = kc;
  return buf;
}

}  // namespace minimind::kernels::MINIMIND_TARGET
#endif  // MINIMIND_TARGET
