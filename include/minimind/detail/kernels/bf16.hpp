// bf16: 2 bytes per weight, the top 16 bits of a float32, so widening is a 16-bit shift and the
// products are ordinary float32 FMAs. Half the bytes of f32 per token; rounding to bf16 keeps 8
// bits of mantissa (relative error below 2^-9). Viewed in place when the checkpoint stores BF16.
// The kernels are the target section at the end, compiled once per target (simd.hpp).
#ifndef MINIMIND_DETAIL_KERNELS_BF16_HPP
#define MINIMIND_DETAIL_KERNELS_BF16_HPP
#include "minimind/detail/kernels/format.hpp"
#include "minimind/detail/kernels/simd.hpp"
#include "minimind/detail/weight_arena.hpp"
#include "minimind/tensor.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

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

// Widens `n` values.
inline void to_float(const uint16_t* in, float* out, Index n) {
  for (Index i = 0; i < n; ++i) out[i] = to_float(in[i]);
}

// The plain reference: y[r] = sum_c float(W[r, c]) x[c] for r in [begin, end).
inline void matvec_reference(const uint16_t* w, Index cols, const float* x, float* y, Index begin, Index end) {
  for (Index r = begin; r < end; ++r) {
    double sum = 0;
    for (Index c = 0; c < cols; ++c) sum += static_cast<double>(to_float(w[r * cols + c])) * x[c];
    y[r] = static_cast<float>(sum);
  }
}

// The order the x86 decode kernels read the activations in (DecodeInput::x_pairs): in each whole
// 32 of x the 16 at even offsets, then the 16 at odd; the last cols % 32 as they are. A 32-bit lane
// of bf16 weights holds an even and an odd weight, which widen by a shift and a mask, with no
// shuffle, to be multiplied by x in this order; the products stay exact. Where this was measured
// it streamed bf16 from DRAM as fast as f32, well ahead of widening 16 weights at a time
// (docs/performance.md; the CPUs that prefer the latter: simd::decode_bf16_extended).
inline constexpr Index kPairBlock = 32;
inline void to_pair_order(const float* x, Index cols, float* out) {
  Index c = 0;
  for (; c + kPairBlock <= cols; c += kPairBlock) {
    for (Index j = 0; j < kPairBlock / 2; ++j) {
      out[c + j] = x[c + 2 * j];
      out[c + kPairBlock / 2 + j] = x[c + 2 * j + 1];
    }
  }
  for (; c < cols; ++c) out[c] = x[c];
}

struct View {
  const uint16_t* data = nullptr;
  Index rows = 0, cols = 0;
};

// bf16 in the table of formats (format.hpp).
struct Format {
  static constexpr WeightFormat id = WeightFormat::BF16;
  static constexpr const char* name = "bf16";
  static constexpr bool kQuantizedInput = false;
  static constexpr bool kInt8Input = false;
  static constexpr bool kKMajorInput = false;
  static constexpr bool kPairedInput = true;
  using View = bf16::View;

  static size_t bytes(Index rows, Index cols) { return static_cast<size_t>(rows * cols) * 2; }
  static View convert(const float* data, Index rows, Index cols, WeightArena& arena, std::shared_ptr<const void>& owner) {
    auto storage = arena.allocate(bytes(rows, cols));
    auto* out = static_cast<uint16_t*>(storage.get());
    for (Index i = 0; i < rows * cols; ++i) out[i] = from_float(data[i]);
    owner = std::move(storage);
    return {out, rows, cols};
  }
  static void row_to(const View& w, Index r, float* out) { to_float(w.data + r * w.cols, out, w.cols); }
  static BlockLines lines(const View& w, Index r, Index mr, Index k0, Index kc) {
    return dense_lines(w.data, 2, w.cols, r, mr, k0, kc);
  }
};

}  // namespace minimind::kernels::bf16

#endif  // MINIMIND_DETAIL_KERNELS_BF16_HPP

#ifdef MINIMIND_TARGET
namespace minimind::kernels::bf16::MINIMIND_TARGET {
namespace simd = kernels::MINIMIND_TARGET;

// Widens `n` values (the GEMM's blocks).
inline void widen(const uint16_t* in, float* out, Index n) {
  Index i = 0;
#if MINIMIND_AVX512
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, simd::Avx512::load(in + i));
#endif
#if MINIMIND_AVX2
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, simd::Avx2::load(in + i));
#endif
  to_float(in + i, out + i, n - i);
}

