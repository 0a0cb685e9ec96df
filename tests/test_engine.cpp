// Engine: requests run together by the scheduler thread give what generate() gives each alone
// (greedy ids, stop reasons, counts), with prompts prefilled in chunks, KV caches grown in
// blocks, requests queued behind busy slots, JSON-schema constraints and LoRA adapters mixed with
// plain requests; submission and cancel from many threads; a full queue; shutdown in flight; the
// steps reported to on_step and the times of each request's first and last ids.
#include <doctest/doctest.h>
#include <minimind/engine.hpp>

#include "golden.hpp"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

using namespace minimind;
using minimind::testing::data_dir;
using minimind::testing::greedy;
using minimind::testing::source_dir;

namespace {

const std::filesystem::path demo_dir = source_dir() / "examples" / "models" / "demo";

// Small prefill chunks make prompts run over several steps (and caches grow mid-request, by blocks of 32 positions).
EngineOptions engine_options(int slots, size_t max_queue = 16, Index context = 0, size_t prefill_rows = 256, size_t cache_mb = 256) {
  EngineOptions options;
  options.slots = slots;
  options.max_queue = max_queue;
  options.context = context;
  options.prefill_rows = prefill_rows;
  options.cache_mb = cache_mb;
  return options;
}

struct Expected {
  std::vector<int32_t> ids;
  StopReason stop;
};

Expected alone(const MiniMindForCausalLM<float>& model, const std::vector<int32_t>& prompt, const GenerationConfig& config,
               std::vector<LoraUse> adapters = {}) {
  auto session = model.new_session();
  session.set_adapters(std::move(adapters));
  auto result = generate(model, session, prompt, config);
  return {std::move(result.ids), result.stop};
}

// Every id a request generates, read to its end.
std::vector<int32_t> read_all(RequestHandle<float>& generation) {
  std::vector<int32_t> all, ids;
  while (generation.next(ids)) all.insert(all.end(), ids.begin(), ids.end());
  return all;
}

// Prompts of several lengths from the demo tokenizer, one longer than a few prefill chunks.
std::vector<std::vector<int32_t>> demo_prompts(const Tokenizer& tokenizer) {
  std::vector<std::vector<int32_t>> prompts;
  for (const char* text : {"今天天气", "小明家养了一只猫", "这块石头很硬", "你好", "天气"}) prompts.push_back(tokenizer.encode(text));
  std::vector<int32_t> long_prompt;
  while (long_prompt.size() < 70) {
    const auto more = tokenizer.encode("小明家养了一只猫，今天天气很好。");
    long_prompt.insert(long_prompt.end(), more.begin(), more.end());
  }
  prompts.insert(prompts.begin() + 2, long_prompt);
  return prompts;
}

}  // namespace

