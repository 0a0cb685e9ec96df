// The example programs as a user runs them: outputs, formats, and one-line errors.
#include <doctest/doctest.h>
#include <minimind/minimind.hpp>

#include "golden.hpp"
#include "test_support.hpp"

#include <nlohmann/json.hpp>
#include <sstream>

using namespace minimind;
using namespace minimind::testing;

namespace {
const std::string demo = (source_dir() / "examples" / "models" / "demo").string();
const std::string golden_case = (data_dir() / "golden" / "mm3-dense").string();

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

// An error is one line "<program>: error: ..." on stderr and a non-zero exit.
void check_error(const CommandResult& r, const std::string& program_name, const std::string& needle) {
  CAPTURE(r.err);
  CHECK(r.exit_code != 0);
  CHECK(r.err.rfind(program_name + ": error: ", 0) == 0);
  CHECK(r.err.find(needle) != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
}
}  // namespace

TEST_CASE("minimind-next ranks 很 first after 今天天气 on the demo model (the README's first command)") {
  const auto r = run_command(program("minimind-next") + " --prompt 今天天气");
  REQUIRE(r.exit_code == 0);
  const auto first_row = r.out.substr(r.out.find('\n') + 1);
  CHECK(first_row.rfind("1 ", 0) == 0);
  CHECK(first_row.substr(0, first_row.find('\n')).find("\"很\"") != std::string::npos);
}

TEST_CASE("minimind-next: --ids, --top, --json and --logits-out agree with the reference") {
  const auto golden = read_golden_case(golden_case);
  const auto& prompt = golden.prompts[0];
  const auto out_file = scratch_dir("next_logits") / "logits.f32";
  const auto r = run_command(program("minimind-next") + " --model " + golden_case + " --ids " + join(prompt.ids) +
                             " --top 3 --json --logits-out " + out_file.string());
  REQUIRE(r.exit_code == 0);
  const auto json = nlohmann::json::parse(r.out);
  REQUIRE(json.at("top").size() == 3);
  std::vector<size_t> order(prompt.last_logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prompt.last_logits[a] > prompt.last_logits[b]; });
  for (size_t i = 0; i < 3; ++i) CHECK(json["top"][i]["id"].get<size_t>() == order[i]);
  CHECK(json["top"][0]["probability"].get<double>() > json["top"][1]["probability"].get<double>());

  const std::string bytes = read_file(out_file);
  REQUIRE(bytes.size() == prompt.last_logits.size() * 4);
  std::vector<float> logits(prompt.last_logits.size());
  std::memcpy(logits.data(), bytes.data(), bytes.size());
  for (size_t j = 0; j < logits.size(); ++j) CHECK(std::abs(logits[j] - prompt.last_logits[j]) < golden.tolerance);
}

TEST_CASE("minimind-next --info reports the shape and the parameter count, tied counted once") {
  const auto r = run_command(program("minimind-next") + " --model " + golden_case + " --info");
  REQUIRE(r.exit_code == 0);
  const auto model = MiniMindForCausalLM<float>::from_pretrained(golden_case);
  CHECK(r.out.find("Qwen3ForCausalLM") != std::string::npos);
  CHECK(r.out.find(std::to_string(model.num_parameters())) != std::string::npos);
  CHECK(r.out.find("tied") != std::string::npos);
  CHECK(r.out.find(std::string("\nkernels: ") + kernels::name() + "\n") != std::string::npos);
}

TEST_CASE("minimind-bench --json rows name the kernels this build runs") {
  const auto r = run_command(program("minimind-bench") + " --model " + demo + " -p 0 -n 2 -r 1 -t 1 --json");
  REQUIRE(r.exit_code == 0);
  const auto row = nlohmann::json::parse(r.out.substr(0, r.out.find('\n')));
  CHECK(row.at("kernels") == kernels::name());
  CHECK(row.at("test") == "tg2");
}

TEST_CASE("minimind-generate --print-ids gives the reference greedy ids") {
  const auto golden = read_golden_case(golden_case);
  for (const auto& prompt : golden.prompts) {
    const auto r = run_command(program("minimind-generate") + " --model " + golden_case + " --ids " + join(prompt.ids) +
                               " --temperature 0 --ignore-eos --print-ids --max-new-tokens " +
                               std::to_string(prompt.greedy_ids.size()));
    REQUIRE(r.exit_code == 0);
    CHECK(r.out == join(prompt.greedy_ids) + "\n");
    CHECK(r.err.find("prompt tokens " + std::to_string(prompt.ids.size())) != std::string::npos);
    CHECK(r.err.find("decode") != std::string::npos);
  }
}

