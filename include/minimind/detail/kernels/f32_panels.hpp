// f32_panels: f32 weights in panels of 16 rows, stored k-major: panel p holds rows [16p, 16p + 16)
// as cols runs of 16 values, w[16p + i][k] at data[(p * cols + k) * 16 + i] (the last panel padded
// with zero rows). Each panel is one sequential stream, so the products read the whole matrix
// front to back, and one vector load takes the k-th weight of 16 rows: the products put the rows
// in the lanes and broadcast each position's x[k] against them, every position in one pass.
// Each (row, position) is one FMA chain over k in order, whatever the number of positions, so a
// sequence gets bit for bit the same in a batch as alone, and in prefill as in decode.
// Why: reading one stream per panel, rather than one per row, is what lets several positions'
// products keep up with memory; the same kernel on row-major rows gained nothing (commit 79223f6;
// docs/performance.md, "Design choices"). The loader holds f32 models this way where the active
// kernels have them and the CPU measured them faster (f32_panels_preferred, targets.hpp); the
// kernels are the target section.
#ifndef MINIMIND_DETAIL_KERNELS_F32_PANELS_HPP
#define MINIMIND_DETAIL_KERNELS_F32_PANELS_HPP
#include "minimind/detail/kernels/format.hpp"
#include "minimind/detail/kernels/simd.hpp"
#include "minimind/detail/weight_arena.hpp"
#include "minimind/tensor.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <span>
#include <utility>

namespace minimind::kernels::f32_panels {

inline constexpr Index kRows = 16;  // rows per panel: one zmm of f32
// Positions per group of a decode step's k-major activations (DecodeInput::xk).
inline constexpr Index kGroup = 16;

inline Index panels_for(Index rows) { return (rows + kRows - 1) / kRows; }

struct View {
  const float* data = nullptr;
  Index rows = 0, cols = 0;
};

// f32_panels in the table of formats (format.hpp).
struct Format {
  static constexpr WeightFormat id = WeightFormat::F32Panels;
  static constexpr const char* name = "f32_panels";
  static constexpr bool kQuantizedInput = false;
  static constexpr bool kInt8Input = false;
  static constexpr bool kPairedInput = false;
  static constexpr bool kKMajorInput = true;
  using View = f32_panels::View;

  static size_t bytes(Index rows, Index cols) { return static_cast<size_t>(panels_for(rows) * kRows * cols) * sizeof(float); }
  static View convert(const float* data, Index rows, Index cols, WeightArena& arena, std::shared_ptr<const void>& owner) {
    auto storage = arena.allocate(bytes(rows, cols));
    auto* out = static_cast<float*>(storage.get());
    for (Index p = 0; p < panels_for(rows); ++p) {
      float* panel = out + p * cols * kRows;
      for (Index i = 0; i < kRows; ++i) {
        const Index r = p * kRows + i;
        for (Index c = 0; c < cols; ++c) panel[c * kRows + i] = r < rows ? data[r * cols + c] : 0.0f;
      }
    }
    owner = std::move(storage);
    return {out, rows, cols};
  }
  static void row_to(const View& w, Index r, float* out) {
    const float* from = w.data + (r / kRows) * w.cols * kRows + r % kRows;
    for (Index c = 0; c < w.cols; ++c) out[c] = from[c * kRows];
  }
};

}  // namespace minimind::kernels::f32_panels

#endif  // MINIMIND_DETAIL_KERNELS_F32_PANELS_HPP

