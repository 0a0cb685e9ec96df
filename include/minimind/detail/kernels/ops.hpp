// The float work of a layer beside its products: SwiGLU's silu(gate) * up, and one attention
// head's causal softmax(q k^T * scale) v over its cached keys and values.
//
// The generic versions (Eigen, any T) serve the double model and the targets without their own
// (scalar, neon, wasm_simd128: there Eigen vectorizes for the build's flags). The x86 targets'
// sections have their own, on their vectors: in a run-time dispatch build everything outside the
// sections is compiled for plain x86-64, where Eigen's exp and products ran 4 lanes wide and cost
// a prefill ~12% (minimind-bench, Zen 5).
#ifndef MINIMIND_DETAIL_KERNELS_OPS_HPP
#define MINIMIND_DETAIL_KERNELS_OPS_HPP
#include "minimind/detail/kernels/simd.hpp"
#include "minimind/tensor.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>

namespace minimind::kernels {

// g[c] = silu(g[c]) * u[c] = g[c] / (1 + exp(-g[c])) * u[c] for c in [0, n).
template <class T>
void silu_mul(T* g, const T* u, Index n) {
  Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>> gate(g, n);
  gate = gate / (T(1) + (-gate).exp()) * Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>(u, n);
}

// One head's attention for m consecutive query rows of one sequence: row i sees the keys and
// values of positions [0, first_visible + i) (causal).
template <class T>
struct HeadAttention {
  const T* q;  // [m, head_dim], rows q_stride apart
  Index q_stride;
  Index m;
  Index first_visible;
  const T* keys;    // [first_visible + m - 1, head_dim], contiguous
  const T* values;  // the same shape
  Index head_dim;
  T scale;    // 1 / sqrt(head_dim)
  T* scores;  // [m, first_visible + m - 1], rows scores_stride apart: the probabilities, 0 where unseen
  Index scores_stride;
  T* out;  // [m, head_dim], rows out_stride apart
  Index out_stride;

  Index reach() const { return first_visible + m - 1; }
};

// The block's scores against every key its last row sees (one matrix product), a causal softmax
// per row, and the weighted sum of the values (another).
template <class T>
void attend_head(const HeadAttention<T>& a) {
  using Rows = Eigen::Map<const MatrixRM<T>, 0, Eigen::OuterStride<>>;
  using MutableRows = Eigen::Map<MatrixRM<T>, 0, Eigen::OuterStride<>>;
  const Index reach = a.reach();
  const ConstMatrixMap<T> keys(a.keys, reach, a.head_dim), values(a.values, reach, a.head_dim);
  MutableRows scores(a.scores, a.m, reach, Eigen::OuterStride<>(a.scores_stride));
  scores.noalias() = Rows(a.q, a.m, a.head_dim, Eigen::OuterStride<>(a.q_stride)) * keys.transpose();
  for (Index i = 0; i < a.m; ++i) {
    const Index visible = a.first_visible + i;
    auto seen = scores.row(i).head(visible);
    seen = ((seen.array() - seen.maxCoeff()) * a.scale).exp();
    seen /= seen.sum();
    scores.row(i).tail(reach - visible).setZero();
  }
  MutableRows(a.out, a.m, a.head_dim, Eigen::OuterStride<>(a.out_stride)).noalias() = scores * values;
}

}  // namespace minimind::kernels

#endif  // MINIMIND_DETAIL_KERNELS_OPS_HPP

#ifdef MINIMIND_TARGET
namespace minimind::kernels::MINIMIND_TARGET {

#if MINIMIND_AVX2
// e^x in each lane, as Cephes' expf: x = n ln 2 + r with |r| <= ln 2 / 2, e^r by its degree-7
// Taylor-like polynomial, times 2^n built in the exponent bits: within 1 ulp of std::exp on
// [-87, 88] (a sweep when it was written); test_kernels checks it through silu_mul, within 2e-7
// relative of the double formula. x is clamped to where 2^n stays a normal float; NaN stays NaN.
template <class S>
typename S::V exp(typename S::V x) {
  using V = typename S::V;
  x = S::min(S::set1(88.0f), S::max(S::set1(-87.0f), x));
  const V n = S::round(S::mul(x, S::set1(1.44269504088896341f)));
  V r = S::madd(x, n, S::set1(-0.693359375f));  // ln 2 in two parts, the first exact in float
  r = S::madd(r, n, S::set1(2.12194440e-4f));
  V p = S::set1(1.9875691500e-4f);
  for (const float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f}) {
    p = S::madd(S::set1(c), p, r);
  }
  p = S::madd(S::add(r, S::set1(1.0f)), p, S::mul(r, r));
  return S::mul(p, S::pow2(n));
}

