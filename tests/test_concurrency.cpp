// Sharing: one const model and one const tokenizer used by several threads at once, each thread
// with its own Session (KV cache, scratch) and StreamingDecoder. Every thread's output must equal
// the single-threaded output, whatever the model's own thread pool size (LoadOptions::threads: 1,
// the default of one per core, and more threads than cores). .ci/run also runs this test under
// ThreadSanitizer, which turns any data race in that sharing into a failure.
#include <doctest/doctest.h>
#include <minimind/minimind.hpp>

#include "golden.hpp"
#include "test_support.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

using namespace minimind;
using minimind::testing::greedy;

namespace {

constexpr int kThreads = 4;
constexpr int kRounds = 2;  // each thread goes through its prompts twice, reusing its session

const std::filesystem::path demo_dir = minimind::testing::source_dir() / "examples" / "models" / "demo";


std::vector<int32_t> run_greedy(const MiniMindForCausalLM<float>& model, Session<float>& session,
                                const std::vector<int32_t>& prompt, int64_t new_tokens) {
  session.reset();
  return generate(model, session, prompt, greedy(new_tokens)).ids;
}

// Runs body(thread_index) on kThreads threads at once and waits for them.
template <class Body>
void on_threads(Body&& body) {
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&body, t] { body(t); });
  for (auto& thread : threads) thread.join();
}

// Greedy generation of every prompt on one thread, then on kThreads threads, each thread with its
// own session and starting at a different prompt so that different work overlaps.
void check_shared_model(const MiniMindForCausalLM<float>& model, const std::vector<std::vector<int32_t>>& prompts,
                        int64_t new_tokens) {
  const Index context = static_cast<Index>(
      std::max_element(prompts.begin(), prompts.end(), [](auto& a, auto& b) { return a.size() < b.size(); })->size() + new_tokens);
  std::vector<std::vector<int32_t>> expected;
  auto single = model.new_session(context);
  for (const auto& prompt : prompts) expected.push_back(run_greedy(model, single, prompt, new_tokens));

  std::vector<std::vector<std::vector<int32_t>>> got(kThreads);  // [thread][round * prompts + p]
  on_threads([&](int t) {
    auto session = model.new_session(context);
    for (int round = 0; round < kRounds; ++round) {
      for (size_t i = 0; i < prompts.size(); ++i) {
        const size_t p = (i + static_cast<size_t>(t)) % prompts.size();
        got[t].push_back(run_greedy(model, session, prompts[p], new_tokens));
      }
    }
  });
  for (int t = 0; t < kThreads; ++t) {
    CAPTURE(t);
    REQUIRE(got[t].size() == kRounds * prompts.size());
    for (size_t k = 0; k < got[t].size(); ++k) {
      const size_t p = (k % prompts.size() + static_cast<size_t>(t)) % prompts.size();
      CHECK(got[t][k] == expected[p]);
    }
  }
}

}  // namespace

TEST_CASE("threads sharing one const golden model, each with its own session, give the single-threaded greedy ids") {
  for (const std::string name : {"mm3-dense", "mm2-moe"}) {
    const auto dir = minimind::testing::data_dir() / "golden" / name;
    const auto golden = minimind::testing::read_golden_case(dir);
    std::vector<std::vector<int32_t>> prompts;
    // At most 48 tokens each, so the ThreadSanitizer run stays short; prefill still runs batched.
    for (const auto& prompt : golden.prompts) {
      prompts.emplace_back(prompt.ids.begin(), prompt.ids.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(prompt.ids.size(), 48)));
    }
    for (const int pool : {1, 0, 3}) {  // no pool, one thread per core (the default), more than the cores
      for (const WeightFormat format : {WeightFormat::F32, WeightFormat::Q8}) {
        CAPTURE(name);
        CAPTURE(pool);
        CAPTURE(format_name(format));
        LoadOptions options;
        options.threads = pool;
        options.format = format;
        const auto model = MiniMindForCausalLM<float>::from_pretrained(dir, options);
        check_shared_model(model, prompts, 8);
        if (format == WeightFormat::F32) {
          // And the single-threaded run is the reference run: greedy ids as PyTorch computed them.
          auto session = model.new_session(256);
          for (const auto& prompt : golden.prompts) {
            CHECK(run_greedy(model, session, prompt.ids, static_cast<int64_t>(prompt.greedy_ids.size())) == prompt.greedy_ids);
          }
        }
      }
    }
  }
}

TEST_CASE("threads sharing the demo model and its tokenizer stream the single-threaded text") {
  const auto tokenizer = Tokenizer::from_pretrained(demo_dir);
  const std::vector<std::string> texts = {"今天天气", "我们一起", "小猫", "The model", "你好，世界"};
  for (const int pool : {1, 0}) {
    CAPTURE(pool);
    LoadOptions options;
    options.threads = pool;
    const auto model = MiniMindForCausalLM<float>::from_pretrained(demo_dir, options);
    const auto generate_all = [&](Session<float>& session, size_t first) {
      std::vector<std::string> out(texts.size());
      for (size_t i = 0; i < texts.size(); ++i) {
        const size_t p = (first + i) % texts.size();
        session.reset();
        generate_text(model, tokenizer, session, tokenizer.encode(texts[p]), greedy(12), [&](std::string_view piece) {
          out[p] += piece;
          return true;
        });
      }
      return out;
    };
    auto single = model.new_session(64);
    const std::vector<std::string> expected = generate_all(single, 0);
    std::vector<std::vector<std::string>> got(kThreads);
    on_threads([&](int t) {
      auto session = model.new_session(64);
      got[t] = generate_all(session, static_cast<size_t>(t));
    });
    for (int t = 0; t < kThreads; ++t) CHECK(got[t] == expected);
    CHECK_FALSE(expected[0].empty());
  }
}

TEST_CASE("concurrent encode and decode on one shared tokenizer give the single-threaded ids and text") {
  std::vector<std::filesystem::path> dirs = {demo_dir};
  if (const auto shared = minimind::testing::shared_dir("minimind")) dirs.push_back(*shared / "minimind-3");
  for (const auto& dir : dirs) {
    CAPTURE(dir.string());
    const auto tokenizer = Tokenizer::from_pretrained(dir);
    // Many distinct words, so the threads fill the shared word cache at the same time.
    std::vector<std::string> texts;
    for (int i = 0; i < 64; ++i) {
      texts.push_back("line " + std::to_string(i * 7919) + ": 今天天气很好 <|im_start|>user\n word" + std::to_string(i) +
                      " 😀 the quick brown fox" + std::string(static_cast<size_t>(i % 5), ' ') + "<|im_end|>");
    }
    std::vector<std::vector<int32_t>> expected;
    for (const auto& text : texts) expected.push_back(tokenizer.encode(text));
    // A fresh copy has an empty cache, so the concurrent run starts cold.
    const Tokenizer shared = tokenizer;
    std::vector<size_t> matches(kThreads, 0);
    on_threads([&](int t) {
      for (int round = 0; round < kRounds; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          const size_t k = (i * 5 + static_cast<size_t>(t) * 13) % texts.size();
          const auto ids = shared.encode(texts[k]);
          StreamingDecoder stream(shared);
          std::string streamed;
          for (const int32_t id : ids) streamed += stream.push(id);
          streamed += stream.flush();
          matches[t] += ids == expected[k] && shared.decode(ids) == texts[k] && streamed == texts[k];
        }
      }
    });
    CHECK(matches == std::vector<size_t>(kThreads, kRounds * texts.size()));
  }
}