TEST_CASE("minimind-generate on the demo model says what it learned, as a chat too") {
  auto r = run_command(program("minimind-generate") + " --prompt 小明家养了一只 --temperature 0");
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == "猫，它喜欢吃鱼。\n");
  CHECK(r.err.find("stop: eos") != std::string::npos);
  r = run_command(program("minimind-generate") + " --prompt 你好 --chat --system hi --max-new-tokens 4 --seed 3");
  CHECK(r.exit_code == 0);
}

TEST_CASE("minimind-generate and minimind-chat show the reasoning apart from the answer, or hide it") {
  // The demo model's template is minimind-3's. The library's greedy reply to a prompt that opens
  // the think block: the reasoning, then the answer.
  const auto dir = source_dir() / "examples" / "models" / "demo";
  const auto model = MiniMindForCausalLM<float>::from_pretrained(dir);
  const auto tokenizer = Tokenizer::from_pretrained(dir);
  ChatOptions options;
  options.add_generation_prompt = true;
  options.open_thinking = true;
  const auto prompt = tokenizer.encode(ChatTemplate(tokenizer.chat_template()).render({{"user", "你好"}}, options));
  GenerationConfig config = GenerationConfig::from_pretrained(dir, model.config(), &tokenizer);
  config.sampling.temperature = 0;
  config.max_new_tokens = 12;
  auto session = model.new_session(256);
  std::string text;
  generate_text(model, tokenizer, session, prompt, config, [&](std::string_view piece) {
    text += piece;
    return true;
  });
  ChatReplyOptions reply_options;
  reply_options.starts_in_thinking = true;
  const ChatReply reply = parse_chat_reply(text, reply_options);
  REQUIRE(!reply.reasoning.empty());
  const std::string shown = "thinking: " + reply.reasoning + (reply.content.empty() ? "" : "\n\n" + reply.content) + "\n";

  const std::string flags = " --model " + dir.string() + " --temperature 0 --max-new-tokens 12";
  const std::string gen = program("minimind-generate") + flags + " --prompt 你好 --chat --think";
  auto r = run_command(gen);
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == shown);
  CHECK(run_command(gen + " --hide-thinking").out == reply.content + "\n");
  CHECK(run_command(program("minimind-chat") + flags + " --think", "你好\n").out == shown);
  CHECK(run_command(program("minimind-chat") + flags + " --think --hide-thinking", "你好\n").out == reply.content + "\n");
  // Without --think the prompt closes the think block: the reply is all answer, as written.
  r = run_command(program("minimind-generate") + flags + " --prompt 你好 --chat");
  CHECK(r.out.rfind("thinking: ", 0) == std::string::npos);
  check_error(run_command(program("minimind-generate") + " --prompt hi --hide-thinking"), "minimind-generate", "--hide-thinking need --chat");
}

TEST_CASE("minimind-generate --json-schema and --json: the reply is a document; a bad schema is a one-line error") {
  const auto dir = scratch_dir("generate_json_schema");
  const std::string schema = (dir / "schema.json").string();
  write_file(schema, R"({"type":"object","properties":{"city":{"type":"string"},"sunny":{"type":"boolean"}},"required":["city","sunny"]})");
  for (int seed = 0; seed < 3; ++seed) {
    const auto r = run_command(program("minimind-generate") + " --prompt 今天天气 --max-new-tokens 24 --seed " + std::to_string(seed) +
                               " --json-schema " + schema);
    CAPTURE(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(r.err.find("stop: eos") != std::string::npos);
    const auto reply = nlohmann::json::parse(r.out);
    CHECK(reply.at("city").is_string());
    CHECK(reply.at("sunny").is_boolean());
    CHECK(reply.size() == 2);
  }
  const auto any = run_command(program("minimind-generate") + " --prompt 今天天气 --json");
  REQUIRE(any.exit_code == 0);
  CHECK(nlohmann::json::parse(any.out).is_object());

  const std::string gen = program("minimind-generate") + " --prompt hi ";
  const std::string refused = (dir / "refused.json").string();
  write_file(refused, R"({"type":"object","properties":{"when":{"type":"string","format":"date"}}})");
  check_error(run_command(gen + "--json-schema " + refused), "minimind-generate",
              refused + ": json schema: keyword \"format\" is not supported at /properties/when/format");
  const std::string malformed = (dir / "malformed.json").string();
  write_file(malformed, "{\"type\":");
  check_error(run_command(gen + "--json-schema " + malformed), "minimind-generate", malformed + ": malformed JSON");
  check_error(run_command(gen + "--json-schema " + (dir / "absent.json").string()), "minimind-generate", "absent.json: cannot open");
  check_error(run_command(gen + "--json-schema " + schema + " --max-new-tokens 4"), "minimind-generate",
              "a reply of at most 4 tokens cannot hold the JSON schema's shortest document");
  check_error(run_command(gen + "--json --json-schema " + schema), "minimind-generate", "at most one of --json and --json-schema");
  check_error(run_command(gen + "--json --ignore-eos"), "minimind-generate", "drop --ignore-eos");
}

TEST_CASE("minimind-chat runs a piped conversation with /reset and ends at EOF") {
  const auto r = run_command(program("minimind-chat") + " --temperature 0 --max-new-tokens 12", "今天天气\n/reset\n这块石头\n");
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 2);  // one line per reply
  const auto again = run_command(program("minimind-chat") + " --temperature 0 --max-new-tokens 12", "这块石头\n/exit\n今天天气\n");
  CHECK(again.exit_code == 0);
  CHECK(again.out == r.out.substr(r.out.find('\n') + 1));  // after /reset the second reply is as if first
}

