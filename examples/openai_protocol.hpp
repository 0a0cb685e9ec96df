#pragma once
// The OpenAI protocol as minimind-server speaks it, without HTTP: request bodies read into what to
// render and generate (every field either honoured or refused with a 400 naming it), and replies
// built as chat.completion messages and chat.completion.chunk deltas, with reasoning and tool
// calls split out of the text by minimind::ChatReplyParser. Request JSON is kept in its key order
// (ordered_json) because tools and call arguments reach the prompt as the client wrote them.
#include <minimind/chat_reply.hpp>
#include <minimind/chat_template.hpp>
#include <minimind/detail/io/json.hpp>
#include <minimind/engine.hpp>
#include <minimind/generate.hpp>
#include <minimind/json_constraint.hpp>
#include <minimind/tokenizer.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace openai {

using Json = nlohmann::ordered_json;

// ---- Errors in the OpenAI shape: {"error": {"message", "type", "param", "code"}} ----

struct ApiError : std::runtime_error {
  ApiError(int status_, const std::string& message, std::string type_ = "invalid_request_error",
           std::optional<std::string> param_ = std::nullopt, std::optional<std::string> code_ = std::nullopt)
      : std::runtime_error(message), status(status_), type(std::move(type_)), param(std::move(param_)), code(std::move(code_)) {}
  int status;
  std::string type;
  std::optional<std::string> param, code;
};

inline ApiError bad_param(const std::string& param, const std::string& message) {
  return ApiError(400, message, "invalid_request_error", param);
}

inline Json error_json(const ApiError& e) {
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", e.param ? Json(*e.param) : Json(nullptr)},
            {"code", e.code ? Json(*e.code) : Json(nullptr)}}}};
}

// Generated text is valid UTF-8, but echoed request strings need not be; never throw on output.
inline std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// ---- Request fields ----

// Arrays and objects nested deeper than this are refused before parsing: nlohmann's parser does not
// recurse, but copying and dumping a value do, so a body of a few hundred thousand brackets would
// overflow the stack of the thread handling it.
inline constexpr size_t kMaxBodyDepth = 64;

inline void check_depth(std::string_view text) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if ((c == '[' || c == '{') && ++depth > kMaxBodyDepth) {
      throw ApiError(400, "the request body nests arrays and objects deeper than " + std::to_string(kMaxBodyDepth) + " levels (at byte " +
                              std::to_string(i) + ")");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

// A request body of any JSON value (POST /lora-adapters takes an array).
inline Json parse_json(const std::string& text) {
  check_depth(text);
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what());
  }
}

inline Json parse_body(const std::string& text) {
  Json body = parse_json(text);
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return body;
}

// The library's typed field reader, with its message turned into a 400 naming the parameter
// (`param`: the field's path, when it is inside another object).
template <class T>
std::optional<T> field(const Json& object, const std::string& key, const std::string& param = "") {
  try {
    return minimind::io::optional_field<T>(object, key, "request");
  } catch (const minimind::Error& e) {
    throw bad_param(param.empty() ? key : param, e.what());
  }
}

enum class Endpoint { chat, completion };

// Every field of a request is honoured or refused: the ones the server implements, and OpenAI's
// that it does not but that ask only for what it does anyway (a zero penalty, no logprobs) are
// taken; any other is a 400 naming it. null is "not given", as in OpenAI's API.
inline void check_fields(const Json& body, Endpoint endpoint) {
  static const std::set<std::string, std::less<>> both = {
      "model", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "seed", "n", "ignore_eos",
      "stream", "stream_options", "stop", "max_tokens", "max_completion_tokens", "lora", "cache_prompt"};
  static const std::set<std::string, std::less<>> chat = {"messages", "tools", "tool_choice", "parallel_tool_calls",
                                                          "response_format", "open_thinking", "chat_template_kwargs"};
  static const std::set<std::string, std::less<>> completion = {"prompt"};
  struct Neutral {
    const char* name;
    Json value;  // the one value taken
    std::optional<Endpoint> only;  // the endpoint that has the field; none: both
  };
  static const std::vector<Neutral> neutral = {
      {"presence_penalty", 0, {}},    {"frequency_penalty", 0, {}},           {"logit_bias", Json::object(), {}},
      {"logprobs", false, {}},        {"top_logprobs", 0, Endpoint::chat},    {"store", false, Endpoint::chat},
      {"modalities", Json::array({"text"}), Endpoint::chat}, {"echo", false, Endpoint::completion}, {"best_of", 1, Endpoint::completion}};
  for (const auto& item : body.items()) {
    const std::string& key = item.key();  // not a structured binding: clang 14 cannot capture one
    const Json& value = item.value();
    if (value.is_null() || both.contains(key) || (endpoint == Endpoint::chat ? chat : completion).contains(key)) continue;
    const auto it = std::find_if(neutral.begin(), neutral.end(), [&](const Neutral& n) { return key == n.name && n.only.value_or(endpoint) == endpoint; });
    if (it != neutral.end()) {
      // logprobs is a bool in chat and a count in completions; 0 and false both ask for none.
      if (value == it->value || (key == "logprobs" && value == 0)) continue;
      throw bad_param(key, key + " is not supported by this server: only " + dump(it->value) + " (or leaving it out) is, got " + dump(value));
    }
    throw bad_param(key, "unknown or unsupported field \"" + key + "\" for " +
                             (endpoint == Endpoint::chat ? "/v1/chat/completions" : "/v1/completions") +
                             "; this server refuses what it would otherwise ignore");
  }
}

