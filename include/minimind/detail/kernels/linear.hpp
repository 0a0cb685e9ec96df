#pragma once
// out = x W^T for every linear layer, dispatched on the format the weight is held in (formats.hpp),
// on the kernels of one target (targets.hpp; Workspace::kernels, by default the best this CPU runs):
//   one position (decode): the format's matrix-vector product (Kernels::matvec), the weight rows
//     split across the thread pool; each weight is read once per token.
//   many positions (prefill): a matrix-matrix product (gemm.hpp), the weight rows split across
//     the pool; bf16, q8 and q4 rows are widened to f32 panels on the way in, ggml's integer
//     types multiplied in int8 (gemm_int8.hpp).
// The plain Eigen product `x * W.matrix().transpose()` is the reference all of these are tested
// against (tests/test_kernels*.cpp).
#include "minimind/detail/kernels/formats.hpp"
#include "minimind/detail/kernels/gemm.hpp"
#include "minimind/detail/kernels/targets.hpp"
#include "minimind/detail/kernels/thread_pool.hpp"
#include "minimind/detail/kernels/weight.hpp"
#include "minimind/tensor.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace minimind::kernels {

// Scratch of the kernels for one session; grown on first use, never per token.
struct Workspace {
  ThreadPool* pool = nullptr;  // null: run on the calling thread
  const Kernels* kernels = &active();  // the target the products run on (tests try each)
  // The decode kernels' inputs besides x; rows of cols a multiple of 16 start on cache lines.
  LineVector<int16_t> xq;  // activations quantized for q8 [rows, blocks * 32]
  std::vector<float> xd;   // their scales [rows, blocks]
  LineVector<int8_t> x8;         // activations quantized to int8 for q4 [rows, blocks * 32]
  std::vector<float> x8_scale;   // their scales [rows, blocks]
  std::vector<int32_t> x8_sum;   // the sums of their blocks [rows, blocks]
  AlignedFloats x_pairs;   // activations in bf16's pair order [rows, cols]
  AlignedFloats x_lines;   // x copied onto cache lines [rows, line_floats(cols)]
  AlignedFloats x_groups;  // x in k-major groups of positions [groups, cols, f32_panels::kGroup]
  GemmScratch gemm;