#ifdef MINIMIND_TARGET
namespace minimind::kernels::f32_panels::MINIMIND_TARGET {
namespace simd = kernels::MINIMIND_TARGET;

// Where a product's positions are: position q's x[k] at xk[(q / lanes) * group + q % lanes + k * lanes]
// (k-major groups of `lanes` positions, `group` floats apart: the GEMM's packed panels or
// Workspace's decode groups), or, for one position, x itself (lanes 1).
struct Positions {
  const float* xk;
  Index lanes, group, n;
  const float* at(Index q) const { return xk + (q / lanes) * group + q % lanes; }
};

#if MINIMIND_AVX512
// NP panels (panel_floats apart) x P positions: y[p * y_stride + 16 j + i] = sum_k w_j[k][i] x_p[k],
// rows outside lanes [lo_j, hi_j) of panel j not written. Per k: one load of each panel's line
// and P FMAs with x_p[k] broadcast from memory. With Ahead each panel's line 8 KiB ahead is asked
// for at every k: with several positions the loads are too few for the hardware prefetcher to
// keep the stream up (8 KiB measured best, commit 79223f6). One position streams as fast without.
template <int P, int NP, bool Ahead>
inline void tile(const float* w, Index panel_floats, Index cols, const float* xk, Index lanes, float* y,
                 Index y_stride, const __mmask16* store) {
  constexpr Index kAhead = 8192 / 4;
  __m512 acc[NP][P];
#pragma GCC unroll 4
  for (int j = 0; j < NP; ++j)
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) acc[j][p] = _mm512_setzero_ps();
  for (Index k = 0; k < cols; ++k, w += kRows, xk += lanes) {
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) {
      if constexpr (Ahead) _mm_prefetch(reinterpret_cast<const char*>(w + j * panel_floats + kAhead), _MM_HINT_T0);
      const __m512 wv = _mm512_loadu_ps(w + j * panel_floats);
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) acc[j][p] = _mm512_fmadd_ps(wv, _mm512_set1_ps(xk[p]), acc[j][p]);
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < NP; ++j)
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) _mm512_mask_storeu_ps(y + p * y_stride + j * kRows, store[j], acc[j][p]);
}

template <int NP, bool Ahead, size_t... P>
constexpr auto tile_table(std::index_sequence<P...>) {
  return std::array{&tile<static_cast<int>(P) + 1, NP, Ahead>...};
}
#endif

