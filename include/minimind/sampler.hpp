#pragma once
// Picking the next token from the logits, in upstream MiniMind's order: temperature, repetition
// penalty, top-k, top-p, then (our addition) min-p, then a draw from the softmax. Temperature 0 is
// greedy. The random numbers come from our own generator, not std::*_distribution, so a seed
// gives the same text with every standard library.
#include "minimind/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace minimind {

struct SamplingParams {
  float temperature = 0.85f;  // 0 = greedy
  int64_t top_k = 50;         // 0 = off
  float top_p = 0.85f;        // 1 = off
  float min_p = 0.0f;         // 0 = off; keep tokens with p >= min_p * p(best)
  float repetition_penalty = 1.0f;
  uint64_t seed = 42;

  void validate() const {
    if (!(temperature >= 0) || !std::isfinite(temperature)) throw Error("temperature must be >= 0, got " + std::to_string(temperature));
    if (top_k < 0) throw Error("top_k must be >= 0, got " + std::to_string(top_k));
    if (!(top_p > 0 && top_p <= 1)) throw Error("top_p must be in (0, 1], got " + std::to_string(top_p));
    if (!(min_p >= 0 && min_p <= 1)) throw Error("min_p must be in [0, 1], got " + std::to_string(min_p));
    if (!(repetition_penalty > 0) || !std::isfinite(repetition_penalty)) {
      throw Error("repetition_penalty must be > 0, got " + std::to_string(repetition_penalty));
    }
  }
};

// xoshiro256** seeded through splitmix64: small, fast, and defined bit for bit.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) {
    for (auto& s : state_) {
      seed += 0x9E3779B97F4A7C15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      s = z ^ (z >> 31);
    }
  }
  uint64_t next() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t state_[4];
};

class Sampler {
 public:
  Sampler(const SamplingParams& params, int64_t vocab_size) : params_(params), rng_(params.seed) {
    params_.validate();
    order_.resize(static_cast<size_t>(vocab_size));
    probs_.resize(static_cast<size_t>(vocab_size));
  }

  const SamplingParams& params() const { return params_; }

  // Chooses a token from `logits` (modified in place), penalising the distinct ids in `seen`.
  int32_t sample(std::span<float> logits, std::span<const int32_t> seen) {
    const size_t vocab = logits.size();
    if (vocab != order_.size()) throw Error("sampler: logits have " + std::to_string(vocab) + " entries, expected " + std::to_string(order_.size()));
    // NaN logits (activations of extreme but finite weights overflowed) have no order: sorting
    // them is undefined behaviour and argmax would pick an arbitrary token. A +inf logit makes
    // the softmax inf/inf = NaN. Both are refused; -inf is a mask (that token is never drawn),
    // but not on every token.
    const Scan scan = scan_logits(logits);
    for (size_t i = 0; scan.overflowed && i < vocab; ++i) {  // which one, in token order
      if (std::isnan(logits[i])) throw Error("sampler: the logit of token " + std::to_string(i) + " is NaN (the forward pass overflowed)");
      if (logits[i] == std::numeric_limits<float>::infinity()) {
        throw Error("sampler: the logit of token " + std::to_string(i) + " is +inf (the forward pass overflowed)");
      }
    }
    if (!scan.any_candidate) throw Error("sampler: every logit is -inf, no token can be drawn");
    const bool greedy = params_.temperature == 0.0f;
    if (!greedy) {
      for (float& l : logits) l /= params_.temperature;
    }
    if (params_.repetition_penalty != 1.0f) {
      for (int32_t id : seen) {
        float& l = logits[static_cast<size_t>(id)];
        l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
      }
    }
    if (greedy) return params_.repetition_penalty != 1.0f ? argmax(logits) : first_equal(logits, scan.top);

    // Candidates best first; ties keep the lower id, so the order is fully determined.
    std::iota(order_.begin(), order_.end(), 0);
    auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    size_t count = vocab;
    if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < vocab) {
      // Like upstream, every token tied with the k-th best survives.
      const size_t k = static_cast<size_t>(params_.top_k);
      std::nth_element(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k - 1), order_.end(), better);
      const float kth = logits[order_[k - 1]];
      count = static_cast<size_t>(std::partition(order_.begin(), order_.end(), [&](int32_t id) { return logits[id] >= kth; }) -
                                  order_.begin());
    }
    std::sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(count), better);

    const double best = logits[order_[0]];
    double total = 0;
    for (size_t i = 0; i < count; ++i) total += probs_[i] = std::exp(static_cast<double>(logits[order_[i]]) - best);
    if (params_.top_p < 1.0f) {
      // Keep a token while the probability of the better ones before it is <= top_p.
      double cumulative = 0;
      size_t keep = 0;
      while (keep < count && (keep == 0 || cumulative <= params_.top_p)) cumulative += probs_[keep++] / total;
      count = keep;
    }
    if (params_.min_p > 0.0f) {
      size_t keep = 1;
      while (keep < count && probs_[keep] >= params_.min_p * probs_[0]) ++keep;
      count = keep;
    }
    total = 0;
    for (size_t i = 0; i < count; ++i) total += probs_[i];
    const double target = rng_.uniform() * total;
    double cumulative = 0;
    for (size_t i = 0; i < count; ++i) {
      cumulative += probs_[i];
      if (target < cumulative) return order_[i];
    }
    return order_[count - 1];
  }

  // The first of the largest logits (0 if there are none, or a NaN).
  static int32_t argmax(std::span<const float> logits) { return first_equal(logits, scan_logits(logits).top); }

 private:
  // One pass over the logits as integers, which the compiler vectorizes: whether any is NaN or
  // +inf, whether any is above -inf, and the largest (NaN if there is one). It matters because a
  // batch's step samples every sequence while the other threads wait (commit fab60e8: greedy
  // sampling less than half the time of a comparison per token).
  struct Scan {
    bool overflowed, any_candidate;
    float top;
  };
  static Scan scan_logits(std::span<const float> logits) {
    constexpr uint32_t kMagnitude = 0x7fffffffu, kInf = 0x7f800000u, kMinusInf = 0xff800000u;
    // A float's bits with the magnitude flipped when negative order as int32 as the floats do
    // (-0 just below +0); the map is its own inverse.
    auto key = [](uint32_t b) { return b ^ (static_cast<uint32_t>(static_cast<int32_t>(b) >> 31) & kMagnitude); };
    uint32_t overflowed = 0, any_candidate = 0;
    int32_t top = std::numeric_limits<int32_t>::min();
    // memcpy, not std::bit_cast: the libc++ of Debian's emscripten 3.1.6 has no std::bit_cast.
    for (const float logit : logits) {
      uint32_t b;
      std::memcpy(&b, &logit, sizeof b);
      overflowed |= (b & kMagnitude) >= kInf && b != kMinusInf;
      any_candidate |= b != kMinusInf;
      const auto k = static_cast<int32_t>(key(b));
      top = k > top ? k : top;
    }
    const uint32_t top_bits = key(static_cast<uint32_t>(top));
    float top_value;
    std::memcpy(&top_value, &top_bits, sizeof top_bits);
    return {overflowed != 0, any_candidate != 0, top_value};
  }
  static int32_t first_equal(std::span<const float> logits, float value) {
    for (size_t i = 0; i < logits.size(); ++i)
      if (logits[i] == value) return static_cast<int32_t>(i);
    return 0;
  }

  SamplingParams params_;
  Rng rng_;
  std::vector<int32_t> order_;  // [vocab] candidate ids
  std::vector<double> probs_;   // [vocab] unnormalised probabilities in candidate order
};

}  // namespace minimind
