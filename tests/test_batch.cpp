// Batch: sequences run together give what each gives alone. Sequences of different lengths join
// at different steps (a prompt in chunks, then one token per step) and leave when done; each
// one's logits are compared with its own single-sequence run, and its greedy ids must be equal.
#include <doctest/doctest.h>
#include <minimind/batch.hpp>

#include "test_support.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

using namespace minimind;

namespace {

struct Plan {
  std::vector<int32_t> prompt;
  int joins_at;    // the step at which it is first added
  int new_tokens;  // greedy tokens it generates
};

int32_t argmax(const float* logits, Index vocab) {
  return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
}

// Greedy ids of one plan run alone, and the logits of each step.
std::vector<int32_t> alone(const MiniMindForCausalLM<float>& model, const Plan& plan, std::vector<RowVector<float>>& steps) {
  auto session = model.new_session(64);
  RowVector<float> logits = model.forward(session, plan.prompt, false).row(0);
  std::vector<int32_t> ids;
  for (int t = 0; t < plan.new_tokens; ++t) {
    steps.push_back(logits);
    ids.push_back(argmax(logits.data(), logits.size()));
    if (t + 1 < plan.new_tokens) logits = model.forward(session, {&ids.back(), 1}, false).row(0);
  }
  return ids;
}

// Runs every plan in one Batch; a prompt is fed in chunks of at most `chunk` ids per step. With
// `grow_block`, each session starts with that many positions and is grown, in multiples of it,
// before each step that needs more (as minimind-server does); otherwise it holds 64 from the start.
void check_batched(const MiniMindForCausalLM<float>& model, const std::vector<Plan>& plans, Index chunk, double tolerance,
                   Index grow_block = 0) {
  const Index vocab = model.config().vocab_size;
  std::vector<std::vector<RowVector<float>>> expected(plans.size());
  std::vector<std::vector<int32_t>> expected_ids;
  for (size_t p = 0; p < plans.size(); ++p) expected_ids.push_back(alone(model, plans[p], expected[p]));

  std::vector<Session<float>> sessions;
  Batch<float> batch(model);
  for (size_t p = 0; p < plans.size(); ++p) sessions.push_back(model.new_session(grow_block > 0 ? grow_block : 64));
  auto add = [&](size_t p, std::span<const int32_t> new_ids) {
    Session<float>& session = sessions[p];
    const Index needed = session.position() + static_cast<Index>(new_ids.size());
    if (grow_block > 0 && needed > session.context()) session.reserve((needed + grow_block - 1) / grow_block * grow_block);
    batch.add(session, new_ids);
  };
  std::vector<size_t> fed(plans.size(), 0);          // prompt ids already run
  std::vector<std::vector<int32_t>> ids(plans.size());  // generated so far
  double worst = 0;
  for (int step = 0;; ++step) {
    std::vector<size_t> members;
    for (size_t p = 0; p < plans.size(); ++p) {
      const bool done = static_cast<int>(ids[p].size()) == plans[p].new_tokens;
      if (step < plans[p].joins_at || done) continue;
      if (fed[p] < plans[p].prompt.size()) {
        const size_t n = std::min<size_t>(static_cast<size_t>(chunk), plans[p].prompt.size() - fed[p]);
        add(p, {plans[p].prompt.data() + fed[p], n});
        fed[p] += n;
      } else {
        add(p, {&ids[p].back(), 1});
      }
      members.push_back(p);
    }
    if (members.empty()) {
      if (std::all_of(plans.begin(), plans.end(), [&](const Plan& q) { return step >= q.joins_at; })) break;
      continue;
    }
    CHECK(batch.sequences() == static_cast<Index>(members.size()));
    const auto logits = batch.step();
    REQUIRE(logits.rows() == static_cast<Index>(members.size()));
    for (size_t i = 0; i < members.size(); ++i) {
      const size_t p = members[i];
      if (fed[p] < plans[p].prompt.size()) continue;  // mid-prompt: no token yet
      const RowVector<float>& want = expected[p][ids[p].size()];
      const double diff = (logits.row(static_cast<Index>(i)) - want).cwiseAbs().maxCoeff();
      REQUIRE_MESSAGE(std::isfinite(diff), "non-finite logits");
      worst = std::max(worst, diff);
      ids[p].push_back(argmax(&logits(static_cast<Index>(i), 0), vocab));
    }
  }
  MESSAGE("max |logit difference| batched vs alone: " << worst);
  CHECK(worst <= tolerance);
  for (size_t p = 0; p < plans.size(); ++p) {
    CAPTURE(p);
    CHECK(ids[p] == expected_ids[p]);
    CHECK(sessions[p].position() == static_cast<Index>(plans[p].prompt.size()) + plans[p].new_tokens - 1);
  }
}

std::vector<Plan> plans(size_t count) {
  std::vector<Plan> out;
  for (size_t p = 0; p < count; ++p) {
    std::vector<int32_t> prompt;
    for (size_t i = 0; i < 3 + 5 * p % 17; ++i) prompt.push_back(static_cast<int32_t>((7 * p + 13 * i + 1) % 200));
    out.push_back({prompt, static_cast<int>(p % 4), static_cast<int>(4 + p % 5)});
  }
  return out;
}

}  // namespace