// Rows [begin, end) of W for every position: y[q * y_stride + r] = W[r, :] x_q. Panel by panel,
// each for all the positions, 16 at a time (the ones after the first 16 read it from cache).
inline void products(const View& w, const Positions& x, float* y, Index y_stride, Index begin, Index end) {
  const Index cols = w.cols, panel_floats = cols * kRows;
  const auto lanes_of = [&](Index p) {
    return std::pair{std::max<Index>(begin - p * kRows, 0), std::min<Index>(end - p * kRows, kRows)};
  };
#if MINIMIND_AVX512
  static constexpr auto first = tile_table<1, true>(std::make_index_sequence<kGroup>{});
  static constexpr auto later = tile_table<1, false>(std::make_index_sequence<kGroup>{});
  const auto mask_of = [&](Index p) {
    const auto [lo, hi] = lanes_of(p);
    return static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
  };
  Index p = begin / kRows;
  const Index last = (end + kRows - 1) / kRows;
  // One position or a few: their FMA chains would wait on each other, so several panels at once
  // (4 measured best; 8 ran out of registers).
  auto several = [&]<int P, int NP>() {
    for (; p + NP <= last; p += NP) {
      __mmask16 store[NP];
      for (int j = 0; j < NP; ++j) store[j] = mask_of(p + j);
      tile<P, NP, (P > 1)>(w.data + p * panel_floats, panel_floats, cols, x.at(0), x.lanes, y + p * kRows, y_stride, store);
    }
  };
  if (x.n == 1) several.template operator()<1, 4>();
  else if (x.n == 2) several.template operator()<2, 2>();
  else if (x.n == 3) several.template operator()<3, 2>();
  for (; p < last; ++p) {
    const __mmask16 store = mask_of(p);
    for (Index q = 0; q < x.n; q += kGroup) {
      const Index count = std::min(kGroup, x.n - q);
      (q == 0 ? first : later)[static_cast<size_t>(count - 1)](w.data + p * panel_floats, panel_floats, cols, x.at(q),
                                                                 x.lanes, y + q * y_stride + p * kRows, y_stride, &store);
    }
  }
#else
  // The same chains on the target's vectors (std::fma without them): explicit, so that the
  // compiler cannot fuse or not fuse differently for different numbers of positions.
  for (Index p = begin / kRows; p * kRows < end; ++p) {
    const auto [lo, hi] = lanes_of(p);
    // A group stays inside one of x's panels of positions (WebAssembly's GEMM packs 8).
    const Index group = std::min(kGroup, x.lanes);
    for (Index q = 0; q < x.n; q += group) {
      const Index count = std::min(group, x.n - q);
      const float* panel = w.data + p * panel_floats;
      const float* xk = x.at(q);
      alignas(64) float sums[kGroup][kRows];
#if MINIMIND_SIMD
      using S = simd::Ops;
      constexpr Index kVectors = kRows / S::kLanes;
      typename S::V acc[kGroup][kVectors];
      for (Index j = 0; j < count; ++j)
        for (Index v = 0; v < kVectors; ++v) acc[j][v] = S::zero();
      for (Index k = 0; k < cols; ++k, panel += kRows, xk += x.lanes) {
        typename S::V wv[kVectors];
        for (Index v = 0; v < kVectors; ++v) wv[v] = S::load(panel + v * S::kLanes);
        for (Index j = 0; j < count; ++j) {
          const typename S::V xv = S::set1(xk[j]);
          for (Index v = 0; v < kVectors; ++v) acc[j][v] = S::madd(acc[j][v], wv[v], xv);
        }
      }
      for (Index j = 0; j < count; ++j)
        for (Index v = 0; v < kVectors; ++v) S::store(sums[j] + v * S::kLanes, acc[j][v]);
#else
      for (Index j = 0; j < count; ++j) std::fill_n(sums[j], kRows, 0.0f);
      for (Index k = 0; k < cols; ++k, panel += kRows, xk += x.lanes)
        for (Index j = 0; j < count; ++j)
          for (Index i = 0; i < kRows; ++i) sums[j][i] = std::fma(panel[i], xk[j], sums[j][i]);
#endif
      for (Index j = 0; j < count; ++j)
        for (Index i = lo; i < hi; ++i) y[(q + j) * y_stride + p * kRows + i] = sums[j][i];
    }
  }
#endif
}

}  // namespace minimind::kernels::f32_panels::MINIMIND_TARGET

// The format's entry points on this target (targets.hpp, gemm.hpp).
namespace minimind::kernels::MINIMIND_TARGET {

inline void matvec(const f32_panels::View& w, const DecodeInput& in, float* y, Index begin, Index end) {
  f32_panels::MINIMIND_TARGET::products(w, {in.x, 1, 0, 1}, y, 0, begin, end);
}

// Every position of a decode step in one pass over the weights; several positions read x in the
// k-major groups Workspace::prepare made (DecodeInput::xk).
inline void matvec_positions(const f32_panels::View& w, std::span<const DecodeInput> in, float* y, Index y_stride,
                             Index begin, Index end) {
  const auto n = static_cast<Index>(in.size());
  if (n == 1) {
    matvec(w, in[0], y, begin, end);
    return;
  }
  const Index group = w.cols * f32_panels::kGroup;
  f32_panels::MINIMIND_TARGET::products(w, {in[0].xk, f32_panels::kGroup, group, n}, y, y_stride, begin, end);
}

// The decode products take up to kMaxDecodePositions positions; more go to gemm_each, which
// hands its packed panels of positions to the same products.
constexpr Index gemm_min_rows(const f32_panels::View&) { return kMaxDecodePositions + 1; }

}  // namespace minimind::kernels::MINIMIND_TARGET
#endif  // MINIMIND_TARGET