// The demo model's tool round trip (golden.json's chats tool_weather and tool_weather_answer):
// offered its tools, it calls get_weather; "/tool RESULT" gives it the result, and it answers.
TEST_CASE("minimind-chat --tools: the demo model's call is shown, and /tool sends the result back") {
  const auto demo = source_dir() / "examples" / "models" / "demo";
  const auto golden = nlohmann::ordered_json::parse(read_file(demo / "golden.json"));
  nlohmann::ordered_json call, answer;
  for (const auto& chat : golden.at("chats")) {
    if (chat.at("name") == "tool_weather") call = chat;
    if (chat.at("name") == "tool_weather_answer") answer = chat;
  }
  REQUIRE(!call.is_null());
  REQUIRE(!answer.is_null());
  const auto& function = call.at("reply").at("tool_calls").at(0).at("function");
  const auto dir = scratch_dir("chat_tools");
  write_file(dir / "tools.json", call.at("tools").dump());
  const std::string chat = program("minimind-chat") + " --temperature 0 --max-new-tokens 64 --tools " + (dir / "tools.json").string();
  const std::string question = call.at("messages").at(0).at("content").get<std::string>() + "\n";
  const std::string result = answer.at("messages").at(2).at("content").get<std::string>();
  const auto r = run_command(chat, question + "/tool " + result + "\n");
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == "tool call: " + function.at("name").get<std::string>() + "(" + detail::tojson(function.at("arguments")) + ")\n" +
                     answer.at("greedy_text").get<std::string>() + "\n");
  check_error(run_command(program("minimind-chat") + " --tools " + (dir / "absent.json").string()), "minimind-chat", "absent.json: cannot open");
  write_file(dir / "object.json", "{}");
  check_error(run_command(program("minimind-chat") + " --tools " + (dir / "object.json").string()), "minimind-chat", "expected a JSON array");
  write_file(dir / "nameless.json", R"([{"type": "function", "function": {"parameters": {}}}])");
  check_error(run_command(program("minimind-chat") + " --tools " + (dir / "nameless.json").string()), "minimind-chat", "every tool needs a function.name");
}

TEST_CASE("--dtype and --threads: every weight format and thread count gives the reference greedy ids") {
  const auto golden = read_golden_case(golden_case);
  const auto& prompt = golden.prompts[0];
  const std::string expected = join(prompt.greedy_ids) + "\n";
  for (const char* dtype : {"f32", "bf16", "q8"}) {
    for (const char* threads : {"1", "2", "3"}) {
      CAPTURE(dtype);
      CAPTURE(threads);
      const auto r = run_command(program("minimind-generate") + " --model " + golden_case + " --ids " + join(prompt.ids) +
                                 " --temperature 0 --ignore-eos --print-ids --dtype " + dtype + " --threads " + threads +
                                 " --max-new-tokens " + std::to_string(prompt.greedy_ids.size()));
      REQUIRE(r.exit_code == 0);
      // bf16 and q8 change the logits a little; on this case greedy decoding does not notice.
      if (std::string(dtype) == "f32") CHECK(r.out == expected);
      else CHECK(r.out.substr(0, r.out.find(',')) == expected.substr(0, expected.find(',')));
    }
  }
  const auto r = run_command(program("minimind-next") + " --prompt 今天天气 --dtype q8 --threads 2");
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.substr(r.out.find('\n') + 1).find("\"很\"") != std::string::npos);
}

