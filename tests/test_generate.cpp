// The generation loop: greedy output equals the reference greedy ids, and each stop rule holds.
#include <doctest/doctest.h>
#include <minimind/generate.hpp>

#include "checkpoint_writer.hpp"
#include "golden.hpp"

using namespace minimind;
using minimind::testing::greedy;

namespace {
const std::filesystem::path case_dir = minimind::testing::data_dir() / "golden" / "mm3-dense";
}  // namespace

TEST_CASE("greedy generation reproduces the reference greedy ids of every own golden case") {
  for (const auto& entry : std::filesystem::directory_iterator(minimind::testing::data_dir() / "golden")) {
    if (!std::filesystem::exists(entry.path() / "expected.json")) continue;
    const auto golden = minimind::testing::read_golden_case(entry.path());
    const auto model = MiniMindForCausalLM<float>::from_pretrained(entry.path());
    for (const auto& prompt : golden.prompts) {
      CAPTURE(golden.name);
      CAPTURE(prompt.name);
      auto session = model.new_session(static_cast<Index>(prompt.ids.size() + prompt.greedy_ids.size()));
      const auto result = generate(model, session, prompt.ids, greedy(static_cast<int64_t>(prompt.greedy_ids.size())));
      CHECK(result.ids == prompt.greedy_ids);
      CHECK(result.stop == StopReason::MaxNewTokens);
      CHECK(result.prompt_tokens == static_cast<int64_t>(prompt.ids.size()));
    }
  }
}

TEST_CASE("stop rules: eos, callback, full context, and a prompt that does not fit") {
  const auto model = MiniMindForCausalLM<float>::from_pretrained(case_dir);
  const auto golden = minimind::testing::read_golden_case(case_dir);
  const auto& prompt = golden.prompts[0];
  const auto& expected = prompt.greedy_ids;

  SUBCASE("an eos id ends generation and is reported") {
    auto config = greedy(24);
    config.ignore_eos = false;
    config.eos_token_ids = {expected[3]};
    auto session = model.new_session(64);
    const auto result = generate(model, session, prompt.ids, config);
    const auto first = std::find(expected.begin(), expected.end(), expected[3]) - expected.begin();
    CHECK(result.stop == StopReason::EndOfSequence);
    CHECK(result.ids.size() == static_cast<size_t>(first + 1));
  }
  SUBCASE("the callback can stop it") {
    auto session = model.new_session(64);
    int calls = 0;
    const auto result = generate(model, session, prompt.ids, greedy(24), [&](int32_t) { return ++calls < 5; });
    CHECK(result.stop == StopReason::Callback);
    CHECK(result.ids.size() == 5);
  }
  SUBCASE("a full context stops with a reason, not a crash") {
    auto session = model.new_session(static_cast<Index>(prompt.ids.size() + 3));
    const auto result = generate(model, session, prompt.ids, greedy(100));
    CHECK(result.stop == StopReason::ContextFull);
    CHECK(result.ids.size() == 4);  // 3 fed back through the cache, then one more predicted
    CHECK(std::equal(result.ids.begin(), result.ids.end(), expected.begin()));
  }
  SUBCASE("a prompt longer than the context is an error") {
    auto session = model.new_session(4);
    CHECK_THROWS_WITH_AS(generate(model, session, prompt.ids, greedy(1)), doctest::Contains("does not fit the context"), Error);
  }
  SUBCASE("max_new_tokens 0 generates nothing; negative is refused") {
    auto session = model.new_session(64);
    CHECK(generate(model, session, prompt.ids, greedy(0)).ids.empty());
    CHECK_THROWS_WITH_AS(generate(model, session, prompt.ids, greedy(-1)), doctest::Contains("max_new_tokens must be >= 0"), Error);
  }
}