#if MINIMIND_AVX512
// sum_c float(w[c]) x[c], with x also given in pair order (xp, to_pair_order); each step's line
// asked for `ahead` bytes early unless 0 (decode_ahead, simd.hpp).
inline float dot(const uint16_t* w, const float* x, const float* xp, Index cols, uintptr_t ahead) {
  using S = simd::Avx512;
  const __m512i odd = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m512 a0 = S::zero(), a1 = a0;
  Index c = 0;
  for (; c + kPairBlock <= cols; c += kPairBlock) {
    if (ahead > 0) simd::prefetch_ahead(w + c, ahead);
    const __m512i v = _mm512_loadu_si512(w + c);
    a0 = S::madd(a0, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), S::load(xp + c));
    a1 = S::madd(a1, _mm512_castsi512_ps(_mm512_and_si512(v, odd)), S::load(xp + c + 16));
  }
  for (; c < cols; c += S::kLanes) {
    const Index n = std::min(S::kLanes, cols - c);
    a0 = S::madd(a0, S::load(w + c, n), S::load(x + c, n));
  }
  return S::sum(S::add(a0, a1));
}

// sum_c float(w[c]) x[c], the weights widened 16 at a time by zero-extension into the top half,
// four chains (simd::dot; decode_bf16_extended says when).
inline float dot_extended(const uint16_t* w, const float* x, Index cols, uintptr_t ahead) {
  return simd::dot<simd::Avx512, 1>(w, x, cols, [](uint16_t v) { return to_float(v); }, ahead);
}

// Rows w_r = w + r * cols (r < R) against positions p < P in a register tile, as f32's dot_tile:
// y[p * y_stride + r] = w_r . x_p, each (row, position) summed exactly as dot() sums it (even and
// odd chains, the tail in the even one), so a sequence gets bit for bit the same in any batch as
// alone. Per 32 columns R weight loads and 2 P input loads feed 2 R P FMAs.
template <int R, int P>
inline void dot_tile(const uint16_t* w, Index cols, const DecodeInput* in, float* y, Index y_stride) {
  using S = simd::Avx512;
  const __m512i odd = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m512 a0[R][P], a1[R][P];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) a0[r][p] = a1[r][p] = S::zero();
  Index c = 0;
  for (; c + kPairBlock <= cols; c += kPairBlock) {
    __m512i v[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(w + (r + R) * cols + c), _MM_HINT_T0);
      v[r] = _mm512_loadu_si512(w + r * cols + c);
    }
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) {
      const __m512 xe = S::load(in[p].x_pairs + c), xo = S::load(in[p].x_pairs + c + 16);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        a0[r][p] = S::madd(a0[r][p], _mm512_castsi512_ps(_mm512_slli_epi32(v[r], 16)), xe);
        a1[r][p] = S::madd(a1[r][p], _mm512_castsi512_ps(_mm512_and_si512(v[r], odd)), xo);
      }
    }
  }
  for (; c < cols; c += S::kLanes) {
    const Index n = std::min(S::kLanes, cols - c);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 wv = S::load(w + r * cols + c, n);
#pragma GCC unroll 4
      for (int p = 0; p < P; ++p) a0[r][p] = S::madd(a0[r][p], wv, S::load(in[p].x + c, n));
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int p = 0; p < P; ++p) a0[r][p] = S::add(a0[r][p], a1[r][p]);
  simd::store_sums(a0, y, y_stride);
}
#elif MINIMIND_AVX2
// The same in 256-bit vectors (matvec asks 1 KiB ahead here, the distance that measured best on
// AVX2).
inline float dot(const uint16_t* w, const float* x, const float* xp, Index cols, uintptr_t ahead) {
  using S = simd::Avx2;
  const __m256i odd = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  auto even_of = [](__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); };
  auto odd_of = [&](__m256i v) { return _mm256_castsi256_ps(_mm256_and_si256(v, odd)); };
  __m256 a0 = S::zero(), a1 = a0, a2 = a0, a3 = a0;
  Index c = 0;
  for (; c + kPairBlock <= cols; c += kPairBlock) {
    if (ahead > 0) simd::prefetch_ahead(w + c, ahead);
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + c));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + c + 16));
    a0 = S::madd(a0, even_of(v0), S::load(xp + c));
    a1 = S::madd(a1, even_of(v1), S::load(xp + c + 8));
    a2 = S::madd(a2, odd_of(v0), S::load(xp + c + 16));
    a3 = S::madd(a3, odd_of(v1), S::load(xp + c + 24));
  }
  for (; c + S::kLanes <= cols; c += S::kLanes) a0 = S::madd(a0, S::load(w + c), S::load(x + c));
  float sum = S::sum(S::add(S::add(a0, a1), S::add(a2, a3)));
  for (; c < cols; ++c) sum += to_float(w[c]) * x[c];
  return sum;
}
#else
// sum_c float(w[c]) x[c]; the 128-bit targets take 8 weights a step.
inline float dot(const uint16_t* w, const float* x, Index cols) {
#if MINIMIND_SIMD
  return simd::dot<simd::Ops, 2>(w, x, cols, [](uint16_t v) { return to_float(v); }, 1024);
#else
  float sum = 0;
  for (Index c = 0; c < cols; ++c) sum += to_float(w[c]) * x[c];
  return sum;
#endif
}
#endif

}  // namespace minimind::kernels::bf16::MINIMIND_TARGET

