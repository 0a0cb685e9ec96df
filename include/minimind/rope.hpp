#pragma once
// Rotary position embedding in the rotate-half form upstream uses: dimension j of a head is paired
// with j + head_dim/2 (not llama2.c's interleaved (2j, 2j+1)), and
//   x' = x * cos(pos * inv_freq) + rotate_half(x) * sin(pos * inv_freq),  rotate_half([a, b]) = [-b, a].
// YaRN rescales inv_freq by the rule the generation's own code uses (see Config).
// The table is computed in T: for float exactly as upstream does it in float32, for double all in
// double, so a double model is a float64 reference with no float32 step inside.
#include "minimind/config.hpp"
#include "minimind/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

namespace minimind {

template <class T>
class RotaryEmbedding {
 public:
  RotaryEmbedding() = default;
  explicit RotaryEmbedding(const Config& config) : half_(config.head_dim / 2) {
    const Index dim = config.head_dim;
    inv_freq_.resize(static_cast<size_t>(half_));
    // 1 / theta^(2j/dim), in float32 as upstream computes it when T is float.
    for (Index j = 0; j < half_; ++j) {
      const T exponent = static_cast<T>(2 * j) / static_cast<T>(dim);
      inv_freq_[j] = T(1) / std::pow(static_cast<T>(config.rope_theta), exponent);
    }
    if (config.rope_scaling) apply_yarn(*config.rope_scaling, config, dim);
  }

  Index half_dim() const { return half_; }
  const std::vector<T>& inv_freq() const { return inv_freq_; }

  // cos and sin of every pair's angle at `position`, each [head_dim/2].
  void angles(int64_t position, T* cos_out, T* sin_out) const {
    for (Index j = 0; j < half_; ++j) {
      const T angle = static_cast<T>(position) * inv_freq_[j];
      cos_out[j] = std::cos(angle) * attention_factor_;
      sin_out[j] = std::sin(angle) * attention_factor_;
    }
  }

  // Rotates `heads` consecutive heads of one position in place.
  void rotate(T* x, Index heads, const T* cos, const T* sin) const {
    for (Index h = 0; h < heads; ++h) {
      T* head = x + h * 2 * half_;
      for (Index j = 0; j < half_; ++j) {
        const T a = head[j], b = head[j + half_];
        head[j] = a * cos[j] - b * sin[j];
        head[j + half_] = b * cos[j] + a * sin[j];
      }
    }
  }

 private:
  void apply_yarn(const RopeScaling& s, const Config& config, Index dim) {
    // Both rules apply to every position, but only when the context was actually extended.
    if (!(static_cast<double>(config.max_position_embeddings) / s.original_max_position_embeddings > 1.0)) return;
    const double pi = std::numbers::pi;
    if (s.rule == YarnRule::Ramp) {
      auto inv_dim = [&](double beta) {
        return static_cast<double>(dim) * std::log(s.original_max_position_embeddings / (beta * 2 * pi)) /
               (2 * std::log(config.rope_theta));
      };
      const double low = std::max(std::floor(inv_dim(s.beta_fast)), 0.0);
      const double high = std::min(std::ceil(inv_dim(s.beta_slow)), static_cast<double>(half_ - 1));
      for (Index j = 0; j < half_; ++j) {
        const T ramp = std::clamp(
            (static_cast<T>(j) - static_cast<T>(low)) / static_cast<T>(std::max(high - low, 0.001)), T(0), T(1));
        inv_freq_[j] = inv_freq_[j] * (T(1) - ramp + ramp / static_cast<T>(s.factor));
      }
      attention_factor_ = static_cast<T>(s.attention_factor);
    } else {
      // MiniMind2: blend towards 1/factor up to the first pair whose wavelength exceeds the
      // original context; beyond it, divide by factor.
      Index first_long = half_;
      for (Index j = 0; j < half_; ++j) {
        if (2 * pi / inv_freq_[j] > s.original_max_position_embeddings) {
          first_long = j;
          break;
        }
      }
      for (Index j = 0; j < half_; ++j) {
        if (j < first_long) {
          const double beta = s.beta_slow + (s.beta_fast - s.beta_slow) * static_cast<double>(j) /
                                                static_cast<double>(std::max<Index>(half_ - 1, 1));
          inv_freq_[j] = static_cast<T>(inv_freq_[j] * (beta * s.factor - beta + 1) / (beta * s.factor));
        } else {
          inv_freq_[j] = static_cast<T>(inv_freq_[j] / s.factor);
        }
      }
    }
  }

  Index half_ = 0;
  std::vector<T> inv_freq_;  // [head_dim/2]
  T attention_factor_ = T(1);
};

}  // namespace minimind
