// minimind-server as a client sees it: started on a free loopback port, driven over HTTP with
// cpp-httplib's client. Replies are checked against the library run in this process, so a reply
// that is well formed but wrong fails too.
#include <doctest/doctest.h>
#include <minimind/minimind.hpp>
#include <minimind/trace.hpp>

#include "checkpoint_writer.hpp"
#include "prometheus_text.hpp"
#include "test_support.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <thread>

using namespace minimind;
using namespace minimind::testing;
using Json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

const std::filesystem::path demo_dir = source_dir() / "examples" / "models" / "demo";

// A minimind-server child process; stdout is read for the port, stderr goes to a log file.
class ServerProcess {
 public:
  ServerProcess(const std::string& name, const std::vector<std::string>& flags) : log_(scratch_dir("server_" + name) / "stderr.log") {
    int out[2];
    REQUIRE(::pipe(out) == 0);
    const std::string binary = program("minimind-server");
    std::vector<std::string> argv_strings = {binary, "--port", "0"};
    argv_strings.insert(argv_strings.end(), flags.begin(), flags.end());
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      const int err = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err, STDERR_FILENO);
      ::close(out[0]);
      std::vector<char*> argv;
      for (auto& s : argv_strings) argv.push_back(s.data());
      argv.push_back(nullptr);
      ::execv(binary.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    stdout_fd_ = out[0];
    // The first stdout line names the port; allow time for loading the model.
    std::string text;
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (text.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{stdout_fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buffer[256];
      const ssize_t n = ::read(stdout_fd_, buffer, sizeof buffer);
      if (n <= 0) break;
      text.append(buffer, static_cast<size_t>(n));
    }
    const std::string prefix = "minimind-server: listening on http://127.0.0.1:";
    INFO("server stdout: " << text << "\nserver stderr: " << log());
    REQUIRE(text.rfind(prefix, 0) == 0);
    port_ = std::stoi(text.substr(prefix.size()));
    REQUIRE(port_ > 0);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  ~ServerProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (stdout_fd_ >= 0) ::close(stdout_fd_);
  }

  int port() const { return port_; }
  std::string log() const { return read_file(log_); }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }

  // Sends `sig` and returns the exit status (-1: killed by a signal, -2: still running after 20 s).
  int stop(int sig) {
    REQUIRE(pid_ > 0);
    ::kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(20ms);
    }
    return -2;
  }

 private:
  std::filesystem::path log_;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int port_ = 0;
};

// The demo-model server most cases share; the last case stops it.
ServerProcess& demo_server() {
  static ServerProcess server("demo", {"--slots", "4", "--queue", "8", "--max-body", "65536", "--threads", "1"});
  return server;
}

Json post_raw(const ServerProcess& server, const std::string& path, const std::string& body, int expected_status) {
  auto client = server.client();
  auto res = client.Post(path.c_str(), body, "application/json");
  REQUIRE_MESSAGE(res, "no response from " << path << ": " << httplib::to_string(res.error()));
  INFO(path << " " << body << " -> " << res->status << " " << res->body);
  REQUIRE(res->status == expected_status);
  REQUIRE(res->get_header_value("Content-Type") == "application/json");
  return Json::parse(res->body);
}

Json post_json(const ServerProcess& server, const std::string& path, const Json& body, int expected_status = 200) {
  return post_raw(server, path, body.dump(), expected_status);
}

Json get_json(const ServerProcess& server, const std::string& path, int expected_status = 200) {
  auto client = server.client();
  auto res = client.Get(path.c_str());
  REQUIRE(res);
  INFO(path << " -> " << res->status << " " << res->body);
  REQUIRE(res->status == expected_status);
  return Json::parse(res->body);
}

// GET /metrics, read by the format's checker (which REQUIREs the grammar holds).
minimind::testing::prometheus::Exposition scrape(const ServerProcess& server, const httplib::Headers& headers = {}) {
  auto client = server.client();
  auto res = client.Get("/metrics", headers);
  REQUIRE(res);
  INFO(res->body);
  REQUIRE(res->status == 200);
  CHECK(res->get_header_value("Content-Type") == "text/plain; version=0.0.4");
  try {
    return minimind::testing::prometheus::parse(res->body);
  } catch (const std::runtime_error& e) {
    FAIL("/metrics is not in the text exposition format: " << e.what());
  }
  return {};
}

// An OpenAI-style error body: {"error": {"message", "type", "param", "code"}}.
void check_error_body(const Json& body, const std::string& type, const Json& param) {
  INFO(body.dump());
  REQUIRE(body.contains("error"));
  const Json& e = body["error"];
  CHECK(e.at("message").is_string());
  CHECK(!e.at("message").get<std::string>().empty());
  CHECK(e.at("type") == type);
  CHECK(e.at("param") == param);
  CHECK(e.contains("code"));
}

Json chat_request(const std::string& user, int64_t max_tokens = 24) {
  return {{"model", "demo"}, {"messages", {{{"role", "user"}, {"content", user}}}}, {"temperature", 0}, {"max_tokens", max_tokens}};
}

// A reply's usage without prompt_tokens_details: what a request asked for and got, whatever the
// prompt cache held when it came.
Json counts(Json usage) {
  usage.erase("prompt_tokens_details");
  return usage;
}

// The same generation run in this process with the library.
struct Local {
  Local()
      : model(MiniMindForCausalLM<float>::from_pretrained(demo_dir)),
        tokenizer(Tokenizer::from_pretrained(demo_dir)),
        defaults(GenerationConfig::from_pretrained(demo_dir, model.config(), &tokenizer)) {}

  std::vector<int32_t> chat_prompt(const std::string& user) const {
    ChatOptions options;
    options.add_generation_prompt = true;
    return tokenizer.encode(ChatTemplate(tokenizer.chat_template()).render({ChatMessage("user", user)}, options));
  }
  std::pair<std::string, GenerationResult> generate(const std::vector<int32_t>& prompt, GenerationConfig config) const {
    auto session = model.new_session(512);
    std::string text;
    auto result = generate_text(model, tokenizer, session, prompt, config, [&](std::string_view piece) {
      text += piece;
      return true;
    });
    return {text, result};
  }
  GenerationConfig greedy(int64_t max_new_tokens) const {
    GenerationConfig g = defaults;
    g.sampling.temperature = 0;
    g.max_new_tokens = max_new_tokens;
    return g;
  }

  MiniMindForCausalLM<float> model;
  Tokenizer tokenizer;
  GenerationConfig defaults;
};

const Local& local() {
  static const Local l;
  return l;
}

// A streamed POST, its raw body collected; `on_data` may return false to hang up.
struct Streamed {
  int status = 0;
  std::string content_type, body;
  httplib::Error error = httplib::Error::Success;
};
Streamed post_stream(const ServerProcess& server, const std::string& path, const Json& body,
                     const std::function<bool(const std::string& so_far)>& on_data = {}) {
  auto client = server.client();
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  Streamed out;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    out.body.append(data, n);
    return !on_data || on_data(out.body);
  };
  auto res = client.send(req);
  out.error = res.error();
  if (res) {
    out.status = res->status;
    out.content_type = res->get_header_value("Content-Type");
  }
  return out;
}

// Splits an SSE body into its `data:` payloads, checking the framing: every event is one
// `data: ...` line followed by a blank line, and the last is `[DONE]`.
std::vector<Json> sse_chunks(const std::string& body) {
  INFO(body);
  std::vector<Json> chunks;
  size_t start = 0;
  bool done = false;
  while (start < body.size()) {
    const size_t end = body.find("\n\n", start);
    REQUIRE(end != std::string::npos);
    const std::string event = body.substr(start, end - start);
    REQUIRE(event.rfind("data: ", 0) == 0);
    REQUIRE(event.find('\n') == std::string::npos);
    REQUIRE_FALSE(done);
    const std::string data = event.substr(6);
    if (data == "[DONE]") done = true;
    else chunks.push_back(Json::parse(data));
    start = end + 2;
  }
  CHECK(done);
  return chunks;
}

// The content a chat stream delivered, with its checks on every chunk.
std::string chat_stream_text(const std::vector<Json>& chunks, const Json** last = nullptr) {
  REQUIRE(chunks.size() >= 2);
  std::string text;
  const std::string id = chunks[0].at("id");
  CHECK(chunks[0]["choices"][0]["delta"]["role"] == "assistant");
  for (size_t i = 0; i < chunks.size(); ++i) {
    const Json& c = chunks[i];
    INFO(c.dump());
    CHECK(c.at("object") == "chat.completion.chunk");
    CHECK(c.at("id") == id);
    CHECK(c.at("model") == "demo");
    CHECK(c.at("created").is_number_integer());
    if (c["choices"].empty()) continue;  // the include_usage chunk
    const Json& choice = c["choices"][0];
    CHECK(choice.at("index") == 0);
    if (choice["delta"].contains("content")) text += choice["delta"]["content"].get<std::string>();
    const bool is_final = !choice.at("finish_reason").is_null();
    CHECK(is_final == c.contains("usage"));
    if (is_final && last) *last = &c;
  }
  return text;
}

// Byte offset of the second UTF-8 character.
size_t second_char(const std::string& s) {
  size_t i = 1;
  while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
  return i;
}

}  // namespace

TEST_CASE("minimind-server: /health, /v1/models, and a greedy chat equal to the library's") {
  auto& server = demo_server();
  const Json health = get_json(server, "/health");
  CHECK(health["status"] == "ok");
  CHECK(health["slots_total"] == 4);
  CHECK(health["slots_idle"] == 4);

  const Json models = get_json(server, "/v1/models");
  CHECK(models["object"] == "list");
  REQUIRE(models["data"].size() == 1);
  CHECK(models["data"][0]["id"] == "demo");
  CHECK(models["data"][0]["object"] == "model");
  CHECK(get_json(server, "/v1/models/demo")["id"] == "demo");
  check_error_body(get_json(server, "/v1/models/gpt-4", 404), "invalid_request_error", "model");

  const std::string user = "小明家养了一只";
  const Json reply = post_json(server, "/v1/chat/completions", chat_request(user, 24));
  const auto [text, result] = local().generate(local().chat_prompt(user), local().greedy(24));
  CHECK(reply["object"] == "chat.completion");
  CHECK(std::string(reply["id"]).rfind("chatcmpl-", 0) == 0);
  CHECK(reply["model"] == "demo");
  REQUIRE(reply["choices"].size() == 1);
  CHECK(reply["choices"][0]["message"]["role"] == "assistant");
  CHECK(reply["choices"][0]["message"]["content"] == text);
  CHECK(reply["choices"][0]["finish_reason"] == (result.stop == StopReason::EndOfSequence ? "stop" : "length"));
  const Json& usage = reply["usage"];
  CHECK(usage["prompt_tokens"] == result.prompt_tokens);
  CHECK(usage["completion_tokens"] == static_cast<int64_t>(result.ids.size()) - (result.stop == StopReason::EndOfSequence ? 1 : 0));
  CHECK(usage["total_tokens"] == usage["prompt_tokens"].get<int64_t>() + usage["completion_tokens"].get<int64_t>());

  // Text content parts and the developer role are accepted as OpenAI sends them.
  Json parts = chat_request(user, 24);
  parts["messages"][0]["content"] = Json::array({{{"type", "text"}, {"text", "小明家"}}, {{"type", "text"}, {"text", "养了一只"}}});
  CHECK(post_json(server, "/v1/chat/completions", parts)["choices"][0]["message"]["content"] == text);
}

