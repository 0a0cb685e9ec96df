// f32: 4 bytes per weight; viewed in place in the checkpoint when it is stored as F32.
// Decode is y = W x for a row-major W [rows, cols], one row range at a time so a thread pool can
// split the rows; it reads every weight once per token from memory: the loop is a stream of loads
// with four independent FMA chains (dot, simd.hpp). On x86 the several positions of a batch's
// decode step read each row once: AVX2 through dot_positions, which sums each in dot's order,
// AVX-512 through register tiles (dot_tile), which sum each the same in any batch. The kernels
// are the target section at the end, compiled once per target (simd.hpp).
#ifndef MINIMIND_DETAIL_KERNELS_F32_HPP
#define MINIMIND_DETAIL_KERNELS_F32_HPP
#include "minimind/detail/kernels/format.hpp"
#include "minimind/detail/kernels/simd.hpp"
#include "minimind/tensor.hpp"

#include <algorithm>
#include <cstring>
#include <span>

namespace minimind::kernels::f32 {

// The plain reference: y[r] = sum_c W[r, c] x[c] for r in [begin, end).
inline void matvec_reference(const float* w, Index cols, const float* x, float* y, Index begin, Index end) {
  for (Index r = begin; r < end; ++r) {
    double sum = 0;
    for (Index c = 0; c < cols; ++c) sum += static_cast<double>(w[r * cols + c]) * x[c];
    y[r] = static_cast<float>(sum);
  }
}

struct View {
  const float* data = nullptr;
  Index rows = 0, cols = 0;
};

// f32 in the table of formats (format.hpp).
struct Format {
  static constexpr WeightFormat id = WeightFormat::F32;
  static constexpr const char* name = "f32";
  static constexpr bool kQuantizedInput = false;
  static constexpr bool kInt8Input = false;
  static constexpr bool kKMajorInput = false;
  static constexpr bool kPairedInput = false;
  using View = f32::View;
  // No convert(): f32 is what the others are converted from.

  static size_t bytes(Index rows, Index cols) { return static_cast<size_t>(rows * cols) * sizeof(float); }
  static void row_to(const View& w, Index r, float* out) {
    std::memcpy(out, w.data + r * w.cols, static_cast<size_t>(w.cols) * sizeof(float));
  }
  static BlockLines lines(const View& w, Index r, Index mr, Index k0, Index kc) {
    return dense_lines(w.data, 4, w.cols, r, mr, k0, kc);
  }
};

}  // namespace minimind::kernels::f32

#endif  // MINIMIND_DETAIL_KERNELS_F32_HPP

#ifdef MINIMIND_TARGET
namespace minimind::kernels::f32::MINIMIND_TARGET {
namespace simd = kernels::MINIMIND_TARGET;

// sum_c w[c] x[c]; `ahead` as simd::dot's.
inline float dot(const float* w, const float* x, Index cols, uintptr_t ahead = 0) {
#if MINIMIND_SIMD
  return simd::dot<simd::Ops, 1>(w, x, cols, [](float v) { return v; }, ahead);
#else
  (void)ahead;
  float sum = 0;
  for (Index c = 0; c < cols; ++c) sum += w[c] * x[c];
  return sum;
#endif
}

#if MINIMIND_AVX2 && !MINIMIND_AVX512
// Row w against positions x_i, i < P: y[i * y_stride] = w . x_i. Each row is read once for all
// of a decode step's positions (a batch of sequences), and every (row, position) is summed in the
// same order whatever P is, and as dot(): four FMA chains over 4 vectors a step, whole vectors
// of the tail into the first, the last values after the lanes' sum. So a sequence gets bit for
// bit the same in a batch as alone (test_kernels). With several positions the loop has too few
// loads in flight for the stream from DRAM to keep up, so it asks for the lines 8 KiB ahead into
// L2 (4 KiB into L2 and 2 KiB into L1 gained less; alone, one position streams fastest without).
template <int P>
inline void dot_positions(const float* w, Index cols, const DecodeInput* in, float* y, Index y_stride) {
  using S = simd::Ops;
  using V = typename S::V;
  constexpr Index L = S::kLanes;
  V a[P][4];
#pragma GCC unroll 4
  for (int i = 0; i < P; ++i) a[i][0] = a[i][1] = a[i][2] = a[i][3] = S::zero();
  Index c = 0;
  for (; c + 4 * L <= cols; c += 4 * L) {
    if constexpr (P > 1) {
      for (Index line = 0; line < 4 * L; line += 16) {
        _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(w + c + line) + 8192), _MM_HINT_T1);
      }
    }
    const V w0 = S::load(w + c), w1 = S::load(w + c + L), w2 = S::load(w + c + 2 * L), w3 = S::load(w + c + 3 * L);
#pragma GCC unroll 4
    for (int i = 0; i < P; ++i) {
      a[i][0] = S::madd(a[i][0], w0, S::load(in[i].x + c));
      a[i][1] = S::madd(a[i][1], w1, S::load(in[i].x + c + L));
      a[i][2] = S::madd(a[i][2], w2, S::load(in[i].x + c + 2 * L));
      a[i][3] = S::madd(a[i][3], w3, S::load(in[i].x + c + 3 * L));
    }
  }
  for (; c + L <= cols; c += L) {
    const V w0 = S::load(w + c);
#pragma GCC unroll 4
    for (int i = 0; i < P; ++i) a[i][0] = S::madd(a[i][0], w0, S::load(in[i].x + c));
  }
