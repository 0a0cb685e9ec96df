// minimind-web: what the web page's worker (minimind-worker.js) calls, compiled to WebAssembly.
// One model at a time, loaded from emscripten's in-memory file system (the worker writes the
// fetched or opened files there). Every function returns a JSON string, and an error as
// {"error": "..."} with the library's message, so nothing throws across into JavaScript.
#include <minimind/chat_template.hpp>
#include <minimind/minimind.hpp>
#include <minimind/trace.hpp>

#include <emscripten/bind.h>
#include <emscripten/em_asm.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace {

using Json = nlohmann::json;

std::optional<minimind::Pretrained<float>> loaded;
std::optional<minimind::ChatTemplate> chat_template;

// Half a character in a token piece is replaced, so the JSON stays valid UTF-8.
std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

template <class F>
std::string guarded(F&& f) {
  try {
    return dump(f());
  } catch (const std::exception& e) {
    return dump(Json{{"error", e.what()}});
  }
}

// Threads per forward pass: with pthreads (minimind-web-threads) the caller and every worker the
// module started with (Module.threadPool, minimind-worker.js), else one.
int threads() {
#ifdef __EMSCRIPTEN_PTHREADS__
  return 1 + EM_ASM_INT({ return Module.threadPool; });
#else
  return 1;
#endif
}

const minimind::Pretrained<float>& model() {
  if (!loaded) throw minimind::Error("no model is loaded");
  return *loaded;
}

// The reply being generated: the chat so far, prefilled into its own session, continued one
// call of step() at a time so the worker can take a Stop between calls.
struct Reply {
  Reply(const minimind::Pretrained<float>& p, std::vector<int32_t> prompt_ids, const minimind::GenerationConfig& g)
      : config(g),
        prompt(std::move(prompt_ids)),
        session(p.model.new_session(static_cast<minimind::Index>(
            std::min<int64_t>(p.model.config().max_position_embeddings, static_cast<int64_t>(prompt.size()) + g.max_new_tokens)))),
        text(p.require_tokenizer(), config),
        logits(p.model.forward(session, prompt, false).data()),
        sampler(config, p.model.config().vocab_size, prompt, session.remaining()) {}

  minimind::GenerationConfig config;
  std::vector<int32_t> prompt;
  minimind::Session<float> session;
  minimind::TextStream text;
  const float* logits;  // the last position's, from the latest forward pass
  minimind::SequenceSampler sampler;
  std::optional<minimind::StopReason> stop;
};
std::unique_ptr<Reply> reply;

// path: a GGUF/safetensors file or a directory with config.json + model.safetensors + tokenizer.json.
std::string load(const std::string& path) {
  return guarded([&] {
    reply.reset();
    chat_template.reset();
    loaded.reset();
    minimind::LoadOptions options;
    options.threads = threads();
    loaded.emplace(minimind::load_pretrained<float>(path, options));
    const auto& config = loaded->model.config();
    Json info = {{"path", path},
                 {"hidden_size", config.hidden_size},
                 {"layers", config.num_hidden_layers},
                 {"vocab_size", config.vocab_size},
                 {"context", config.max_position_embeddings},
                 {"parameters", loaded->model.num_parameters()},
                 {"kernels", minimind::kernels::name()},
                 {"threads", loaded->model.threads()},
                 {"tokenizer", loaded->tokenizer.has_value()}};
    if (loaded->tokenizer) {
      try {
        chat_template.emplace(loaded->tokenizer->chat_template());
      } catch (const minimind::Error& e) {
        info["chat_error"] = e.what();  // inspect still works
      }
    }
    return info;
  });
}

std::string tokenize(const std::string& text) {
  return guarded([&] {
    const auto& tokenizer = model().require_tokenizer();
    Json pieces = Json::array();
    const auto ids = tokenizer.encode(text);
    for (int32_t id : ids) pieces.push_back(tokenizer.token_to_piece(id));
    return Json{{"ids", ids}, {"pieces", pieces}};
  });
}

// The same JSON as `minimind-next --trace --json [--attention]` and the server's /v1/inspect.
std::string inspect(const std::string& text, int top, bool attention) {
  return guarded([&] {
    const auto& p = model();
    const auto ids = p.require_tokenizer().encode(text);
    if (ids.empty()) throw minimind::Error("the text encodes to no tokens");
    if (static_cast<int64_t>(ids.size()) > p.model.config().max_position_embeddings) {
      throw minimind::Error("the text has " + std::to_string(ids.size()) + " tokens, more than the context of " +
                            std::to_string(p.model.config().max_position_embeddings));
    }
    minimind::TraceOptions options;
    options.top = top;
    options.attention = attention;
    return minimind::trace(p.model, ids, &*p.tokenizer, options).to_json();
  });
}

