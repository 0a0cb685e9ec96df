#pragma once
// The token loop: prefill the prompt in one batched pass, then one token at a time through the KV
// cache, until an end-of-sequence id, max_new_tokens, or a full context. Nothing is allocated
// per token: the sampler, the session and the id buffers are sized before the loop. Any number of
// threads may generate from one const model at once, each with its own Session; the Sampler is
// made per call.
#include "minimind/error.hpp"
#include "minimind/detail/io/json.hpp"
#include "minimind/json_constraint.hpp"
#include "minimind/model.hpp"
#include "minimind/sampler.hpp"
#include "minimind/session.hpp"
#include "minimind/tokenizer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace minimind {

struct GenerationConfig {
  int64_t max_new_tokens = 512;
  SamplingParams sampling;
  std::vector<int32_t> eos_token_ids = {2};
  bool ignore_eos = false;  // keep going past eos ids (benchmarks, tests)
  // When set, the reply is a document of this grammar ending with an eos id, within
  // max_new_tokens (json_constraint.hpp); shared by every sequence that uses this config.
  std::shared_ptr<const JsonGrammar> json_grammar;

  void validate() const {
    if (max_new_tokens < 0) throw Error("max_new_tokens must be >= 0, got " + std::to_string(max_new_tokens));
    if (json_grammar && ignore_eos) throw Error("json_grammar needs the eos ids to end the document; ignore_eos is set");
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

// One sequence's choice of ids, step by step: its own Sampler (config and seed), the ids seen
// (prompt and output) for the repetition penalty, and the stop rules. generate() runs one over a
// session; a scheduler that advances many sequences in one Batch runs one per sequence.
class SequenceSampler {
 public:
  // `room`: positions the session has left after the prompt; sizes the buffers up front. The
  // prompt's ids must be in the vocabulary.
  SequenceSampler(const GenerationConfig& config, int64_t vocab, std::span<const int32_t> prompt, Index room)
      : config_(&config), sampler_(config.sampling, vocab), logits_(static_cast<size_t>(vocab)), seen_mask_(static_cast<size_t>(vocab), 0) {
    config.validate();
    // At most one id per position left after the prompt, plus the one sampled last:
    // max_new_tokens alone may be any number a generation_config.json says.
    ids_.reserve(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(config.max_new_tokens, room + 1))));
    seen_.reserve(static_cast<size_t>(vocab));
    for (int32_t id : prompt) mark_seen(id);
    if (config.json_grammar) constraint_.emplace(config.json_grammar, std::min<int64_t>(config.max_new_tokens, room + 1), config.eos_token_ids);
  }

  // Samples the id after `logits` (the last position's, vocab values) and records it.
  int32_t next(const float* logits) {
    std::copy(logits, logits + logits_.size(), logits_.begin());
    if (constraint_) constraint_->apply(logits_);
    const int32_t id = sampler_.sample(logits_, seen_);
    if (constraint_) constraint_->accept(id);
    ids_.push_back(id);
    mark_seen(id);
    return id;
  }

  // Whether the id `next` gave last ends generation, with `remaining` positions left in the session.
  std::optional<StopReason> stop(Index remaining) const {
    const int32_t last = ids_.back();
    const auto& eos = config_->eos_token_ids;
    if (!config_->ignore_eos && std::find(eos.begin(), eos.end(), last) != eos.end()) return StopReason::EndOfSequence;
    if (static_cast<int64_t>(ids_.size()) >= config_->max_new_tokens) return StopReason::MaxNewTokens;
    if (remaining == 0) return StopReason::ContextFull;
    return std::nullopt;
  }

  const std::vector<int32_t>& ids() const { return ids_; }
  std::vector<int32_t> take_ids() { return std::move(ids_); }

 private:
  void mark_seen(int32_t id) {
    if (!seen_mask_[static_cast<size_t>(id)]) {
      seen_mask_[static_cast<size_t>(id)] = 1;
      seen_.push_back(id);
    }
  }

  const GenerationConfig* config_;
  Sampler sampler_;
  std::vector<float> logits_;       // a copy: the sampler works in place
  std::vector<uint8_t> seen_mask_;  // distinct ids seen so far, for the repetition penalty
  std::vector<int32_t> seen_;
  std::vector<int32_t> ids_;
  std::optional<JsonConstraint> constraint_;
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
  const auto prefill_start = Clock::now();
  const float* logits = model.forward(session, prompt, false).data();
  const auto decode_start = Clock::now();
  result.prefill_seconds = std::chrono::duration<double>(decode_start - prefill_start).count();
  // After the forward pass, which refuses ids outside the vocabulary.
  SequenceSampler sampler(config, model.config().vocab_size, prompt, session.remaining());

  while (true) {
    const int32_t next = sampler.next(logits);
    if (on_token && !on_token(next)) {
      result.stop = StopReason::Callback;
      break;
    }
    if (auto stop = sampler.stop(session.remaining())) {
      result.stop = *stop;
      break;
    }
    logits = model.forward(session, std::span<const int32_t>(&next, 1), false).data();
  }
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - decode_start).count();
  result.ids = sampler.take_ids();
  return result;
}

// Called with each complete UTF-8 piece of text; return false to stop.
using TextCallback = std::function<bool(std::string_view text)>;

// Generated ids as text: a character split across tokens is delivered whole, once its last byte
// has arrived. End-of-sequence ids are not text (unless the config ignores them).
class TextStream {
 public:
  TextStream(const Tokenizer& tokenizer, const GenerationConfig& config)
      : config_(&config), decoder_(tokenizer, /*skip_special_tokens=*/false) {}
  // The text `id` completes; empty for an eos id or an unfinished character.
  std::string push(int32_t id) {
    const auto& eos = config_->eos_token_ids;
    if (!config_->ignore_eos && std::find(eos.begin(), eos.end(), id) != eos.end()) return {};
    return decoder_.push(id);
  }
  // What is left at the end.
  std::string flush() { return decoder_.flush(); }

 private:
  const GenerationConfig* config_;
  StreamingDecoder decoder_;
};

// generate() with the output streamed as text (TextStream).
template <class T>
GenerationResult generate_text(const MiniMindForCausalLM<T>& model, const Tokenizer& tokenizer, Session<T>& session,
                               std::span<const int32_t> prompt, const GenerationConfig& config, const TextCallback& on_text) {
  TextStream text(tokenizer, config);
  bool keep_going = true;
  auto result = generate(model, session, prompt, config, [&](int32_t id) {
    const std::string piece = text.push(id);
    if (!piece.empty()) keep_going = on_text(piece);
    return keep_going;
  });
  const std::string rest = text.flush();
  if (!rest.empty() && keep_going) on_text(rest);
  return result;
}

}  // namespace minimind