TEST_CASE("prompts through the Engine give generate()'s greedy ids, on the demo model and every own golden case") {
  // Small prefill chunks and KV blocks, and fewer slots than requests: prompts are prefilled over
  // several steps beside others' decoding, caches grow mid-request, and requests wait their turn.
  const EngineOptions options = engine_options(3, 16, 128, 16);
  SUBCASE("the demo model, eos ids on") {
    const auto checkpoint = load_pretrained<float>(demo_dir);
    const auto prompts = demo_prompts(checkpoint.require_tokenizer());
    const std::vector<int64_t> max_tokens = {40, 7, 25, 60, 3, 33};
    std::vector<GenerationConfig> configs;
    for (int64_t max : max_tokens) {
      GenerationConfig config = checkpoint.generation;
      config.sampling.temperature = 0;
      config.max_new_tokens = max;
      configs.push_back(config);
    }
    Engine engine(checkpoint.model, options);
    std::vector<RequestHandle<float>> replies;
    for (size_t i = 0; i < prompts.size(); ++i) replies.push_back(engine.submit({prompts[i], configs[i]}));
    for (size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(i);
      const Expected expected = alone(checkpoint.model, prompts[i], configs[i]);
      CHECK(read_all(replies[i]) == expected.ids);
      const EngineOutcome outcome = replies[i].outcome();
      CHECK(outcome.stop == expected.stop);
      CHECK(outcome.prompt_tokens == static_cast<int64_t>(prompts[i].size()));
      CHECK(outcome.generated_tokens == static_cast<int64_t>(expected.ids.size()));
      CHECK(!outcome.cancelled);
      CHECK(outcome.error.empty());
    }
    const EngineStatus status = engine.status();
    CHECK(status.idle == 3);
    CHECK(status.queued == 0);
  }
  SUBCASE("every own golden case, with a context that fills up") {
    for (const auto& entry : std::filesystem::directory_iterator(data_dir() / "golden")) {
      if (!std::filesystem::exists(entry.path() / "expected.json")) continue;
      const auto golden = minimind::testing::read_golden_case(entry.path());
      CAPTURE(golden.name);
      const auto model = MiniMindForCausalLM<float>::from_pretrained(entry.path());
      Index context = 0;
      for (const auto& prompt : golden.prompts) context = std::max(context, static_cast<Index>(prompt.ids.size() + prompt.greedy_ids.size()));
      Engine engine(model, engine_options(2, 16, context, 5));
      std::vector<RequestHandle<float>> replies;
      std::vector<Expected> expected;
      for (const auto& prompt : golden.prompts) {
        const GenerationConfig config = greedy(static_cast<int64_t>(prompt.greedy_ids.size()));
        replies.push_back(engine.submit({prompt.ids, config}));
        expected.push_back({prompt.greedy_ids, StopReason::MaxNewTokens});
        // The same prompt until the context is full.
        replies.push_back(engine.submit({prompt.ids, greedy(100000)}));
        auto session = model.new_session(context);
        const auto result = generate(model, session, prompt.ids, greedy(100000));
        expected.push_back({result.ids, StopReason::ContextFull});
      }
      for (size_t i = 0; i < replies.size(); ++i) {
        CAPTURE(i);
        CHECK(read_all(replies[i]) == expected[i].ids);
        CHECK(replies[i].outcome().stop == expected[i].stop);
      }
    }
  }
}

TEST_CASE("a JSON-schema constraint and LoRA adapters mixed with plain requests in one batch") {
  SUBCASE("constrained and plain on the demo model") {
    const auto checkpoint = load_pretrained<float>(demo_dir);
    const Tokenizer& tokenizer = checkpoint.require_tokenizer();
    GenerationConfig plain = checkpoint.generation;
    plain.sampling.temperature = 0;
    plain.max_new_tokens = 30;
    GenerationConfig constrained = plain;
    constrained.json_grammar = JsonGrammar::from_schema(
        nlohmann::json::parse(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"]})"),
        tokenizer);
    constrained.max_new_tokens = 40;
    const auto prompts = demo_prompts(tokenizer);
    Engine engine(checkpoint.model, engine_options(4, 16, 0, 16));
    std::vector<RequestHandle<float>> replies;
    for (size_t i = 0; i < prompts.size(); ++i) replies.push_back(engine.submit({prompts[i], i % 2 ? constrained : plain}));
    for (size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(i);
      const Expected expected = alone(checkpoint.model, prompts[i], i % 2 ? constrained : plain);
      const auto ids = read_all(replies[i]);
      CHECK(ids == expected.ids);
      if (i % 2) {
        // A whole document of the schema, ended by an eos id.
        REQUIRE(replies[i].outcome().stop == StopReason::EndOfSequence);
        const auto document = nlohmann::json::parse(tokenizer.decode(std::vector<int32_t>(ids.begin(), ids.end() - 1)));
        CHECK(document.at("name").is_string());
        CHECK(document.at("age").is_number_integer());
      }
    }
  }
  SUBCASE("adapters and none on a golden case") {
    const auto model = MiniMindForCausalLM<float>::from_pretrained(data_dir() / "golden" / "mm2-dense-f32");
    const auto adapter = std::make_shared<const LoraAdapter>(LoraAdapter::load(data_dir() / "lora" / "adapters" / "mm2-peft"));
    const std::vector<std::vector<LoraUse>> choices = {{{adapter, 1.0f}}, {}, {{adapter, -0.75f}}, {}};
    const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9, 3}, {1, 5, 9, 3}, {1, 40, 2, 33, 7, 8}, {1, 17}};
    Engine engine(model, engine_options(4));
    std::vector<RequestHandle<float>> replies;
    for (size_t i = 0; i < prompts.size(); ++i) replies.push_back(engine.submit({prompts[i], greedy(12), choices[i]}));
    std::vector<std::vector<int32_t>> got;
    for (size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(i);
      got.push_back(read_all(replies[i]));
      CHECK(got.back() == alone(model, prompts[i], greedy(12), choices[i]).ids);
    }
    CHECK(got[0] != got[1]);  // the adapter changes what is generated
    // One after another, so that each could find the blocks of the one before: keys and values
    // made with an adapter are not the plain model's, so a request with adapters neither reuses
    // nor leaves cached blocks.
    for (const size_t i : {0, 1, 0}) {
      CAPTURE(i);
      auto reply = engine.submit({prompts[i], greedy(12), choices[i]});
      CHECK(read_all(reply) == got[i]);
      CHECK(reply.outcome().cached_tokens == (choices[i].empty() ? 3 : 0));
    }
  }
}

