#pragma once
// f32: 4 bytes per weight; viewed in place in the checkpoint when it is stored as F32.
// y = W x for a row-major W [rows, cols], one row range at a time so a thread pool can split the
// rows. Decode reads every weight once per token from memory: the loop is a stream of loads with
// four independent FMA chains (kernels::dot, simd.hpp).
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

// y[r] = Dot(W[r, :], x) for r in [begin, end), one row after another: the weights are then one
// sequential stream, which the hardware prefetcher follows best (from DRAM: 14 GB/s, against 12
// for four rows read side by side); x stays in L1.
template <float (*Dot)(const float*, const float*, Index)>
inline void matvec_rows(const float* w, Index cols, const float* x, float* y, Index begin, Index end) {
  for (Index r = begin; r < end; ++r) y[r] = Dot(w + r * cols, x, cols);
}

namespace scalar {
inline float dot(const float* w, const float* x, Index cols) {
  float sum = 0;
  for (Index c = 0; c < cols; ++c) sum += w[c] * x[c];
  return sum;
}
}  // namespace scalar

// The dot product on vector target S (simd.hpp).
template <class S>
inline float dot(const float* w, const float* x, Index cols) {
  return kernels::dot<S, 1, 0>(w, x, cols, [](float v) { return v; });
}

// The best target this build has (kernels::name()).
inline void matvec(const float* w, Index cols, const float* x, float* y, Index begin, Index end) {
#ifdef MINIMIND_SIMD
  matvec_rows<dot<Simd>>(w, cols, x, y, begin, end);
#else
  matvec_rows<scalar::dot>(w, cols, x, y, begin, end);
#endif
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
  using View = f32::View;
  // No convert(): f32 is what the others are converted from.

  static size_t bytes(Index rows, Index cols) { return static_cast<size_t>(rows * cols) * sizeof(float); }
  static void row_to(const View& w, Index r, float* out) {
    std::memcpy(out, w.data + r * w.cols, static_cast<size_t>(w.cols) * sizeof(float));
  }
  static void matvec(const View& w, const DecodeInput& in, float* y, Index begin, Index end) {
    f32::matvec(w.data, w.cols, in.x, y, begin, end);
  }
  // The GEMM reads f32 rows in place: rows [r, r + mr), columns from k0, `stride` apart.
  static const float* block(const View& w, Index r, Index, Index k0, Index, float*, Index& stride) {
    stride = w.cols;
    return w.data + r * w.cols + k0;
  }
  static BlockLines lines(const View& w, Index r, Index mr, Index k0, Index kc) {
    return dense_lines(w.data, 4, w.cols, r, mr, k0, kc);
  }
};

}  // namespace minimind::kernels::f32
