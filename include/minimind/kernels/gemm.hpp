#pragma once
// Matrix-matrix products for prefill: Y [n, rows] = X [n, cols] W^T with W held in any format.
// The weight rows are split across the thread pool; each thread multiplies its slice with
// Eigen's blocked GEMM (Eigen's own threading is not used). bf16 and q8 weights are first
// widened, a panel of rows at a time, into a per-thread f32 buffer that stays in L2.
#include "minimind/kernels/bf16.hpp"
#include "minimind/kernels/q8.hpp"
#include "minimind/kernels/thread_pool.hpp"
#include "minimind/tensor.hpp"
#include "minimind/weights.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <vector>

namespace minimind::kernels {

struct GemmScratch {
  std::vector<std::vector<float>> panels;  // one f32 panel per thread
  std::vector<float> x;                    // q8: the activations after rounding to q8 blocks
  std::vector<int8_t> xq;
  std::vector<float> xd;
};

namespace detail {
using StridedMap = Eigen::Map<MatrixRM<float>, 0, Eigen::OuterStride<>>;
using ConstStridedMap = Eigen::Map<const MatrixRM<float>, 0, Eigen::OuterStride<>>;

// Widens rows [begin, end) of w into panel [end - begin, cols].
inline void widen_rows(const Weight<float>& w, Index begin, Index end, float* panel) {
  const Index cols = w.cols();
  for (Index r = begin; r < end; ++r) {
    if (w.format() == WeightFormat::BF16) bf16::to_float(w.bf16_data() + r * cols, panel + (r - begin) * cols, cols);
    else w.row_to(r, panel + (r - begin) * cols);
  }
}
}  // namespace detail

inline void gemm(const float* x, Index x_stride, Index n, const Weight<float>& w, float* y, Index y_stride,
                 GemmScratch& scratch, ThreadPool* pool) {
  const Index rows = w.rows(), cols = w.cols();
  const int threads = pool ? pool->size() : 1;
  if (w.format() == WeightFormat::Q8) {
    // The activations go through the same per-block rounding as in the matrix-vector kernel, so
    // prefill and decode compute the same function.
    const Index blocks = q8::blocks_for(cols), padded = blocks * q8::kBlock;
    scratch.x.resize(static_cast<size_t>(n * padded));
    scratch.xq.resize(static_cast<size_t>(padded));
    scratch.xd.resize(static_cast<size_t>(blocks));
    for (Index i = 0; i < n; ++i) {
      q8::quantize_activations(x + i * x_stride, cols, scratch.xq.data(), scratch.xd.data());
      for (Index b = 0; b < blocks; ++b) {
        for (Index c = b * q8::kBlock; c < (b + 1) * q8::kBlock; ++c) {
          scratch.x[static_cast<size_t>(i * padded + c)] = scratch.xd[static_cast<size_t>(b)] * scratch.xq[static_cast<size_t>(c)];
        }
      }
    }
    x = scratch.x.data();
    x_stride = padded;
  }
  const detail::ConstStridedMap X(x, n, cols, Eigen::OuterStride<>(x_stride));
  // Panel height: about 128 KiB of f32 per panel, a multiple of 16 rows.
  const Index panel_rows = std::max<Index>(16, (32768 / std::max<Index>(cols, 1)) / 16 * 16);
  if (w.format() != WeightFormat::F32 && static_cast<int>(scratch.panels.size()) < threads) scratch.panels.resize(threads);
  auto body = [&](Index begin, Index end, int t) {
    detail::StridedMap Y(y, n, rows, Eigen::OuterStride<>(y_stride));
    if (w.format() == WeightFormat::F32) {
      Y.middleCols(begin, end - begin).noalias() = X * w.matrix().middleRows(begin, end - begin).transpose();
      return;
    }
    std::vector<float>& panel = scratch.panels[static_cast<size_t>(t)];
    if (panel.size() < static_cast<size_t>(panel_rows * cols)) panel.resize(static_cast<size_t>(panel_rows * cols));
    for (Index p = begin; p < end; p += panel_rows) {
      const Index h = std::min(panel_rows, end - p);
      detail::widen_rows(w, p, p + h, panel.data());
      const detail::ConstStridedMap P(panel.data(), h, cols, Eigen::OuterStride<>(cols));
      Y.middleCols(p, h).noalias() = X * P.transpose();
    }
  };
  if (!pool || threads == 1) {
    body(0, rows, 0);
    return;
  }
  pool->run([&](int t, int nt) {
    const Index chunks = (rows + 15) / 16;
    const Index begin = std::min(rows, chunks * t / nt * 16), end = std::min(rows, chunks * (t + 1) / nt * 16);
    if (begin < end) body(begin, end, t);
  });
}

}  // namespace minimind::kernels
