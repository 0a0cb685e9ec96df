// SwiGLU and MoE against naive scalar references (tests/reference_ops.hpp) on small random shapes.
// MoE routing of both generations: MiniMind2-MoE (softmax router, top-k, weights renormalised only
// when norm_topk_prob and top_k > 1, shared experts added with weight 1) and minimind-3-moe
// (renormalised whenever norm_topk_prob, so a top-1 expert gets weight 1; no shared experts).
#include <doctest/doctest.h>
#include <minimind/minimind.hpp>

#include "reference_ops.hpp"

#include <vector>

using namespace minimind;
namespace ref = minimind::reference;

namespace {

Config small(Config c) {
  c.hidden_size = 16, c.intermediate_size = 40, c.num_hidden_layers = 1;
  return c;
}

}  // namespace

TEST_CASE_TEMPLATE("SwiGLU equals down(silu(gate x) * up x)", T, float, double) {
  const Config c = small(Config::minimind3());
  const FeedForward<T> ffn(WeightLoader<T>::random(3), "mlp", c, c.intermediate_size);
  FeedForwardScratch<T> s;
  kernels::Workspace work;
  for (const Index n : {1, 2, 5, 33}) {  // the matrix-vector path (n < 9) and the gemm path
    CAPTURE(n);
    const auto x = ref::random_matrix<T>(n, c.hidden_size, static_cast<unsigned>(n), 2.0);
    s.reserve(c, n);
    MatrixRM<T> out(n, c.hidden_size);
    ffn.forward(x, out, s, work);
    const ref::Mat want = ref::swiglu(x.template cast<double>(), ref::to_double(ffn.gate_proj),
                                      ref::to_double(ffn.up_proj), ref::to_double(ffn.down_proj));
    CHECK(ref::max_diff(out, want) <= ref::tolerance<T>());
  }
}

TEST_CASE_TEMPLATE("MoE routing and output of both generations", T, float, double) {
  struct Setup {
    const char* name;
    Config config;
    Index experts, top_k, shared;
    bool norm_topk_prob;
    bool renormalised;  // the generation's rule, stated here independently of Config
  };
  const std::vector<Setup> setups = {
      {"MiniMind2 top-2 renormalised, 1 shared", Config::minimind2_small(), 4, 2, 1, true, true},
      {"MiniMind2 top-1: norm_topk_prob ignored", Config::minimind2_small(), 4, 1, 0, true, false},
      {"MiniMind2 top-2 raw scores, 2 shared", Config::minimind2_small(), 5, 2, 2, false, false},
      {"minimind-3 top-1 renormalised to weight 1", Config::minimind3(), 4, 1, 0, true, true},
      {"minimind-3 top-2 renormalised", Config::minimind3(), 6, 2, 0, true, true},
      {"minimind-3 top-3 raw scores", Config::minimind3(), 6, 3, 0, false, false},
  };
  for (const Setup& setup : setups) {
    CAPTURE(setup.name);
    Config c = small(setup.config);
    c.num_experts = setup.experts, c.num_experts_per_tok = setup.top_k, c.n_shared_experts = setup.shared;
    c.norm_topk_prob = setup.norm_topk_prob, c.moe_intermediate_size = 24;
    MoEFeedForward<T> moe(WeightLoader<T>::random(17 + static_cast<uint64_t>(setup.experts * 7 + setup.top_k)), "mlp", c);
    moe.gate.mutable_matrix() *= T(4);  // decisive scores: no near-ties between the k-th and the next
    const Index n = 7;
    const auto x = ref::random_matrix<T>(n, c.hidden_size, 5, 1.5);
    MoEScratch<T> s;
    FeedForwardScratch<T> expert;
    kernels::Workspace work;
    s.reserve(c, n);
    expert.reserve(c, n);
    MatrixRM<T> out(n, c.hidden_size);
    moe.forward(x, out, s, expert, work);

    std::vector<ref::Expert> experts, shared;
    for (const auto& e : moe.experts) experts.push_back(ref::expert_weights(e));
    for (const auto& e : moe.shared_experts) shared.push_back(ref::expert_weights(e));
    ref::Routing routing;
    const ref::Mat want = ref::moe(x.template cast<double>(), ref::to_double(moe.gate), experts, shared, setup.top_k,
                                   setup.renormalised, &routing);
    CHECK(ref::max_diff(out, want) <= ref::tolerance<T>());
    for (Index r = 0; r < n; ++r) {
      for (Index k = 0; k < setup.top_k; ++k) {
        const auto at = static_cast<size_t>(r * setup.top_k + k);
        CHECK(s.chosen[at] == routing.experts[static_cast<size_t>(r)][static_cast<size_t>(k)]);
        CHECK(static_cast<double>(s.chosen_weight[at]) ==
              doctest::Approx(routing.weights[static_cast<size_t>(r)][static_cast<size_t>(k)]).epsilon(1e-6));
      }
      if (setup.top_k == 1 && setup.renormalised) CHECK(static_cast<double>(s.chosen_weight[static_cast<size_t>(r)]) == doctest::Approx(1.0));
    }
    // The other renormalisation rule would give other outputs: the rule is what is tested.
    const ref::Mat other = ref::moe(x.template cast<double>(), ref::to_double(moe.gate), experts, shared, setup.top_k,
                                    !setup.renormalised);
    CHECK(ref::max_diff(out, other) > 1e-3);
  }
}
