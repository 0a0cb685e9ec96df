// Sampling rules against hand-computed expectations; the seeded generator is reproducible.
#include <doctest/doctest.h>
#include <minimind/sampler.hpp>

#include <limits>
#include <map>
#include <vector>

using namespace minimind;

namespace {
std::map<int32_t, int> histogram(SamplingParams params, std::vector<float> logits, int draws, std::vector<int32_t> seen = {}) {
  Sampler sampler(params, static_cast<int64_t>(logits.size()));
  std::map<int32_t, int> counts;
  for (int i = 0; i < draws; ++i) {
    auto copy = logits;
    ++counts[sampler.sample(copy, seen)];
  }
  return counts;
}
}  // namespace

TEST_CASE("the generator is defined bit for bit by its seed") {
  Rng a(7), b(7), c(8);
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.next();
    CHECK(x == b.next());
    CHECK(x != c.next());
  }
  // xoshiro256** seeded by splitmix64(0): the first output is fixed forever.
  Rng zero(0);
  const uint64_t first = zero.next();
  Rng again(0);
  CHECK(again.next() == first);
  double u = Rng(3).uniform();
  CHECK(u >= 0.0);
  CHECK(u < 1.0);
}

TEST_CASE("temperature 0 is greedy, after the repetition penalty") {
  SamplingParams p;
  p.temperature = 0;
  Sampler sampler(p, 4);
  std::vector<float> logits = {1, 3, 2, -1};
  CHECK(sampler.sample(logits, {}) == 1);
  p.repetition_penalty = 2.0f;
  Sampler penalised(p, 4);
  logits = {1, 3, 2, -1};
  CHECK(penalised.sample(logits, std::vector<int32_t>{1}) == 2);  // 3 / 2 = 1.5 < 2
  CHECK(logits[1] == doctest::Approx(1.5));
}

TEST_CASE("greedy picks the first of the largest logits, as one comparison per token does") {
  SamplingParams p;
  p.temperature = 0;
  const float inf = std::numeric_limits<float>::infinity();
  auto reference = [](const std::vector<float>& logits) {
    size_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i)
      if (logits[i] > logits[best]) best = i;
    return static_cast<int32_t>(best);
  };
  // Ties, signed zeros, all negative, -inf masks, denormals, the largest finite values.
  const std::vector<std::vector<float>> cases = {
      {1, 3, 3, 2}, {-0.0f, 0.0f, -1}, {0.0f, -0.0f}, {-5, -2, -2, -7}, {-inf, -3, -inf}, {-inf, -inf, -inf, 0.5f},
      {1e-45f, -1e-45f, 0}, {-1e-45f, -2e-45f}, {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()},
      {-std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest(), -inf}};
  for (const auto& logits : cases) {
    CAPTURE(logits);
    Sampler sampler(p, static_cast<int64_t>(logits.size()));
    auto copy = logits;
    CHECK(sampler.sample(copy, {}) == reference(logits));
    CHECK(Sampler::argmax(logits) == reference(logits));
  }
  // Random vocabularies with repeated values, every length around the vector widths.
  Rng rng(11);
  for (size_t vocab = 1; vocab < 80; ++vocab) {
    std::vector<float> logits(vocab);
    for (float& l : logits) l = static_cast<float>(static_cast<int>(rng.uniform() * 9) - 6);
    CAPTURE(logits);
    Sampler sampler(p, static_cast<int64_t>(vocab));
    auto copy = logits;
    CHECK(sampler.sample(copy, {}) == reference(logits));
  }
}

TEST_CASE("repetition penalty: positive logits divided, negative multiplied") {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 1.5f;
  Sampler sampler(p, 3);
  std::vector<float> logits = {3, -2, 1};
  sampler.sample(logits, std::vector<int32_t>{0, 1});
  CHECK(logits[0] == doctest::Approx(2.0));
  CHECK(logits[1] == doctest::Approx(-3.0));
  CHECK(logits[2] == doctest::Approx(1.0));
}

TEST_CASE("top-k keeps the k best") {
  SamplingParams p;
  p.temperature = 1, p.top_k = 2, p.top_p = 1;
  auto counts = histogram(p, {0, 5, 4.9f, 4.8f}, 2000);
  CHECK(counts.count(0) == 0);
  CHECK(counts.count(3) == 0);
  CHECK(counts[1] > 0);
  CHECK(counts[2] > 0);
}

