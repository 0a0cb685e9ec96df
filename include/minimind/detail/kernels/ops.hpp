// The float work of a layer beside its products: SwiGLU's silu(gate) * up, and the causal
// softmax(q k^T * scale) v of the query heads that share one kv head, over its cached keys and
// values.
//
// The generic versions (Eigen, any T) serve the double model and the targets without their own
// (scalar, neon, wasm_simd128: there Eigen vectorizes for the build's flags). The x86 targets'
// sections have their own, on their vectors: in a run-time dispatch build everything outside the
// sections is compiled for plain x86-64, where Eigen's exp and products ran 4 lanes wide and
// cost a noticeable share of a prefill (docs/performance.md, "Design choices").
#ifndef MINIMIND_DETAIL_KERNELS_OPS_HPP
#define MINIMIND_DETAIL_KERNELS_OPS_HPP
#include "minimind/detail/kernels/gemm.hpp"
#include "minimind/detail/kernels/simd.hpp"
#include "minimind/tensor.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace minimind::kernels {

// g[c] = silu(g[c]) * u[c] = g[c] / (1 + exp(-g[c])) * u[c] for c in [0, n).
template <class T>
void silu_mul(T* g, const T* u, Index n) {
  Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>> gate(g, n);
  gate = gate / (T(1) + (-gate).exp()) * Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>(u, n);
}

// Where one kv head's cached keys and values lie (kv_cache.hpp): in blocks of block_positions
// positions, each block's rows head_dim floats apart; the sequence's i-th block starts at
// keys + blocks[i] * block_stride (and values + blocks[i] * block_stride). Sequences that share a
// prefix share its blocks.
template <class T>
struct KVBlocks {
  const T* keys;
  const T* values;
  const int32_t* blocks;
  Index block_positions;
  Index block_stride;

  const T* key_block(Index i) const { return keys + blocks[i] * block_stride; }
  const T* value_block(Index i) const { return values + blocks[i] * block_stride; }
};

// The attention of the query heads that share one kv head (grouped-query attention) for m
// consecutive query rows of one sequence: row i sees the keys and values of positions
// [0, first_visible + i) (causal). The heads' columns lie side by side, head_dim apart, in q
// and out; head g's score rows are rows [g * m, (g + 1) * m) of scores.
template <class T>
struct HeadAttention {
  const T* q;  // [m, heads * head_dim], rows q_stride apart
  Index q_stride;
  Index m;
  Index heads;  // query heads sharing the keys and values
  Index first_visible;
  KVBlocks<T> kv;  // [first_visible + m - 1, head_dim] keys and values, in blocks
  Index head_dim;
  T scale;    // 1 / sqrt(head_dim)
  T* scores;  // [heads * m, first_visible + m - 1], rows scores_stride apart: the probabilities, 0 where unseen
  Index scores_stride;
  T* out;  // [m, heads * head_dim], rows out_stride apart
  Index out_stride;
  // Optional: attention_panel_floats(head_dim) floats on a cache line (line_aligned.hpp). With
  // them the x86 targets multiply a block of queries in register tiles (attend_tiled); without,
  // or for a single query, row by row.
  T* panels = nullptr;

  Index reach() const { return first_visible + m - 1; }
  const T* key(Index j) const { return kv.key_block(j / kv.block_positions) + j % kv.block_positions * head_dim; }
  const T* value(Index j) const { return kv.value_block(j / kv.block_positions) + j % kv.block_positions * head_dim; }
};

// The scratch attend_tiled needs: a panel of keys transposed (as many keys as the widest
// target's GEMM panel of positions, AVX-512's 32), and the values of kAttentionValueKeys keys in
// panels of columns.
inline constexpr Index kAttentionKeyPanel = 32;
inline constexpr Index kAttentionValueKeys = 256;
inline constexpr Index attention_panel_floats(Index head_dim) { return head_dim * (kAttentionKeyPanel + kAttentionValueKeys); }

