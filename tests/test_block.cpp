// Block (pre-norm with residuals) and the model's recipe around it, against the naive references
// (tests/reference_ops.hpp): through the public API, an observer sees each block's input and its
// two residual updates, which are checked one block at a time:
//   h = x + o_proj(attention(input_layernorm(x)));  out = h + mlp(post_attention_layernorm(h)),
// then logits = final_norm(x) E^T.
#include <doctest/doctest.h>
#include <minimind/minimind.hpp>

#include "reference_ops.hpp"

#include <numeric>
#include <vector>

using namespace minimind;
namespace ref = minimind::reference;

namespace {

template <class T>
struct Recorder : ForwardObserver<T> {
  ref::Mat embedded, normed, logit_rows;
  std::vector<ref::Mat> after_attention, after_ffn;
  void embedding(ConstMatrixMap<T> h) override { embedded = h.template cast<double>(); }
  void residual_after_attention(int64_t, ConstMatrixMap<T> x) override { after_attention.push_back(x.template cast<double>()); }
  void residual_after_ffn(int64_t, ConstMatrixMap<T> x) override { after_ffn.push_back(x.template cast<double>()); }
  void final_norm(ConstMatrixMap<T> h) override { normed = h.template cast<double>(); }
  void logits(ConstMatrixMap<T> l) override { logit_rows = l.template cast<double>(); }
};

template <class T>
ref::Mat reference_mlp(const Block<T>& block, const Config& c, const ref::Mat& x) {
  if (const auto* moe = std::get_if<MoEFeedForward<T>>(&block.mlp)) {
    std::vector<ref::Expert> experts, shared;
    for (const auto& e : moe->experts) experts.push_back(ref::expert_weights(e));
    for (const auto& e : moe->shared_experts) shared.push_back(ref::expert_weights(e));
    const bool renormalised = c.norm_topk_prob && (c.num_experts_per_tok > 1 || c.normalize_single_expert);
    return ref::moe(x, ref::to_double(moe->gate), experts, shared, c.num_experts_per_tok, renormalised);
  }
  const auto& ffn = std::get<FeedForward<T>>(block.mlp);
  return ref::swiglu(x, ref::to_double(ffn.gate_proj), ref::to_double(ffn.up_proj), ref::to_double(ffn.down_proj));
}

template <class T>
void check_blocks(const Config& c, uint64_t seed) {
  const auto model = MiniMindForCausalLM<T>::random(c, seed);
  std::vector<int32_t> ids(11);
  std::iota(ids.begin(), ids.end(), 3);
  auto session = model.new_session(static_cast<Index>(ids.size()));
  Recorder<T> seen;
  model.forward(session, ids, true, &seen);
  REQUIRE(seen.after_ffn.size() == static_cast<size_t>(c.num_hidden_layers));
  const auto& m = model.model;
  CHECK(ref::max_diff(seen.embedded, ref::to_double(m.embed_tokens.weight()).middleRows(3, 11)) == 0);
  ref::Mat x = seen.embedded;
  for (size_t l = 0; l < m.layers.size(); ++l) {
    CAPTURE(l);
    const Block<T>& block = m.layers[l];
    const ref::Mat h = x + ref::attention(ref::rms_norm(x, ref::to_double(block.input_layernorm.weight()), c.rms_norm_eps),
                                          ref::attention_weights(block.self_attn, c));
    CHECK(ref::max_diff(seen.after_attention[l], h) <= ref::tolerance<T>());
    // From the block's own residual on, so one block's rounding is not charged to the next.
    const ref::Mat& h_seen = seen.after_attention[l];
    const ref::Mat out =
        h_seen + reference_mlp(block, c, ref::rms_norm(h_seen, ref::to_double(block.post_attention_layernorm.weight()), c.rms_norm_eps));
    CHECK(ref::max_diff(seen.after_ffn[l], out) <= ref::tolerance<T>());
    x = seen.after_ffn[l];
  }
  const ref::Mat normed = ref::rms_norm(x, ref::to_double(m.norm.weight()), c.rms_norm_eps);
  CHECK(ref::max_diff(seen.normed, normed) <= ref::tolerance<T>());
  CHECK(ref::max_diff(seen.logit_rows, ref::linear(seen.normed, ref::to_double(model.lm_head().weight()))) <=
        4 * ref::tolerance<T>());
}

Config tiny(Config c) {
  c.hidden_size = 16, c.num_hidden_layers = 2, c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 4;
  c.intermediate_size = 40, c.vocab_size = 48, c.rope_theta = 1e4;
  c.rope_scaling.reset();
  return c;
}

}  // namespace

TEST_CASE_TEMPLATE("each block is x + attention(norm(x)), then + mlp(norm(.)): MiniMind2 and minimind-3, dense", T, float,
                   double) {
  SUBCASE("MiniMind2") { check_blocks<T>(tiny(Config::minimind2_small()), 1); }
  SUBCASE("minimind-3, q/k norm") { check_blocks<T>(tiny(Config::minimind3()), 2); }
}

TEST_CASE_TEMPLATE("each block with an MoE feed-forward: both generations", T, float, double) {
  Config mm2 = tiny(Config::minimind2_small());
  mm2.num_experts = 4, mm2.num_experts_per_tok = 2, mm2.n_shared_experts = 1;
  mm2.norm_topk_prob = true, mm2.moe_intermediate_size = mm2.intermediate_size;
  Config mm3 = tiny(Config::minimind3());
  mm3.num_experts = 4, mm3.num_experts_per_tok = 1, mm3.norm_topk_prob = true, mm3.moe_intermediate_size = 24;
  SUBCASE("MiniMind2-MoE") { check_blocks<T>(mm2, 3); }
  SUBCASE("minimind-3-moe") { check_blocks<T>(mm3, 4); }
}