  int threads() const { return pool ? pool->size() : 1; }
  // Makes room for the decode inputs of `rows` x `cols` activations (a session reserves them up front).
  void reserve_inputs(Index rows, Index cols) {
    static_assert(q4::kBlock == q8::kBlock);
    const size_t blocks = static_cast<size_t>(rows * q8::blocks_for(cols));
    if (xq.size() < blocks * q8::kBlock) xq.resize(blocks * q8::kBlock);
    if (xd.size() < blocks) xd.resize(blocks);
    if (x8.size() < blocks * q4::kBlock) x8.resize(blocks * q4::kBlock);
    if (x8_scale.size() < blocks) x8_scale.resize(blocks), x8_sum.resize(blocks);
    if (x_pairs.size() < static_cast<size_t>(rows * cols)) x_pairs.resize(static_cast<size_t>(rows * cols));
    if (x_groups.size() < grouped_floats(rows, cols)) x_groups.resize(grouped_floats(rows, cols));
  }
  // Floats of x_groups for n positions: none for one (its product reads x itself).
  static size_t grouped_floats(Index n, Index cols) {
    constexpr Index G = f32_panels::kGroup;
    return n > 1 ? static_cast<size_t>((n + G - 1) / G * G * cols) : 0;
  }
  // What format F's decode product reads: x itself (every format but the quantized-input ones),
  // x quantized (to int16, or to int8), x in pair order, x in k-major groups.
  struct Needs {
    bool plain = false, quantized = false, paired = false, k_major = false, int8 = false;
    template <class F>
    static Needs of() {
      return {!F::kQuantizedInput && !F::kInt8Input && !F::kKMajorInput, F::kQuantizedInput, F::kPairedInput,
              F::kKMajorInput, F::kInt8Input};
    }
    static Needs of(WeightFormat format) {
      return with_format(format, []<class F>() { return of<F>(); });
    }
    Needs operator|(Needs o) const {
      return {plain || o.plain, quantized || o.quantized, paired || o.paired, k_major || o.k_major, int8 || o.int8};
    }
  };
  // Floats in a row of x_lines: whole cache lines.
  static Index line_floats(Index cols) { return (cols + 15) / 16 * 16; }
  // x [n, cols] (rows x_stride apart) made into what `needs` says, once for all the rows of a
  // product; inputs() then gives position i's. Returns where the kernels read x: x itself, or,
  // for several positions whose rows do not start on cache lines (Eigen aligns to what the build's
  // own vectors need) and a format that reads x itself, a copy that does: a register tile's loads
  // of x would each straddle two lines and run at about half speed (commit b4a3511).
  std::pair<const float*, Index> prepare(const float* x, Index x_stride, Index n, Index cols, Needs needs) {
    const bool on_lines =
        reinterpret_cast<uintptr_t>(x) % kCacheLine == 0 && (x_stride * sizeof(float)) % kCacheLine == 0;
    if (needs.k_major && n > 1) to_groups(x, x_stride, n, cols);
    if (needs.plain && n > 1 && !on_lines) {
      const Index stride = line_floats(cols);
      if (x_lines.size() < static_cast<size_t>(n * stride)) x_lines.resize(static_cast<size_t>(n * stride));
      for (Index i = 0; i < n; ++i) std::copy_n(x + i * x_stride, cols, x_lines.data() + i * stride);
      x = x_lines.data(), x_stride = stride;
    }
    if (!needs.quantized && !needs.paired && !needs.int8) return {x, x_stride};
    reserve_inputs(n, cols);
    const Index blocks = q8::blocks_for(cols);
    for (Index i = 0; i < n; ++i) {
      if (needs.quantized) {
        kernels->quantize_activations(x + i * x_stride, cols, xq.data() + i * blocks * q8::kBlock, xd.data() + i * blocks);
      }
      if (needs.int8) {
        kernels->quantize_activations_int8(x + i * x_stride, cols, x8.data() + i * blocks * q4::kBlock,
                                           x8_scale.data() + i * blocks, x8_sum.data() + i * blocks);
      }
      if (needs.paired) bf16::to_pair_order(x + i * x_stride, cols, x_pairs.data() + i * cols);
    }
    return {x, x_stride};
  }
  // x [n, cols] into x_groups: position i's x[k] at group i / G, [k][i % G] (zero past n).
  void to_groups(const float* x, Index x_stride, Index n, Index cols) {
    constexpr Index G = f32_panels::kGroup;
    if (x_groups.size() < grouped_floats(n, cols)) x_groups.resize(grouped_floats(n, cols));
    for (Index g = 0; g * G < n; ++g) {
      float* to = x_groups.data() + g * cols * G;
      const Index count = std::min(G, n - g * G);
      for (Index k = 0; k < cols; ++k) {
        for (Index j = 0; j < count; ++j) to[k * G + j] = x[(g * G + j) * x_stride + k];
        std::fill(to + k * G + count, to + (k + 1) * G, 0.0f);
      }
    }
  }
  // The inputs of positions [0, n), n < kernels->gemm_from(F::id), for format F (after prepare() for F).
  template <class F>
  std::array<DecodeInput, kMaxDecodePositions> inputs(const float* x, Index x_stride, Index cols, Index n) const {
    std::array<DecodeInput, kMaxDecodePositions> in{};
    const Index blocks = q8::blocks_for(cols);
    for (Index i = 0; i < n; ++i) {
      DecodeInput& d = in[static_cast<size_t>(i)];
      d.x = x + i * x_stride;
      if constexpr (F::kQuantizedInput) d.xq = xq.data() + i * blocks * q8::kBlock, d.xd = xd.data() + i * blocks;
      if constexpr (F::kInt8Input) {
        d.x8 = x8.data() + i * blocks * q4::kBlock, d.x8_scale = x8_scale.data() + i * blocks, d.x8_sum = x8_sum.data() + i * blocks;
      }
      if constexpr (F::kPairedInput) d.x_pairs = x_pairs.data() + i * cols;
      if constexpr (F::kKMajorInput) {
        if (n > 1) d.xk = x_groups.data() + (i / f32_panels::kGroup) * cols * f32_panels::kGroup + i % f32_panels::kGroup;
      }
    }
    return in;
  }
  // The float work beside the products (ops.hpp) on this target; other T on the generic ones.
  template <class T>
  void silu_mul(T* g, const T* u, Index n) const {
    if constexpr (std::is_same_v<T, float>) kernels->silu_mul(g, u, n);
    else kernels::silu_mul(g, u, n);
  }
  template <class T>
  void attend_heads(const HeadAttention<T>& a) const {
    if constexpr (std::is_same_v<T, float>) kernels->attend_heads(a);
    else kernels::attend_heads(a);
  }
  template <class Body>
  void parallel_for(Index count, Index grain, Body&& body) {
    if (pool) pool->parallel_for(count, grain, body);
    else if (count > 0) body(Index{0}, count);
  }
  // body(begin, end, thread) with thread in [0, threads()).
  template <class Body>
  void parallel_for_indexed(Index count, Index grain, Body&& body) {
    if (pool) pool->parallel_for_indexed(count, grain, body);
    else if (count > 0) body(Index{0}, count, 0);
  }
};

