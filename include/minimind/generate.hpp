#pragma once
// The token loop: prefill the prompt in one batched pass, then one token at a time through the KV
// cache, until an end-of-sequence id, max_new_tokens, or a full context. Nothing is allocated
// per token: the sampler, the session and the id buffers are sized before the loop. Any number of
// threads may generate from one const model at once, each with its own Session; the Sampler is
// made per call.
#include "minimind/error.hpp"
#include "minimind/io/json.hpp"
#include "minimind/model.hpp"
#include "minimind/sampler.hpp"
#include "minimind/session.hpp"
#include "minimind/tokenizer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace minimind {

struct GenerationConfig {
  int64_t max_new_tokens = 512;
  SamplingParams sampling;
  std::vector<int32_t> eos_token_ids = {2};
  bool ignore_eos = false;  // keep going past eos ids (benchmarks, tests)

  void validate() const {
    if (max_new_tokens < 0) throw Error("max_new_tokens must be >= 0, got " + std::to_string(max_new_tokens));
    sampling.validate();
  }

  // Defaults from the checkpoint: generation_config.json's sampling values, and every eos id that
  // config.json, generation_config.json and the tokenizer name (MiniMind: 2 <|im_end|>, and 0
  // <|endoftext|>, which ends pretraining documents).
  static GenerationConfig from_pretrained(const std::filesystem::path& dir, const Config& model_config,
                                          const Tokenizer* tokenizer = nullptr) {
    GenerationConfig g;
    g.eos_token_ids.clear();
    auto add_eos = [&](int64_t id) {
      if (id >= 0 && id < model_config.vocab_size &&
          std::find(g.eos_token_ids.begin(), g.eos_token_ids.end(), id) == g.eos_token_ids.end()) {
        g.eos_token_ids.push_back(static_cast<int32_t>(id));
      }
    };
    for (int64_t id : model_config.eos_token_ids) add_eos(id);
    const auto path = dir / "generation_config.json";
    if (std::filesystem::exists(path)) {
      const io::Json json = io::read_json_file(path);
      const std::string source = path.string();
      if (!json.is_object()) throw Error(source + ": not a JSON object");
      using io::optional_field;
      g.max_new_tokens = optional_field<int64_t>(json, "max_new_tokens", source).value_or(g.max_new_tokens);
      g.sampling.temperature = optional_field<float>(json, "temperature", source).value_or(g.sampling.temperature);
      g.sampling.top_p = optional_field<float>(json, "top_p", source).value_or(g.sampling.top_p);
      g.sampling.top_k = optional_field<int64_t>(json, "top_k", source).value_or(g.sampling.top_k);
      g.sampling.repetition_penalty = optional_field<float>(json, "repetition_penalty", source).value_or(g.sampling.repetition_penalty);
      if (optional_field<bool>(json, "do_sample", source) == false) g.sampling.temperature = 0;
      if (auto eos = json.find("eos_token_id"); eos != json.end()) {
        if (eos->is_number_integer()) add_eos(eos->get<int64_t>());
        else if (eos->is_array())
          for (const auto& id : *eos)
            if (id.is_number_integer()) add_eos(id.get<int64_t>());
      }
    }
    if (tokenizer) {
      if (auto eos = tokenizer->eos_id()) add_eos(*eos);
      if (auto end_of_text = tokenizer->token_to_id("<|endoftext|>")) add_eos(*end_of_text);
    }
    if (g.eos_token_ids.empty()) g.eos_token_ids.push_back(2);
    return g;
  }
};

enum class StopReason { EndOfSequence, MaxNewTokens, ContextFull, Callback };

inline const char* to_string(StopReason reason) {
  switch (reason) {
    case StopReason::EndOfSequence: return "eos";
    case StopReason::MaxNewTokens: return "max_new_tokens";
    case StopReason::ContextFull: return "context_full";
    case StopReason::Callback: return "stopped";
  }
  return "?";
}

struct GenerationResult {
  std::vector<int32_t> ids;  // the new ids; an eos that stopped generation is included
  StopReason stop = StopReason::MaxNewTokens;
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  double prefill_tokens_per_second() const { return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0; }
  // Decode covers every token after the first, which the prefill produced.
  double decode_tokens_per_second() const {
    return decode_seconds > 0 && ids.size() > 1 ? static_cast<double>(ids.size() - 1) / decode_seconds : 0;
  }
};