TEST_CASE("a continued session is the same as one long prompt") {
  const auto model = MiniMindForCausalLM<float>::from_pretrained(case_dir);
  const std::vector<int32_t> first = {1, 7, 9}, second = {11, 12};
  auto session = model.new_session(64);
  const auto turn1 = generate(model, session, first, greedy(4));
  // The session holds the prompt and all but the last generated id, which the next turn feeds.
  CHECK(session.position() == static_cast<Index>(first.size() + turn1.ids.size() - 1));
  std::vector<int32_t> turn2_prompt = {turn1.ids.back()};
  turn2_prompt.insert(turn2_prompt.end(), second.begin(), second.end());
  const auto turn2 = generate(model, session, turn2_prompt, greedy(4));

  std::vector<int32_t> whole = first;
  whole.insert(whole.end(), turn1.ids.begin(), turn1.ids.end());
  whole.insert(whole.end(), second.begin(), second.end());
  auto fresh = model.new_session(64);
  CHECK(generate(model, fresh, whole, greedy(4)).ids == turn2.ids);
}

TEST_CASE("sampled generation is reproducible for a seed") {
  const auto model = MiniMindForCausalLM<float>::from_pretrained(case_dir);
  GenerationConfig config;
  config.max_new_tokens = 16;
  config.ignore_eos = true;
  config.sampling.temperature = 1.0f;
  config.sampling.seed = 1234;
  const std::vector<int32_t> prompt = {1, 2, 3};
  auto run = [&] {
    auto session = model.new_session(64);
    return generate(model, session, prompt, config).ids;
  };
  const auto a = run();
  CHECK(a == run());
  config.sampling.seed = 99;
  CHECK(a != run());
}

TEST_CASE("generation defaults come from generation_config.json and every eos id is collected") {
  using namespace minimind::testing;
  const auto dir = write_tiny_checkpoint("generation_config");
  write_file(dir / "generation_config.json",
             R"({"bos_token_id": 1, "eos_token_id": [2, 5], "temperature": 0.7, "top_p": 0.9, "top_k": 20, "max_new_tokens": 64})");
  const auto model = MiniMindForCausalLM<float>::from_pretrained(dir);
  const auto g = GenerationConfig::from_pretrained(dir, model.config());
  CHECK(g.sampling.temperature == doctest::Approx(0.7));
  CHECK(g.sampling.top_p == doctest::Approx(0.9));
  CHECK(g.sampling.top_k == 20);
  CHECK(g.max_new_tokens == 64);
  CHECK(g.eos_token_ids == std::vector<int32_t>{2, 5});
  write_file(dir / "generation_config.json", R"({"temperature": "hot"})");
  CHECK_THROWS_WITH_AS(GenerationConfig::from_pretrained(dir, model.config()), doctest::Contains("\"temperature\""), Error);
}

TEST_CASE("resource bounds: max_new_tokens of any size reserves only what the context holds") {
  // A generation_config.json may say 10^12; reserving that many ids once threw std::length_error.
  const auto model = MiniMindForCausalLM<float>::from_pretrained(case_dir);
  auto session = model.new_session(8);
  const auto result = generate(model, session, std::vector<int32_t>{1, 2, 3}, greedy(1'000'000'000'000));
  CHECK(result.stop == StopReason::ContextFull);
  CHECK(result.ids.size() == 6);  // 5 positions left after the prompt, plus the last prediction
  CHECK(result.ids.capacity() <= 6);
}

TEST_CASE("prompt ids out of range are refused before anything runs, and the session stays usable") {
  const auto model = MiniMindForCausalLM<float>::from_pretrained(case_dir);
  const auto vocab = static_cast<int32_t>(model.config().vocab_size);
  auto session = model.new_session(16);
  for (const int32_t bad : {INT32_MIN, -1, vocab, INT32_MAX}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(generate(model, session, std::vector<int32_t>{1, bad, 2}, greedy(4)),
                         doctest::Contains(("token id " + std::to_string(bad) + " is outside the vocabulary").c_str()), Error);
    CHECK(session.position() == 0);
  }
  CHECK(generate(model, session, std::vector<int32_t>{1, vocab - 1}, greedy(4)).ids.size() == 4);
}
