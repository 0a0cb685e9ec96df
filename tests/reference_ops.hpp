#pragma once
// Naive scalar references for the component tests (as gemma.cpp tests its ops): plain double
// loops written from the formulas in ../shared/golden/README.md, sharing no code with the library.
#include <minimind/minimind.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

namespace minimind::reference {

using Mat = MatrixRM<double>;

template <class T>
Mat to_double(const Weight<T>& w) {
  Mat m(w.rows(), w.cols());
  std::vector<T> row(static_cast<size_t>(w.cols()));
  for (Index r = 0; r < w.rows(); ++r) {
    w.row_to(r, row.data());  // any format and layout (f32_panels is not row-major)
    for (Index c = 0; c < w.cols(); ++c) m(r, c) = static_cast<double>(row[static_cast<size_t>(c)]);
  }
  return m;
}

template <class T>
MatrixRM<T> random_matrix(Index rows, Index cols, unsigned seed, double spread = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-spread, spread);
  MatrixRM<T> m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(u(rng));
  return m;
}

// y = x W^T
inline Mat linear(const Mat& x, const Mat& w) {
  Mat y(x.rows(), w.rows());
  for (Index i = 0; i < x.rows(); ++i) {
    for (Index o = 0; o < w.rows(); ++o) {
      double sum = 0;
      for (Index c = 0; c < x.cols(); ++c) sum += x(i, c) * w(o, c);
      y(i, o) = sum;
    }
  }
  return y;
}

// Each `dim`-wide segment of each row: x / sqrt(mean(x^2) + eps) * gamma.
inline Mat rms_norm(const Mat& x, const Mat& gamma, double eps) {
  const Index dim = gamma.cols();
  Mat y(x.rows(), x.cols());
  for (Index i = 0; i < x.rows(); ++i) {
    for (Index s = 0; s < x.cols(); s += dim) {
      double sq = 0;
      for (Index j = 0; j < dim; ++j) sq += x(i, s + j) * x(i, s + j);
      const double inv = 1.0 / std::sqrt(sq / static_cast<double>(dim) + eps);
      for (Index j = 0; j < dim; ++j) y(i, s + j) = x(i, s + j) * inv * gamma(0, j);
    }
  }
  return y;
}

// down(silu(gate x) * up x)
inline Mat swiglu(const Mat& x, const Mat& gate, const Mat& up, const Mat& down) {
  Mat g = linear(x, gate);
  const Mat u = linear(x, up);
  for (Index i = 0; i < g.size(); ++i) g.data()[i] = g.data()[i] / (1.0 + std::exp(-g.data()[i])) * u.data()[i];
  return linear(g, down);
}

struct AttentionWeights {
  Mat q, k, v, o;
  std::optional<Mat> q_norm, k_norm;
  Index heads = 0, kv_heads = 0, head_dim = 0;
  double eps = 1e-6, theta = 1e6;
};

template <class T>
AttentionWeights attention_weights(const Attention<T>& a, const Config& c) {
  AttentionWeights w{to_double(a.q_proj), to_double(a.k_proj), to_double(a.v_proj), to_double(a.o_proj), {}, {},
                     c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rms_norm_eps, c.rope_theta};
  if (a.q_norm) {
    w.q_norm = to_double(a.q_norm->weight());
    w.k_norm = to_double(a.k_norm->weight());
  }
  return w;
}

// Rotate-half RoPE of every head of row i at `position`.
inline void rope(Mat& x, Index i, Index heads, Index head_dim, double position, double theta) {
  const Index half = head_dim / 2;
  for (Index h = 0; h < heads; ++h) {
    for (Index j = 0; j < half; ++j) {
      const double angle = position / std::pow(theta, 2.0 * static_cast<double>(j) / static_cast<double>(head_dim));
      const double a = x(i, h * head_dim + j), b = x(i, h * head_dim + j + half);
      x(i, h * head_dim + j) = a * std::cos(angle) - b * std::sin(angle);
      x(i, h * head_dim + j + half) = b * std::cos(angle) + a * std::sin(angle);
    }
  }
}