TEST_CASE("a batch gives each sequence its own logits and greedy ids (1, 3, 8 sequences, every format)") {
  for (Config c : {Config::minimind2_small(), Config::minimind3()}) {
    c.num_hidden_layers = 2;
    c.vocab_size = 256;
    for (WeightFormat format : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::Q8}) {
      for (int threads : {1, 2}) {
        CAPTURE(c.architecture);
        CAPTURE(std::string(format_name(format)));
        CAPTURE(threads);
        const auto model = MiniMindForCausalLM<float>::random(c, 11, {format, threads});
        // f32 and bf16: only summation order differs (measured 1.7e-6). q8: one row alone takes
        // the integer matrix-vector kernel, several the GEMM on the same rounded activations in
        // float (measured 1.0e-4).
        const double tolerance = format == WeightFormat::Q8 ? 3e-4 : 1e-5;
        for (size_t count : {1, 3, 8}) check_batched(model, plans(count), 5, tolerance);
      }
    }
  }
}

TEST_CASE("MoE blocks batch too") {
  Config c = Config::minimind3();
  c.num_hidden_layers = 2;
  c.vocab_size = 256;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 64;
  const auto model = MiniMindForCausalLM<float>::random(c, 5);
  check_batched(model, plans(5), 4, 1e-5);
}

TEST_CASE("sessions that start small and grow between steps keep what they cached") {
  Config c = Config::minimind2_small();
  c.num_hidden_layers = 2;
  c.vocab_size = 256;
  const auto model = MiniMindForCausalLM<float>::random(c, 7);
  // Blocks of 3 positions: every sequence's cache is re-laid several times, mid-prompt and mid-decode.
  check_batched(model, plans(8), 5, 1e-5, 3);
  auto session = model.new_session(2);
  CHECK_THROWS_WITH_AS(session.reserve(c.max_position_embeddings + 1), doctest::Contains("exceeds max_position_embeddings"), Error);
  session.reserve(1);  // never shrinks
  CHECK(session.context() == 2);
}

TEST_CASE("a batch refuses what does not fit, changing nothing") {
  Config c = Config::minimind2_small();
  c.num_hidden_layers = 1;
  c.vocab_size = 64;
  const auto model = MiniMindForCausalLM<float>::random(c);
  auto a = model.new_session(4), b = model.new_session(4);
  Batch<float> batch(model);
  const std::vector<int32_t> two = {1, 2}, five = {1, 2, 3, 4, 5}, bad = {1, 64};
  CHECK_THROWS_WITH_AS(batch.step(), doctest::Contains("nothing to run"), Error);
  batch.add(a, two);
  CHECK_THROWS_WITH_AS(batch.add(a, two), doctest::Contains("only once"), Error);
  CHECK_THROWS_WITH_AS(batch.add(b, five), doctest::Contains("exceeds the session's context of 4"), Error);
  CHECK_THROWS_WITH_AS(batch.add(b, bad), doctest::Contains("token id 64"), Error);
  CHECK_THROWS_WITH_AS(batch.add(b, {}), doctest::Contains("no token ids"), Error);
  CHECK(batch.sequences() == 1);
  CHECK(batch.step().rows() == 1);
  CHECK(a.position() == 2);
  CHECK(b.position() == 0);
}
