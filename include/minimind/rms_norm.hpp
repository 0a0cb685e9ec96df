#pragma once
// RMSNorm(x) = x / sqrt(mean(x^2) + eps) * gamma, over the last dimension, in the compute type.
// Used for input_layernorm, post_attention_layernorm, the final norm, and per head for q_norm and
// k_norm.
#include "minimind/tensor.hpp"
#include "minimind/weights.hpp"

#include <cmath>

namespace minimind {

template <class T>
class RMSNorm {
 public:
  RMSNorm() = default;
  RMSNorm(Weight<T> weight, double eps) : weight_(std::move(weight)), eps_(static_cast<T>(eps)) {}

  Index dim() const { return weight_.cols(); }
  const Weight<T>& weight() const { return weight_; }

  // Normalises `n` contiguous vectors of dim() values each, in place or from `in` to `out`.
  void forward(const T* in, T* out, Index n) const {
    const auto gamma = weight_.vector();
    const Index d = dim();
    for (Index r = 0; r < n; ++r) {
      ConstVectorMap<T> x(in + r * d, d);
      Eigen::Map<RowVector<T>> y(out + r * d, d);
      const T inv_rms = T(1) / std::sqrt(x.squaredNorm() / static_cast<T>(d) + eps_);
      y = gamma.cwiseProduct(x * inv_rms);
    }
  }

  // Row-wise over a [rows, dim] block of activations.
  template <class In, class Out>
  void forward(const In& in, Out&& out) const {
    forward(in.data(), out.data(), in.rows());
  }

 private:
  Weight<T> weight_;  // gamma [dim]
  T eps_ = T(1e-6);
};

}  // namespace minimind
