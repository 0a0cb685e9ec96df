// Decoding allocates nothing: after a session exists and has seen its prompt, each one-token
// forward pass (all layers, the KV cache, lm_head, the thread pool) runs with Eigen's malloc guard
// armed and with a count of every global operator new, in every weight format and thread count.
#define EIGEN_RUNTIME_NO_MALLOC
// Eigen checks the guard with eigen_assert, which NDEBUG (Release) would compile away: make it
// throw instead, in every build type.
#include <stdexcept>
#define eigen_assert(x) \
  do {                  \
    if (!(x)) throw std::logic_error("eigen_assert failed: " #x); \
  } while (false)
#if defined(__GNUC__) && !defined(__clang__)
// The replacement operator new below allocates with malloc, so free is the matching release.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
#include <doctest/doctest.h>
#include <minimind/minimind.hpp>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <tuple>
#include <vector>

namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

using namespace minimind;

// Allocations (operator new, or Eigen's heap under the guard, which throws) in 16 greedy decode steps.
long decode_allocations(const MiniMindForCausalLM<float>& model, Session<float>& session) {
  int32_t id = 7;
  allocations = 0;
  counting = true;
  Eigen::internal::set_is_malloc_allowed(false);
  for (int step = 0; step < 16; ++step) {
    auto logits = model.forward(session, std::span<const int32_t>(&id, 1), false);
    Index best = 0;
    logits.row(0).maxCoeff(&best);
    id = static_cast<int32_t>(best);
  }
  Eigen::internal::set_is_malloc_allowed(true);
  counting = false;
  return allocations;
}

TEST_CASE("decode steps allocate nothing (Eigen malloc guard and operator new count)") {
  for (const Config& shape : {Config::minimind2_small(), Config::minimind3()}) {
    Config c = shape;
    c.num_hidden_layers = 2;
    for (WeightFormat format : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::Q8}) {
      for (int threads : {1, 2}) {
        CAPTURE(c.architecture);
        CAPTURE(std::string(format_name(format)));
        CAPTURE(threads);
        const auto model = MiniMindForCausalLM<float>::random(c, 3, {format, threads});
        auto session = model.new_session(64);
        const std::vector<int32_t> prompt = {1, 20, 300, 4000, 5};
        model.forward(session, prompt, false);
        CHECK(decode_allocations(model, session) == 0);
        CHECK(session.position() == 5 + 16);
      }
    }
  }
}

// A random adapter of `rank` on q, o, gate and down of every layer (in memory).
std::shared_ptr<const LoraAdapter> random_adapter(const Config& c, Index rank) {
  std::vector<LoraAdapter::Pair> pairs;
  const Index q = c.num_attention_heads * c.head_dim;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string layer = "model.layers." + std::to_string(l);
    for (const auto& [module, out, in] : {std::tuple{".self_attn.q_proj", q, c.hidden_size}, std::tuple{".self_attn.o_proj", c.hidden_size, q},
                                          std::tuple{".mlp.gate_proj", c.intermediate_size, c.hidden_size},
                                          std::tuple{".mlp.down_proj", c.hidden_size, c.intermediate_size}}) {
      pairs.push_back({layer + module, MatrixRM<float>::Random(rank, in) * 0.01f, MatrixRM<float>::Random(out, rank) * 0.01f});
    }
  }
  return std::make_shared<const LoraAdapter>(LoraAdapter::from_pairs("random", std::move(pairs)));
}

TEST_CASE("decode steps with unmerged LoRA adapters allocate nothing") {
  for (const Config& shape : {Config::minimind2_small(), Config::minimind3()}) {
    Config c = shape;
    c.num_hidden_layers = 2;
    const auto model = MiniMindForCausalLM<float>::random(c, 3, {WeightFormat::F32, 2});
    auto session = model.new_session(64);
    session.set_adapters({{random_adapter(c, 16), 1.0f}, {random_adapter(c, 8), 0.5f}});
    const std::vector<int32_t> prompt = {1, 20, 300, 4000, 5};
    model.forward(session, prompt, false);
    CHECK(decode_allocations(model, session) == 0);
  }
}

TEST_CASE("the guard is armed: an Eigen heap allocation under it throws") {
  Eigen::internal::set_is_malloc_allowed(false);
  CHECK_THROWS_AS(MatrixRM<float>(64, 64), std::logic_error);
  Eigen::internal::set_is_malloc_allowed(true);
  CHECK_NOTHROW(MatrixRM<float>(64, 64));
}