TEST_CASE("minimind-server: /v1/completions uses the raw prompt; max_tokens, stop and seed are honoured") {
  auto& server = demo_server();
  const Local& l = local();
  const std::string prompt = "这块石头";
  const auto ids = l.tokenizer.encode(prompt);
  const auto [text, result] = l.generate(ids, l.greedy(32));
  REQUIRE(second_char(text) < text.size());  // at least two characters, so a stop string can cut it

  Json request = {{"prompt", prompt}, {"temperature", 0}, {"max_tokens", 32}};
  Json reply = post_json(server, "/v1/completions", request);
  CHECK(reply["object"] == "text_completion");
  CHECK(std::string(reply["id"]).rfind("cmpl-", 0) == 0);
  CHECK(reply["choices"][0]["text"] == text);
  CHECK(reply["usage"]["prompt_tokens"] == ids.size());

  // Token ids as the prompt give the same.
  request["prompt"] = ids;
  CHECK(post_json(server, "/v1/completions", request)["choices"][0]["text"] == text);

  // max_tokens: exactly that many tokens past eos, finish_reason "length".
  Json limited = {{"prompt", prompt}, {"temperature", 0}, {"max_tokens", 5}, {"ignore_eos", true}};
  reply = post_json(server, "/v1/completions", limited);
  CHECK(reply["usage"]["completion_tokens"] == 5);
  CHECK(reply["choices"][0]["finish_reason"] == "length");

  // stop: the text ends before the stop string, which is not included; also when streamed,
  // where the stop string arrives over several tokens.
  const std::string kept = text.substr(0, second_char(text)), stop = text.substr(second_char(text));
  request["prompt"] = prompt;
  request["stop"] = Json::array({"never appears", stop});
  reply = post_json(server, "/v1/completions", request);
  CHECK(reply["choices"][0]["text"] == kept);
  CHECK(reply["choices"][0]["finish_reason"] == "stop");
  request["stream"] = true;
  const auto streamed = post_stream(server, "/v1/completions", request);
  std::string joined;
  for (const auto& chunk : sse_chunks(streamed.body)) {
    CHECK(chunk["object"] == "text_completion");
    joined += chunk["choices"][0]["text"].get<std::string>();
  }
  CHECK(joined == kept);

  // seed: a sampled completion equals the library's with the same seed and parameters.
  Json sampled = {{"prompt", prompt}, {"temperature", 1.5}, {"top_p", 1}, {"top_k", 0}, {"seed", 7}, {"max_tokens", 20}, {"ignore_eos", true}};
  GenerationConfig config = l.defaults;
  config.sampling.temperature = 1.5f;
  config.sampling.top_p = 1;
  config.sampling.top_k = 0;
  config.sampling.seed = 7;
  config.max_new_tokens = 20;
  config.ignore_eos = true;
  const std::string expected = l.generate(ids, config).first;
  CHECK(post_json(server, "/v1/completions", sampled)["choices"][0]["text"] == expected);
  CHECK(post_json(server, "/v1/completions", sampled)["choices"][0]["text"] == expected);
}

// Ids in [3, 1024) from a fixed seed: a prompt no other test sends.
std::vector<int32_t> random_prompt(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(3, 1023);
  std::vector<int32_t> ids(n);
  for (int32_t& i : ids) i = id(rng);
  return ids;
}