// One generation to run: the prompt ids and how to continue them.
struct Job {
  std::vector<int32_t> prompt;
  minimind::GenerationConfig config;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a final chunk with only usage
  bool cache_prompt = true;    // reuse a cached prefix of the prompt, and leave this one's for others
};

// The sampling and length fields both endpoints share, over the checkpoint's defaults.
inline Job parse_job(const Json& body, std::vector<int32_t> prompt, const minimind::GenerationConfig& defaults, minimind::Index context,
                     int64_t vocab) {
  Job job;
  job.config = defaults;
  auto& sampling = job.config.sampling;
  // SamplingParams::validate words the range rules; each field is checked as it is set so the
  // error can name it.
  auto check = [&](const char* param) {
    try {
      sampling.validate();
    } catch (const minimind::Error& e) {
      throw bad_param(param, e.what());
    }
  };
  if (auto t = field<double>(body, "temperature")) sampling.temperature = static_cast<float>(*t), check("temperature");
  if (auto p = field<double>(body, "top_p")) sampling.top_p = static_cast<float>(*p), check("top_p");
  if (auto k = field<int64_t>(body, "top_k")) sampling.top_k = *k, check("top_k");
  if (auto p = field<double>(body, "min_p")) sampling.min_p = static_cast<float>(*p), check("min_p");
  if (auto r = field<double>(body, "repetition_penalty")) sampling.repetition_penalty = static_cast<float>(*r), check("repetition_penalty");
  // Without a seed every request samples differently, as with OpenAI's API.
  if (auto seed = field<int64_t>(body, "seed")) {
    sampling.seed = static_cast<uint64_t>(*seed);
  } else {
    std::random_device device;
    sampling.seed = (static_cast<uint64_t>(device()) << 32) | device();
  }
  if (auto n = field<int64_t>(body, "n"); n && *n != 1) throw bad_param("n", "only n = 1 is supported, got " + std::to_string(*n));
  job.config.ignore_eos = field<bool>(body, "ignore_eos").value_or(false);
  job.stream = field<bool>(body, "stream").value_or(false);
  job.cache_prompt = field<bool>(body, "cache_prompt").value_or(true);
  if (auto options = body.find("stream_options"); options != body.end() && !options->is_null()) {
    if (!options->is_object()) throw bad_param("stream_options", "stream_options must be an object");
    if (!job.stream) throw bad_param("stream_options", "stream_options is only allowed when stream is true");
    for (const auto& [key, value] : options->items()) {
      if (key != "include_usage" && !value.is_null()) throw bad_param("stream_options." + key, "stream_options." + key + " is not supported (only include_usage is)");
    }
    job.include_usage = field<bool>(*options, "include_usage", "stream_options.include_usage").value_or(false);
  }

  if (auto stop = body.find("stop"); stop != body.end() && !stop->is_null()) {
    if (stop->is_string()) {
      job.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array() && stop->size() <= 4) {
      for (const auto& s : *stop) {
        if (!s.is_string()) throw bad_param("stop", "stop must be a string or an array of at most 4 strings");
        job.stop.push_back(s.get<std::string>());
      }
    } else {
      throw bad_param("stop", "stop must be a string or an array of at most 4 strings");
    }
    for (const auto& s : job.stop)
      if (s.empty()) throw bad_param("stop", "stop strings must not be empty");
  }

  for (int32_t id : prompt)
    if (id < 0 || id >= vocab) throw bad_param("prompt", "token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(vocab));
  if (prompt.empty()) throw bad_param("prompt", "the prompt encodes to no tokens");
  const auto prompt_tokens = static_cast<int64_t>(prompt.size());
  const std::string context_text = std::to_string(context) + " tokens (--ctx)";
  if (prompt_tokens >= context) {
    throw ApiError(400, "the prompt has " + std::to_string(prompt_tokens) + " tokens, but the context is " + context_text,
                   "invalid_request_error", body.contains("messages") ? "messages" : "prompt", "context_length_exceeded");
  }
  // max_completion_tokens is the newer name; either may be sent, both only if they agree.
  const auto max_tokens = field<int64_t>(body, "max_tokens"), max_completion = field<int64_t>(body, "max_completion_tokens");
  if (max_tokens && max_completion && *max_tokens != *max_completion) {
    throw bad_param("max_completion_tokens", "max_tokens (" + std::to_string(*max_tokens) + ") and max_completion_tokens (" +
                                                 std::to_string(*max_completion) + ") disagree; send one of them");
  }
  const char* max_name = max_completion ? "max_completion_tokens" : "max_tokens";
  if (auto max = max_completion ? max_completion : max_tokens) {
    if (*max < 1) throw bad_param(max_name, std::string(max_name) + " must be >= 1, got " + std::to_string(*max));
    if (prompt_tokens + *max > context) {
      throw ApiError(400,
                     "the context is " + context_text + ", but " + std::to_string(prompt_tokens) + " prompt tokens and " +
                         max_name + " " + std::to_string(*max) + " need " + std::to_string(prompt_tokens + *max),
                     "invalid_request_error", max_name, "context_length_exceeded");
    }
    job.config.max_new_tokens = *max;
  } else {
    job.config.max_new_tokens = std::min<int64_t>(job.config.max_new_tokens, context - prompt_tokens);
  }
  job.prompt = std::move(prompt);
  return job;
}

// /v1/completions: a string, one string in an array, or an array of token ids.
inline std::vector<int32_t> parse_prompt(const Json& body, const minimind::Tokenizer& tokenizer) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) throw bad_param("prompt", "prompt is required");
  if (it->is_string()) return tokenizer.encode(it->get<std::string>());
  if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) return tokenizer.encode((*it)[0].get<std::string>());
  if (it->is_array() && !it->empty() && std::all_of(it->begin(), it->end(), [](const Json& v) { return v.is_number_integer(); })) {
    std::vector<int32_t> ids;
    for (const auto& v : *it) {
      const auto id = v.get<int64_t>();
      if (id < INT32_MIN || id > INT32_MAX) throw bad_param("prompt", "token id " + std::to_string(id) + " is out of range");
      ids.push_back(static_cast<int32_t>(id));
    }
    return ids;
  }
  throw bad_param("prompt", "prompt must be a string, an array of one string, or an array of token ids");
}