#pragma GCC unroll 4
  for (int i = 0; i < P; ++i) {
    float sum = S::sum(S::add(S::add(a[i][0], a[i][1]), S::add(a[i][2], a[i][3])));
    for (Index t = c; t < cols; ++t) sum += w[t] * in[i].x[t];
    y[i * y_stride] = sum;
  }
}
#endif

#if MINIMIND_AVX512
// Rows w_r = w + r * cols (r < R) against positions x_p (p < P): y[p * y_stride + r] = w_r . x_p.
// A register tile: per 16 columns, R weight vectors and P input vectors feed R x P FMAs, so a
// step loads R + P vectors for R P products (dot_positions loads one per product, and waited on
// those loads). Each (row, position) is one FMA chain over the row's vectors, a masked
// last one included, then the lanes' sum: the same order whatever R and P, so a position gets
// bit for bit the same in any batch (test_kernels). With several positions the next tile's
// lines are asked for while this one is multiplied.
template <int R, int P>
inline void dot_tile(const float* w, Index cols, const DecodeInput* in, float* y, Index y_stride) {
  __m512 acc[R][P];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 6
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  const float* x[P];
#pragma GCC unroll 6
  for (int p = 0; p < P; ++p) x[p] = in[p].x;
  auto step = [&](Index c, __mmask16 m) {
    __m512 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if constexpr (P > 1) _mm_prefetch(reinterpret_cast<const char*>(w + (r + R) * cols + c), _MM_HINT_T0);
      wv[r] = _mm512_maskz_loadu_ps(m, w + r * cols + c);
    }
#pragma GCC unroll 6
    for (int p = 0; p < P; ++p) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x[p] + c);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][p] = _mm512_fmadd_ps(wv[r], xv, acc[r][p]);
    }
  };
  Index c = 0;
  for (; c + 16 <= cols; c += 16) step(c, 0xFFFF);
  if (c < cols) step(c, static_cast<__mmask16>((1u << (cols - c)) - 1));
  simd::store_sums(acc, y, y_stride);
}
#endif

}  // namespace minimind::kernels::f32::MINIMIND_TARGET