// The lanes [c, c + count) of a row through f, count <= kLanes: whole vectors, and the last
// partial one under a mask (AVX-512) or lane by lane through f_scalar.
template <class S, class F, class FScalar>
void for_each_vector(Index n, F f, FScalar f_scalar) {
  constexpr Index L = S::kLanes;
  Index c = 0;
  for (; c + L <= n; c += L) f(c, L);
  if constexpr (S::kMasked) {
    if (c < n) f(c, n - c);
  } else {
    for (; c < n; ++c) f_scalar(c);
  }
}

inline void silu_mul(float* g, const float* u, Index n) {
  using S = Ops;
  for_each_vector<S>(
      n,
      [&](Index c, Index count) {
        const typename S::V x = S::load(g + c, count);
        const typename S::V e = exp<S>(S::sub(S::zero(), x));
        S::store(g + c, S::mul(S::div(x, S::add(S::set1(1.0f), e)), S::load(u + c, count)), count);
      },
      [&](Index c) { g[c] = g[c] / (1.0f + std::exp(-g[c])) * u[c]; });
}

// out[0, K * L) = sum_j p[j] v[j * stride, ...] for K vectors of lanes: K independent chains.
template <class S, int K>
void weighted_sum(const float* p, const float* v, Index rows, Index stride, float* out) {
  typename S::V acc[K];
  for (int t = 0; t < K; ++t) acc[t] = S::zero();
  for (Index j = 0; j < rows; ++j) {
    const typename S::V w = S::set1(p[j]);
    for (int t = 0; t < K; ++t) acc[t] = S::madd(acc[t], w, S::load(v + j * stride + t * S::kLanes));
  }
  for (int t = 0; t < K; ++t) S::store(out + t * S::kLanes, acc[t]);
}

// Row by row: the scores of the keys it sees (decode's dot products), their softmax, and the
// weighted sum of the values in blocks of up to four vectors.
inline void attend_head(const HeadAttention<float>& a) {
  using S = Ops;
  constexpr Index L = S::kLanes;
  const Index d = a.head_dim;
  for (Index i = 0; i < a.m; ++i) {
    const Index visible = a.first_visible + i;
    const float* q = a.q + i * a.q_stride;
    float* p = a.scores + i * a.scores_stride;
    float top = -std::numeric_limits<float>::infinity();
    for (Index j = 0; j < visible; ++j) {
      p[j] = dot<S, 1>(a.keys + j * d, q, d, [](float w) { return w; });
      top = std::max(top, p[j]);
    }
    typename S::V total = S::zero();
    float tail_total = 0;
    for_each_vector<S>(
        visible,
        [&](Index c, Index count) {
          const typename S::V e = exp<S>(S::mul(S::sub(S::load(p + c, count), S::set1(top)), S::set1(a.scale)));
          S::store(p + c, e, count);
          total = S::add(total, S::load(p + c, count));  // the lanes past count read as 0
        },
        [&](Index c) {
          p[c] = std::exp((p[c] - top) * a.scale);
          tail_total += p[c];
        });
    const float sum = S::sum(total) + tail_total;
    for (Index j = 0; j < visible; ++j) p[j] /= sum;
    std::fill(p + visible, p + a.reach(), 0.0f);

    float* out = a.out + i * a.out_stride;
    Index c = 0;
    for (; c + 4 * L <= d; c += 4 * L) weighted_sum<S, 4>(p, a.values + c, visible, d, out + c);
    for (; c + 2 * L <= d; c += 2 * L) weighted_sum<S, 2>(p, a.values + c, visible, d, out + c);
    for (; c + L <= d; c += L) weighted_sum<S, 1>(p, a.values + c, visible, d, out + c);
    for (; c < d; ++c) {
      float sum_c = 0;
      for (Index j = 0; j < visible; ++j) sum_c += p[j] * a.values[j * d + c];
      out[c] = sum_c;
    }
  }
}
#else
inline void silu_mul(float* g, const float* u, Index n) { kernels::silu_mul<float>(g, u, n); }
inline void attend_head(const HeadAttention<float>& a) { kernels::attend_head<float>(a); }
#endif

}  // namespace minimind::kernels::MINIMIND_TARGET
#endif  // MINIMIND_TARGET