// Refuses keys of `object` (at `path`; empty: the body) outside `allowed`, null ones aside.
inline void check_keys(const Json& object, const std::string& path, std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : object.items()) {
    if (value.is_null() || std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    const std::string param = path.empty() ? key : path + "." + key;
    throw bad_param(param, param + " is not supported by this server");
  }
}

// ---- LoRA adapters, chosen as llama-server chooses them ----

// One entry of a `lora` list: an adapter, by its position among the server's --lora and
// --lora-scaled flags, and the scale to run it with (0: not at all).
struct LoraScale {
  size_t id;
  double scale;
};

// Past this a scale only overflows the activations (adapters are trained at 1).
inline constexpr int kMaxLoraScale = 100;

// [{"id": N, "scale": S}, ...]: a request's `lora` field (`param` "lora") or the body of POST
// /lora-adapters (`param` empty). Each id names one of the `loaded` adapters, at most once; errors
// name the entry's field, e.g. lora[1].id.
inline std::vector<LoraScale> parse_lora_scales(const Json& list, const std::string& param, size_t loaded) {
  const std::string what = param.empty() ? "the request body" : param;
  if (!list.is_array()) {
    throw ApiError(400, what + " must be an array of {\"id\": N, \"scale\": S}", "invalid_request_error",
                   param.empty() ? std::nullopt : std::optional(param));
  }
  std::vector<LoraScale> scales;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string entry = param + "[" + std::to_string(i) + "]";
    if (!list[i].is_object()) throw bad_param(entry, entry + " must be an object {\"id\": N, \"scale\": S}");
    check_keys(list[i], entry, {"id", "scale"});
    const auto id = field<int64_t>(list[i], "id", entry + ".id");
    if (!id) throw bad_param(entry + ".id", entry + ".id is required");
    if (loaded == 0) throw bad_param(entry + ".id", "this server has no LoRA adapters (start it with --lora or --lora-scaled)");
    if (*id < 0 || static_cast<size_t>(*id) >= loaded) {
      throw bad_param(entry + ".id", entry + ".id " + std::to_string(*id) + " is not a loaded adapter: the ids are 0 to " +
                                         std::to_string(loaded - 1) + " (GET /lora-adapters lists them)");
    }
    if (std::any_of(scales.begin(), scales.end(), [&](const LoraScale& s) { return s.id == static_cast<size_t>(*id); })) {
      throw bad_param(entry + ".id", entry + ".id: adapter " + std::to_string(*id) + " is listed twice");
    }
    const auto scale = field<double>(list[i], "scale", entry + ".scale");
    if (!scale) throw bad_param(entry + ".scale", entry + ".scale is required");
    if (!(std::abs(*scale) <= kMaxLoraScale)) {
      throw bad_param(entry + ".scale", entry + ".scale must be in [-" + std::to_string(kMaxLoraScale) + ", " + std::to_string(kMaxLoraScale) + "], got " + dump(*scale));
    }
    scales.push_back({static_cast<size_t>(*id), *scale});
  }
  return scales;
}