// Causal GQA self-attention of rows x [n, hidden] at positions 0..n-1, o_proj included.
inline Mat attention(const Mat& x, const AttentionWeights& w) {
  const Index n = x.rows(), hd = w.head_dim;
  Mat q = linear(x, w.q), k = linear(x, w.k);
  const Mat v = linear(x, w.v);
  if (w.q_norm) {  // per head, before RoPE
    q = rms_norm(q, *w.q_norm, w.eps);
    k = rms_norm(k, *w.k_norm, w.eps);
  }
  for (Index i = 0; i < n; ++i) {
    rope(q, i, w.heads, hd, static_cast<double>(i), w.theta);
    rope(k, i, w.kv_heads, hd, static_cast<double>(i), w.theta);
  }
  Mat out = Mat::Zero(n, w.heads * hd);
  for (Index h = 0; h < w.heads; ++h) {
    const Index kv = h / (w.heads / w.kv_heads);
    for (Index i = 0; i < n; ++i) {
      std::vector<double> p(static_cast<size_t>(i + 1));  // keys 0..i only: the causal mask
      for (Index s = 0; s <= i; ++s) {
        double dot = 0;
        for (Index d = 0; d < hd; ++d) dot += q(i, h * hd + d) * k(s, kv * hd + d);
        p[static_cast<size_t>(s)] = dot / std::sqrt(static_cast<double>(hd));
      }
      const double top = *std::max_element(p.begin(), p.end());
      double total = 0;
      for (double& e : p) total += (e = std::exp(e - top));
      for (Index s = 0; s <= i; ++s) {
        for (Index d = 0; d < hd; ++d) out(i, h * hd + d) += p[static_cast<size_t>(s)] / total * v(s, kv * hd + d);
      }
    }
  }
  return linear(out, w.o);
}

struct Expert {
  Mat gate, up, down;
};

template <class T>
Expert expert_weights(const FeedForward<T>& f) {
  return {to_double(f.gate_proj), to_double(f.up_proj), to_double(f.down_proj)};
}

struct Routing {
  std::vector<std::vector<int>> experts;       // per row, the chosen experts, best first
  std::vector<std::vector<double>> weights;    // and their weights
};

// Router softmax(x W^T), the top_k highest (ties: the lower index), weights divided by their sum
// (+1e-20) when `renormalise`; output = sum of chosen experts weighted, plus every shared expert.
inline Mat moe(const Mat& x, const Mat& router, const std::vector<Expert>& experts, const std::vector<Expert>& shared,
               Index top_k, bool renormalise, Routing* routing = nullptr) {
  const Mat logits = linear(x, router);
  Mat out = Mat::Zero(x.rows(), x.cols());
  for (Index i = 0; i < x.rows(); ++i) {
    std::vector<double> p(static_cast<size_t>(logits.cols()));
    const double top = logits.row(i).maxCoeff();
    for (Index e = 0; e < logits.cols(); ++e) p[static_cast<size_t>(e)] = std::exp(logits(i, e) - top);
    const double total = std::accumulate(p.begin(), p.end(), 0.0);
    for (double& e : p) e /= total;
    std::vector<int> order(p.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)]; });
    order.resize(static_cast<size_t>(top_k));
    std::vector<double> weight;
    for (int e : order) weight.push_back(p[static_cast<size_t>(e)]);
    if (renormalise) {
      const double sum = std::accumulate(weight.begin(), weight.end(), 0.0);
      for (double& wt : weight) wt /= sum + 1e-20;
    }
    const Mat row = x.row(i);
    for (size_t s = 0; s < order.size(); ++s) {
      const Expert& e = experts[static_cast<size_t>(order[s])];
      out.row(i) += weight[s] * swiglu(row, e.gate, e.up, e.down);
    }
    for (const Expert& e : shared) out.row(i) += swiglu(row, e.gate, e.up, e.down);
    if (routing) {
      routing->experts.push_back(order);
      routing->weights.push_back(weight);
    }
  }
  return out;
}

// Largest |a - b|; NaN if either holds one.
template <class A>
double max_diff(const A& a, const Mat& b) {
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  double worst = 0;
  for (Index i = 0; i < b.rows(); ++i) {
    for (Index j = 0; j < b.cols(); ++j) {
      const double d = std::abs(static_cast<double>(a(i, j)) - b(i, j));
      if (std::isnan(d)) return d;
      worst = std::max(worst, d);
    }
  }
  return worst;
}

// Tolerances for the library in T against these double loops on O(1) values.
template <class T>
constexpr double tolerance() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}

}  // namespace minimind::reference