TEST_CASE("minimind-server: the prompt cache: usage.prompt_tokens_details.cached_tokens, cache_prompt false, --cache-mb 0; the same replies") {
  auto& server = demo_server();
  const Local& l = local();
  auto cached_tokens = [](const Json& reply) { return reply["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(); };
  SUBCASE("completions: a second turn reuses the first's prompt and reply") {
    const auto first = random_prompt(70, 1);
    auto greedy = l.greedy(8);
    greedy.ignore_eos = true;
    const auto [first_text, first_result] = l.generate(first, greedy);
    Json request = {{"prompt", first}, {"temperature", 0}, {"max_tokens", 8}, {"ignore_eos", true}};
    const Json reply = post_json(server, "/v1/completions", request);
    CHECK(reply["choices"][0]["text"] == first_text);
    CHECK(cached_tokens(reply) == 0);
    // The whole prompt again: all but its last position, whose logits give the first id.
    const Json again = post_json(server, "/v1/completions", request);
    CHECK(again["choices"][0]["text"] == first_text);
    CHECK(cached_tokens(again) == 69);
    // The first prompt, its 8 reply ids (the last one sampled, never run), then more.
    auto second = first;
    second.insert(second.end(), first_result.ids.begin(), first_result.ids.end());
    const auto more = random_prompt(10, 2);
    second.insert(second.end(), more.begin(), more.end());
    request["prompt"] = second;
    const Json next = post_json(server, "/v1/completions", request);
    CHECK(next["choices"][0]["text"] == l.generate(second, greedy).first);
    CHECK(cached_tokens(next) == 77);
    // Opted out: computed whole, the same text.
    request["cache_prompt"] = false;
    const Json out = post_json(server, "/v1/completions", request);
    CHECK(out["choices"][0]["text"] == next["choices"][0]["text"]);
    CHECK(cached_tokens(out) == 0);
    // Streamed: the final chunk's usage and the usage-only chunk say it too.
    request["cache_prompt"] = true;
    request["stream"] = true;
    request["stream_options"] = {{"include_usage", true}};
    const auto chunks = sse_chunks(post_stream(server, "/v1/completions", request).body);
    REQUIRE(chunks.size() >= 2);
    CHECK(chunks.back()["usage"]["prompt_tokens_details"]["cached_tokens"] == static_cast<int64_t>(second.size()) - 1);
    CHECK(chunks[chunks.size() - 2]["usage"] == chunks.back()["usage"]);
  }
  SUBCASE("chat: the same conversation again, and opted out") {
    const Json request = chat_request("小明家养了一只猫，它喜欢什么？", 12);
    const Json reply = post_json(server, "/v1/chat/completions", request);
    const int64_t prompt_tokens = reply["usage"]["prompt_tokens"];
    const Json again = post_json(server, "/v1/chat/completions", request);
    CHECK(again["choices"][0]["message"] == reply["choices"][0]["message"]);
    CHECK(cached_tokens(again) == prompt_tokens - 1);
    Json out_request = request;
    out_request["cache_prompt"] = false;
    const Json out = post_json(server, "/v1/chat/completions", out_request);
    CHECK(out["choices"][0]["message"] == reply["choices"][0]["message"]);
    CHECK(cached_tokens(out) == 0);
  }
  SUBCASE("cache_prompt must be a boolean") {
    for (const Json& bad : {Json("no"), Json(0), Json::array()}) {
      CAPTURE(bad.dump());
      check_error_body(post_json(server, "/v1/completions", Json{{"prompt", "x"}, {"cache_prompt", bad}}, 400), "invalid_request_error",
                       "cache_prompt");
      Json chat = chat_request("你好");
      chat["cache_prompt"] = bad;
      check_error_body(post_json(server, "/v1/chat/completions", chat, 400), "invalid_request_error", "cache_prompt");
    }
  }
  SUBCASE("--cache-mb 0: nothing is cached") {
    ServerProcess off("cache_off", {"--slots", "2", "--threads", "1", "--cache-mb", "0"});
    const Json request = {{"prompt", random_prompt(40, 3)}, {"temperature", 0}, {"max_tokens", 4}};
    const Json reply = post_json(off, "/v1/completions", request);
    const Json again = post_json(off, "/v1/completions", request);
    CHECK(again["choices"][0]["text"] == reply["choices"][0]["text"]);
    CHECK(cached_tokens(reply) == 0);
    CHECK(cached_tokens(again) == 0);
  }
}

TEST_CASE("minimind-server: a streamed chat is SSE chat.completion.chunk events ending in data: [DONE]") {
  auto& server = demo_server();
  const std::string user = "今天天气";
  Json request = chat_request(user, 24);
  const Json whole = post_json(server, "/v1/chat/completions", request);
  request["stream"] = true;
  const auto streamed = post_stream(server, "/v1/chat/completions", request);
  CHECK(streamed.status == 200);
  CHECK(streamed.content_type == "text/event-stream");
  const Json* last = nullptr;
  const auto chunks = sse_chunks(streamed.body);
  CHECK(chat_stream_text(chunks, &last) == whole["choices"][0]["message"]["content"]);
  REQUIRE(last != nullptr);
  CHECK(last == &chunks.back());
  CHECK((*last)["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]);
  CHECK(counts((*last)["usage"]) == counts(whole["usage"]));
  // The same prompt again: all of it but its last position was cached.
  CHECK((*last)["usage"]["prompt_tokens_details"]["cached_tokens"] == whole["usage"]["prompt_tokens"].get<int64_t>() - 1);

  // stream_options.include_usage adds OpenAI's usage-only chunk with no choices.
  request["stream_options"] = {{"include_usage", true}};
  const auto with_usage = sse_chunks(post_stream(server, "/v1/chat/completions", request).body);
  REQUIRE(!with_usage.empty());
  CHECK(with_usage.back()["choices"].empty());
  CHECK(with_usage.back()["usage"] == (*last)["usage"]);
}

TEST_CASE("minimind-server: 8 concurrent greedy chats each equal the same request run alone") {
  auto& server = demo_server();
  const std::vector<std::string> users = {"今天天气", "小明家养了一只猫", "这块石头很硬", "你好", "天气", "小明", "石头", "猫"};
  auto request = [&](size_t i) {
    Json r = chat_request(users[i], 40);
    r["ignore_eos"] = true;  // long enough replies that the eight overlap
    if (i % 2) r["stream"] = true;
    return r;
  };
  auto reply_text = [&](size_t i) {
    if (i % 2 == 0) return post_json(server, "/v1/chat/completions", request(i))["choices"][0]["message"]["content"].get<std::string>();
    const auto streamed = post_stream(server, "/v1/chat/completions", request(i));
    return chat_stream_text(sse_chunks(streamed.body));
  };
  std::vector<std::string> alone;
  for (size_t i = 0; i < users.size(); ++i) alone.push_back(reply_text(i));

  std::vector<std::future<std::string>> together;
  for (size_t i = 0; i < users.size(); ++i) together.push_back(std::async(std::launch::async, reply_text, i));
  for (size_t i = 0; i < users.size(); ++i) {
    CAPTURE(users[i]);
    CHECK(together[i].get() == alone[i]);
  }
  CHECK(get_json(server, "/health")["slots_idle"] == 4);
}

TEST_CASE("minimind-server: batched greedy completions of different lengths, joining at different steps, equal each alone") {
  auto& server = demo_server();
  const Local& l = local();
  // Six requests on four slots: two wait and join the running batch later. One prompt is longer
  // than a step's prefill chunk of 256 positions, so it is prefilled over two steps beside the
  // others' decoding.
  std::vector<std::vector<int32_t>> prompts;
  for (const char* text : {"今天天气", "小明家养了一只猫", "这块石头很硬", "你好", "天气"}) prompts.push_back(l.tokenizer.encode(text));
  std::vector<int32_t> long_prompt;
  while (long_prompt.size() < 300) {
    const auto more = l.tokenizer.encode("小明家养了一只猫，今天天气很好。");
    long_prompt.insert(long_prompt.end(), more.begin(), more.end());
  }
  prompts.insert(prompts.begin() + 2, long_prompt);
  const std::vector<int64_t> max_tokens = {40, 7, 25, 60, 3, 33};
  auto request = [&](size_t i) {
    return Json{{"prompt", prompts[i]}, {"temperature", 0}, {"max_tokens", max_tokens[i]}, {"ignore_eos", true}};
  };
  auto reply_text = [&](size_t i) {
    const Json reply = post_json(server, "/v1/completions", request(i));
    CHECK(reply["usage"]["completion_tokens"] == max_tokens[i]);
    return reply["choices"][0]["text"].get<std::string>();
  };
  std::vector<std::string> alone;
  for (size_t i = 0; i < prompts.size(); ++i) {
    alone.push_back(reply_text(i));
    GenerationConfig config = l.greedy(max_tokens[i]);
    config.ignore_eos = true;
    CHECK(alone[i] == l.generate(prompts[i], config).first);  // alone is the library's generate()
  }
  std::vector<std::future<std::string>> together;
  for (size_t i = 0; i < prompts.size(); ++i) together.push_back(std::async(std::launch::async, reply_text, i));
  for (size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(i);
    CHECK(together[i].get() == alone[i]);
  }
  CHECK(get_json(server, "/health")["slots_idle"] == 4);
}

TEST_CASE("minimind-server: bad requests get OpenAI-style errors with the right status, and leave no slot busy") {
  auto& server = demo_server();
  const std::string chat = "/v1/chat/completions";
  auto with = [](const std::string& key, const Json& value) {
    Json r = chat_request("你好");
    r[key] = value;
    return r;
  };
  check_error_body(post_raw(server, chat, "{\"messages\": [", 400), "invalid_request_error", nullptr);
  check_error_body(post_raw(server, chat, "[1, 2]", 400), "invalid_request_error", nullptr);
  check_error_body(post_json(server, chat, Json{{"model", "demo"}}, 400), "invalid_request_error", "messages");
  check_error_body(post_json(server, chat, with("messages", "hi"), 400), "invalid_request_error", "messages");
  check_error_body(post_json(server, chat, with("messages", Json::array()), 400), "invalid_request_error", "messages");
  check_error_body(post_json(server, chat, with("messages", {{{"role", "wizard"}, {"content", "x"}}}), 400), "invalid_request_error",
                   "messages[0].role");
  check_error_body(post_json(server, chat, with("messages", {{{"role", "user"}, {"content", 5}}}), 400), "invalid_request_error",
                   "messages[0].content");
  check_error_body(post_json(server, chat, with("temperature", "hot"), 400), "invalid_request_error", "temperature");
  check_error_body(post_json(server, chat, with("temperature", -0.5), 400), "invalid_request_error", "temperature");
  check_error_body(post_json(server, chat, with("top_p", 0), 400), "invalid_request_error", "top_p");
  check_error_body(post_json(server, chat, with("top_k", -1), 400), "invalid_request_error", "top_k");
  check_error_body(post_json(server, chat, with("stream", "yes"), 400), "invalid_request_error", "stream");
  check_error_body(post_json(server, chat, with("seed", "x"), 400), "invalid_request_error", "seed");
  check_error_body(post_json(server, chat, with("n", 2), 400), "invalid_request_error", "n");
  check_error_body(post_json(server, chat, with("stop", Json::array({"a", "b", "c", "d", "e"})), 400), "invalid_request_error", "stop");
  check_error_body(post_json(server, chat, with("stop", 3), 400), "invalid_request_error", "stop");
  check_error_body(post_json(server, chat, with("max_tokens", 0), 400), "invalid_request_error", "max_tokens");
  const Json too_long = post_json(server, chat, with("max_tokens", 600), 400);
  check_error_body(too_long, "invalid_request_error", "max_tokens");
  CHECK(too_long["error"]["code"] == "context_length_exceeded");
  check_error_body(post_json(server, "/v1/completions", Json{{"max_tokens", 1}}, 400), "invalid_request_error", "prompt");
  check_error_body(post_json(server, "/v1/completions", Json{{"prompt", {5, 99999}}}, 400), "invalid_request_error", "prompt");
  const Json long_prompt = post_json(server, "/v1/completions", Json{{"prompt", std::vector<int>(600, 5)}}, 400);
  check_error_body(long_prompt, "invalid_request_error", "prompt");
  CHECK(long_prompt["error"]["code"] == "context_length_exceeded");

  // 404 for unknown paths and methods, with a JSON body.
  auto client = server.client();
  // Plain loop variables: clang 14's lambdas (inside CAPTURE) cannot name structured bindings.
  for (const auto& request : std::vector<std::pair<std::string, std::string>>{
           {"GET", "/v1/nothing"}, {"POST", "/v1/nothing"}, {"GET", "/v1/chat/completions"}}) {
    const std::string& path = request.second;
    auto res = request.first == "GET" ? client.Get(path.c_str()) : client.Post(path.c_str(), "{}", "application/json");
    CAPTURE(path);
    REQUIRE(res);
    CHECK(res->status == 404);
    check_error_body(Json::parse(res->body), "invalid_request_error", nullptr);
  }

  // 413 past --max-body 65536; a body just under it is read (and refused for its length).
  const std::string filler(70000, 'a');
  const Json big = post_raw(server, chat, chat_request(filler).dump(), 413);
  check_error_body(big, "invalid_request_error", nullptr);
  CHECK(big["error"]["code"] == "request_too_large");
  CHECK(post_json(server, chat, chat_request(std::string(60000, 'a')), 400)["error"]["code"] == "context_length_exceeded");

  const Json health = get_json(server, "/health");
  CHECK(health["slots_idle"] == 4);
  CHECK(health["queued"] == 0);
  CHECK(post_json(server, chat, chat_request("你好"))["choices"].size() == 1);
}

TEST_CASE("minimind-server: /metrics counts requests and tokens exactly, and its histograms agree with the steps and replies") {
  using minimind::testing::prometheus::Exposition;
  auto& server = demo_server();
  const Exposition before = scrape(server);
  int scrapes = 1;

  // Generations whose usage the server reports, each timed by the client; ignore_eos, so that
  // every id the engine samples is read into the reply.
  std::vector<Json> usages;
  double wall_seconds = 0;
  std::mutex mutex;
  auto timed = [&](const std::function<Json()>& send) {
    const auto start = std::chrono::steady_clock::now();
    const Json usage = send();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    std::lock_guard<std::mutex> lock(mutex);
    usages.push_back(usage);
    wall_seconds += took.count();
  };
  auto completion = [&](const Json& prompt, int max_tokens) {
    timed([&] {
      return post_json(server, "/v1/completions", {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}})["usage"];
    });
  };
  completion("今天天气", 5);
  completion(std::vector<int>{5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, 4);
  timed([&] {
    Json request = chat_request("你好", 6);
    request["ignore_eos"] = true;
    request["stream"] = true;
    const auto chunks = sse_chunks(post_stream(server, "/v1/chat/completions", request).body);
    REQUIRE(!chunks.empty());
    return chunks.back().at("usage");
  });
  std::vector<std::future<void>> together;
  for (const char* prompt : {"小明家养了一只猫", "这块石头很硬", "天气", "你好"})
    together.push_back(std::async(std::launch::async, [&, prompt] { completion(prompt, 8); }));
  for (auto& f : together) f.get();
  check_error_body(post_json(server, "/v1/completions", Json{{"max_tokens", 1}}, 400), "invalid_request_error", "prompt");
  get_json(server, "/v1/models");
  get_json(server, "/v1/models/demo");
  get_json(server, "/v1/nothing", 404);

  using Labels = minimind::testing::prometheus::Labels;
  auto requests = [](const Exposition& m, const std::string& endpoint, const std::string& method, int status) {
    return m.value("minimind_requests_total", Labels{{"endpoint", endpoint}, {"method", method}, {"status", std::to_string(status)}}).value_or(0);
  };
  struct Expected {
    std::string endpoint, method;
    int status;
    double count;
  };
  const std::vector<Expected> expected = {{"/v1/completions", "POST", 200, 6}, {"/v1/chat/completions", "POST", 200, 1},
                                          {"/v1/completions", "POST", 400, 1}, {"/v1/models", "GET", 200, 1},
                                          {"/v1/models/{id}", "GET", 200, 1},  {"other", "GET", 404, 1}};
  // A request is counted once its reply is written, which the client may see a moment before.
  Exposition after;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  bool all_counted = false;
  while (!all_counted && std::chrono::steady_clock::now() < deadline) {
    after = scrape(server);
    ++scrapes;
    all_counted = std::all_of(expected.begin(), expected.end(), [&](const Expected& e) {
      return requests(after, e.endpoint, e.method, e.status) - requests(before, e.endpoint, e.method, e.status) >= e.count;
    });
  }
  for (const auto& e : expected) {
    CAPTURE(e.endpoint);
    CAPTURE(e.status);
    CHECK(requests(after, e.endpoint, e.method, e.status) - requests(before, e.endpoint, e.method, e.status) == e.count);
  }
  const double scraped = requests(after, "/metrics", "GET", 200) - requests(before, "/metrics", "GET", 200);
  CHECK(scraped >= 1);
  CHECK(scraped < scrapes);

  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  for (const Json& usage : usages) {
    prompt_tokens += usage.at("prompt_tokens").get<int64_t>();
    completion_tokens += usage.at("completion_tokens").get<int64_t>();
    if (usage.contains("prompt_tokens_details")) cached_tokens += usage["prompt_tokens_details"].value("cached_tokens", int64_t{0});
  }
  CHECK(completion_tokens == 5 + 4 + 6 + 4 * 8);
  auto moved = [&](const std::string& name) { return *after.value(name) - *before.value(name); };
  CHECK(moved("minimind_prompt_tokens_total") == prompt_tokens);
  CHECK(moved("minimind_generated_tokens_total") == completion_tokens);
  CHECK(moved("minimind_prompt_tokens_cached_total") == cached_tokens);
  CHECK(after.value("minimind_slots") == 4);
  CHECK(after.value("minimind_slots_busy") == 0);
  CHECK(after.value("minimind_queue_length") == 0);

  // A histogram's change: each observation lies in its bucket, so the sum moved by at least the
  // lower bounds and at most the upper bounds of the buckets the observations went to.
  struct Change {
    double count, sum, low = 0, high = 0;
  };
  auto change = [&](const std::string& name) {
    const auto h0 = before.histogram(name), h1 = after.histogram(name);
    REQUIRE(h0.buckets.size() == h1.buckets.size());
    Change c{h1.count - h0.count, h1.sum - h0.sum};
    double below = 0, previous_bound = 0;
    for (size_t i = 0; i < h1.buckets.size(); ++i) {
      const double in_bucket = (h1.buckets[i].second - h0.buckets[i].second) - below;
      below += in_bucket;
      c.low += in_bucket * previous_bound;
      c.high += in_bucket == 0 ? 0 : in_bucket * h1.buckets[i].first;
      previous_bound = h1.buckets[i].first;
    }
    CHECK(c.sum >= c.low - 1e-9);
    CHECK(c.sum <= c.high + 1e-9);
    return c;
  };
  // Every sampled id took one sequence-step: the batch sizes sum to the tokens generated, the
  // steps were no fewer than the longest reply's and no more than one per token.
  const Change batch = change("minimind_step_batch_size");
  CHECK(batch.sum == completion_tokens);
  CHECK(batch.count <= completion_tokens);
  CHECK(batch.count >= 8);
  const Change step = change("minimind_step_seconds");
  CHECK(step.count == batch.count);
  CHECK(step.sum > 0);
  CHECK(step.sum < wall_seconds);
  // Each generation has a time to first token and, with two or more tokens, a per-token latency,
  // both within what its client waited.
  const Change first_token = change("minimind_time_to_first_token_seconds");
  CHECK(first_token.count == static_cast<double>(usages.size()));
  CHECK(first_token.sum > 0);
  CHECK(first_token.sum < wall_seconds);
  const Change per_token = change("minimind_time_per_output_token_seconds");
  CHECK(per_token.count == static_cast<double>(usages.size()));
  CHECK(per_token.sum > 0);
  CHECK(per_token.sum < wall_seconds);
}

TEST_CASE("minimind-server: every request field is honoured or refused with a 400 naming it") {
  auto& server = demo_server();
  const std::string chat = "/v1/chat/completions";
  const Json weather = {{"type", "function"},
                        {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}};
  auto with = [&](const Json& fields) {
    Json r = chat_request("你好");
    r.update(fields);
    return r;
  };
  auto strict = weather;
  strict["function"]["strict"] = true;
  const Json call_history = Json::array({{{"role", "user"}, {"content", "北京天气？"}},
                                         {{"role", "assistant"},
                                          {"content", nullptr},
                                          {"tool_calls", Json::array({{{"id", "call_1"}, {"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", "{}"}}}}})}},
                                         {{"role", "tool"}, {"tool_call_id", "call_2"}, {"content", "晴"}}});
  const std::vector<std::pair<Json, std::string>> refused = {
      {{{"user", "u-1"}}, "user"},
      {{{"frobnicate", 1}}, "frobnicate"},
      {{{"functions", Json::array()}}, "functions"},
      {{{"presence_penalty", 0.5}}, "presence_penalty"},
      {{{"frequency_penalty", -1}}, "frequency_penalty"},
      {{{"logprobs", true}}, "logprobs"},
      {{{"top_logprobs", 2}}, "top_logprobs"},
      {{{"logit_bias", {{"5", 1}}}}, "logit_bias"},
      {{{"store", true}}, "store"},
      {{{"echo", false}}, "echo"},  // a /v1/completions field
      {{{"stream_options", {{"include_usage", true}}}}, "stream_options"},  // without stream
      {{{"stream", true}, {"stream_options", {{"include_obfuscation", true}}}}, "stream_options.include_obfuscation"},
      {{{"max_completion_tokens", 10}}, "max_completion_tokens"},  // disagrees with max_tokens 24
      {{{"tools", "get_weather"}}, "tools"},
      {{{"tools", Json::array({{{"type", "retrieval"}}})}}, "tools[0].type"},
      {{{"tools", Json::array({weather, weather})}}, "tools[1].function.name"},
      {{{"tools", Json::array({strict})}}, "tools[0].function.strict"},
      {{{"tools", Json::array({{{"type", "function"}, {"function", {{"name", "f"}, {"returns", "int"}}}}})}}, "tools[0].function.returns"},
      {{{"tool_choice", "sometimes"}}, "tool_choice"},
      {{{"tool_choice", "required"}}, "tool_choice"},  // no tools
      {{{"tools", Json::array({weather})}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}}, "tool_choice.function.name"},
      {{{"parallel_tool_calls", "no"}}, "parallel_tool_calls"},
      {{{"tools", Json::array({weather})}, {"response_format", {{"type", "json_object"}}}}, "response_format"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", {{"type", "string"}, {"format", "date"}}}}}}}},
       "response_format.json_schema.schema"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", {{"type", "object"}}}}}}}}, "response_format.json_schema.name"},
      {{{"response_format", {{"type", "json_object"}}}, {"ignore_eos", true}}, "ignore_eos"},
      {{{"response_format", {{"type", "xml"}}}}, "response_format.type"},
      {{{"open_thinking", "yes"}}, "open_thinking"},
      {{{"chat_template_kwargs", {{"tools_in_user_message", true}}}}, "chat_template_kwargs.tools_in_user_message"},
      {{{"chat_template_kwargs", {{"enable_thinking", "no"}}}}, "chat_template_kwargs.enable_thinking"},
      {{{"messages", Json::array({{{"role", "user"}, {"content", "hi"}, {"name", "bob"}}})}}, "messages[0].name"},
      {{{"messages", Json::array({{{"role", "user"}, {"content", Json::array({{{"type", "image_url"}, {"image_url", "x"}}})}}})}}, "messages[0].content"},
      {{{"messages", Json::array({{{"role", "assistant"}, {"content", "x"}, {"tool_calls", Json::array({{{"type", "function"}}})}}})}}, "messages[0].tool_calls[0].function"},
      {{{"messages", call_history}}, "messages[2].tool_call_id"},
  };
  for (const auto& refused_case : refused) {
    const auto& [fields, param] = refused_case;
    CAPTURE(refused_case.first.dump());  // (clang 14 cannot capture a structured binding)
    check_error_body(post_json(server, chat, with(fields), 400), "invalid_request_error", param);
  }
  const Json wrong_model = post_json(server, chat, with({{"model", "gpt-4"}}), 404);
  check_error_body(wrong_model, "invalid_request_error", "model");
  CHECK(wrong_model["error"]["code"] == "model_not_found");
  check_error_body(post_json(server, "/v1/completions", Json{{"prompt", "x"}, {"tools", Json::array()}}, 400), "invalid_request_error", "tools");
  check_error_body(post_json(server, "/v1/completions", Json{{"prompt", "x"}, {"suffix", "y"}}, 400), "invalid_request_error", "suffix");
  check_error_body(post_json(server, "/v1/inspect", Json{{"prompt", "x"}, {"layers", 2}}, 400), "invalid_request_error", "layers");

  // The values that ask for nothing the server does not do, null for any field, and
  // enable_thinking false (which minimind-3's template, the demo's, does not read) are taken: the
  // same greedy reply as the plain request.
  const Json plain = post_json(server, chat, chat_request("你好"));
  const Json neutral = post_json(server, chat,
                                 with({{"presence_penalty", 0}, {"frequency_penalty", 0.0}, {"logprobs", false}, {"top_logprobs", 0},
                                       {"logit_bias", Json::object()}, {"store", false}, {"n", 1}, {"user", nullptr}, {"modalities", {"text"}},
                                       {"max_completion_tokens", 24}, {"tool_choice", "auto"}, {"parallel_tool_calls", false},
                                       {"response_format", {{"type", "text"}}}, {"open_thinking", false},
                                       {"chat_template_kwargs", {{"open_thinking", false}, {"enable_thinking", false}}}}));
  CHECK(neutral["choices"][0]["message"] == plain["choices"][0]["message"]);
  CHECK(counts(neutral["usage"]) == counts(plain["usage"]));
  CHECK(get_json(server, "/health")["slots_idle"] == 4);
}

TEST_CASE("minimind-server: tools, tool_choice and the tool-call history reach the template as upstream renders them") {
  auto& server = demo_server();
  const Local& l = local();
  const ChatTemplate chat_template(l.tokenizer.chat_template());
  // Keys out of alphabetical order: the template renders each tool with tojson, in the order sent.
  const nlohmann::ordered_json tool = nlohmann::ordered_json::parse(
      R"({"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"b": {}, "a": {}}}}})");
  const Json messages = Json::array(
      {{{"role", "user"}, {"content", "天气？"}},
       {{"role", "assistant"},
        {"content", nullptr},
        {"reasoning_content", "查"},
        {"tool_calls", Json::array({{{"id", "call_a"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{\"b\": 1}"}}}},
                                    {{"id", "call_b"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", {{"a", "上海"}}}}}}})}},
       {{"role", "tool"}, {"tool_call_id", "call_a"}, {"content", "晴"}},
       {{"role", "tool"}, {"tool_call_id", "call_b"}, {"content", "雨"}},
       {{"role", "user"}, {"content", "明天？"}}});
  std::vector<ChatMessage> history = {{"user", "天气？"}, {"assistant", ""}, {"tool", "晴"}, {"tool", "雨"}, {"user", "明天？"}};
  history[1].reasoning_content = "查";
  history[1].tool_calls = {ToolCall{"f", "{\"b\": 1}"}, ToolCall{"f", nlohmann::ordered_json{{"a", "上海"}}}};

  // The server's prompt (its length) and greedy reply are the library's for the same conversation.
  using Ordered = nlohmann::ordered_json;
  auto expect = [&](const Json& request_messages, const std::vector<ChatMessage>& conversation, const ChatOptions& options,
                    const Ordered& fields) {
    ChatOptions with_prompt = options;
    with_prompt.add_generation_prompt = true;
    const auto prompt = l.tokenizer.encode(chat_template.render(conversation, with_prompt));
    const auto [text, result] = l.generate(prompt, l.greedy(24));
    Ordered request = Ordered::parse(chat_request("", 24).dump());
    request["messages"] = Ordered::parse(request_messages.dump());
    request.update(fields);  // ordered: the tools keep their key order
    const Json reply = post_raw(server, "/v1/chat/completions", request.dump(), 200);
    CHECK(reply["usage"]["prompt_tokens"] == prompt.size());
    CHECK(reply["choices"][0]["message"]["content"] == text);
    return reply["usage"]["prompt_tokens"].get<size_t>();
  };
  // The tools block alone takes most of the demo model's 512 positions: tools and the history are
  // sent in separate requests.
  const Json question = Json::array({{{"role", "user"}, {"content", "天气？"}}});
  ChatOptions with_tools;
  with_tools.tools = {tool};
  const Ordered tools = Ordered::array({tool});
  const size_t offered = expect(question, {history[0]}, with_tools, {{"tools", tools}});
  // tool_choice none: the tools are not offered.
  const size_t declined = expect(question, {history[0]}, {}, {{"tools", tools}, {"tool_choice", "none"}});
  CHECK(offered > declined + 100);
  // The history's calls (string and object arguments), reasoning and results.
  CHECK(expect(messages, history, {}, Ordered::object()) > declined + 40);
  // enable_thinking reaches the template; minimind-3's (the demo's) ignores it.
  ChatOptions no_thinking;
  no_thinking.enable_thinking = false;
  CHECK(expect(question, {history[0]}, no_thinking, {{"chat_template_kwargs", {{"enable_thinking", false}}}}) == declined);
}

std::filesystem::path write_slow_checkpoint();

// python3-jsonschema's verdict on `document` against `schema`: "" when it validates, else why not.
std::string jsonschema_error(const Json& schema, const std::string& document) {
  const auto dir = scratch_dir("server_jsonschema");
  write_file(dir / "schema.json", schema.dump());
  write_file(dir / "document.json", document);
  const auto r = run_command("python3 -c 'import json, sys, jsonschema; jsonschema.Draft202012Validator(json.load(open(sys.argv[1])))"
                             ".validate(json.load(open(sys.argv[2])))' " + (dir / "schema.json").string() + " " + (dir / "document.json").string());
  return r.exit_code == 0 ? "" : r.err + r.out;
}

TEST_CASE("minimind-server: a named or required tool_choice forces a call whose arguments follow the function's parameters, streamed and not") {
  // Random weights, whatever they write, and room for the tools block (the demo model has 512 positions).
  const auto model_dir = write_slow_checkpoint();
  ServerProcess server("forced_calls", {"--model", model_dir.string(), "--slots", "2", "--threads", "1"});
  const Json parameters = {{"type", "object"},
                           {"properties", {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}}}},
                           {"required", {"city"}}};
  const Json tool = {{"type", "function"}, {"function", {{"name", "get_weather"}, {"strict", true}, {"parameters", parameters}}}};
  Json request = chat_request("北京天气？", 40);
  request.erase("model");
  request["tools"] = Json::array({tool});
  request["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const Json reply = post_json(server, "/v1/chat/completions", request);
  const Json& choice = reply["choices"][0];
  CHECK(choice["finish_reason"] == "tool_calls");
  CHECK(choice["message"]["content"].is_null());
  REQUIRE(choice["message"]["tool_calls"].size() == 1);
  const Json& call = choice["message"]["tool_calls"][0];
  CHECK(call["type"] == "function");
  CHECK(call["function"]["name"] == "get_weather");
  const std::string arguments = call["function"]["arguments"];
  CHECK(jsonschema_error(parameters, arguments) == "");

  // Streamed: the same call, in a head and an arguments delta.
  request["stream"] = true;
  const auto chunks = sse_chunks(post_stream(server, "/v1/chat/completions", request).body);
  std::string streamed_arguments, name;
  for (const Json& chunk : chunks) {
    const Json& delta = chunk["choices"][0]["delta"];
    if (!delta.contains("tool_calls")) continue;
    CHECK(delta["tool_calls"][0]["index"] == 0);
    if (delta["tool_calls"][0]["function"].contains("name")) name = delta["tool_calls"][0]["function"]["name"];
    streamed_arguments += delta["tool_calls"][0]["function"]["arguments"].get<std::string>();
  }
  CHECK(name == "get_weather");
  CHECK(streamed_arguments == arguments);  // greedy: the same call
  CHECK(chunks.back()["choices"][0]["finish_reason"] == "tool_calls");

  // required: one of the tools, with its arguments.
  request["stream"] = false;
  request["tools"].push_back({{"type", "function"}, {"function", {{"name", "get_time"}}}});
  request["tool_choice"] = "required";
  const Json required = post_json(server, "/v1/chat/completions", request);
  REQUIRE(required["choices"][0]["message"]["tool_calls"].size() == 1);
  const Json& chosen = required["choices"][0]["message"]["tool_calls"][0]["function"];
  CHECK((chosen["name"] == "get_weather" || chosen["name"] == "get_time"));
  CHECK(jsonschema_error(chosen["name"] == "get_time" ? Json{{"type", "object"}, {"additionalProperties", false}} : parameters,
                         chosen["arguments"]) == "");
  CHECK(server.stop(SIGTERM) == 0);
}

TEST_CASE("minimind-server: response_format json_schema and json_object replies parse and validate") {
  auto& server = demo_server();
  const std::vector<Json> schemas = {
      {{"type", "object"}, {"properties", {{"animal", {{"enum", {"猫", "狗"}}}}, {"age", {{"type", "integer"}}}}}, {"required", {"animal", "age"}}},
      {{"type", "object"},
       {"properties", {{"names", {{"type", "array"}, {"items", {{"type", "string"}}}, {"minItems", 1}, {"maxItems", 3}}}, {"ok", {{"type", "boolean"}}}}},
       {"required", {"names"}}},
      {{"anyOf", {{{"type", "object"}, {"properties", {{"x", {{"type", "number"}}}}}, {"required", {"x"}}}, {{"type", "object"}, {"properties", {{"y", {{"type", "null"}}}}}, {"required", {"y"}}}}}},
  };
  for (const Json& schema : schemas) {
    for (bool stream : {false, true}) {
      CAPTURE(schema.dump());
      Json request = chat_request("小明家养了一只猫", 60);
      request["temperature"] = 1.0;
      request["seed"] = 5;
      request["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "answer"}, {"strict", true}, {"schema", schema}}}};
      std::string content;
      if (stream) {
        request["stream"] = true;
        content = chat_stream_text(sse_chunks(post_stream(server, "/v1/chat/completions", request).body));
      } else {
        const Json reply = post_json(server, "/v1/chat/completions", request);
        CHECK(reply["choices"][0]["finish_reason"] == "stop");
        content = reply["choices"][0]["message"]["content"];
      }
      CHECK(jsonschema_error(schema, content) == "");
    }
  }
  Json request = chat_request("小明家养了一只猫", 40);
  request["response_format"] = {{"type", "json_object"}};
  CHECK(Json::parse(post_json(server, "/v1/chat/completions", request)["choices"][0]["message"]["content"].get<std::string>()).is_object());
  // A schema whose shortest document does not fit in max_tokens is refused before generating.
  request["max_tokens"] = 3;
  request["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schemas[1]}}}};
  check_error_body(post_json(server, "/v1/chat/completions", request, 400), "invalid_request_error", "max_tokens");
}

// A random schema of the constraint engine's subset: objects, arrays, scalars, enum, const, anyOf.
Json random_schema(std::mt19937& rng, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const int kind = depth <= 0 ? 2 + pick(4) : pick(6);
  switch (kind) {
    case 0: {
      Json properties = Json::object(), required = Json::array();
      for (int i = 0, n = 1 + pick(3); i < n; ++i) {
        const std::string key = std::string(1, static_cast<char>('a' + i)) + (pick(2) ? "键" : "");
        properties[key] = random_schema(rng, depth - 1);
        if (pick(2)) required.push_back(key);
      }
      Json schema = {{"type", "object"}, {"properties", properties}, {"required", required}};
      if (pick(2)) schema["additionalProperties"] = false;
      return schema;
    }
    case 1: {
      const int min = pick(2);
      return {{"type", "array"}, {"items", random_schema(rng, depth - 1)}, {"minItems", min}, {"maxItems", min + pick(3)}};
    }
    case 2: return {{"type", Json::array({"string", "integer", "number", "boolean", "null"})[static_cast<size_t>(pick(5))]}};
    case 3: return {{"enum", Json::array({"猫", 7, false, nullptr, "a\"b"})}};
    case 4: return {{"const", pick(2) ? Json("固定") : Json(pick(100))}};
    default: return {{"anyOf", Json::array({random_schema(rng, depth - 1), random_schema(rng, depth - 1)})}};
  }
}

TEST_CASE("minimind-server: 200 json_schema replies from a random-weight model, on random schemas, all parse and validate") {
  const auto model_dir = write_slow_checkpoint();
  ServerProcess server("random_schemas", {"--model", model_dir.string(), "--slots", "4", "--threads", "1"});
  std::mt19937 rng(44);
  constexpr int kRequests = 200;
  std::vector<Json> schemas;
  while (static_cast<int>(schemas.size()) < kRequests) schemas.push_back(random_schema(rng, 2));
  auto reply = [&](int i) {
    Json request = chat_request("JSON", 120);
    request.erase("model");
    request["temperature"] = 1.0;
    request["seed"] = i;
    request["stream"] = i % 2 == 1;
    request["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "r"}, {"schema", schemas[static_cast<size_t>(i)]}}}};
    if (!request["stream"]) return post_json(server, "/v1/chat/completions", request)["choices"][0]["message"]["content"].get<std::string>();
    std::string text;
    for (const Json& chunk : sse_chunks(post_stream(server, "/v1/chat/completions", request).body)) {
      text += chunk["choices"][0]["delta"].value("content", "");
    }
    return text;
  };
  const auto dir = scratch_dir("server_random_schemas");
  std::string lines;
  for (int first = 0; first < kRequests; first += 4) {
    std::vector<std::future<std::string>> batch;
    for (int i = first; i < first + 4; ++i) batch.push_back(std::async(std::launch::async, reply, i));
    for (int i = first; i < first + 4; ++i) lines += Json{{"schema", schemas[static_cast<size_t>(i)]}, {"document", batch[static_cast<size_t>(i - first)].get()}}.dump() + "\n";
  }
  write_file(dir / "replies.jsonl", lines);
  // python3-jsonschema counts the documents that parse and validate.
  const auto r = run_command("python3 -c 'import json, sys, jsonschema\n"
                             "good = 0\n"
                             "for line in open(sys.argv[1], encoding=\"utf-8\"):\n"
                             "    case = json.loads(line)\n"
                             "    try:\n"
                             "        jsonschema.Draft202012Validator(case[\"schema\"]).validate(json.loads(case[\"document\"])); good += 1\n"
                             "    except Exception as e: print(case, e)\n"
                             "print(good)' " + (dir / "replies.jsonl").string());
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  MESSAGE("json_schema replies that parse and validate: " << r.out);
  CHECK(std::stoi(r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1)) == kRequests);
  CHECK(server.stop(SIGTERM) == 0);
}

// The demo model's chat template is minimind-3's: its prompt can open a think block, and the
// demo model was trained to reason in it.
TEST_CASE("minimind-server: with minimind-3's template, open_thinking makes the reply reasoning_content, streamed before any content") {
  const auto demo = source_dir() / "examples" / "models" / "demo";
  ServerProcess server("minimind3_template", {"--model", demo.string(), "--slots", "2", "--threads", "1"});

  const Local& l = local();
  const ChatTemplate chat_template = ChatTemplate::minimind3();
  const std::string user = "你好";  // a greeting the demo was trained to reason about
  ChatOptions options;
  options.add_generation_prompt = true;
  options.open_thinking = true;
  const auto prompt = l.tokenizer.encode(chat_template.render({{"user", user}}, options));
  const auto [text, result] = l.generate(prompt, l.greedy(24));
  ChatReplyOptions reply_options;
  reply_options.starts_in_thinking = true;
  const ChatReply expected = parse_chat_reply(text, reply_options);
  REQUIRE(!expected.reasoning.empty());

  for (const Json& switch_on : {Json{{"open_thinking", true}}, Json{{"chat_template_kwargs", {{"open_thinking", true}}}},
                                Json{{"chat_template_kwargs", {{"enable_thinking", true}}}}}) {
    CAPTURE(switch_on.dump());
    Json request = chat_request(user, 24);
    request.erase("model");
    request.update(switch_on);
    const Json reply = post_json(server, "/v1/chat/completions", request);
    CHECK(reply["usage"]["prompt_tokens"] == prompt.size());
    const Json& message = reply["choices"][0]["message"];
    CHECK(message["reasoning_content"] == expected.reasoning);
    CHECK(message["content"] == expected.content);
    CHECK_FALSE(message.contains("tool_calls"));

    request["stream"] = true;
    const auto chunks = sse_chunks(post_stream(server, "/v1/chat/completions", request).body);
    std::string reasoning, content;
    for (const Json& chunk : chunks) {
      const Json& delta = chunk["choices"][0]["delta"];
      if (delta.contains("reasoning_content")) {
        CHECK(content.empty());  // reasoning comes first
        reasoning += delta["reasoning_content"].get<std::string>();
      }
      if (delta.contains("content")) content += delta["content"].get<std::string>();
    }
    CHECK(reasoning == expected.reasoning);
    CHECK(content == expected.content);
    CHECK(chunks.back()["choices"][0]["finish_reason"] == reply["choices"][0]["finish_reason"]);
  }
  // Without the switch the prompt ends in a closed think block and the reply is content.
  Json plain = chat_request(user, 24);
  plain.erase("model");
  const Json closed = post_json(server, "/v1/chat/completions", plain);
  CHECK_FALSE(closed["choices"][0]["message"].contains("reasoning_content"));
  CHECK(server.stop(SIGTERM) == 0);
}

// Each (flags, text): minimind-server exits 1 with one line `minimind-server: error: ...` holding text.
void check_flag_errors(const std::vector<std::pair<std::string, std::string>>& cases) {
  for (const auto& flag_case : cases) {
    const std::string &flags = flag_case.first, &needle = flag_case.second;
    const auto r = run_command(program("minimind-server") + " " + flags);
    CAPTURE(flags);
    CAPTURE(r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.err.rfind("minimind-server: error: ", 0) == 0);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.err.find(needle) != std::string::npos);
  }
}

TEST_CASE("minimind-server: flag errors are one line and exit 1") {
  check_flag_errors({
           {"--slots 0", "--slots must be in"},
           {"--cache-mb -1", "--cache-mb must be in"},
           {"--port 70000", "--port must be in"},
           {"--queue -1", "--queue must be in"},
           {"--ctx 100000", "--ctx must be in"},
           {"--frobnicate", "unknown flag --frobnicate"},
           {"--web-root /nonexistent-web-root", "--web-root: \"/nonexistent-web-root\" is not a directory"},
           {"--model /nonexistent", "/nonexistent"},
           {"--port " + std::to_string(demo_server().port()), "cannot listen on 127.0.0.1:"}});
}

TEST_CASE("minimind-server: Ctrl-C stops it with exit 0") {
  auto& server = demo_server();
  CHECK(server.stop(SIGINT) == 0);
  CHECK(server.log().find("minimind-server: stopped") != std::string::npos);
}

// A model slow enough (random weights, hidden 512) that a long stream is still running while
// the test looks at the queue; the demo tokenizer supplies the text.
std::filesystem::path write_slow_checkpoint() {
  const int64_t hidden = 512, kv = 128, ffn = 1536, vocab = 1024, layers = 4;
  io::Json config = tiny_config();
  config["hidden_size"] = hidden;
  config["num_hidden_layers"] = layers;
  config["num_attention_heads"] = 8;
  config["num_key_value_heads"] = 2;
  config["intermediate_size"] = ffn;
  config["vocab_size"] = vocab;
  config["max_position_embeddings"] = 2048;
  std::vector<TensorBytes> tensors = {{"model.embed_tokens.weight", {vocab, hidden}}, {"model.norm.weight", {hidden}}};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (auto t : std::vector<TensorBytes>{{p + "input_layernorm.weight", {hidden}},
                                           {p + "self_attn.q_proj.weight", {hidden, hidden}},
                                           {p + "self_attn.k_proj.weight", {kv, hidden}},
                                           {p + "self_attn.v_proj.weight", {kv, hidden}},
                                           {p + "self_attn.o_proj.weight", {hidden, hidden}},
                                           {p + "post_attention_layernorm.weight", {hidden}},
                                           {p + "mlp.gate_proj.weight", {ffn, hidden}},
                                           {p + "mlp.up_proj.weight", {ffn, hidden}},
                                           {p + "mlp.down_proj.weight", {hidden, ffn}}})
      tensors.push_back(t);
  }
  const auto dir = write_checkpoint("server_slow_model", config, safetensors_image(tensors));
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) std::filesystem::copy_file(demo_dir / file, dir / file);
  return dir;
}

// A loopback connection to the server, for clients that misbehave.
int connect_to(const ServerProcess& server) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(server.port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
  return fd;
}

// A client on a plain socket that sends one request and hangs up when told to: the test decides
// when the connection closes, rather than a client read timeout racing the server.
class HangingUpClient {
 public:
  HangingUpClient(const ServerProcess& server, const std::string& path, const Json& body) {
    fd_ = connect_to(server);
    const std::string payload = body.dump();
    const std::string request = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                                "Content-Length: " + std::to_string(payload.size()) + "\r\n\r\n" + payload;
    REQUIRE(::send(fd_, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()));
  }
  HangingUpClient(const HangingUpClient&) = delete;
  HangingUpClient& operator=(const HangingUpClient&) = delete;
  ~HangingUpClient() { hang_up(); }

  // True if no byte of a reply has arrived yet.
  bool no_reply_yet() const {
    char byte;
    return ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  void hang_up() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

TEST_CASE("minimind-server: a full queue gives 503, a client that hangs up frees its slot, SIGTERM exits 0") {
  const auto model_dir = write_slow_checkpoint();
  ServerProcess server("slow", {"--model", model_dir.string(), "--slots", "1", "--queue", "1", "--threads", "1"});
  const Json long_stream = {{"prompt", "今天天气"}, {"temperature", 0}, {"max_tokens", 2000}, {"ignore_eos", true}, {"stream", true}};

  // A: a long stream that hangs up once told to, after its first text has arrived.
  std::promise<void> first_text;
  std::atomic<bool> hang_up{false};
  bool first = true;
  auto a = std::async(std::launch::async, [&] {
    return post_stream(server, "/v1/completions", long_stream, [&](const std::string& so_far) {
      if (first && so_far.find("\"text\":\"") != std::string::npos) {
        first = false;
        first_text.set_value();
      }
      return !hang_up;
    });
  });
  REQUIRE(first_text.get_future().wait_for(30s) == std::future_status::ready);
  CHECK(get_json(server, "/health")["slots_idle"] == 0);

  // Waits until /health shows `value` for `key`; the deadline only guards against a hang.
  auto wait_for_health = [&](const char* key, int value) {
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (get_json(server, "/health")[key] != value && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
    return get_json(server, "/health")[key] == value;
  };
  // A client that hangs up while queued leaves the queue.
  {
    HangingUpClient impatient(server, "/v1/completions", Json{{"prompt", "你好"}, {"max_tokens", 3}});
    REQUIRE(wait_for_health("queued", 1));
    CHECK(impatient.no_reply_yet());
  }
  CHECK(wait_for_health("queued", 0));
  CHECK(server.log().find("completion: client disconnected while queued") != std::string::npos);

  // B waits in the queue; C finds it full.
  auto b = std::async(std::launch::async, [&] {
    return post_json(server, "/v1/completions", Json{{"prompt", "你好"}, {"max_tokens", 3}, {"temperature", 0}}, 200);
  });
  REQUIRE(wait_for_health("queued", 1));
  const auto busy = scrape(server);
  CHECK(busy.value("minimind_slots_busy") == 1);
  CHECK(busy.value("minimind_queue_length") == 1);
  const Json overflow = post_json(server, "/v1/completions", Json{{"prompt", "你好"}, {"max_tokens", 3}}, 503);
  check_error_body(overflow, "server_error", nullptr);
  CHECK(overflow["error"]["code"] == "server_overloaded");
  // An inspection holds a slot as well, so it waits in (here: finds full) the same queue.
  CHECK(post_json(server, "/v1/inspect", Json{{"prompt", "你好"}}, 503)["error"]["code"] == "server_overloaded");

  // A hangs up mid-stream: its slot goes to B at once, long before A's 2000 tokens.
  hang_up = true;
  const auto a_result = a.get();
  CHECK(a_result.error == httplib::Error::Canceled);
  REQUIRE(b.wait_for(20s) == std::future_status::ready);
  CHECK(b.get()["usage"]["completion_tokens"] == 3);
  const std::string log = server.log();
  INFO(log);
  auto disconnected_after = [&](const std::string& text, size_t from) {
    const size_t line = text.find("tokens, finish: client disconnected", from);
    REQUIRE(line != std::string::npos);
    const size_t count_at = text.rfind("completion ", line) + std::string("completion ").size();
    return std::pair{std::stoll(text.substr(count_at)), line + 1};
  };
  const auto [streamed_tokens, next] = disconnected_after(log, 0);
  CHECK(streamed_tokens < 1000);
  const Json health = get_json(server, "/health");
  CHECK(health["slots_idle"] == 1);
  CHECK(health["queued"] == 0);

  // A non-streamed reply whose client hangs up mid-generation frees the slot too.
  {
    Json whole = long_stream;
    whole["stream"] = false;
    HangingUpClient impatient(server, "/v1/completions", whole);
    REQUIRE(wait_for_health("slots_idle", 0));
    CHECK(impatient.no_reply_yet());
  }
  CHECK(wait_for_health("slots_idle", 1));
  CHECK(disconnected_after(server.log(), next).first < 1000);

  // SIGTERM during a stream: the stream ends with an error event and [DONE]; exit status 0.
  std::promise<void> started;
  bool once = true;
  auto d = std::async(std::launch::async, [&] {
    return post_stream(server, "/v1/completions", long_stream, [&](const std::string&) {
      if (std::exchange(once, false)) started.set_value();
      return true;
    });
  });
  REQUIRE(started.get_future().wait_for(30s) == std::future_status::ready);
  CHECK(server.stop(SIGTERM) == 0);
  const auto d_result = d.get();
  CHECK(d_result.status == 200);
  const auto chunks = sse_chunks(d_result.body);
  REQUIRE(!chunks.empty());
  CHECK(chunks.back()["error"]["code"] == "shutting_down");
}

TEST_CASE("minimind-server: a chat template the library cannot render leaves /v1/completions working") {
  const auto model_dir = write_slow_checkpoint();
  Json tokenizer_config = Json::parse(read_file(model_dir / "tokenizer_config.json"));
  tokenizer_config["chat_template"] = "{{ messages[0]['content'] }}";
  write_file(model_dir / "tokenizer_config.json", tokenizer_config.dump());
  ServerProcess server("custom_template", {"--model", model_dir.string(), "--slots", "1"});
  Json request = chat_request("你好", 2);
  request.erase("model");  // the server's model is not "demo"
  const Json chat = post_json(server, "/v1/chat/completions", request, 500);
  check_error_body(chat, "server_error", nullptr);
  CHECK(chat["error"]["message"].get<std::string>().find("chat template") != std::string::npos);
  CHECK(post_json(server, "/v1/completions", Json{{"prompt", "你好"}, {"max_tokens", 2}})["usage"]["completion_tokens"].get<int>() <= 2);
  CHECK(server.stop(SIGTERM) == 0);
}

TEST_CASE("minimind-server: / serves the page; POST /v1/inspect returns the library's trace of the raw prompt") {
  ServerProcess server("inspect", {"--slots", "1", "--threads", "1"});
  auto client = server.client();
  auto page = client.Get("/");
  REQUIRE(page);
  CHECK(page->status == 200);
  CHECK(page->get_header_value("Content-Type").rfind("text/html", 0) == 0);
  for (const char* hook : {"data-testid=\"prompt\"", "data-testid=\"send\"", "data-testid=\"inspect\"", "data-testid=\"topk\"", "/v1/inspect"}) {
    CHECK(page->body.find(hook) != std::string::npos);
  }
  // Offline: nothing on the page names another host.
  CHECK(page->body.find("http://") == std::string::npos);
  CHECK(page->body.find("https://") == std::string::npos);

  const Json got = post_json(server, "/v1/inspect", {{"prompt", "今天天气"}, {"top", 3}, {"attention", true}});
  const auto ids = local().tokenizer.encode("今天天气");
  TraceOptions options;
  options.top = 3;
  options.attention = true;
  const Json expected = trace(local().model, ids, &local().tokenizer, options).to_json();
  CHECK(got == expected);
  CHECK(got.at("top")[0].at("piece") == "很");
  CHECK(got.at("layers")[0].at("attention").size() == static_cast<size_t>(local().model.config().num_attention_heads));

  check_error_body(post_raw(server, "/v1/inspect", "{\"prompt\": ", 400), "invalid_request_error", nullptr);
  check_error_body(post_json(server, "/v1/inspect", Json::object(), 400), "invalid_request_error", "prompt");
  check_error_body(post_json(server, "/v1/inspect", {{"prompt", 5}}, 400), "invalid_request_error", "prompt");
  check_error_body(post_json(server, "/v1/inspect", {{"prompt", ""}}, 400), "invalid_request_error", "prompt");
  check_error_body(post_json(server, "/v1/inspect", {{"prompt", "x"}, {"top", 0}}, 400), "invalid_request_error", "top");
  check_error_body(post_json(server, "/v1/inspect", {{"prompt", "x"}, {"attention", "yes"}}, 400), "invalid_request_error", "attention");
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += "天气 ";
  check_error_body(post_json(server, "/v1/inspect", {{"prompt", long_prompt}, {"attention", true}}, 400), "invalid_request_error", "prompt");
  CHECK(server.stop(SIGTERM) == 0);
}

// ---- Keys and timeouts (examples/server_auth.hpp, examples/server_deadline.hpp) ----

TEST_CASE("minimind-server: with keys, every request but /, /health and preflights needs Authorization: Bearer <one of them>") {
  const auto dir = scratch_dir("api_key_file");
  write_file(dir / "keys.txt", "# the team's keys\n\n  key-from-file  \r\nsecond-file-key\n");
  ServerProcess server("keys", {"--api-key", "key-one", "--api-key-file", (dir / "keys.txt").string(), "--slots", "1", "--threads", "1"});
  const std::string completion = Json{{"prompt", "你好"}, {"max_tokens", 2}}.dump();
  auto send = [&](const std::string& method, const std::string& path, const std::optional<std::string>& authorization) {
    auto client = server.client();
    httplib::Headers headers;
    if (authorization) headers.emplace("Authorization", *authorization);
    auto res = method == "GET" ? client.Get(path.c_str(), headers) : client.Post(path.c_str(), headers, completion, "application/json");
    REQUIRE_MESSAGE(res, method << " " << path << ": " << httplib::to_string(res.error()));
    return *res;
  };

  for (const auto& endpoint : std::vector<std::pair<std::string, std::string>>{
           {"GET", "/v1/models"}, {"GET", "/v1/models/demo"}, {"POST", "/v1/completions"}, {"POST", "/v1/chat/completions"},
           {"POST", "/v1/inspect"}, {"GET", "/lora-adapters"}, {"POST", "/lora-adapters"}, {"GET", "/metrics"}, {"GET", "/no-such-page"}}) {
    const std::string& method = endpoint.first;  // not a structured binding: clang 14 cannot CAPTURE one
    const std::string& path = endpoint.second;
    for (const std::optional<std::string>& authorization :
         std::vector<std::optional<std::string>>{std::nullopt, "Bearer", "Bearer ", "Bearer key-on", "Bearer key-onf", "Bearer key-one-",
                                                 "Basic key-one", "key-one", "Bearer " + std::string(300, 'k')}) {
      CAPTURE(method);
      CAPTURE(path);
      CAPTURE(authorization.value_or("(none)"));
      const auto res = send(method, path, authorization);
      CHECK(res.status == 401);
      CHECK(res.get_header_value("WWW-Authenticate") == "Bearer");
      const Json body = Json::parse(res.body);
      check_error_body(body, "invalid_request_error", nullptr);
      CHECK(body["error"]["code"] == "invalid_api_key");
    }
  }
  // Every key works, from the flag and from the file; the scheme's case does not matter.
  for (const std::string key : {"key-one", "key-from-file", "second-file-key"}) {
    CAPTURE(key);
    CHECK(send("GET", "/v1/models", "Bearer " + key).status == 200);
    const auto res = send("POST", "/v1/completions", "bearer  " + key);
    CHECK(res.status == 200);
    CHECK(Json::parse(res.body)["usage"]["completion_tokens"].get<int>() <= 2);
  }
  // Prometheus sends its key as a bearer token; the refusals above were counted.
  const auto scraped = scrape(server, {{"Authorization", "Bearer key-one"}});
  CHECK(scraped.value("minimind_requests_total", {{"endpoint", "/metrics"}, {"method", "GET"}, {"status", "401"}}) == 9);
  // A valid key does not turn a bad request into anything but its own error.
  CHECK(send("GET", "/no-such-page", "Bearer key-one").status == 404);
  // This server has no LoRA adapters: an empty list, and any id in a request's lora field unknown.
  const auto adapters = send("GET", "/lora-adapters", "Bearer key-one");
  CHECK(adapters.status == 200);
  CHECK(Json::parse(adapters.body) == Json::array());
  auto client_with_key = server.client();
  auto with_lora = client_with_key.Post("/v1/completions", {{"Authorization", "Bearer key-one"}},
                                        R"({"prompt": "你好", "max_tokens": 2, "lora": [{"id": 0, "scale": 1}]})", "application/json");
  REQUIRE(with_lora);
  CHECK(with_lora->status == 400);
  check_error_body(Json::parse(with_lora->body), "invalid_request_error", "lora[0].id");
  // Open: the page, /health, and CORS preflights (browsers send those without credentials).
  CHECK(send("GET", "/health", std::nullopt).status == 200);
  const auto page = send("GET", "/", std::nullopt);
  CHECK(page.status == 200);
  CHECK(page.body.find("data-testid=\"prompt\"") != std::string::npos);
  auto client = server.client();
  auto preflight = client.Options("/v1/chat/completions");
  REQUIRE(preflight);
  CHECK(preflight->status == 204);
  CHECK(server.stop(SIGTERM) == 0);
}

// A raw GET on a plain socket (httplib's client would not send a path that climbs): the status line
// and the whole reply.
std::string raw_get(const ServerProcess& server, const std::string& target) {
  const int fd = connect_to(server);
  const std::string request = "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  REQUIRE(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()));
  std::string reply;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) reply.append(buffer, static_cast<size_t>(n));
  ::close(fd);
  return reply;
}

TEST_CASE("minimind-server --web-root: the folder's files at / with the cross-origin isolation headers and no key; nothing outside it") {
  const auto base = scratch_dir("web_root");
  const auto root = base / "web";
  std::filesystem::create_directories(root / "model");
  write_file(root / "index.html", "<!doctype html><title>in-browser page</title>");
  write_file(root / "minimind-web.js", "createMiniMind = 1;");
  write_file(root / "minimind-web.wasm", std::string("\0asm\1\0\0\0", 8));
  write_file(root / "model" / "config.json", "{\"hidden_size\": 64}");
  write_file(base / "secret.txt", "not to be served");
  ServerProcess server("web_root", {"--slots", "1", "--threads", "1", "--web-root", root.string(), "--api-key", "web-key"});
  auto client = server.client();
  // A struct, not a structured binding: clang 14 cannot capture those in CAPTURE's lambda.
  struct Served {
    std::string path, body, type;
  };
  for (const Served& file : {Served{"/", "<!doctype html><title>in-browser page</title>", "text/html"},
                             Served{"/minimind-web.js", "createMiniMind = 1;", "javascript"},
                             Served{"/minimind-web.wasm", std::string("\0asm\1\0\0\0", 8), "application/wasm"},
                             Served{"/model/config.json", "{\"hidden_size\": 64}", "application/json"}}) {
    CAPTURE(file.path);
    auto res = client.Get(file.path.c_str());  // no key: the page's files are as public as the built-in page
    REQUIRE(res);
    CHECK(res->status == 200);
    CHECK(res->body == file.body);
    CHECK(res->get_header_value("Content-Type").find(file.type) != std::string::npos);
    CHECK(res->get_header_value("Cross-Origin-Opener-Policy") == "same-origin");
    CHECK(res->get_header_value("Cross-Origin-Embedder-Policy") == "require-corp");
  }
  // The API is still there, behind its key; a path that is no file there is not exempt from it.
  CHECK(client.Get("/health")->status == 200);
  CHECK(client.Get("/v1/models")->status == 401);
  CHECK(client.Get("/missing.js")->status == 401);
  httplib::Headers key = {{"Authorization", "Bearer web-key"}};
  CHECK(client.Get("/v1/models", key)->status == 200);
  CHECK(client.Get("/missing.js", key)->status == 404);
  // Paths that climb out of the folder, plain and percent-encoded, are refused.
  for (const std::string target : {"/../secret.txt", "/model/../../secret.txt", "/%2e%2e/secret.txt", "/model/%2E%2E/%2E%2E/secret.txt", "/..%2fsecret.txt"}) {
    CAPTURE(target);
    const std::string reply = raw_get(server, target);
    CHECK(reply.rfind("HTTP/1.1 200", 0) != 0);
    CHECK(reply.find("not to be served") == std::string::npos);
  }
  CHECK(server.stop(SIGTERM) == 0);
}

TEST_CASE("minimind-server: key and timeout flag errors are one line and exit 1") {
  const auto dir = scratch_dir("server_key_files");
  write_file(dir / "empty.txt", "");
  write_file(dir / "comments.txt", "# no keys yet\n\n   \n");
  write_file(dir / "spaced.txt", "good-key\nbad key\n");
  check_flag_errors({
           {"--api-key-file " + (dir / "missing.txt").string(), "missing.txt: cannot read it"},
           {"--api-key-file " + dir.string(), "cannot read it"},
           {"--api-key-file " + (dir / "empty.txt").string(), "empty.txt: holds no keys"},
           {"--api-key-file " + (dir / "comments.txt").string(), "comments.txt: holds no keys"},
           {"--api-key-file " + (dir / "spaced.txt").string(), "spaced.txt line 2: an API key is printable ASCII without spaces; byte 3 is 32"},
           {"--api-key ''", "--api-key: an API key must not be empty"},
           {"--api-key " + std::string(257, 'k'), "an API key is at most 256 bytes"},
           {"--timeout 0", "--timeout must be in [1, 604800]"},
           {"--timeout soon", "--timeout: \"soon\" is not an integer"}});
}

TEST_CASE("minimind-server: --timeout cuts off a client that trickles its body or never reads its reply; the server stays healthy") {
  const auto model_dir = write_slow_checkpoint();
  ServerProcess server("timeout", {"--model", model_dir.string(), "--timeout", "2", "--slots", "1", "--threads", "1"});

  // A body sent a byte every 200 ms never lets one read wait long enough to time out; the whole
  // request's limit ends it.
  const int fd = connect_to(server);
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n";
  REQUIRE(::send(fd, head.data(), head.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(head.size()));
  const auto start = std::chrono::steady_clock::now();
  bool closed = false;
  while (!closed && std::chrono::steady_clock::now() - start < 20s) {
    closed = ::send(fd, " ", 1, MSG_NOSIGNAL) != 1;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 200) > 0) {
      char buffer[512];
      closed = closed || ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT) <= 0 || (p.revents & (POLLHUP | POLLERR)) != 0;
    }
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ::close(fd);
  CHECK(closed);
  CHECK(elapsed >= 1500ms);
  CHECK(elapsed < 10s);

  // A long stream whose client never reads: cut off too, and its slot freed.
  {
    HangingUpClient deaf(server, "/v1/completions", Json{{"prompt", "今天天气"}, {"max_tokens", 2000}, {"ignore_eos", true}, {"stream", true}});
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    bool busy = false, freed = false;
    while (!freed && std::chrono::steady_clock::now() < deadline) {
      const bool idle = get_json(server, "/health")["slots_idle"] == 1;
      busy = busy || !idle;
      freed = busy && idle;
      std::this_thread::sleep_for(20ms);
    }
    CHECK(busy);
    CHECK(freed);
  }
  const std::string log = server.log();
  INFO(log);
  const std::string cut_off = "ran past --timeout 2 s";
  size_t cut_offs = 0;
  for (size_t at = log.find(cut_off); at != std::string::npos; at = log.find(cut_off, at + 1)) ++cut_offs;
  CHECK(cut_offs == 2);
  // Healthy: a request after them is answered.
  CHECK(post_json(server, "/v1/completions", Json{{"prompt", "你好"}, {"max_tokens", 2}})["usage"]["completion_tokens"].get<int>() <= 2);
  CHECK(server.stop(SIGTERM) == 0);
}

// ---- LoRA adapters chosen per request (--lora, the lora field, /lora-adapters) ----

// A random PEFT adapter for the demo model (hidden 128, intermediate 384, 4 layers) in `dir`:
// rank 4 on `modules` of every layer, lora_alpha = r, so its delta is B A.
std::filesystem::path write_demo_adapter(const std::filesystem::path& dir, const std::vector<std::string>& modules, uint32_t seed) {
  std::filesystem::create_directories(dir);
  constexpr int64_t rank = 4;
  auto shape_of = [](const std::string& module) {  // {in, out}
    if (module == "gate_proj" || module == "up_proj") return std::pair<int64_t, int64_t>{128, 384};
    if (module == "down_proj") return std::pair<int64_t, int64_t>{384, 128};
    return std::pair<int64_t, int64_t>{128, 128};
  };
  // Uniform in [-0.42, 0.42] from mt19937's own numbers (the standard's distributions differ
  // between libraries): large enough that each adapter, at the scales the test runs it with,
  // changes the demo model's greedy text.
  std::mt19937 random(seed);
  auto values = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = 0.84f * (static_cast<float>(random() >> 8) / 16777216.0f - 0.5f);
    return f32_bytes(v);
  };
  std::vector<TensorBytes> tensors;
  for (int layer = 0; layer < 4; ++layer) {
    for (const auto& module : modules) {
      const bool attention = module == "q_proj" || module == "k_proj" || module == "v_proj" || module == "o_proj";
      const std::string block = attention ? "self_attn" : "mlp";
      const std::string name = "base_model.model.model.layers." + std::to_string(layer) + "." + block + "." + module;
      const auto [in, out] = shape_of(module);
      tensors.emplace_back(name + ".lora_A.weight", std::vector<int64_t>{rank, in}, "F32", values(rank * in));
      tensors.emplace_back(name + ".lora_B.weight", std::vector<int64_t>{out, rank}, "F32", values(out * rank));
    }
  }
  write_file(dir / "adapter_model.safetensors", safetensors_image(tensors));
  write_file(dir / "adapter_config.json",
             Json{{"peft_type", "LORA"}, {"r", rank}, {"lora_alpha", rank}, {"target_modules", modules}}.dump());
  return dir;
}

TEST_CASE("minimind-server --lora: each request runs the adapters it names, as minimind-generate runs them merged; /lora-adapters") {
  const auto dir = scratch_dir("demo_adapters");  // not server_<name>: ServerProcess clears that
  const std::string attention = write_demo_adapter(dir / "attention", {"q_proj", "o_proj"}, 1).string();
  const std::string mlp = write_demo_adapter(dir / "mlp", {"gate_proj", "up_proj", "down_proj"}, 2).string();
  const std::string prompt = "小明家养了一只";
  // minimind-generate's greedy continuation of `prompt` with `flags` (its adapters merged at load).
  auto merged = [&](const std::string& flags) {
    const auto r = run_command(program("minimind-generate") + " --prompt " + prompt + " --temperature 0 --ignore-eos --max-new-tokens 16 " + flags);
    INFO(flags << ": " << r.err);
    REQUIRE(r.exit_code == 0);
    REQUIRE(r.out.size() > 1);
    return r.out.substr(0, r.out.size() - 1);
  };
  const std::string base = merged(""), with_attention = merged("--lora " + attention), with_mlp_half = merged("--lora-scaled " + mlp + ":0.5"),
                    with_attention_part = merged("--lora-scaled " + attention + ":0.8"),
                    with_both = merged("--lora " + attention + " --lora-scaled " + mlp + ":0.5");
  // Each adapter changes the text, so a request run with the wrong ones cannot pass.
  const std::set<std::string> distinct = {base, with_attention, with_mlp_half, with_attention_part, with_both};
  REQUIRE(distinct.size() == 5);

  ServerProcess server("lora", {"--lora", attention, "--lora-scaled", mlp + ":0.5", "--slots", "4", "--threads", "1"});
  CHECK(server.log().find("minimind-server: lora adapter 1: " + mlp + ": peft, rank 4, 12 modules (") != std::string::npos);
  CHECK(get_json(server, "/lora-adapters") ==
        Json::parse(R"([{"id": 0, "path": ")" + attention + R"(", "scale": 1.0}, {"id": 1, "path": ")" + mlp + R"(", "scale": 0.5}])"));

  auto request = [&](const std::optional<Json>& lora, bool stream = false) {
    Json r = {{"prompt", prompt}, {"temperature", 0}, {"max_tokens", 16}, {"ignore_eos", true}};
    if (lora) r["lora"] = *lora;
    if (stream) r["stream"] = true;
    return r;
  };
  auto complete = [&](const std::optional<Json>& lora, bool stream = false) {
    if (!stream) return post_json(server, "/v1/completions", request(lora))["choices"][0]["text"].get<std::string>();
    std::string text;
    for (const auto& chunk : sse_chunks(post_stream(server, "/v1/completions", request(lora, true)).body))
      text += chunk["choices"][0]["text"].get<std::string>();
    return text;
  };
  // Without the field every adapter runs at its global scale, as llama-server does; with it, the
  // listed ones at their scales and no other; an empty list is the base model.
  CHECK(complete(std::nullopt) == with_both);
  CHECK(complete(Json::parse(R"([{"id": 0, "scale": 1}])")) == with_attention);
  CHECK(complete(Json::parse(R"([{"id": 1, "scale": 0.5}, {"id": 0, "scale": 0}])")) == with_mlp_half);
  CHECK(complete(Json::parse(R"([{"id": 0, "scale": 0.8}])"), true) == with_attention_part);
  CHECK(complete(Json::array()) == base);

  // Requests with different adapters (and none) at once share the batch's steps; each gets its own text.
  const std::vector<std::pair<std::optional<Json>, std::string>> mixed = {
      {Json::parse(R"([{"id": 0, "scale": 1}])"), with_attention},
      {Json::parse(R"([{"id": 1, "scale": 0.5}])"), with_mlp_half},
      {Json::array(), base},
      {std::nullopt, with_both}};
  for (int round = 0; round < 2; ++round) {
    std::vector<std::future<std::string>> replies;
    for (size_t i = 0; i < mixed.size(); ++i) replies.push_back(std::async(std::launch::async, [&, i] { return complete(mixed[i].first, (i + round) % 2); }));
    for (size_t i = 0; i < mixed.size(); ++i) CHECK(replies[i].get() == mixed[i].second);
  }

  // A chat runs its adapters as a completion does: the same reply as the library's model with the
  // adapter merged.
  LoadOptions options;
  options.adapters = {{std::make_shared<const LoraAdapter>(LoraAdapter::load(attention)), 1.0f}};
  const auto adapted = MiniMindForCausalLM<float>::from_pretrained(demo_dir, options);
  auto session = adapted.new_session(512);
  std::string chat_text;
  generate_text(adapted, local().tokenizer, session, local().chat_prompt("今天天气"), local().greedy(24), [&](std::string_view piece) {
    chat_text += piece;
    return true;
  });
  Json chat = chat_request("今天天气", 24);
  chat["lora"] = Json::parse(R"([{"id": 0, "scale": 1}])");
  CHECK(post_json(server, "/v1/chat/completions", chat)["choices"][0]["message"]["content"] == chat_text);
  chat["lora"] = Json::array();
  CHECK(post_json(server, "/v1/chat/completions", chat)["choices"][0]["message"]["content"] ==
        local().generate(local().chat_prompt("今天天气"), local().greedy(24)).first);

  // Bad entries are a 400 naming the entry's field, on both endpoints.
  for (const std::string path : {"/v1/completions", "/v1/chat/completions"}) {
    for (const auto& bad : std::vector<std::pair<std::string, std::string>>{
             {R"([{"id": 0, "scale": 1}, {"id": 2, "scale": 1}])", "lora[1].id"},
             {R"([{"id": -1, "scale": 1}])", "lora[0].id"},
             {R"([{"id": 0, "scale": 1}, {"id": 0, "scale": 0.5}])", "lora[1].id"},
             {R"([{"id": 0, "scale": "strong"}])", "lora[0].scale"},
             {R"([{"id": 0, "scale": 1000}])", "lora[0].scale"},
             {R"([{"id": 0}])", "lora[0].scale"},
             {R"([{"id": 0, "scale": 1, "alpha": 2}])", "lora[0].alpha"},
             {R"({"id": 0, "scale": 1})", "lora"}}) {
      Json body = path == "/v1/completions" ? request(std::nullopt) : chat_request("你好", 4);
      body["lora"] = Json::parse(bad.first);
      CAPTURE(bad.first);
      check_error_body(post_json(server, path, body, 400), "invalid_request_error", bad.second);
    }
  }

  // POST /lora-adapters sets the global scales: the listed adapters get theirs, the others 0.
  CHECK(post_json(server, "/lora-adapters", Json::parse(R"([{"id": 0, "scale": 0.8}])")) == Json{{"success", true}});
  CHECK(get_json(server, "/lora-adapters") ==
        Json::parse(R"([{"id": 0, "path": ")" + attention + R"(", "scale": 0.8}, {"id": 1, "path": ")" + mlp + R"(", "scale": 0.0}])"));
  CHECK(complete(std::nullopt) == with_attention_part);
  CHECK(complete(Json::parse(R"([{"id": 1, "scale": 0.5}])")) == with_mlp_half);  // a request's own list still wins
  CHECK(post_json(server, "/lora-adapters", Json::array()) == Json{{"success", true}});
  CHECK(complete(std::nullopt) == base);
  check_error_body(post_json(server, "/lora-adapters", Json::parse(R"([{"id": 0, "scale": 1}, {"id": 7, "scale": 1}])"), 400),
                   "invalid_request_error", "[1].id");
  check_error_body(post_json(server, "/lora-adapters", Json::parse(R"([{"id": 0, "scale": null}])"), 400), "invalid_request_error", "[0].scale");
  check_error_body(post_json(server, "/lora-adapters", Json{{"id", 0}, {"scale", 1}}, 400), "invalid_request_error", nullptr);
  check_error_body(post_raw(server, "/lora-adapters", "[{", 400), "invalid_request_error", nullptr);
  CHECK(get_json(server, "/lora-adapters")[0]["scale"] == 0.0);  // a refused POST changes nothing
  CHECK(server.stop(SIGTERM) == 0);

  // --lora-init-without-apply: loaded at global scale 0, used only when asked for.
  ServerProcess off("lora_off", {"--lora", attention, "--lora-init-without-apply", "--threads", "1"});
  CHECK(get_json(off, "/lora-adapters") == Json::parse(R"([{"id": 0, "path": ")" + attention + R"(", "scale": 0.0}])"));
  CHECK(post_json(off, "/v1/completions", request(std::nullopt))["choices"][0]["text"] == base);
  CHECK(post_json(off, "/v1/completions", request(Json::parse(R"([{"id": 0, "scale": 1}])")))["choices"][0]["text"] == with_attention);
  CHECK(off.stop(SIGTERM) == 0);

  check_flag_errors({{"--lora /nonexistent.pth", "/nonexistent.pth: no such file"},
                     {"--lora-scaled " + attention, "is not PATH:SCALE"},
                     {"--lora " + (data_dir() / "lora" / "bad" / "hidden-32.pth").string(), "hidden_size 32"}});
}