// A request's `lora` field; none when it is absent or null (the global scales apply).
inline std::optional<std::vector<LoraScale>> parse_lora_field(const Json& body, size_t loaded) {
  const auto it = body.find("lora");
  if (it == body.end() || it->is_null()) return std::nullopt;
  return parse_lora_scales(*it, "lora", loaded);
}

// The server's LoRA adapters: loaded once at start and held beside the base model, unmerged, with
// global scales (at start, each flag's scale). A request without a `lora` field runs with the
// global scales as they are when it arrives; one with the field runs its listed adapters at its
// scales and no other, as llama-server does. Any thread.
class LoraAdapters {
 public:
  explicit LoraAdapters(std::vector<minimind::LoraUse> loaded) : loaded_(std::move(loaded)) {
    for (const auto& use : loaded_) scales_.push_back(use.scale);
  }
  size_t size() const { return loaded_.size(); }

  // GET /lora-adapters: [{"id", "path", "scale"}], the path as given on the command line.
  Json list() const {
    std::lock_guard<std::mutex> lock(mutex_);
    Json out = Json::array();
    for (size_t i = 0; i < loaded_.size(); ++i) out.push_back({{"id", i}, {"path", loaded_[i].adapter->path().string()}, {"scale", scales_[i]}});
    return out;
  }

  // POST /lora-adapters: the listed adapters get their scales, the others 0 (off).
  void set_scales(const std::vector<LoraScale>& scales) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::fill(scales_.begin(), scales_.end(), 0.0);
    for (const auto& s : scales) scales_.at(s.id) = s.scale;
  }

  // The adapters a request runs with: its own list, else the global scales. Those at scale 0 are
  // left out, so they cost the request nothing.
  std::vector<minimind::LoraUse> for_request(const std::optional<std::vector<LoraScale>>& requested) const {
    std::vector<LoraScale> chosen;
    if (requested) {
      chosen = *requested;
    } else {
      std::lock_guard<std::mutex> lock(mutex_);
      for (size_t i = 0; i < scales_.size(); ++i) chosen.push_back({i, scales_[i]});
    }
    std::vector<minimind::LoraUse> uses;
    for (const auto& s : chosen)
      if (s.scale != 0) uses.push_back({loaded_.at(s.id).adapter, static_cast<float>(s.scale)});
    return uses;
  }

 private:
  mutable std::mutex mutex_;
  const std::vector<minimind::LoraUse> loaded_;
  std::vector<double> scales_;  // global, guarded by mutex_
};

// ---- /v1/chat/completions: messages, tools, thinking ----

