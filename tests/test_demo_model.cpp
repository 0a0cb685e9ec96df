// The demo model shipped in examples/models/demo: the C++ logits equal the exported torch logits,
// its tokenizer gives the exporter's ids, and greedy generation says the sentences it learned;
// in its chat template it thinks and calls its tools as the exporter saw it do.
#include <doctest/doctest.h>
#include <minimind/chat_reply.hpp>
#include <minimind/chat_template.hpp>
#include <minimind/generate.hpp>
#include <minimind/minimind.hpp>
#include <minimind/tokenizer.hpp>

#include "test_support.hpp"

using namespace minimind;

namespace {
const std::filesystem::path demo_dir = minimind::testing::source_dir() / "examples" / "models" / "demo";

// Greedy decoding of at most `max_new_tokens` after `ids`, stopping after eos: the ids and the
// text streamed.
std::pair<std::vector<int32_t>, std::string> greedy(const MiniMindForCausalLM<float>& model, const Tokenizer& tokenizer,
                                                    const std::vector<int32_t>& ids, int64_t max_new_tokens, int32_t eos) {
  GenerationConfig config;
  config.sampling.temperature = 0;
  config.max_new_tokens = max_new_tokens;
  config.eos_token_ids = {eos};
  auto session = model.new_session(static_cast<Index>(ids.size()) + config.max_new_tokens);
  std::string streamed;
  const auto result = generate_text(model, tokenizer, session, ids, config, [&](std::string_view piece) {
    streamed += piece;
    return true;
  });
  return {result.ids, streamed};
}
}  // namespace

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

    const auto [greedy_ids, streamed] = greedy(model, tokenizer, ids, golden.at("greedy_n").get<int64_t>(), golden.at("eos_token_id").get<int32_t>());
    CHECK(greedy_ids == prompt.at("greedy_ids").get<std::vector<int32_t>>());
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

// golden.json's chats: the library's template renders each conversation as jinja2 did for the
// exporter, byte for byte (tools in their key order); greedy decoding gives the exporter's reply;
// and the reply parser splits it into the thinking, answer and tool call the demo was trained on.
TEST_CASE("demo model: chats render as the exporter's, and the greedy replies think and call the tools") {
  using Ordered = nlohmann::ordered_json;
  const auto golden = io::read_json_file<Ordered>(demo_dir / "golden.json");
  const auto model = MiniMindForCausalLM<float>::from_pretrained(demo_dir);
  const auto tokenizer = Tokenizer::from_pretrained(demo_dir);
  const ChatTemplate chat_template(tokenizer.chat_template());
  CHECK(chat_template.family() == ChatTemplateFamily::minimind3);
  REQUIRE(golden.at("chats").size() >= 4);
  size_t thought = 0, called = 0;
  for (const auto& chat : golden.at("chats")) {
    CAPTURE(chat.at("name").get<std::string>());
    std::vector<ChatMessage> messages;
    for (const auto& m : chat.at("messages")) {
      ChatMessage& message = messages.emplace_back(m.at("role").get<std::string>(), m.at("content").get<std::string>());
      for (const auto& call : m.value("tool_calls", Ordered::array())) {
        message.tool_calls.push_back(ToolCall{call.at("function").at("name").get<std::string>(), call.at("function").at("arguments")});
      }
    }
    ChatOptions options;
    options.add_generation_prompt = true;
    if (chat.at("open_thinking").get<bool>()) options.open_thinking = true;
    options.tools.assign(chat.at("tools").begin(), chat.at("tools").end());
    const std::string prompt = chat_template.render(messages, options);
    CHECK(prompt == chat.at("prompt_text").get<std::string>());
    const auto ids = tokenizer.encode(prompt);
    REQUIRE(ids == chat.at("prompt_ids").get<std::vector<int32_t>>());

    const auto [greedy_ids, text] = greedy(model, tokenizer, ids, golden.at("chat_greedy_n").get<int64_t>(), golden.at("eos_token_id").get<int32_t>());
    CHECK(greedy_ids == chat.at("greedy_ids").get<std::vector<int32_t>>());
    CHECK(text == chat.at("greedy_text").get<std::string>());

    ChatReplyOptions reply_options;
    reply_options.starts_in_thinking = reply_starts_in_thinking(chat_template, options);
    reply_options.tool_calls = !options.tools.empty();
    const ChatReply reply = parse_chat_reply(text, reply_options);
    const Ordered& expected = chat.at("reply");
    CHECK(reply.reasoning == expected.value("reasoning_content", ""));
    CHECK(reply.content == expected.value("content", ""));
    const Ordered calls = expected.value("tool_calls", Ordered::array());
    REQUIRE(reply.tool_calls.size() == calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      CHECK(reply.tool_calls[i].name == calls[i].at("function").at("name").get<std::string>());
      CHECK(Ordered::parse(reply.tool_calls[i].arguments.get<std::string>()) == calls[i].at("function").at("arguments"));
    }
    thought += !reply.reasoning.empty();
    called += !reply.tool_calls.empty();
  }
  CHECK(thought >= 1);
  CHECK(called >= 2);
}