// out [n, w.rows()] = x [n, w.cols()] W^T. x and out are row-major blocks (unit inner stride).
template <class T, class In, class Out>
void linear(const In& x, const Weight<T>& w, Out&& out, Workspace& ws) {
  const Index n = x.rows(), rows = w.rows(), cols = w.cols();
  if constexpr (!std::is_same_v<T, float>) {
    out.noalias() = x * w.matrix().transpose();
  } else {
    const float* xp = x.data();
    float* yp = out.data();
    const Index xs = x.outerStride(), ys = out.outerStride();
    if (n >= ws.kernels->gemm_from(w.format())) {
      const GemmProduct product{&w, yp, ys};
      ws.kernels->gemm_each(xp, xs, n, {&product, 1}, ws.gemm, ws.pool);
      return;
    }
    with_format(w.format(), [&]<class F>() {
      const typename F::View v = w.template format_view<F>();
      const Matvec<F> matvec = ws.kernels->template matvec<F>();
      const auto [x_in, x_in_stride] = ws.prepare(xp, xs, n, cols, Workspace::Needs::of<F>());
      const auto in = ws.inputs<F>(x_in, x_in_stride, cols, n);
      ws.parallel_for(rows, kDecodeGrain, [&](Index begin, Index end) {
        matvec(v, {in.data(), static_cast<size_t>(n)}, yp, ys, begin, end);
      });
    });
  }
}

// Several products of the same input, out_i = x W_i^T (q, k and v; gate and up): the same
// results as one linear() each. The rows of all the weights are split across the pool in a single
// dispatch (and x is quantized or packed once), so the threads meet once, not per weight.
template <class T, class In, class... Outs>
void linear_each(const In& x, Workspace& ws, std::tuple<const Weight<T>&, Outs&>... products) {
  const Index n = x.rows(), cols = x.cols();
  if constexpr (std::is_same_v<T, float>) {
    const bool decode = ((n < ws.kernels->gemm_from(std::get<0>(products).format())) && ...);
    if (decode) {
      struct Part {
        const Weight<float>* w;
        float* y;
        Index y_stride, first;  // first: where its rows start in the concatenation
      };
      std::array<Part, sizeof...(Outs)> parts{Part{&std::get<0>(products), std::get<1>(products).data(),
                                                   std::get<1>(products).outerStride(), 0}...};
      Index total = 0;
      Workspace::Needs needs;
      for (auto& part : parts) {
        part.first = total;
        total += part.w->rows();
        needs = needs | Workspace::Needs::of(part.w->format());
      }
      // (Not a structured binding: clang before 16 cannot capture one in the lambda below.)
      const std::pair<const float*, Index> input = ws.prepare(x.data(), x.outerStride(), n, cols, needs);
      const float* xp = input.first;
      const Index xs = input.second;
      ws.parallel_for(total, kDecodeGrain, [&](Index begin, Index end) {
        for (const auto& part : parts) {
          const Index b = std::max(begin, part.first) - part.first;
          const Index e = std::min(end, part.first + part.w->rows()) - part.first;
          if (b >= e) continue;
          with_format(part.w->format(), [&]<class F>() {
            const typename F::View v = part.w->template format_view<F>();
            const auto in = ws.inputs<F>(xp, xs, cols, n);
            ws.kernels->template matvec<F>()(v, {in.data(), static_cast<size_t>(n)}, part.y, part.y_stride, b, e);
          });
        }
      });
      return;
    }
    const std::array<GemmProduct, sizeof...(Outs)> parts{
        GemmProduct{&std::get<0>(products), std::get<1>(products).data(), std::get<1>(products).outerStride()}...};
    ws.kernels->gemm_each(x.data(), x.outerStride(), n, parts, ws.gemm, ws.pool);
    return;
  }
  (linear(x, std::get<0>(products), std::get<1>(products), ws), ...);
}

}  // namespace minimind::kernels