TEST_CASE("top-p keeps the smallest prefix whose mass reaches p") {
  SamplingParams p;
  p.temperature = 1, p.top_k = 0, p.top_p = 0.5f;
  // probabilities 0.6, 0.3, 0.1: the first alone exceeds 0.5.
  const std::vector<float> logits = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  auto counts = histogram(p, logits, 500);
  CHECK(counts[0] == 500);
  p.top_p = 0.7f;  // 0.6 <= 0.7, so the second stays; 0.9 > 0.7 drops the third
  counts = histogram(p, logits, 3000);
  CHECK(counts[1] > 0);
  CHECK(counts.count(2) == 0);
  CHECK(counts[0] / 3000.0 == doctest::Approx(0.6 / 0.9).epsilon(0.05));
}

TEST_CASE("min-p drops tokens far below the best") {
  SamplingParams p;
  p.temperature = 1, p.top_k = 0, p.top_p = 1, p.min_p = 0.4f;
  auto counts = histogram(p, {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)}, 2000);
  CHECK(counts[0] > 0);
  CHECK(counts[1] > 0);  // 0.3 >= 0.4 * 0.5
  CHECK(counts.count(2) == 0);
  CHECK(counts.count(3) == 0);
}

TEST_CASE("sampling follows the softmax and the same seed repeats the same draws") {
  SamplingParams p;
  p.temperature = 1, p.top_k = 0, p.top_p = 1, p.seed = 11;
  const std::vector<float> logits = {0, std::log(3.0f)};
  auto counts = histogram(p, logits, 4000);
  CHECK(counts[1] / 4000.0 == doctest::Approx(0.75).epsilon(0.05));
  CHECK(histogram(p, logits, 300) == histogram(p, logits, 300));
  p.temperature = 0.25f;  // sharper: 3^4 = 81 to 1
  counts = histogram(p, logits, 4000);
  CHECK(counts[1] / 4000.0 == doctest::Approx(81.0 / 82.0).epsilon(0.02));
}

TEST_CASE("invalid parameters are refused") {
  SamplingParams p;
  p.temperature = -1;
  CHECK_THROWS_WITH_AS(Sampler(p, 4), doctest::Contains("temperature must be >= 0"), Error);
  p = {};
  p.top_p = 0;
  CHECK_THROWS_WITH_AS(Sampler(p, 4), doctest::Contains("top_p must be in (0, 1]"), Error);
  p.top_p = 1.5f;
  CHECK_THROWS_AS(Sampler(p, 4), Error);
  p = {};
  p.top_k = -2;
  CHECK_THROWS_AS(Sampler(p, 4), Error);
}

TEST_CASE("NaN and +inf logits are refused, naming the token; -inf masks a token, but not every one") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (const float temperature : {0.0f, 0.85f}) {
    CAPTURE(temperature);
    SamplingParams p;
    p.temperature = temperature;
    p.repetition_penalty = 1.2f;
    Sampler sampler(p, 5);
    // Sorting NaN is undefined behaviour and argmax would return an arbitrary token.
    std::vector<float> logits = {0.5f, 1.0f, nan, 0.0f, -1.0f};
    CHECK_THROWS_WITH_AS(sampler.sample(logits, std::vector<int32_t>{1}), doctest::Contains("the logit of token 2 is NaN"), Error);
    // exp(inf - inf) would make every probability NaN.
    logits = {0, inf, 1, inf, -inf};
    CHECK_THROWS_WITH_AS(sampler.sample(logits, std::vector<int32_t>{3}), doctest::Contains("the logit of token 1 is +inf"), Error);
    logits.assign(5, -inf);
    CHECK_THROWS_WITH_AS(sampler.sample(logits, std::vector<int32_t>{3}), doctest::Contains("every logit is -inf"), Error);
    for (int draw = 0; draw < 200; ++draw) {
      logits = {0.5f, -inf, 0.25f, -inf, 0.0f};
      const int32_t id = sampler.sample(logits, std::vector<int32_t>{3});
      CHECK((id == 0 || id == 2 || id == 4));
      if (temperature == 0.0f) CHECK(id == 0);
    }
  }
}
