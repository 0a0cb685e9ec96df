#pragma once
// One decoder layer, pre-norm with residuals:
//   x += self_attn(input_layernorm(x));  x += mlp(post_attention_layernorm(x)).
#include "minimind/activations.hpp"
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

  // Updates the residual stream act.x of positions [start, start + n) in place.
  void forward(Index n, Index start, KVCache<T>& cache, size_t layer, const RotaryEmbedding<T>& rope,
               Activations<T>& act) const {
    auto x = act.x.topRows(n);
    auto normed = act.normed.topRows(n);
    auto sublayer = act.sublayer.topRows(n);
    input_layernorm.forward(x, normed);
    self_attn.forward(normed, start, cache.k[layer], cache.v[layer], cache.capacity, rope, sublayer, act);
    x += sublayer;
    post_attention_layernorm.forward(x, normed);
    std::visit([&](const auto& ffn) { ffn.forward(normed, sublayer, act); }, mlp);
    x += sublayer;
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