// Called with each new id; return false to stop.
using TokenCallback = std::function<bool(int32_t id)>;

// Continues the session (which may already hold earlier turns) with `prompt`, then generates.
template <class T>
GenerationResult generate(const MiniMindForCausalLM<T>& model, Session<T>& session, std::span<const int32_t> prompt,
                          const GenerationConfig& config, const TokenCallback& on_token = {}) {
  config.validate();
  if (prompt.empty()) throw Error("generate: the prompt has no tokens");
  if (static_cast<Index>(prompt.size()) > session.remaining()) {
    throw Error("prompt of " + std::to_string(prompt.size()) + " tokens does not fit the context (" +
                std::to_string(session.remaining()) + " of " + std::to_string(session.context()) + " positions left)");
  }
  using Clock = std::chrono::steady_clock;
  GenerationResult result;
  result.prompt_tokens = static_cast<int64_t>(prompt.size());
  if (config.max_new_tokens == 0) return result;
  // At most one id per position left after the prompt, plus the one sampled last: max_new_tokens
  // alone may be any number a generation_config.json says.
  const auto most = std::min<int64_t>(config.max_new_tokens, session.remaining() - static_cast<Index>(prompt.size()) + 1);
  result.ids.reserve(static_cast<size_t>(most));

  const int64_t vocab = model.config().vocab_size;
  Sampler sampler(config.sampling, vocab);
  std::vector<float> logits(static_cast<size_t>(vocab));
  // Distinct ids seen so far (prompt and output), for the repetition penalty.
  std::vector<uint8_t> seen_mask(static_cast<size_t>(vocab), 0);
  std::vector<int32_t> seen;
  seen.reserve(static_cast<size_t>(vocab));
  auto mark_seen = [&](int32_t id) {
    if (!seen_mask[static_cast<size_t>(id)]) {
      seen_mask[static_cast<size_t>(id)] = 1;
      seen.push_back(id);
    }
  };

  const auto prefill_start = Clock::now();
  auto last = model.forward(session, prompt, false);
  std::copy(last.data(), last.data() + vocab, logits.begin());
  for (int32_t id : prompt) mark_seen(id);
  const auto decode_start = Clock::now();
  result.prefill_seconds = std::chrono::duration<double>(decode_start - prefill_start).count();

  while (true) {
    const int32_t next = sampler.sample(logits, seen);
    result.ids.push_back(next);
    mark_seen(next);
    if (on_token && !on_token(next)) {
      result.stop = StopReason::Callback;
      break;
    }
    if (!config.ignore_eos &&
        std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(), next) != config.eos_token_ids.end()) {
      result.stop = StopReason::EndOfSequence;
      break;
    }
    if (static_cast<int64_t>(result.ids.size()) >= config.max_new_tokens) {
      result.stop = StopReason::MaxNewTokens;
      break;
    }
    if (session.remaining() == 0) {
      result.stop = StopReason::ContextFull;
      break;
    }
    auto step = model.forward(session, std::span<const int32_t>(&next, 1), false);
    std::copy(step.data(), step.data() + vocab, logits.begin());
  }
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - decode_start).count();
  return result;
}

// Called with each complete UTF-8 piece of text; return false to stop.
using TextCallback = std::function<bool(std::string_view text)>;

// generate() with the output streamed as text: a character split across tokens is delivered
// whole, once its last byte has arrived. End-of-sequence ids are not printed.
template <class T>
GenerationResult generate_text(const MiniMindForCausalLM<T>& model, const Tokenizer& tokenizer, Session<T>& session,
                               std::span<const int32_t> prompt, const GenerationConfig& config, const TextCallback& on_text) {
  StreamingDecoder decoder(tokenizer, /*skip_special_tokens=*/false);
  bool keep_going = true;
  auto result = generate(model, session, prompt, config, [&](int32_t id) {
    const bool is_eos = std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(), id) != config.eos_token_ids.end();
    if (is_eos && !config.ignore_eos) return true;
    const std::string piece = decoder.push(id);
    if (!piece.empty()) keep_going = on_text(piece);
    return keep_going;
  });
  const std::string rest = decoder.flush();
  if (!rest.empty() && keep_going) on_text(rest);
  return result;
}

}  // namespace minimind
