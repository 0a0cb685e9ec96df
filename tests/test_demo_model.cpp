// The demo model shipped in examples/models/demo: the C++ logits equal the exported torch logits,
// its tokenizer gives the exporter's ids, and greedy generation says the sentences it learned.
#include <doctest/doctest.h>
#include <minimind/generate.hpp>
#include <minimind/minimind.hpp>
#include <minimind/tokenizer.hpp>

#include "test_support.hpp"

using namespace minimind;

namespace {
const std::filesystem::path demo_dir = minimind::testing::source_dir() / "examples" / "models" / "demo";
}

TEST_CASE("demo model: tokenizer ids, logits and greedy continuations match the torch export") {
  const auto golden = io::read_json_file(demo_dir / "golden.json");
  const auto model = MiniMindForCausalLM<float>::from_pretrained(demo_dir);
  const auto tokenizer = Tokenizer::from_pretrained(demo_dir);
  const double tolerance = golden.at("tolerance").at("logits_max_abs").get<double>();
  CHECK(model.is_tied());
  REQUIRE(golden.at("prompts").size() >= 4);
  for (const auto& prompt : golden.at("prompts")) {
    const std::string text = prompt.at("text").get<std::string>();
    CAPTURE(text);
    const auto ids = prompt.at("ids").get<std::vector<int32_t>>();
    CHECK(tokenizer.encode(text) == ids);

    const auto expected = prompt.at("last_logits").get<std::vector<float>>();
    const MatrixRM<float> logits = model.forward(ids);
    double worst = 0;
    for (size_t j = 0; j < expected.size(); ++j) {
      worst = minimind::testing::worse(worst, std::abs(static_cast<double>(logits(logits.rows() - 1, static_cast<Index>(j))) - expected[j]));
    }
    CHECK(worst <= tolerance);

    GenerationConfig config;
    config.sampling.temperature = 0;
    config.max_new_tokens = golden.at("greedy_n").get<int64_t>();
    config.eos_token_ids = {golden.at("eos_token_id").get<int32_t>()};
    auto session = model.new_session(static_cast<Index>(ids.size()) + config.max_new_tokens);
    std::string streamed;
    const auto result = generate_text(model, tokenizer, session, ids, config, [&](std::string_view piece) {
      streamed += piece;
      return true;
    });
    CHECK(result.ids == prompt.at("greedy_ids").get<std::vector<int32_t>>());
    CHECK(streamed == prompt.at("greedy_text").get<std::string>());
  }
}

TEST_CASE("demo model: after 今天天气 the most likely next token is 很") {
  const auto model = MiniMindForCausalLM<float>::from_pretrained(demo_dir);
  const auto tokenizer = Tokenizer::from_pretrained(demo_dir);
  const auto ids = tokenizer.encode("今天天气");
  const MatrixRM<float> logits = model.forward(ids);
  Index best = 0;
  logits.row(logits.rows() - 1).maxCoeff(&best);
  CHECK(tokenizer.decode(std::vector<int32_t>{static_cast<int32_t>(best)}) == "很");
}