// messages: [{"role": ..., "content": ...}]; options: temperature, top_p, max_tokens, seed.
// Renders the chat template and prefills; step() then produces the reply.
std::string start_chat(const std::string& messages_json, const std::string& options_json) {
  return guarded([&] {
    reply.reset();
    const auto& p = model();
    if (!chat_template) throw minimind::Error("this checkpoint has no chat template the library can render");
    const Json messages = Json::parse(messages_json);
    const Json options = Json::parse(options_json);
    if (!messages.is_array()) throw minimind::Error("messages must be an array");
    std::vector<minimind::ChatMessage> turns;
    for (const auto& m : messages) turns.emplace_back(m.at("role").get<std::string>(), m.at("content").get<std::string>());
    minimind::ChatOptions chat_options;
    chat_options.add_generation_prompt = true;
    auto ids = p.require_tokenizer().encode(chat_template->render(turns, chat_options));
    minimind::GenerationConfig g = p.generation;
    g.sampling.temperature = options.value("temperature", g.sampling.temperature);
    g.sampling.top_p = options.value("top_p", g.sampling.top_p);
    g.sampling.seed = options.value("seed", g.sampling.seed);
    g.max_new_tokens = options.value("max_tokens", g.max_new_tokens);
    g.validate();
    if (g.max_new_tokens < 1) throw minimind::Error("max_tokens must be at least 1");
    if (static_cast<int64_t>(ids.size()) >= p.model.config().max_position_embeddings) {
      throw minimind::Error("the chat has " + std::to_string(ids.size()) + " tokens, no room left in the context of " +
                            std::to_string(p.model.config().max_position_embeddings) + " (press New chat)");
    }
    const auto prompt_tokens = ids.size();
    reply = std::make_unique<Reply>(p, std::move(ids), g);
    return Json{{"prompt_tokens", prompt_tokens}};
  });
}

// Up to `tokens` more tokens of the reply: their text (whole characters only), how many ids, and
// finish_reason once it has ended (eos, max_new_tokens, context_full).
std::string step(int tokens) {
  return guarded([&] {
    if (!reply) throw minimind::Error("no reply is being generated");
    const auto& p = model();
    Reply& r = *reply;
    std::string text;
    int produced = 0;
    while (produced < tokens && !r.stop) {
      const int32_t id = r.sampler.next(r.logits);
      ++produced;
      text += r.text.push(id);
      if ((r.stop = r.sampler.stop(r.session.remaining()))) {
        text += r.text.flush();
        break;
      }
      r.logits = p.model.forward(r.session, std::span<const int32_t>(&id, 1), false).data();
    }
    Json out = {{"text", text}, {"tokens", produced}};
    if (r.stop) {
      out["finish_reason"] = minimind::to_string(*r.stop);
      reply.reset();
    }
    return out;
  });
}

// Random weights of a published shape (minimind2-small, minimind-3), no tokenizer: what
// minimind-bench --shape loads, to measure the speed of a real size without its checkpoint.
std::string load_shape(const std::string& name) {
  return guarded([&] {
    reply.reset();
    chat_template.reset();
    loaded.reset();
    minimind::Config config;
    if (name == "minimind2-small") config = minimind::Config::minimind2_small();
    else if (name == "minimind-3") config = minimind::Config::minimind3();
    else throw minimind::Error("unknown shape \"" + name + "\" (minimind2-small or minimind-3)");
    minimind::LoadOptions options;
    options.threads = threads();
    loaded.emplace(minimind::Pretrained<float>{name, minimind::MiniMindForCausalLM<float>::random(config, 1, options), std::nullopt, {}});
    return Json{{"path", name}, {"parameters", loaded->model.num_parameters()}, {"kernels", minimind::kernels::name()}, {"threads", loaded->model.threads()}};
  });
}

// minimind-bench's pp and tg tests on the loaded model, timed inside WebAssembly: one forward pass
// over `prompt_tokens` ids, and `decode_tokens` single-token passes, each from an empty session.
std::string bench(int prompt_tokens, int decode_tokens) {
  return guarded([&] {
    using Clock = std::chrono::steady_clock;
    const auto& m = model().model;
    const auto vocab = static_cast<uint64_t>(m.config().vocab_size);
    minimind::Rng rng(1);
    std::vector<int32_t> prompt(static_cast<size_t>(std::max(prompt_tokens, 1)));
    for (auto& id : prompt) id = static_cast<int32_t>(rng.next() % vocab);
    auto session = m.new_session(static_cast<minimind::Index>(std::max(prompt_tokens, decode_tokens) + 1));
    Json out = Json::object();
    if (prompt_tokens > 0) {
      const auto start = Clock::now();
      m.forward(session, prompt, false);
      out["prefill_tokens_per_second"] = prompt_tokens / std::chrono::duration<double>(Clock::now() - start).count();
    }
    if (decode_tokens > 0) {
      session.reset();
      int32_t id = prompt[0];
      const auto start = Clock::now();
      for (int i = 0; i < decode_tokens; ++i) {
        m.forward(session, std::span<const int32_t>(&id, 1), false);
        id = static_cast<int32_t>(rng.next() % vocab);
      }
      out["decode_tokens_per_second"] = decode_tokens / std::chrono::duration<double>(Clock::now() - start).count();
    }
    return out;
  });
}

}  // namespace

EMSCRIPTEN_BINDINGS(minimind_web) {
  emscripten::function("load", &load);
  emscripten::function("tokenize", &tokenize);
  emscripten::function("inspect", &inspect);
  emscripten::function("startChat", &start_chat);
  emscripten::function("step", &step);
  emscripten::function("loadShape", &load_shape);
  emscripten::function("bench", &bench);
}