// The format's entry points on this target (as f32.hpp's).
namespace minimind::kernels::MINIMIND_TARGET {

// y[r] = float(W[r, :]) x for r in [begin, end), row after row as for f32: one sequential stream
// read faster from DRAM than four rows side by side.
inline void matvec(const bf16::View& w, const DecodeInput& in, float* y, Index begin, Index end) {
#if MINIMIND_AVX2
  const uintptr_t ahead = decode_ahead(1024);
#endif
#if MINIMIND_AVX512
  if (decode_bf16_extended()) {
    for (Index r = begin; r < end; ++r) y[r] = bf16::MINIMIND_TARGET::dot_extended(w.data + r * w.cols, in.x, w.cols, ahead);
    return;
  }
#endif
  for (Index r = begin; r < end; ++r) {
#if MINIMIND_AVX2
    y[r] = bf16::MINIMIND_TARGET::dot(w.data + r * w.cols, in.x, in.x_pairs, w.cols, ahead);
#else
    y[r] = bf16::MINIMIND_TARGET::dot(w.data + r * w.cols, in.x, w.cols);
#endif
  }
}

#if MINIMIND_AVX512
// Every position of a decode step at once (targets.hpp: Matvec), as f32's: register tiles of R
// rows x 2 positions (dot_tile), the last 3 together; one position alone streams row after row
// (dot). Reading each row once for all positions roughly doubles a small batch's speed over a
// chunk at a time for each position; 2 positions a pass measured best (bigger tiles do not fit in
// the registers). From 13 sequences the GEMM and the tiles run alike, so the GEMM takes them.
// (commit 2d38d3a, minimind-bench -b).
inline void matvec_positions(const bf16::View& w, std::span<const DecodeInput> in, float* y, Index y_stride,
                             Index begin, Index end) {
  if (in.size() == 1) {
    matvec(w, in[0], y, begin, end);
    return;
  }
  in_passes<2, 3>(in, y, y_stride, begin, end, [&](Index b, Index e, const DecodeInput* x, float* out, size_t count) {
    // 2 R P accumulators and R weight vectors, widened as used, within the 32 zmm.
    auto rows = [&]<int R, int P>() {
      in_tiles<R>(b, e, [&]<int T>(Index r) {
        bf16::MINIMIND_TARGET::dot_tile<T, P>(w.data + r * w.cols, w.cols, x, out + r, y_stride);
      });
    };
    // Passes of 2 with the last of up to 3 (at least 2 positions here): count is 2 or 3.
    if (count == 2) rows.template operator()<4, 2>();
    else rows.template operator()<2, 3>();
  });
}
#endif

// Rows [r, r + mr), columns [k0, k0 + kc) widened into buf [mr, kc].
inline const float* block(const bf16::View& w, Index r, Index mr, Index k0, Index kc, float* buf, Index& stride) {
  for (Index i = 0; i < mr; ++i) bf16::MINIMIND_TARGET::widen(w.data + (r + i) * w.cols + k0, buf + i * kc, kc);
  stride = kc;
  return buf;
}

}  // namespace minimind::kernels::MINIMIND_TARGET
#endif  // MINIMIND_TARGET