// A message's content: a string, or text parts (only text can reach a text model).
inline std::string message_text(const Json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw bad_param(param, param + " must be a string or an array of text parts");
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string() || part.size() != 2) {
      throw bad_param(param, param + " parts must be {\"type\": \"text\", \"text\": string}");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

enum class ToolChoice { none, automatic, required, named };

// What a chat request asks for besides sampling: the conversation and template variables to
// render, and how to read the reply.
struct ChatRequest {
  std::vector<minimind::ChatMessage> messages;
  minimind::ChatOptions options;  // add_generation_prompt, tools, thinking switches
  ToolChoice tool_choice = ToolChoice::automatic;
  bool parallel_tool_calls = true;
  minimind::ChatReplyOptions reply;  // how the reply's text splits
  // Constrained replies (a forced tool call, a JSON response_format): the text the reply starts
  // with, put at the end of the prompt (it closes an open think block and opens the call), the
  // grammar of what the model writes after it, and the text that closes a document that ended.
  std::string prefill;
  std::shared_ptr<const minimind::JsonGrammar> grammar;
  std::string suffix;
};

inline std::vector<minimind::ChatMessage> parse_messages(const Json& body) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) throw bad_param("messages", "messages is required");
  if (!it->is_array() || it->empty()) throw bad_param("messages", "messages must be a non-empty array");
  std::vector<minimind::ChatMessage> messages;
  std::vector<std::string> open_call_ids;  // the ids of the last assistant turn's calls
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw bad_param(at, at + " must be an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) throw bad_param(at + ".role", at + ".role must be a string");
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";  // OpenAI's newer name for the system role
    if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
      throw bad_param(at + ".role", at + ".role \"" + r + "\" is not one of system, developer, user, assistant, tool");
    }
    if (r == "assistant") check_keys(m, at, {"role", "content", "tool_calls", "reasoning_content"});
    else if (r == "tool") check_keys(m, at, {"role", "content", "tool_call_id"});
    else check_keys(m, at, {"role", "content"});

    minimind::ChatMessage message;
    message.role = r;
    auto c = m.find("content");
    if (c == m.end() || c->is_null()) {
      if (r != "assistant") throw bad_param(at + ".content", at + ".content is required");
    } else {
      message.content = message_text(*c, at + ".content");
    }
    if (r == "assistant") {
      if (auto reasoning = field<std::string>(m, "reasoning_content", at + ".reasoning_content")) message.reasoning_content = *reasoning;
      if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
        const std::string param = at + ".tool_calls";
        if (!calls->is_array()) throw bad_param(param, param + " must be an array");
        open_call_ids.clear();
        for (size_t j = 0; j < calls->size(); ++j) {
          const Json& call = (*calls)[j];
          const std::string call_at = param + "[" + std::to_string(j) + "]";
          if (!call.is_object()) throw bad_param(call_at, call_at + " must be an object");
          check_keys(call, call_at, {"id", "type", "function"});
          if (field<std::string>(call, "type", call_at + ".type").value_or("function") != "function") {
            throw bad_param(call_at + ".type", call_at + ".type must be \"function\"");
          }
          if (auto id = field<std::string>(call, "id", call_at + ".id")) open_call_ids.push_back(*id);
          const auto function = call.find("function");
          if (function == call.end() || !function->is_object()) throw bad_param(call_at + ".function", call_at + ".function must be an object");
          check_keys(*function, call_at + ".function", {"name", "arguments"});
          const auto name = field<std::string>(*function, "name", call_at + ".function.name");
          if (!name || name->empty()) throw bad_param(call_at + ".function.name", call_at + ".function.name must be a non-empty string");
          // A string is rendered verbatim, an object as tojson: the template's two cases.
          const auto arguments = function->find("arguments");
          if (arguments == function->end() || !(arguments->is_string() || arguments->is_object())) {
            throw bad_param(call_at + ".function.arguments", call_at + ".function.arguments must be a JSON string (or an object)");
          }
          message.tool_calls.push_back(minimind::ToolCall{*name, *arguments});
        }
      }
    }
    if (r == "tool") {
      // The template matches results to calls by order; an id that answers no call is a mistake
      // the prompt would hide.
      if (auto id = field<std::string>(m, "tool_call_id", at + ".tool_call_id")) {
        if (std::find(open_call_ids.begin(), open_call_ids.end(), *id) == open_call_ids.end()) {
          throw bad_param(at + ".tool_call_id", at + ".tool_call_id \"" + *id + "\" answers no tool call of the assistant message before it");
        }
      }
    }
    messages.push_back(std::move(message));
  }
  return messages;
}

// `tools`: OpenAI function tools, passed to the template as given (it renders each with tojson).
// `strict`: the paths of the tools that ask for strict arguments (honoured when a call is forced).
inline std::vector<Json> parse_tools(const Json& body, std::vector<std::string>& names, std::vector<std::string>& strict) {
  std::vector<Json> tools;
  auto it = body.find("tools");
  if (it == body.end() || it->is_null()) return tools;
  if (!it->is_array()) throw bad_param("tools", "tools must be an array");
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& tool = (*it)[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!tool.is_object()) throw bad_param(at, at + " must be an object");
    check_keys(tool, at, {"type", "function"});
    if (field<std::string>(tool, "type", at + ".type") != "function") throw bad_param(at + ".type", at + ".type must be \"function\"");
    const auto function = tool.find("function");
    if (function == tool.end() || !function->is_object()) throw bad_param(at + ".function", at + ".function must be an object");
    check_keys(*function, at + ".function", {"name", "description", "parameters", "strict"});
    const auto name = field<std::string>(*function, "name", at + ".function.name");
    if (!name || name->empty()) throw bad_param(at + ".function.name", at + ".function.name must be a non-empty string");
    if (std::find(names.begin(), names.end(), *name) != names.end()) {
      throw bad_param(at + ".function.name", "two tools are named \"" + *name + "\"");
    }
    field<std::string>(*function, "description", at + ".function.description");
    if (auto parameters = function->find("parameters"); parameters != function->end() && !parameters->is_object()) {
      throw bad_param(at + ".function.parameters", at + ".function.parameters must be a JSON Schema object");
    }
    if (field<bool>(*function, "strict", at + ".function.strict").value_or(false)) strict.push_back(at + ".function.strict");
    names.push_back(*name);
    tools.push_back(tool);
  }
  return tools;
}