TEST_CASE("every program has --help, naming --model, --dtype and --threads") {
  for (const char* name : {"minimind-next", "minimind-generate", "minimind-chat", "minimind-server"}) {
    CAPTURE(name);
    const auto r = run_command(program(name) + " --help");
    CHECK(r.exit_code == 0);
    for (const char* flag : {"--model", "--dtype", "--threads"}) CHECK(r.out.find(flag) != std::string::npos);
  }
}

TEST_CASE("bad flags and values are one-line errors") {
  check_error(run_command(program("minimind-next") + " --frobnicate"), "minimind-next", "unknown flag --frobnicate");
  check_error(run_command(program("minimind-next") + " --ids"), "minimind-next", "--ids needs a value");
  check_error(run_command(program("minimind-next") + " --ids 1,x"), "minimind-next", "is not an integer");
  check_error(run_command(program("minimind-next") + " --ids 99999"), "minimind-next", "token id 99999 is outside the vocabulary");
  check_error(run_command(program("minimind-next") + " --model /nonexistent --ids 1"), "minimind-next", "/nonexistent");
  check_error(run_command(program("minimind-next") + " --top 0 --ids 1"), "minimind-next", "--top");
  const std::string gen = program("minimind-generate");
  check_error(run_command(gen + " --prompt hi --max-new-tokens -1"), "minimind-generate", "max_new_tokens must be >= 0");
  check_error(run_command(gen + " --prompt hi --temperature -0.5"), "minimind-generate", "temperature must be >= 0");
  check_error(run_command(gen + " --prompt hi --top-p 0"), "minimind-generate", "top_p must be in (0, 1]");
  check_error(run_command(gen + " --prompt hi --top-p 1.5"), "minimind-generate", "top_p must be in (0, 1]");
  check_error(run_command(gen + " --prompt hi --temperature warm"), "minimind-generate", "is not a number");
  check_error(run_command(gen), "minimind-generate", "--prompt");
  std::string long_prompt;
  for (int i = 0; i < 600; ++i) long_prompt += "猫";
  check_error(run_command(gen + " --prompt " + long_prompt), "minimind-generate", "context");
  check_error(run_command(program("minimind-chat") + " --ctx 0"), "minimind-chat", "--ctx");
  check_error(run_command(program("minimind-next") + " --prompt hi --dtype f64"), "minimind-next", "unknown weight format \"f64\"");
  check_error(run_command(program("minimind-next") + " --prompt hi --threads 0"), "minimind-next", "--threads must be in [1, 256]");
  check_error(run_command(program("minimind-next") + " --prompt hi --threads 257"), "minimind-next", "--threads must be in [1, 256]");
  check_error(run_command(gen + " --prompt hi --threads many"), "minimind-generate", "is not an integer");
}

TEST_CASE("--lora and --lora-scaled merge adapters at load; --info lists them; minimind-bench runs them unmerged") {
  const std::string base = (data_dir() / "golden" / "mm2-dense-f32").string();
  const auto lora = data_dir() / "lora";
  const std::string upstream = (lora / "adapters" / "mm2-upstream-f32.pth").string(), peft = (lora / "adapters" / "mm2-peft").string();
  const auto expected = io::read_json_file(lora / "mm2-two-scaled" / "expected.json").at("prompts").at(0);
  const auto ids = expected.at("ids").get<std::vector<int32_t>>(), greedy = expected.at("greedy_ids").get<std::vector<int32_t>>();
  const auto r = run_command(program("minimind-generate") + " --model " + base + " --ids " + join(ids) + " --lora-scaled " + upstream +
                             ":0.5 --lora-scaled=" + peft + ":1.5 --temperature 0 --ignore-eos --print-ids --max-new-tokens " +
                             std::to_string(greedy.size()));
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == join(greedy) + "\n");

  const auto info = run_command(program("minimind-next") + " --model " + base + " --info --lora " + upstream + " --lora-scaled " + peft + ":-2");
  REQUIRE(info.exit_code == 0);
  CHECK(info.out.find("lora adapters       2 (merged at load)") != std::string::npos);
  CHECK(info.out.find(upstream + ": minimind, rank 4, 4 modules (o_proj, q_proj), 512 parameters, scale 1\n") != std::string::npos);
  CHECK(info.out.find(peft + ": peft, rank 4, 14 modules (") != std::string::npos);
  CHECK(info.out.find("scale -2\n") != std::string::npos);

  const auto bench = run_command(program("minimind-bench") + " --model " + base + " -n 2 -r 1 -t 1 -b 4 --json --lora " + upstream +
                                 " --lora " + peft + " --lora-unmerged --lora-spread");
  REQUIRE(bench.exit_code == 0);
  CHECK(nlohmann::json::parse(bench.out.substr(0, bench.out.find('\n'))).at("lora") == "spread over 2");

  const std::string next = program("minimind-next") + " --model " + base + " --ids 1,2";
  check_error(run_command(next + " --lora-scaled " + upstream), "minimind-next", "is not PATH:SCALE");
  check_error(run_command(next + " --lora-scaled " + upstream + ":half"), "minimind-next", "is not a number");
  check_error(run_command(next + " --lora-scaled " + upstream + ":inf"), "minimind-next", "is not a finite number");
  check_error(run_command(next + " --lora " + (lora / "bad" / "hidden-32.pth").string()), "minimind-next", "hidden_size 32");
  check_error(run_command(next + " --lora /nonexistent.pth"), "minimind-next", "/nonexistent.pth: no such file");
  check_error(run_command(program("minimind-bench") + " --model " + base + " --lora " + upstream + " --lora-spread"), "minimind-bench",
              "--lora-spread needs -b and --lora-unmerged");
}

