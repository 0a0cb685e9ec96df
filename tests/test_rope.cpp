// RoPE: rotate-half pairing, frequencies, and both YaRN rules, against values computed here from
// the formulas in ../shared/golden/README.md (the golden model cases check them end to end).
#include <doctest/doctest.h>
#include <minimind/minimind.hpp>

#include <cmath>
#include <numbers>

using namespace minimind;

namespace {
Config rope_config(int64_t head_dim, double theta) {
  Config c = Config::minimind3();
  c.head_dim = head_dim;
  c.rope_theta = theta;
  return c;
}
}  // namespace

TEST_CASE("inverse frequencies are theta^(-2j/head_dim)") {
  RotaryEmbedding<float> rope(rope_config(8, 1e6));
  REQUIRE(rope.inv_freq().size() == 4);
  for (int j = 0; j < 4; ++j) CHECK(rope.inv_freq()[j] == doctest::Approx(std::pow(1e6, -2.0 * j / 8)));
}

TEST_CASE("rotate-half pairs dimension j with j + head_dim/2, not (2j, 2j+1)") {
  RotaryEmbedding<float> rope(rope_config(4, 10000));
  std::vector<float> cos(2), sin(2);
  rope.angles(3, cos.data(), sin.data());
  CHECK(cos[0] == doctest::Approx(std::cos(3.0)));
  CHECK(sin[1] == doctest::Approx(std::sin(3.0 / 100.0)));
  // x = [a0, a1, b0, b1]: pair (a0, b0) turns by angle 3, pair (a1, b1) by 3/100.
  std::vector<float> x = {1, 0, 0, 1};
  rope.rotate(x.data(), 1, cos.data(), sin.data());
  CHECK(x[0] == doctest::Approx(std::cos(3.0)));
  CHECK(x[2] == doctest::Approx(std::sin(3.0)));
  CHECK(x[1] == doctest::Approx(-std::sin(0.03)));
  CHECK(x[3] == doctest::Approx(std::cos(0.03)));
}

TEST_CASE("position 0 is the identity, and rotation keeps each pair's length") {
  RotaryEmbedding<float> rope(rope_config(6, 1e6));
  std::vector<float> cos(3), sin(3);
  std::vector<float> x = {0.5f, -1, 2, 3, 0.25f, -4};
  auto original = x;
  rope.angles(0, cos.data(), sin.data());
  rope.rotate(x.data(), 1, cos.data(), sin.data());
  CHECK(x == original);
  rope.angles(1234, cos.data(), sin.data());
  rope.rotate(x.data(), 1, cos.data(), sin.data());
  for (int j = 0; j < 3; ++j) {
    const float before = std::hypot(original[j], original[j + 3]);
    CHECK(std::hypot(x[j], x[j + 3]) == doctest::Approx(before).epsilon(1e-5));
  }
}

TEST_CASE("YaRN ramp rule (minimind-3): frequencies blend by the clamped ramp, attention factor scales cos/sin") {
  Config c = rope_config(16, 1e6);
  c.max_position_embeddings = 32768;
  c.rope_scaling = RopeScaling{4.0, 2048, 32, 1, 0.5, YarnRule::Ramp};
  RotaryEmbedding<float> scaled(c);
  RotaryEmbedding<float> plain(rope_config(16, 1e6));
  auto d = [&](double beta) { return 16 * std::log(2048 / (2 * std::numbers::pi * beta)) / (2 * std::log(1e6)); };
  const double low = std::max(std::floor(d(32)), 0.0), high = std::min(std::ceil(d(1)), 7.0);
  for (int j = 0; j < 8; ++j) {
    const double ramp = std::clamp((j - low) / std::max(high - low, 0.001), 0.0, 1.0);
    CHECK(scaled.inv_freq()[j] == doctest::Approx(plain.inv_freq()[j] * ((1 - ramp) + ramp / 4)).epsilon(1e-5));
  }
  std::vector<float> cos(8), sin(8);
  scaled.angles(0, cos.data(), sin.data());
  CHECK(cos[0] == doctest::Approx(0.5));
}

TEST_CASE("YaRN MiniMind2 rule: beta blend below the first long wavelength, 1/factor beyond") {
  Config c = Config::minimind2_small();
  c.head_dim = 16;
  c.max_position_embeddings = 32768;
  c.rope_scaling = RopeScaling{4.0, 2048, 4, 1, 1.0, YarnRule::MiniMind2};
  RotaryEmbedding<float> scaled(c);
  Config unscaled = c;
  unscaled.rope_scaling.reset();
  RotaryEmbedding<float> plain(unscaled);
  int first_long = 8;
  for (int j = 0; j < 8; ++j) {
    if (2 * std::numbers::pi / plain.inv_freq()[j] > 2048) {
      first_long = j;
      break;
    }
  }
  CHECK(first_long < 8);  // the case exercises both branches
  for (int j = 0; j < 8; ++j) {
    const double beta = 1 + 3.0 * j / 7;
    const double factor = j < first_long ? (beta * 4 - beta + 1) / (beta * 4) : 0.25;
    CHECK(scaled.inv_freq()[j] == doctest::Approx(plain.inv_freq()[j] * factor).epsilon(1e-5));
  }
}

TEST_CASE("YaRN does nothing when the context is not extended") {
  Config c = rope_config(8, 1e6);
  c.max_position_embeddings = 2048;
  c.rope_scaling = RopeScaling{4.0, 2048, 32, 1, 1.0, YarnRule::Ramp};
  RotaryEmbedding<float> scaled(c);
  RotaryEmbedding<float> plain(rope_config(8, 1e6));
  CHECK(scaled.inv_freq() == plain.inv_freq());
}