// The grammar of `schema` (at `param`), its refusal of an unsupported keyword a 400 naming it.
inline std::shared_ptr<const minimind::JsonGrammar> schema_grammar(const Json& schema, const std::string& param, const minimind::Tokenizer& tokenizer) {
  try {
    return minimind::JsonGrammar::from_schema(nlohmann::json(schema), tokenizer);
  } catch (const minimind::Error& e) {
    throw bad_param(param, param + ": " + e.what());
  }
}

// A tool's parameters schema; none means no arguments.
inline Json tool_parameters(const Json& tool) {
  return tool["function"].value("parameters", Json{{"type", "object"}, {"additionalProperties", false}});
}

inline constexpr const char* kToolChoiceForms =
    "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}";

inline ChatRequest parse_chat_request(const Json& body, const minimind::ChatTemplate& chat_template, const minimind::Tokenizer& tokenizer) {
  ChatRequest request;
  request.messages = parse_messages(body);
  request.options.add_generation_prompt = true;
  std::vector<std::string> names, strict;
  auto tools = parse_tools(body, names, strict);

  std::string named;
  if (auto choice = body.find("tool_choice"); choice != body.end() && !choice->is_null()) {
    if (*choice == "none") request.tool_choice = ToolChoice::none;
    else if (*choice == "auto") request.tool_choice = ToolChoice::automatic;
    else if (*choice == "required") request.tool_choice = ToolChoice::required;
    else if (choice->is_object()) {
      check_keys(*choice, "tool_choice", {"type", "function"});
      const auto function = choice->find("function");
      if (field<std::string>(*choice, "type", "tool_choice.type") != "function" || function == choice->end() || !function->is_object()) {
        throw bad_param("tool_choice", kToolChoiceForms);
      }
      check_keys(*function, "tool_choice.function", {"name"});
      const auto name = field<std::string>(*function, "name", "tool_choice.function.name");
      if (!name || std::find(names.begin(), names.end(), *name) == names.end()) {
        throw bad_param("tool_choice.function.name", "tool_choice names the function \"" + name.value_or("") + "\", which is not in tools");
      }
      request.tool_choice = ToolChoice::named;
      named = *name;
    } else {
      throw bad_param("tool_choice", kToolChoiceForms);
    }
  }
  if (request.tool_choice == ToolChoice::required && tools.empty()) throw bad_param("tool_choice", "tool_choice \"required\" needs tools");
  const bool forced = request.tool_choice == ToolChoice::required || request.tool_choice == ToolChoice::named;
  // Strict arguments are guaranteed only where the call is forced through the constraint.
  if (!strict.empty() && !forced && request.tool_choice != ToolChoice::none) {
    throw bad_param(strict.front(), strict.front() + ": arguments that always follow the schema need the call to be forced "
                                                     "(tool_choice \"required\" or a named function); with \"auto\" the model writes freely");
  }
  request.parallel_tool_calls = field<bool>(body, "parallel_tool_calls").value_or(true);

  // Thinking, as upstream's serve_openai_api.py reads it: open_thinking, or chat_template_kwargs'
  // open_thinking or enable_thinking, opens minimind-3's think block. chat_template_kwargs are also
  // the template's variables, so enable_thinking: false closes MiniMind2's.
  bool open_thinking = field<bool>(body, "open_thinking").value_or(false);
  if (auto kwargs = body.find("chat_template_kwargs"); kwargs != body.end() && !kwargs->is_null()) {
    if (!kwargs->is_object()) throw bad_param("chat_template_kwargs", "chat_template_kwargs must be an object");
    check_keys(*kwargs, "chat_template_kwargs", {"enable_thinking", "open_thinking"});
    const auto enable = field<bool>(*kwargs, "enable_thinking", "chat_template_kwargs.enable_thinking");
    const auto open = field<bool>(*kwargs, "open_thinking", "chat_template_kwargs.open_thinking");
    request.options.enable_thinking = enable;
    open_thinking = open_thinking || open.value_or(false) || enable.value_or(false);
  }
  if (open_thinking) request.options.open_thinking = true;

  // tool_choice none: the tools are not offered, and no reply text is read as a call.
  const bool offer_tools = request.tool_choice != ToolChoice::none && !tools.empty();
  if (offer_tools) request.options.tools = tools;
  request.reply.starts_in_thinking = minimind::reply_starts_in_thinking(chat_template, request.options);
  request.reply.tool_calls = offer_tools;
  request.reply.tool_names = names;

  if (auto format = body.find("response_format"); format != body.end() && !format->is_null()) {
    if (!format->is_object()) throw bad_param("response_format", "response_format must be an object");
    const auto type = field<std::string>(*format, "type", "response_format.type");
    if (type == "json_object") {
      check_keys(*format, "response_format", {"type"});
      request.grammar = minimind::JsonGrammar::any_object(tokenizer);
    } else if (type == "json_schema") {
      check_keys(*format, "response_format", {"type", "json_schema"});
      const auto spec = format->find("json_schema");
      if (spec == format->end() || !spec->is_object()) throw bad_param("response_format.json_schema", "response_format.json_schema must be an object");
      check_keys(*spec, "response_format.json_schema", {"name", "description", "schema", "strict"});
      if (!field<std::string>(*spec, "name", "response_format.json_schema.name")) {
        throw bad_param("response_format.json_schema.name", "response_format.json_schema.name is required");
      }
      field<std::string>(*spec, "description", "response_format.json_schema.description");
      field<bool>(*spec, "strict", "response_format.json_schema.strict");  // the reply always follows the schema
      const auto schema = spec->find("schema");
      if (schema == spec->end() || schema->is_null()) request.grammar = minimind::JsonGrammar::any_object(tokenizer);
      else if (!schema->is_object()) throw bad_param("response_format.json_schema.schema", "response_format.json_schema.schema must be an object");
      else request.grammar = schema_grammar(*schema, "response_format.json_schema.schema", tokenizer);
    } else if (type != "text") {
      throw bad_param("response_format.type", "response_format.type must be \"text\", \"json_object\" or \"json_schema\"");
    } else {
      check_keys(*format, "response_format", {"type"});
    }
    if (request.grammar && offer_tools) {
      throw bad_param("response_format", "a JSON response_format leaves no room for tool calls: send tool_choice \"none\" with it, or no tools");
    }
  }

  // A forced call: the reply is one <tool_call> block whose arguments follow the function's
  // parameters. With one function the prompt ends in the call's opening up to its arguments, as
  // the model was trained to write it; with several, the grammar also chooses the name.
  if (forced) {
    std::vector<size_t> candidates;
    for (size_t i = 0; i < tools.size(); ++i)
      if (named.empty() || names[i] == named) candidates.push_back(i);
    if (candidates.size() == 1) {
      const size_t i = candidates.front();
      request.grammar = schema_grammar(tool_parameters(tools[i]), "tools[" + std::to_string(i) + "].function.parameters", tokenizer);
      request.prefill = "<tool_call>\n{\"name\": " + minimind::detail::tojson(names[i]) + ", \"arguments\": ";
      request.suffix = "}\n</tool_call>";
    } else {
      Json branches = Json::array();
      for (size_t i : candidates) {
        const std::string param = "tools[" + std::to_string(i) + "].function.parameters";
        schema_grammar(tool_parameters(tools[i]), param, tokenizer);  // names the tool whose schema is refused
        branches.push_back({{"type", "object"},
                            {"properties", {{"name", {{"const", names[i]}}}, {"arguments", tool_parameters(tools[i])}}},
                            {"required", {"name", "arguments"}}});
      }
      request.grammar = schema_grammar(Json{{"anyOf", branches}}, "tools", tokenizer);
      request.prefill = "<tool_call>\n";
      request.suffix = "\n</tool_call>";
    }
  }
  // A constrained reply starts with the document: an open think block is closed first, empty.
  if (request.grammar && request.reply.starts_in_thinking) request.prefill = "\n</think>\n\n" + request.prefill;
  return request;
}

