// Attention against a naive scalar reference (tests/reference_ops.hpp) on small random shapes: the
// GQA mapping (query head h reads kv head h / (heads / kv_heads)), the causal mask, q/k norm, and
// the KV-cache path (one position at a time, or in chunks) against the full recompute.
#include <doctest/doctest.h>
#include <minimind/minimind.hpp>

#include "reference_ops.hpp"

#include <span>
#include <vector>

using namespace minimind;
namespace ref = minimind::reference;

namespace {

Config attention_config(Index heads, Index kv_heads, bool qk_norm) {
  Config c = Config::minimind3();
  c.hidden_size = 16, c.num_hidden_layers = 1, c.num_attention_heads = heads, c.num_key_value_heads = kv_heads;
  c.head_dim = 6, c.use_qk_norm = qk_norm, c.rms_norm_eps = 1e-6, c.rope_theta = 1e4;
  c.rope_scaling.reset();
  return c;
}

// The library's attention steps as the model's recipe runs them, over one sequence's cache.
template <class T>
struct AttentionRun {
  const Config& c;
  const Attention<T>& attention;
  RotaryEmbedding<T> rope{c};
  KVCache<T> cache;
  AttentionScratch<T> s;
  kernels::Workspace work;
  Index position = 0;

  AttentionRun(const Config& config, const Attention<T>& a, Index context) : c(config), attention(a), cache(config, context) {}

  // The next x.rows() positions; returns their attention output after o_proj [rows, hidden].
  MatrixRM<T> step(const MatrixRM<T>& x) {
    const Index n = x.rows();
    s.reserve(c, n, cache.capacity, 1);
    for (Index i = 0; i < n; ++i) rope.angles(position + i, &s.cos(i, 0), &s.sin(i, 0));
    const SequenceRows<T> seq{&cache, 0, n, position};
    attention.project(x, s, work);
    attention.rotate_and_cache({&seq, 1}, 0, rope, s, work);
    attention.attend({&seq, 1}, 0, s, work);
    MatrixRM<T> out(n, c.hidden_size);
    kernels::linear(s.out.topRows(n), attention.o_proj, out, work);
    position += n;
    return out;
  }
};

template <class T>
Attention<T> random_attention(const Config& c, uint64_t seed) {
  return Attention<T>(WeightLoader<T>::random(seed), "model.layers.0.self_attn", c);
}

}  // namespace

TEST_CASE_TEMPLATE("attention equals the naive reference: GQA groups, MHA, one kv head, with and without q/k norm", T,
                   float, double) {
  struct Shape {
    Index heads, kv_heads;
    bool qk_norm;
  };
  for (const Shape shape : {Shape{4, 2, true}, Shape{4, 2, false}, Shape{6, 3, true}, Shape{4, 1, true}, Shape{2, 2, false}}) {
    CAPTURE(shape.heads);
    CAPTURE(shape.kv_heads);
    CAPTURE(shape.qk_norm);
    const Config c = attention_config(shape.heads, shape.kv_heads, shape.qk_norm);
    const auto attention = random_attention<T>(c, 11 + static_cast<uint64_t>(shape.heads * 10 + shape.kv_heads));
    for (const Index n : {1, 2, 9, 37}) {  // one position, the matrix-vector path, a block of queries, more than one
      CAPTURE(n);
      const auto x = ref::random_matrix<T>(n, c.hidden_size, static_cast<unsigned>(n));
      AttentionRun<T> run(c, attention, n);
      const auto got = run.step(x);
      const ref::Mat want = ref::attention(x.template cast<double>(), ref::attention_weights(attention, c));
      CHECK(ref::max_diff(got, want) <= ref::tolerance<T>());
    }
  }
}

TEST_CASE_TEMPLATE("attention through the KV cache, one position at a time or in chunks, equals the full recompute", T,
                   float, double) {
  const Config c = attention_config(4, 2, true);
  const auto attention = random_attention<T>(c, 5);
  const Index n = 12;
  const auto x = ref::random_matrix<T>(n, c.hidden_size, 99);
  AttentionRun<T> full(c, attention, n);
  const MatrixRM<T> all = full.step(x);
  for (const std::vector<Index>& chunks : {std::vector<Index>(12, 1), std::vector<Index>{5, 7}, std::vector<Index>{1, 3, 8}}) {
    AttentionRun<T> cached(c, attention, n);
    Index at = 0;
    for (const Index m : chunks) {
      CAPTURE(at);
      const MatrixRM<T> part = cached.step(x.middleRows(at, m));
      CHECK(ref::max_diff(part, all.middleRows(at, m).template cast<double>()) <= ref::tolerance<T>());
      at += m;
    }
    CHECK(at == n);
  }
}

TEST_CASE_TEMPLATE("causal mask: a position's output does not depend on later positions", T, float, double) {
  const Config c = attention_config(4, 2, false);
  const auto attention = random_attention<T>(c, 21);
  auto x = ref::random_matrix<T>(6, c.hidden_size, 3);
  AttentionRun<T> before(c, attention, 6);
  const MatrixRM<T> a = before.step(x);
  x.row(5).setConstant(T(4));
  x.row(4) *= T(-2);
  AttentionRun<T> after(c, attention, 6);
  const MatrixRM<T> b = after.step(x);
  CHECK(a.topRows(4) == b.topRows(4));
  CHECK(ref::max_diff(a.bottomRows(2), b.bottomRows(2).template cast<double>()) > 1e-3);
}

TEST_CASE("the cache holds k after q/k norm and RoPE, and v as projected, per kv head") {
  const Config c = attention_config(4, 2, true);
  const auto attention = random_attention<double>(c, 8);
  const auto x = ref::random_matrix<double>(3, c.hidden_size, 4);
  AttentionRun<double> run(c, attention, 3);
  run.step(x);
  const ref::AttentionWeights w = ref::attention_weights(attention, c);
  ref::Mat k = ref::rms_norm(ref::linear(x, w.k), *w.k_norm, w.eps);
  const ref::Mat v = ref::linear(x, w.v);
  for (Index i = 0; i < 3; ++i) ref::rope(k, i, w.kv_heads, w.head_dim, static_cast<double>(i), w.theta);
  for (Index h = 0; h < 2; ++h) {
    for (Index i = 0; i < 3; ++i) {
      CHECK(ref::max_diff(ConstMatrixMap<double>(run.cache.key(0, h, i), 1, 6), k.block(i, h * 6, 1, 6)) <= 1e-12);
      CHECK(ref::max_diff(ConstMatrixMap<double>(run.cache.value(0, h, i), 1, 6), v.block(i, h * 6, 1, 6)) <= 1e-12);
    }
  }
}