TEST_CASE("minimind-next --trace --json: 很 first after 今天天气 with the probability --json prints, one entry per block") {
  const auto plain = run_command(program("minimind-next") + " --json --prompt 今天天气");
  const auto traced = run_command(program("minimind-next") + " --trace --json --prompt 今天天气");
  REQUIRE(plain.exit_code == 0);
  REQUIRE(traced.exit_code == 0);
  const auto expected = nlohmann::json::parse(plain.out);
  const auto json = nlohmann::json::parse(traced.out);
  const auto config = io::read_json_file(std::filesystem::path(demo) / "config.json");
  CHECK(json.at("top")[0].at("piece") == "很");
  CHECK(json["top"][0].at("id") == expected.at("top")[0].at("id"));
  CHECK(json["top"][0].at("probability").get<double>() == expected["top"][0].at("probability").get<double>());
  CHECK(json.at("layers").size() == config.at("num_hidden_layers").get<size_t>());
  CHECK(json["layers"].back().at("lens_top1") == json["top"][0]["id"]);
  CHECK_FALSE(json["layers"][0].contains("attention"));
  CHECK(json.at("embedding").at("norm").get<double>() > 0);

  const auto text = run_command(program("minimind-next") + " --trace --prompt 今天天气");
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("E is the embedding matrix") != std::string::npos);
  CHECK(text.out.find("\"很\"") != std::string::npos);

  const auto maps = run_command(program("minimind-next") + " --trace --json --attention --prompt 今天天气");
  REQUIRE(maps.exit_code == 0);
  const auto with_maps = nlohmann::json::parse(maps.out);
  CHECK(with_maps["layers"][0].at("attention").size() == config.at("num_attention_heads").get<size_t>());
  check_error(run_command(program("minimind-next") + " --attention --prompt 今天天气"), "minimind-next", "--attention needs --trace --json");
}

TEST_CASE("minimind-bench -b: one aggregate decode row per batch size, as a table and as JSON; bad sizes are errors") {
  const std::string bench = program("minimind-bench") + " --shape minimind2-small -n 2 -r 1 -t 1";
  const auto json_run = run_command(bench + " -b 1,3 --json");
  REQUIRE(json_run.exit_code == 0);
  std::istringstream lines(json_run.out);
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(nlohmann::json::parse(line));
  REQUIRE(rows.size() == 2);
  for (size_t i = 0; i < rows.size(); ++i) {
    CHECK(rows[i].at("batch").get<int>() == (i == 0 ? 1 : 3));
    CHECK(rows[i].at("test") == "tg2");
    CHECK(rows[i].at("threads").get<int>() == 1);
    CHECK(rows[i].at("kernels") == minimind::kernels::name());
    CHECK(rows[i].at("tokens_per_s_min").get<double>() > 0);
    CHECK(rows[i].at("tokens_per_s_median").get<double>() >= rows[i].at("tokens_per_s_min").get<double>());
  }
  const auto table = run_command(bench + " -b 2");
  REQUIRE(table.exit_code == 0);
  CHECK(table.out.find("| batch |") != std::string::npos);
  CHECK(table.out.find("|     2 |    tg2 |") != std::string::npos);
  check_error(run_command(bench + " -b 0"), "minimind-bench", "-b: batch size 0 must be in [1, 1024]");
  check_error(run_command(bench + " -t 1,257"), "minimind-bench", "-t: thread count 257 must be in [1, 256]");
  check_error(run_command(bench + " -b 2,x"), "minimind-bench", "-b: \"x\" is not an integer");
  check_error(run_command(program("minimind-bench") + " --shape minimind2-small -b 2 -n 0"), "minimind-bench", "-n must be at least 1");
}