// The checks of a constrained reply that need its length: the grammar's shortest document must
// fit in max_tokens, and the eos id must be able to end it.
inline void check_constrained_job(const ChatRequest& chat, const Job& job, const Json& body) {
  if (!chat.grammar) return;
  if (job.config.ignore_eos) throw bad_param("ignore_eos", "ignore_eos cannot be combined with a constrained reply, which ends with the eos id");
  try {
    chat.grammar->check_room(job.config.max_new_tokens);
  } catch (const minimind::Error& e) {
    throw bad_param(body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens", e.what());
  }
}

// ---- Replies ----

// How a reply's generation ended, as the protocol reports it.
struct Outcome {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;  // of the prompt's, reused from the prompt cache
  minimind::EngineOutcome engine;  // the engine's account: ids sampled, and when (for /metrics)
  std::string finish_reason;  // "stop" or "length"; empty when cut short
  bool eos = false;           // the reply ended with an eos id (a constrained one: its document is whole)
  bool disconnected = false, cancelled = false;  // the client went; the server is shutting down
};

// A stop string, a reply complete by its receiver's rule and an eos id are "stop"; a reply that
// ran to max_tokens or the context is "length".
inline Outcome outcome_of(const minimind::TextOutcome& text) {
  Outcome outcome;
  outcome.prompt_tokens = text.engine.prompt_tokens;
  outcome.cached_tokens = text.engine.cached_tokens;
  outcome.completion_tokens = text.completion_tokens;
  outcome.engine = text.engine;
  outcome.eos = text.eos;
  outcome.disconnected = text.gone;
  outcome.cancelled = text.shut_down;
  if (text.stop_string || text.enough || text.eos) outcome.finish_reason = "stop";
  else if (text.complete) outcome.finish_reason = "length";
  return outcome;
}

inline Json usage_json(const Outcome& o) {
  return {{"prompt_tokens", o.prompt_tokens},
          {"completion_tokens", o.completion_tokens},
          {"total_tokens", o.prompt_tokens + o.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}}};
}

