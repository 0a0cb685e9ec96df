#pragma once
// One decoder layer's weights, pre-norm with residuals:
//   x += self_attn(input_layernorm(x));  x += mlp(post_attention_layernorm(x)).
// The computation is spelled out step by step in the model's forward recipe (model.hpp).
#include "minimind/attention.hpp"
#include "minimind/config.hpp"
#include "minimind/feed_forward.hpp"
#include "minimind/rms_norm.hpp"

#include <string>
#include <variant>

namespace minimind {

template <class T>
class Block {
 public:
  Block() = default;
  Block(const WeightLoader<T>& w, int64_t layer, const Config& c) {
    const std::string prefix = "model.layers." + std::to_string(layer);
    const std::string dims = "hidden_size " + std::to_string(c.hidden_size);
    input_layernorm = RMSNorm<T>(w.vector(prefix + ".input_layernorm.weight", c.hidden_size, dims), c.rms_norm_eps);
    self_attn = Attention<T>(w, prefix + ".self_attn", c);
    post_attention_layernorm =
        RMSNorm<T>(w.vector(prefix + ".post_attention_layernorm.weight", c.hidden_size, dims), c.rms_norm_eps);
    if (c.layer_is_moe(layer)) mlp = MoEFeedForward<T>(w, prefix + ".mlp", c);
    else mlp = FeedForward<T>(w, prefix + ".mlp", c, c.intermediate_size);
  }

  size_t num_parameters() const {
    return static_cast<size_t>(input_layernorm.dim() + post_attention_layernorm.dim()) + self_attn.num_parameters() +
           std::visit([](const auto& ffn) { return ffn.num_parameters(); }, mlp);
  }

  size_t weight_bytes() const {
    return input_layernorm.weight().bytes() + post_attention_layernorm.weight().bytes() + self_attn.weight_bytes() +
           std::visit([](const auto& ffn) { return ffn.weight_bytes(); }, mlp);
  }

  RMSNorm<T> input_layernorm;  // [hidden]
  Attention<T> self_attn;
  RMSNorm<T> post_attention_layernorm;  // [hidden]
  std::variant<FeedForward<T>, MoEFeedForward<T>> mlp;
};

}  // namespace minimind