TEST_CASE("requests submitted and cancelled from several threads") {
  const auto checkpoint = load_pretrained<float>(demo_dir);
  const auto prompts = demo_prompts(checkpoint.require_tokenizer());
  GenerationConfig config = greedy(24);
  std::vector<std::vector<int32_t>> expected;
  for (const auto& prompt : prompts) expected.push_back(alone(checkpoint.model, prompt, config).ids);

  Engine engine(checkpoint.model, engine_options(3, 64, 0, 16));
  constexpr size_t kThreads = 4, kRounds = 3;
  std::atomic<size_t> failures{0}, cancelled{0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t round = 0; round < kRounds; ++round) {
        const size_t p = (t + round) % prompts.size();
        auto reply = engine.submit({prompts[p], config, {}, 1 + t});
        // Every other request is cancelled by another thread after its first ids.
        if ((t + round) % 2 == 0) {
          std::vector<int32_t> all, ids;
          if (reply.next(ids)) all = ids;
          std::thread([&reply] { reply.cancel(); }).join();
          while (reply.next(ids)) all.insert(all.end(), ids.begin(), ids.end());
          const auto outcome = reply.outcome();
          // Cancelled at the next step, or already at its end.
          if (!(outcome.cancelled || outcome.stop) || !std::equal(all.begin(), all.end(), expected[p].begin())) ++failures;
          cancelled += outcome.cancelled;
        } else if (read_all(reply) != expected[p] || reply.outcome().stop != StopReason::MaxNewTokens) {
          ++failures;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(failures == 0);
  CHECK(cancelled > 0);
  CHECK(engine.status().idle == 3);
}

TEST_CASE("on_step sees every step with its batch size; outcomes say when the first and last ids were sampled") {
  const auto model = MiniMindForCausalLM<float>::from_pretrained(demo_dir);
  std::mutex mutex;
  std::vector<EngineStep> steps;
  EngineOptions options = engine_options(2, 8, 0, 16);
  options.on_step = [&](const EngineStep& step) {
    std::lock_guard<std::mutex> lock(mutex);
    steps.push_back(step);
  };
  Engine engine(model, options);
  std::vector<int32_t> long_prompt;
  for (int32_t i = 0; i < 70; ++i) long_prompt.push_back(5 + i);

  // Alone: a prompt of 70 ids prefilled 16 a step takes 5 steps, the last sampling the first id;
  // each further id one step more.
  const auto submitted = std::chrono::steady_clock::now();
  auto reply = engine.submit({long_prompt, greedy(3)});
  CHECK(read_all(reply).size() == 3);
  const auto read = std::chrono::steady_clock::now();
  const EngineOutcome outcome = reply.outcome();
  REQUIRE(outcome.first_token_at);
  REQUIRE(outcome.last_token_at);
  CHECK(submitted < *outcome.first_token_at);
  CHECK(*outcome.first_token_at < *outcome.last_token_at);
  CHECK(*outcome.last_token_at <= read);
  {
    std::lock_guard<std::mutex> lock(mutex);  // every step was reported before its ids were readable
    CHECK(steps.size() == 7);
    for (const auto& step : steps) {
      CHECK(step.sequences == 1);
      CHECK(step.seconds > 0);
    }
    steps.clear();
  }

  // Together, on two slots: every sampled id is one sequence in one step (the prompts are short),
  // and no step holds more sequences than there are slots.
  std::vector<RequestHandle<float>> replies;
  for (int64_t n : {6, 1, 4}) replies.push_back(engine.submit({{1, 5, 9}, greedy(n)}));
  size_t generated = 0;
  for (auto& r : replies) generated += read_all(r).size();
  CHECK(generated == 11);
  CHECK(replies[1].outcome().first_token_at == replies[1].outcome().last_token_at);
  {
    std::lock_guard<std::mutex> lock(mutex);
    size_t sequences = 0;
    for (const auto& step : steps) {
      CHECK(step.sequences >= 1);
      CHECK(step.sequences <= 2);
      sequences += step.sequences;
    }
    CHECK(sequences == generated);
    CHECK(steps.size() >= 6);
  }
  // A request with nothing to generate was never in a step.
  auto nothing = engine.submit({{1, 5}, greedy(0)});
  CHECK(read_all(nothing).empty());
  CHECK(!nothing.outcome().first_token_at);
}

TEST_CASE("a full queue refuses, a queued request can be cancelled, and a reserved slot counts") {
  const auto model = MiniMindForCausalLM<float>::from_pretrained(demo_dir);
  Engine engine(model, engine_options(1, 2));
  auto slot = engine.reserve_slot();
  CHECK(slot.wait_started(std::chrono::milliseconds(0)));
  auto first = engine.submit({{1, 5, 9}, greedy(4)});
  auto second = engine.submit({{1, 5}, greedy(4)});
  CHECK(!first.wait_started(std::chrono::milliseconds(20)));
  const EngineStatus status = engine.status();
  CHECK(status.idle == 0);
  CHECK(status.queued == 2);
  try {
    engine.submit({{1}, greedy(4)});
    FAIL("a full queue took a request");
  } catch (const QueueFull& e) {
    CHECK(e.slots == 1);
    CHECK(e.waiting == 2);
    CHECK(e.max_queue == 2);
  }
  first.cancel();
  CHECK(first.finished());
  CHECK(first.outcome().cancelled);
  CHECK(engine.status().queued == 1);
  slot.cancel();  // the slot goes to the one still waiting
  CHECK(read_all(second) == alone(model, {1, 5}, greedy(4)).ids);
  CHECK(engine.status().idle == 1);
}

TEST_CASE("shutdown with requests running and queued, and handles that outlive the engine") {
  const auto model = MiniMindForCausalLM<float>::from_pretrained(demo_dir);
  std::vector<RequestHandle<float>> replies;
  {
    Engine engine(model, engine_options(2, 8));
    for (int i = 0; i < 5; ++i) replies.push_back(engine.submit({{1, 5, 9, static_cast<int32_t>(3 + i)}, greedy(100000)}));
    std::vector<int32_t> ids;
    REQUIRE(replies[0].next(ids));  // running
    engine.shutdown();
    CHECK(engine.stopping());
    CHECK_THROWS_AS(engine.submit({{1}, greedy(4)}), ShuttingDown);
    for (size_t i = 2; i < replies.size(); ++i) {  // were waiting: ended at once
      CHECK(replies[i].finished());
      CHECK(replies[i].outcome().shut_down);
    }
    read_all(replies[0]);
    CHECK(replies[0].outcome().shut_down);
  }  // destroyed with replies[1] perhaps not read
  read_all(replies[1]);
  CHECK(replies[1].outcome().shut_down);
  replies[1].cancel();  // no effect, and safe, after the engine is gone
}

TEST_CASE("read_text gives generate_text()'s text, cut at a stop string") {
  const auto checkpoint = load_pretrained<float>(demo_dir);
  const Tokenizer& tokenizer = checkpoint.require_tokenizer();
  const auto prompt = tokenizer.encode("小明家养了一只");
  GenerationConfig config = checkpoint.generation;
  config.sampling.temperature = 0;
  config.max_new_tokens = 20;
  std::string whole;
  auto session = checkpoint.model.new_session();
  const auto result = generate_text(checkpoint.model, tokenizer, session, prompt, config, [&](std::string_view piece) {
    whole += piece;
    return true;
  });
  REQUIRE(whole.size() > 6);
  Engine engine(checkpoint.model);
  auto read = [&](std::vector<std::string> stop, std::string& text) {
    auto reply = engine.submit({prompt, config});
    return read_text(reply, tokenizer, config, std::move(stop), [&](std::string_view piece) {
      text += piece;
      return Delivery::more;
    });
  };
  std::string text;
  const TextOutcome full = read({}, text);
  CHECK(text == whole);
  CHECK(full.complete);
  CHECK(full.eos == (result.stop == StopReason::EndOfSequence));
  CHECK(full.completion_tokens == static_cast<int64_t>(result.ids.size()) - (full.eos ? 1 : 0));
  // A stop string taken from the middle of the text, spanning tokens or not: the text before it.
  const std::string stop = whole.substr(3, 3);
  text.clear();
  const TextOutcome cut = read({stop}, text);
  CHECK(text == whole.substr(0, whole.find(stop)));
  CHECK(cut.stop_string);
  CHECK(!cut.complete);
  CHECK(engine.status().idle == engine.options().slots);
}

TEST_CASE("requests the engine cannot run are refused with a reason") {
  const auto model = MiniMindForCausalLM<float>::from_pretrained(demo_dir);
  Engine engine(model, engine_options(4, 16, 16));
  CHECK_THROWS_WITH_AS(engine.submit({{}, greedy(4)}), doctest::Contains("no tokens"), Error);
  CHECK_THROWS_WITH_AS(engine.submit({std::vector<int32_t>(17, 1), greedy(4)}),
                       doctest::Contains("more than the context of 16"), Error);
  CHECK_THROWS_AS(engine.submit({{1, static_cast<int32_t>(model.config().vocab_size)}, greedy(4)}), Error);
  GenerationConfig bad = greedy(4);
  bad.sampling.top_p = 0;
  CHECK_THROWS_WITH_AS(engine.submit({{1}, bad}), doctest::Contains("top_p"), Error);
  CHECK_THROWS_WITH_AS(Engine(model, engine_options(0)), doctest::Contains("slots must be >= 1"), Error);
  auto nothing = engine.submit({{1}, greedy(0)});
  CHECK(nothing.finished());
  CHECK(read_all(nothing).empty());
  CHECK(engine.status().idle == engine.options().slots);
}

namespace {

// Ids in [3, vocab) from a fixed seed: prompts that share exactly what a case says.
std::vector<int32_t> random_ids(size_t n, uint32_t seed, int32_t vocab) {
  std::vector<int32_t> ids(n);
  uint32_t x = seed;
  for (int32_t& id : ids) {
    x = x * 1664525u + 1013904223u;
    id = 3 + static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab - 3));
  }
  return ids;
}

std::vector<int32_t> concat(std::vector<int32_t> a, std::span<const int32_t> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A conversation's first turn and the prompts that share 0 blocks, 1 block, part of a block, the
// whole first prompt, or the first prompt and its reply with it, and how many positions each
// finds cached once the first turn has run (at most the prompt less its last id).
struct CacheCases {
  std::vector<int32_t> first;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> cached;
};

CacheCases cache_cases(int32_t vocab, const std::vector<int32_t>& first_reply) {
  constexpr size_t B = KVCache<float>::kBlockPositions;
  CacheCases c;
  c.first = random_ids(3 * B + 4, 1, vocab);
  auto other = [&](uint32_t seed, size_t n, int32_t differ_from) {
    auto ids = random_ids(n, seed, vocab);
    if (ids[0] == differ_from) ids[0] = differ_from == 3 ? 4 : 3;
    return ids;
  };
  const auto head = [&](size_t n) { return std::vector<int32_t>(c.first.begin(), c.first.begin() + static_cast<std::ptrdiff_t>(n)); };
  c.prompts.push_back(other(2, 50, c.first[0]));
  c.cached.push_back(0);
  c.prompts.push_back(concat(head(B), other(3, 40, c.first[B])));
  c.cached.push_back(B);
  c.prompts.push_back(concat(head(B + 13), other(4, 30, c.first[B + 13])));
  c.cached.push_back(B + 13);
  c.prompts.push_back(c.first);
  c.cached.push_back(static_cast<int64_t>(c.first.size()) - 1);
  if (!first_reply.empty()) {
    // A second turn: the first prompt, its reply, more. The reply's last id was sampled, never run.
    c.prompts.push_back(concat(concat(c.first, first_reply), other(5, 20, -1)));
    c.cached.push_back(static_cast<int64_t>(c.first.size() + first_reply.size()) - 1);
  }
  return c;
}

EngineRequest request(std::vector<int32_t> prompt, int64_t max_new_tokens, bool cache_prompt = true) {
  EngineRequest r(std::move(prompt), greedy(max_new_tokens));
  r.cache_prompt = cache_prompt;
  return r;
}

}  // namespace

TEST_CASE("the prompt cache: prompts that share 0 blocks, 1 block, part of a block or the whole prompt give generate()'s greedy ids") {
  const auto model = MiniMindForCausalLM<float>::from_pretrained(demo_dir);
  const int32_t vocab = static_cast<int32_t>(model.config().vocab_size);
  constexpr int64_t kNew = 24;
  for (const int slots : {1, 3}) {
    CAPTURE(slots);
    Engine engine(model, engine_options(slots, 16, 0, 64));
    const std::vector<int32_t> first = cache_cases(vocab, {}).first;
    auto turn = engine.submit(request(first, kNew));
    const std::vector<int32_t> reply = read_all(turn);
    CHECK(reply == alone(model, first, greedy(kNew)).ids);
    CHECK(turn.outcome().cached_tokens == 0);
    const CacheCases cases = cache_cases(vocab, reply);
    // All at once, and again without the cache: the same ids.
    for (const bool cache_prompt : {true, false}) {
      CAPTURE(cache_prompt);
      std::vector<RequestHandle<float>> replies;
      for (const auto& prompt : cases.prompts) replies.push_back(engine.submit(request(prompt, kNew, cache_prompt)));
      for (size_t i = 0; i < replies.size(); ++i) {
        CAPTURE(i);
        CHECK(read_all(replies[i]) == alone(model, cases.prompts[i], greedy(kNew)).ids);
        CHECK(replies[i].outcome().cached_tokens == (cache_prompt ? cases.cached[i] : 0));
      }
    }
  }
}

TEST_CASE("the prompt cache within its bound: the least recently used blocks go first") {
  const auto model = MiniMindForCausalLM<float>::from_pretrained(demo_dir);
  const int32_t vocab = static_cast<int32_t>(model.config().vocab_size);
  constexpr Index B = KVCache<float>::kBlockPositions;
  // 1 MiB: 16 blocks of the demo model (4 layers, 2 kv heads of 32, f32: 64 KiB a block).
  REQUIRE(KVBlockPool<float>::block_bytes(model.config()) * 16 == size_t{1} << 20);
  Engine engine(model, engine_options(2, 16, 0, 64, 1));
  CHECK(engine.cache_positions() == 16 * B);
  CHECK(Engine(model, engine_options(1, 1, 0, 64, 0)).cache_positions() == 0);
  // Five prompts of 4 full blocks and 1 more id, each leaving 5 blocks (the last holds 2 ids: the
  // prompt's and the first reply id's): the cache holds three at most.
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t seed = 10; seed < 15; ++seed) prompts.push_back(random_ids(4 * B + 1, seed, vocab));
  auto run = [&](const std::vector<int32_t>& prompt) {
    auto reply = engine.submit(request(prompt, 2));
    CHECK(read_all(reply) == alone(model, prompt, greedy(2)).ids);
    return reply.outcome().cached_tokens;
  };
  for (const auto& prompt : prompts) CHECK(run(prompt) == 0);
  // 16 blocks: the last three prompts' 5 each and the first block of prompts[1]. A prompt's blocks
  // go from its end, least recently used first; a whole prompt less its last id is reused.
  CHECK(run(prompts[4]) == 4 * B);
  CHECK(run(prompts[3]) == 4 * B);
  CHECK(run(prompts[1]) == B);  // evicts prompts[2]'s last 4
  CHECK(run(prompts[0]) == 0);  // evicts prompts[2]'s first, prompts[4]'s last 4
  CHECK(run(prompts[2]) == 0);  // evicts prompts[4]'s first, prompts[3]'s last 4
  CHECK(run(prompts[3]) == B);  // evicts prompts[1]'s last 4
  // Two at once, each extending a cached one by a block: both fit beside what they share.
  std::vector<RequestHandle<float>> replies;
  const std::vector<int32_t> longer[] = {concat(prompts[3], random_ids(B, 20, vocab)), concat(prompts[2], random_ids(B, 21, vocab))};
  for (const auto& prompt : longer) replies.push_back(engine.submit(request(prompt, 5)));
  for (size_t i = 0; i < 2; ++i) {
    CHECK(read_all(replies[i]) == alone(model, longer[i], greedy(5)).ids);
    CHECK(replies[i].outcome().cached_tokens == 4 * B + 1);
  }
}