// Per head: the block's scores against every key its last row sees (a matrix product per block
// of keys), a causal softmax per row, and the weighted sum of the values (a product per block).
template <class T>
void attend_heads(const HeadAttention<T>& a) {
  using Rows = Eigen::Map<const MatrixRM<T>, 0, Eigen::OuterStride<>>;
  using MutableRows = Eigen::Map<MatrixRM<T>, 0, Eigen::OuterStride<>>;
  const Index reach = a.reach(), per_block = a.kv.block_positions;
  for (Index g = 0; g < a.heads; ++g) {
    MutableRows scores(a.scores + g * a.m * a.scores_stride, a.m, reach, Eigen::OuterStride<>(a.scores_stride));
    const Rows q(a.q + g * a.head_dim, a.m, a.head_dim, Eigen::OuterStride<>(a.q_stride));
    for (Index j0 = 0, b = 0; j0 < reach; j0 += per_block, ++b) {
      const Index n = std::min(per_block, reach - j0);
      scores.middleCols(j0, n).noalias() = q * ConstMatrixMap<T>(a.kv.key_block(b), n, a.head_dim).transpose();
    }
    for (Index i = 0; i < a.m; ++i) {
      const Index visible = a.first_visible + i;
      auto seen = scores.row(i).head(visible);
      seen = ((seen.array() - seen.maxCoeff()) * a.scale).exp();
      seen /= seen.sum();
      scores.row(i).tail(reach - visible).setZero();
    }
    MutableRows out(a.out + g * a.head_dim, a.m, a.head_dim, Eigen::OuterStride<>(a.out_stride));
    out.setZero();
    for (Index j0 = 0, b = 0; j0 < reach; j0 += per_block, ++b) {
      const Index n = std::min(per_block, reach - j0);
      out.noalias() += scores.middleCols(j0, n) * ConstMatrixMap<T>(a.kv.value_block(b), n, a.head_dim);
    }
  }
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

// p[j] = exp((p[j] - top) * scale) / sum over j < visible, 0 up to reach; top is the largest p[j].
inline void softmax(float* p, Index visible, Index reach, float top, float scale) {
  using S = Ops;
  using V = typename S::V;
  V total = S::zero();
  float tail_total = 0;
  for_each_vector<S>(
      visible,
      [&](Index c, Index count) {
        const V e = exp<S>(S::mul(S::sub(S::load(p + c, count), S::set1(top)), S::set1(scale)));
        S::store(p + c, e, count);
        total = S::add(total, S::load(p + c, count));  // the lanes past count read as 0
      },
      [&](Index c) {
        p[c] = std::exp((p[c] - top) * scale);
        tail_total += p[c];
      });
  const float sum = S::sum(total) + tail_total;
  for (Index j = 0; j < visible; ++j) p[j] /= sum;
  std::fill(p + visible, p + reach, 0.0f);
}

// Up to four query heads of a group at once, G of them: every key and value row is loaded once
// for all G and used from registers, and each value row is asked for while its key is scored, so
// the values arrive during the scores. One head at a time read the keys and values G times,
// mostly from the L3 in a batch's decode step (commit 15d8778).
template <int G>
struct GroupHeads {
  using S = Ops;
  using V = typename S::V;
  static constexpr Index L = S::kLanes;
  // Vectors per head in a pass of the weighted sum: G x kVectors accumulators stay in registers
  // (16 zmm of 32, 8 ymm of 16).
  static constexpr int kVectors = std::min(4, (MINIMIND_AVX512 ? 16 : 8) / G);

  const HeadAttention<float>& a;
  Index h0;  // the first of the G heads

  // f(j, key j, value j) for the positions j in [0, n), in order, a block at a time (no division
  // per key). Here, compiled for the target, not in HeadAttention: the compiler cannot inline a
  // target's f into a function compiled without the target, and a call per key made a batch's
  // decode steps slower.
  template <class F>
  void for_each_key(Index n, F f) const {
    const Index d = a.head_dim, per_block = a.kv.block_positions;
    for (Index j0 = 0, b = 0; j0 < n; j0 += per_block, ++b) {
      const float* keys = a.kv.key_block(b);
      const float* values = a.kv.value_block(b);
      const Index rows = std::min(per_block, n - j0);
      for (Index r = 0; r < rows; ++r) f(j0 + r, keys + r * d, values + r * d);
    }
  }

  // p_g[j] = q_g . key j for j < visible, and top_g the largest: per key one horizontal sum for
  // the G heads. (The maxima as they come: a loop of its own waited on each vmaxss.)
  void scores(const float* const* q, float* const* p, Index visible, float* top) const {
    for (int g = 0; g < G; ++g) top[g] = -std::numeric_limits<float>::infinity();
    const Index d = a.head_dim;
    for_each_key(visible, [&](Index j, const float* key, const float* value) {
      for (Index byte = 0; byte < d * 4; byte += 64) S::prefetch(value, byte);
      V acc[4] = {S::zero(), S::zero(), S::zero(), S::zero()};
      alignas(16) float tail[4] = {0, 0, 0, 0};
      for_each_vector<S>(
          d,
          [&](Index c, Index count) {
            const V k = S::load(key + c, count);
            for (int g = 0; g < G; ++g) acc[g] = S::madd(acc[g], k, S::load(q[g] + c, count));
          },
          [&](Index c) {
            for (int g = 0; g < G; ++g) tail[g] += key[c] * q[g][c];
          });
      alignas(16) float sums[4];
      _mm_store_ps(sums, _mm_add_ps(hsum4(acc[0], acc[1], acc[2], acc[3]), _mm_load_ps(tail)));
      for (int g = 0; g < G; ++g) {
        p[g][j] = sums[g];
        top[g] = std::max(top[g], sums[g]);
      }
    });
  }

  // out_g[c, c + K L) = sum_j p_g[j] value j [c, c + K L): each value vector loaded once for the G heads.
  template <int K>
  void weighted_sum(float* const* p, Index visible, Index c, float* const* out) const {
    V acc[G][K];
    for (int g = 0; g < G; ++g)
      for (int t = 0; t < K; ++t) acc[g][t] = S::zero();
    for_each_key(visible, [&](Index j, const float*, const float* value) {
      V v[K];
      for (int t = 0; t < K; ++t) v[t] = S::load(value + c + t * L);
      for (int g = 0; g < G; ++g) {
        const V w = S::set1(p[g][j]);
        for (int t = 0; t < K; ++t) acc[g][t] = S::madd(acc[g][t], w, v[t]);
      }
    });
    for (int g = 0; g < G; ++g)
      for (int t = 0; t < K; ++t) S::store(out[g] + c + t * L, acc[g][t]);
  }

  void run() const {
    const Index d = a.head_dim;
    for (Index i = 0; i < a.m; ++i) {
      const Index visible = a.first_visible + i;
      const float* q[G];
      float* p[G];
      float* out[G];
      for (int g = 0; g < G; ++g) {
        q[g] = a.q + i * a.q_stride + (h0 + g) * d;
        p[g] = a.scores + ((h0 + g) * a.m + i) * a.scores_stride;
        out[g] = a.out + i * a.out_stride + (h0 + g) * d;
      }
      float top[G];
      scores(q, p, visible, top);
      for (int g = 0; g < G; ++g) softmax(p[g], visible, a.reach(), top[g], a.scale);
      Index c = 0;
      for (; c + kVectors * L <= d; c += kVectors * L) weighted_sum<kVectors>(p, visible, c, out);
      if constexpr (kVectors > 2) {
        for (; c + 2 * L <= d; c += 2 * L) weighted_sum<2>(p, visible, c, out);
      }
      for (; c + L <= d; c += L) weighted_sum<1>(p, visible, c, out);
      for (; c < d; ++c) {
        for (int g = 0; g < G; ++g) {
          float sum_c = 0;
          for_each_key(visible, [&](Index j, const float*, const float* value) { sum_c += p[g][j] * value[c]; });
          out[g][c] = sum_c;
        }
      }
    }
  }
};

// The largest of p[0, n), n > 0.
inline float row_max(const float* p, Index n) {
  using S = Ops;
  float top = -std::numeric_limits<float>::infinity();
  Index c = 0;
  if (n >= S::kLanes) {
    typename S::V lanes = S::load(p);
    for (c = S::kLanes; c + S::kLanes <= n; c += S::kLanes) lanes = S::max(lanes, S::load(p + c));
    alignas(64) float each[S::kLanes];
    S::store(each, lanes);
    top = *std::max_element(each, each + S::kLanes);
  }
  for (; c < n; ++c) top = std::max(top, p[c]);
  return top;
}

// A block of queries as two matrix products on the GEMM's register tiles (gemm.hpp), where
// GroupHeads scores one query against one key per horizontal sum: per panel of keys, transposed
// once, every head's rows of scores; a causal softmax per row; then per block of keys, their
// values packed in panels of columns, the weighted sums (a row's unseen keys weigh 0 there).
// It halves the attention's share of a prompt's time, more for long prompts (commit 287794b).
inline void attend_tiled(const HeadAttention<float>& a) {
  namespace gemm = gemm_detail::MINIMIND_TARGET;
  constexpr Index P = gemm::kPanel, R = gemm::kRows;
  static_assert(P <= kAttentionKeyPanel, "attention_panel_floats holds a panel of keys of every target");
  const Index d = a.head_dim, reach = a.reach();
  float* const keys_t = a.panels;            // [d][P]: a panel of keys, k-major as the tiles read it
  float* const values_p = a.panels + d * P;  // [d / P][kAttentionValueKeys][P]
  alignas(64) float edge[R * P];             // the tile of the last panel when its keys end before P
  auto scores_of = [&](Index h) { return a.scores + h * a.m * a.scores_stride; };
  for (Index j0 = 0; j0 < reach; j0 += P) {
    const Index keys = std::min(P, reach - j0);
    gemm::pack_panel(a.key(j0), d, keys, d, 0, keys_t);  // one block holds the panel (attend_heads)
    for (Index h = 0; h < a.heads; ++h) {
      for (Index i0 = 0; i0 < a.m; i0 += R) {
        const Index rows = std::min(R, a.m - i0);
        const float* q = a.q + i0 * a.q_stride + h * d;
        float* s = scores_of(h) + i0 * a.scores_stride + j0;
        if (keys == P) {
          gemm::micro_kernel(rows, d, q, a.q_stride, keys_t, s, a.scores_stride, false, P, nullptr);
        } else {  // through edge, so that nothing past reach is written
          gemm::micro_kernel(rows, d, q, a.q_stride, keys_t, edge, P, false, keys, nullptr);
          for (Index i = 0; i < rows; ++i) std::copy_n(edge + i * P, keys, s + i * a.scores_stride);
        }
      }
    }
  }
  for (Index h = 0; h < a.heads; ++h) {
    for (Index i = 0; i < a.m; ++i) {
      float* p = scores_of(h) + i * a.scores_stride;
      const Index visible = a.first_visible + i;
      softmax(p, visible, reach, row_max(p, visible), a.scale);
    }
  }
  for (Index j0 = 0; j0 < reach; j0 += kAttentionValueKeys) {
    const Index keys = std::min(kAttentionValueKeys, reach - j0);
    for (Index c0 = 0; c0 < d; c0 += P) {
      float* panel = values_p + c0 * kAttentionValueKeys;
      for (Index j = 0; j < keys; ++j) std::copy_n(a.value(j0 + j) + c0, P, panel + j * P);
    }
    for (Index h = 0; h < a.heads; ++h) {
      for (Index i0 = 0; i0 < a.m; i0 += R) {
        const Index rows = std::min(R, a.m - i0);
        const float* p = scores_of(h) + i0 * a.scores_stride + j0;
        float* out = a.out + i0 * a.out_stride + h * d;
        for (Index c0 = 0; c0 < d; c0 += P) {
          gemm::micro_kernel(rows, keys, p, a.scores_stride, values_p + c0 * kAttentionValueKeys, out + c0, a.out_stride,
                             j0 > 0, P, nullptr);
        }
      }
    }
  }
}

// Fewer queries than this go row by row, where a tile would be mostly empty rows; for short
// prompts the choice hardly shows (commit f8129d0).
inline constexpr Index kTiledMinQueries = 8;

// A block of queries in tiles (attend_tiled) where the caller gave the scratch, the heads are
// whole panels wide and a panel of keys never spans two blocks of the cache; otherwise (a decode step) row by row, the heads in groups of up to four
// (GroupHeads): their scores against the keys a row sees, a softmax per head, and the weighted
// sums of the values.
inline void attend_heads(const HeadAttention<float>& a) {
  constexpr Index P = gemm_detail::MINIMIND_TARGET::kPanel;
  if (a.panels && a.m >= kTiledMinQueries && a.head_dim % P == 0 && a.kv.block_positions % P == 0) {
    attend_tiled(a);
    return;
  }
  for (Index h0 = 0; h0 < a.heads; h0 += 4) {
    switch (std::min<Index>(4, a.heads - h0)) {
      case 4: GroupHeads<4>{a, h0}.run(); break;
      case 3: GroupHeads<3>{a, h0}.run(); break;
      case 2: GroupHeads<2>{a, h0}.run(); break;
      default: GroupHeads<1>{a, h0}.run(); break;
    }
  }
}
#else
inline void silu_mul(float* g, const float* u, Index n) { kernels::silu_mul<float>(g, u, n); }
inline void attend_heads(const HeadAttention<float>& a) { kernels::attend_heads<float>(a); }
#endif

}  // namespace minimind::kernels::MINIMIND_TARGET
#endif  // MINIMIND_TARGET
