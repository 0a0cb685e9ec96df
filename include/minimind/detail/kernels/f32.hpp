// f32: 4 bytes per weight; viewed in place in the checkpoint when it is stored as F32.
// Decode is y = W x for a row-major W [rows, cols], one row range at a time so a thread pool can
// split the rows; it reads every weight once per token from memory: the loop is a stream of loads
// with four independent FMA chains (dot, simd.hpp). The kernels are the target section at the end,
// compiled once per target (simd.hpp).
#ifndef MINIMIND_DETAIL_KERNELS_F32_HPP
#define MINIMIND_DETAIL_KERNELS_F32_HPP
#include "minimind/detail/kernels/format.hpp"
#include "minimind/detail/kernels/simd.hpp"
#include "minimind/tensor.hpp"

#include <cstring>

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

// sum_c w[c] x[c].
inline float dot(const float* w, const float* x, Index cols) {
#if MINIMIND_SIMD
  return simd::dot<simd::Ops, 1, 0>(w, x, cols, [](float v) { return v; });
#else
  float sum = 0;
  for (Index c = 0; c < cols; ++c) sum += w[c] * x[c];
  return sum;
#endif
}

}  // namespace minimind::kernels::f32::MINIMIND_TARGET

// The format's entry points on this target, overloaded on its View: for the table of targets
// (targets.hpp) and the GEMM (gemm.hpp).
namespace minimind::kernels::MINIMIND_TARGET {

// y[r] = W[r, :] x for r in [begin, end), one row after another: the weights are then one
// sequential stream, which the hardware prefetcher follows best (from DRAM: 14 GB/s, against 12
// for four rows read side by side); x stays in L1.
inline void matvec(const f32::View& w, const DecodeInput& in, float* y, Index begin, Index end) {
  for (Index r = begin; r < end; ++r) y[r] = f32::MINIMIND_TARGET::dot(w.data + r * w.cols, in.x, w.cols);
}

// The GEMM reads f32 rows in place: rows [r, r + mr), columns from k0, `stride` apart.
inline const float* block(const f32::View& w, Index r, Index, Index k0, Index, float*, Index& stride) {
  stride = w.cols;
  return w.data + r * w.cols + k0;
}

}  // namespace minimind::kernels::MINIMIND_TARGET
#endif  // MINIMIND_TARGET