TEST_CASE("logits over cached blocks of a shared pool are those of the sequence that computed them") {
  // What the Engine does when a request joins, on a pool and an index of its own. The uncached
  // rest of a prompt cut at a block's end runs in the same blocks of 32 queries as in the whole
  // prompt's prefill, so its logits are the very same; cut inside a block (the queries grouped
  // otherwise) or a single position (the whole prompt cached: row-by-row attention), they are
  // within rounding.
  const auto model = MiniMindForCausalLM<float>::from_pretrained(demo_dir);
  const int32_t vocab = static_cast<int32_t>(model.config().vocab_size);
  constexpr Index B = KVCache<float>::kBlockPositions;
  KVBlockPool<float> pool(model.config(), 64);
  PrefixIndex index(B, 64);
  const CacheCases cases = cache_cases(vocab, {});
  {
    Session<float> writer(model.config(), pool);
    writer.reserve(static_cast<Index>(cases.first.size()));
    model.forward(writer, cases.first, false);
    int32_t parent = PrefixIndex::kRoot;
    for (size_t b = 0; b * B < cases.first.size(); ++b) {
      const auto ids = std::span<const int32_t>(cases.first).subspan(b * B, std::min<size_t>(B, cases.first.size() - b * B));
      bool adopted = false;
      parent = index.insert(parent, ids, writer.cache().blocks[b], adopted);
      REQUIRE(parent != PrefixIndex::kRoot);
      index.release(parent);
    }
  }
  for (size_t i = 0; i < cases.prompts.size(); ++i) {
    CAPTURE(i);
    const auto& prompt = cases.prompts[i];
    const PrefixIndex::Match match = index.find(prompt, static_cast<Index>(prompt.size()) - 1);
    REQUIRE(index.positions(match) == cases.cached[i]);
    Session<float> session(model.config(), pool);
    for (const int32_t node : match.nodes) session.cache().blocks.push_back(index.block(node));
    if (match.copy_rows > 0) {
      session.cache().blocks.push_back(pool.allocate());
      pool.copy_rows(index.block(match.copy_from), session.cache().blocks.back(), match.copy_rows);
    }
    session.cache().capacity = static_cast<Index>(session.cache().blocks.size()) * B;
    session.advance(cases.cached[i]);
    session.reserve(static_cast<Index>(prompt.size()));
    const auto rest = std::span<const int32_t>(prompt).subspan(static_cast<size_t>(cases.cached[i]));
    const MatrixRM<float> cached = model.forward(session, rest);
    const MatrixRM<float> whole = model.forward(prompt);
    const MatrixRM<float> expected = whole.bottomRows(cached.rows());
    if (cases.cached[i] % B == 0) CHECK((cached.array() == expected.array()).all());
    CHECK((cached - expected).cwiseAbs().maxCoeff() <= 1e-5f);
    for (const int32_t node : match.nodes) index.release(node);
  }
}