// A reply's (or, with `chunk`, a stream chunk's) JSON around its one choice: `fields` (text,
// message or delta), no logprobs, and `finish_reason` (null while streaming).
inline Json reply_json(Endpoint endpoint, bool chunk, const std::string& id, int64_t created, const std::string& model,
                       const Json& fields, const Json& finish_reason) {
  Json choice = {{"index", 0}};
  choice.update(fields);
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason;
  const char* object = endpoint == Endpoint::chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", id}, {"object", object}, {"created", created}, {"model", model}, {"choices", Json::array({choice})}};
}

// One server-sent event.
inline std::string sse_event(const Json& data) { return "data: " + dump(data) + "\n\n"; }

// Tool call ids: the reply's id and the call's index, unique as the reply ids are.
inline std::string call_id_prefix(const std::string& reply_id) { return "call_" + reply_id.substr(reply_id.find('-') + 1) + "_"; }

inline ApiError busy_error(const minimind::QueueFull& e) {
  return ApiError(503,
                  "the server is busy: all " + std::to_string(e.slots) + " slots are in use and " + std::to_string(e.waiting) +
                      " requests are waiting (--queue " + std::to_string(e.max_queue) + "); retry later",
                  "server_error", std::nullopt, "server_overloaded");
}
inline ApiError shutting_down_error() { return ApiError(503, "the server is shutting down", "server_error", std::nullopt, "shutting_down"); }

// Turns a chat reply's text, as it is generated, into OpenAI `delta` objects, and at the end into
// the whole `message`: reasoning as reasoning_content, tool calls as tool_calls. A call is sent in
// two deltas once its block has closed (its index, id, type and name with empty arguments, then
// the arguments), the shape OpenAI streams, which clients concatenate.
class ChatReplyWriter {
 public:
  ChatReplyWriter(minimind::ChatReplyOptions options, std::string call_id_prefix)
      : parser_(std::move(options)), call_id_prefix_(std::move(call_id_prefix)) {}

  std::vector<Json> push(std::string_view text) { return deltas(parser_.push(text)); }
  std::vector<Json> finish() { return deltas(parser_.finish()); }
  size_t tool_calls() const { return parser_.tool_call_count(); }

  Json message() const {
    const auto& reply = parser_.reply();
    Json message = {{"role", "assistant"}};
    // With calls and no text, content is null, as OpenAI sends it.
    message["content"] = reply.tool_calls.empty() || !reply.content.empty() ? Json(reply.content) : Json(nullptr);
    if (!reply.reasoning.empty()) message["reasoning_content"] = reply.reasoning;
    if (!reply.tool_calls.empty()) {
      Json calls = Json::array();
      for (size_t i = 0; i < reply.tool_calls.size(); ++i) calls.push_back(call_json(i, reply.tool_calls[i], true));
      message["tool_calls"] = calls;
    }
    return message;
  }

  // The reply's finish_reason from the generation's ("stop", "length"): "tool_calls" when it
  // ended by itself with calls; a reply cut off by max_tokens stays "length".
  std::string finish_reason(const std::string& generation) const { return generation == "stop" && tool_calls() > 0 ? "tool_calls" : generation; }

 private:
  Json call_json(size_t index, const minimind::ToolCall& call, bool with_arguments) const {
    return {{"id", call_id_prefix_ + std::to_string(index)},
            {"type", "function"},
            {"function", {{"name", call.name}, {"arguments", with_arguments ? call.arguments.get<std::string>() : std::string()}}}};
  }

  std::vector<Json> deltas(const std::vector<minimind::ChatReplyDelta>& pieces) const {
    using Kind = minimind::ChatReplyDelta::Kind;
    std::vector<Json> out;
    for (const auto& piece : pieces) {
      if (piece.kind == Kind::reasoning) {
        out.push_back({{"reasoning_content", piece.text}});
      } else if (piece.kind == Kind::content) {
        out.push_back({{"content", piece.text}});
      } else {
        Json head = call_json(piece.index, piece.call, false);
        head = Json{{"index", piece.index}, {"id", head["id"]}, {"type", "function"}, {"function", head["function"]}};
        out.push_back({{"tool_calls", Json::array({head})}});
        out.push_back({{"tool_calls", Json::array({{{"index", piece.index}, {"function", {{"arguments", piece.call.arguments.get<std::string>()}}}}})}});
      }
    }
    return out;
  }

  minimind::ChatReplyParser parser_;
  std::string call_id_prefix_;
};

}  // namespace openai