// The format's entry points on this target, overloaded on its View: for the table of targets
// (targets.hpp) and the GEMM (gemm.hpp).
namespace minimind::kernels::MINIMIND_TARGET {

// y[r] = W[r, :] x for r in [begin, end), one row after another: the weights are then one
// sequential stream, which the hardware prefetcher follows best (faster from DRAM than four rows
// read side by side); x stays in L1. On AVX-512 the stream is also asked for ahead where that
// measured faster (decode_ahead, simd.hpp).
inline void matvec(const f32::View& w, const DecodeInput& in, float* y, Index begin, Index end) {
  const uintptr_t ahead = decode_ahead(0);
  for (Index r = begin; r < end; ++r) y[r] = f32::MINIMIND_TARGET::dot(w.data + r * w.cols, in.x, w.cols, ahead);
}

#if MINIMIND_AVX512
// Every position of a decode step at once (targets.hpp: Matvec): y[i * y_stride + r] = W[r, :] x_i,
// in register tiles of R rows x up to 6 positions (dot_tile); with more than 6 positions in
// chunks of 64 rows, each chunk for 6 positions at a time, then again from cache for the next 6.
// One position (a sequence's own decode) streams row after row (dot), measured faster alone than
// any tile; so on this target a batch's sums differ from a sequence's alone by rounding (one
// chain per product against four), while in any batch they are the same. Up to 6 positions a
// tile measured best: smaller tiles read the rows more often, larger ones run out of registers
// (commit 16877d9, minimind-bench -b).
inline void matvec_positions(const f32::View& w, std::span<const DecodeInput> in, float* y, Index y_stride,
                             Index begin, Index end) {
  if (in.size() == 1) {
    matvec(w, in[0], y, begin, end);
    return;
  }
  in_passes<6, 6>(in, y, y_stride, begin, end, [&](Index b, Index e, const DecodeInput* x, float* out, size_t count) {
    // R x P accumulators, R weights and an input within the 32 zmm.
    auto rows = [&]<int R, int P>() {
      in_tiles<R>(b, e, [&]<int T>(Index r) {
        f32::MINIMIND_TARGET::dot_tile<T, P>(w.data + r * w.cols, w.cols, x, out + r, y_stride);
      });
    };
    switch (count) {
      case 2: rows.template operator()<8, 2>(); break;
      case 3: rows.template operator()<6, 3>(); break;
      case 4: rows.template operator()<5, 4>(); break;
      case 5: rows.template operator()<4, 5>(); break;
      case 6: rows.template operator()<4, 6>(); break;
      default: rows.template operator()<8, 1>(); break;
    }
  });
}

// From how many positions a product runs on the GEMM rather than matvec_positions (targets.hpp):
// the tiles are faster than the GEMM up to some 24 sequences and equal at 32 (commit 16877d9).
constexpr Index gemm_min_rows(const f32::View&) { return 32; }
#elif MINIMIND_AVX2
// Every position of a decode step at once (targets.hpp: Matvec): y[i * y_stride + r] = W[r, :] x_i;
// for several positions in chunks of 64 rows, each chunk row after row for 2 positions at a time
// (8 accumulators of the 16 ymm), then again from cache for the next 2: each chunk comes from
// memory once for all positions, well ahead of chunks of rows for one position after another
// (commit cd66aaf, minimind-bench -b).
inline void matvec_positions(const f32::View& w, std::span<const DecodeInput> in, float* y, Index y_stride,
                             Index begin, Index end) {
  if (in.size() == 1) {  // one sequence's decode: the same sums, the plain stream
    matvec(w, in[0], y, begin, end);
    return;
  }
  in_passes<2, 2>(in, y, y_stride, begin, end, [&](Index b, Index e, const DecodeInput* x, float* out, size_t count) {
    for (Index r = b; r < e; ++r) {
      if (count == 2) f32::MINIMIND_TARGET::dot_positions<2>(w.data + r * w.cols, w.cols, x, out + r, y_stride);
      else f32::MINIMIND_TARGET::dot_positions<1>(w.data + r * w.cols, w.cols, x, out + r, y_stride);
    }
  });
}
#endif

// The GEMM reads f32 rows in place: rows [r, r + mr), columns from k0, `stride` apart.
inline const float* block(const f32::View& w, Index r, Index, Index k0, Index, float*, Index& stride) {
  stride = w.cols;
  return w.data + r * w.cols + k0;
}

}  // namespace minimind::kernels::MINIMIND_TARGET
#endif  // MINIMIND_TARGET
