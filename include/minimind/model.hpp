#pragma once
// The whole network. MiniMindModel: embed_tokens -> N x Block -> norm. MiniMindForCausalLM adds
// lm_head, which for a tied checkpoint IS embed_tokens (one matrix, used the other way round).
// Both are immutable after loading and may be shared by any number of threads, each running its
// own Session. LoadOptions choose the format the matrices are held in (f32, bf16, q8) and how many
// threads one forward pass uses (a persistent pool owned by the model; concurrent sessions take
// turns on it or run on their own thread). The non-const members (set_threads, writes through
// mutable_weight) are the exception: call them only while no other thread uses the model.
#include "minimind/activations.hpp"
#include "minimind/block.hpp"
#include "minimind/config.hpp"
#include "minimind/embedding.hpp"
#include "minimind/error.hpp"
#include "minimind/io/safetensors.hpp"
#include "minimind/kernels/thread_pool.hpp"
#include "minimind/rms_norm.hpp"
#include "minimind/rope.hpp"
#include "minimind/session.hpp"
#include "minimind/weights.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace minimind {

template <class T>
class MiniMindModel {
 public:
  MiniMindModel() = default;
  MiniMindModel(const WeightLoader<T>& w, const Config& c) : config_(c) {
    embed_tokens = TiedEmbedding<T>(w.matrix("model.embed_tokens.weight", c.vocab_size, c.hidden_size,
                                             "vocab_size " + std::to_string(c.vocab_size) + ", hidden_size " +
                                                 std::to_string(c.hidden_size)));
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) layers.emplace_back(w, l, c);
    norm = RMSNorm<T>(w.vector("model.norm.weight", c.hidden_size, "hidden_size " + std::to_string(c.hidden_size)),
                      c.rms_norm_eps);
    // Last: its table is sized by head_dim, which only the tensors above have confirmed.
    rotary_emb = RotaryEmbedding<T>(c);
  }

  const Config& config() const { return config_; }

  // Runs ids at the session's next positions; leaves the final-normed hidden states in
  // act.normed [ids.size(), hidden] and advances the session.
  void forward(std::span<const int32_t> ids, Session<T>& session) const {
    session.check_shape(config_);
    const Index n = static_cast<Index>(ids.size()), start = session.position();
    if (n == 0) throw Error("forward: no token ids");
    if (start + n > config_.max_position_embeddings) {
      throw Error("sequence of " + std::to_string(start + n) + " tokens exceeds max_position_embeddings " +
                  std::to_string(config_.max_position_embeddings));
    }
    if (start + n > session.context()) {
      throw Error("sequence of " + std::to_string(start + n) + " tokens exceeds the session's context of " +
                  std::to_string(session.context()));
    }
    for (int32_t id : ids) embed_tokens.check_id(id);
    Activations<T>& act = session.activations();
    act.reserve(config_, n, session.context());

    embed_tokens.lookup(ids, act.x.topRows(n));
    for (Index i = 0; i < n; ++i) rotary_emb.angles(start + i, &act.cos(i, 0), &act.sin(i, 0));
    for (size_t l = 0; l < layers.size(); ++l) layers[l].forward(n, start, session.cache(), l, rotary_emb, act);
    norm.forward(act.x.topRows(n), act.normed.topRows(n));
    session.advance(n);
  }

  size_t num_parameters() const {
    size_t total = embed_tokens.num_parameters() + static_cast<size_t>(norm.dim());
    for (const auto& layer : layers) total += layer.num_parameters();
    return total;
  }

  TiedEmbedding<T> embed_tokens;  // E [vocab, hidden]
  std::vector<Block<T>> layers;
  RMSNorm<T> norm;  // [hidden]
  RotaryEmbedding<T> rotary_emb;

 private:
  Config config_;
};

template <class T>
class MiniMindForCausalLM {
 public:
  // Loads config.json and model.safetensors (or its sharded index) from an HF checkpoint directory.
  static MiniMindForCausalLM from_pretrained(const std::filesystem::path& dir, const LoadOptions& options = {}) {
    if (!std::filesystem::is_directory(dir)) throw Error(dir.string() + ": not a checkpoint directory");
    const auto config_path = dir / "config.json";
    if (!std::filesystem::exists(config_path)) throw Error(config_path.string() + ": missing");
    const io::Json json = io::read_json_file(config_path);
    io::TensorTable tensors = io::read_safetensors_checkpoint(dir);
    Config config = Config::from_json(json, &tensors, config_path.string());
    return from_tensors(config, tensors, options);
  }

  // Builds the model over an already-parsed tensor table (the weights keep its files alive).
  static MiniMindForCausalLM from_tensors(const Config& config, const io::TensorTable& tensors,
                                          const LoadOptions& options = {}) {
    return build(config, WeightLoader<T>(tensors, options.format), options);
  }

  // A model of the given shape with deterministic random weights (benchmarks, shape tests).
  static MiniMindForCausalLM random(const Config& config, uint64_t seed = 0, const LoadOptions& options = {}) {
    return build(config, WeightLoader<T>::random(seed, options.format), options);
  }

  const Config& config() const { return model.config(); }
  const TiedEmbedding<T>& lm_head() const { return untied_lm_head_ ? *untied_lm_head_ : model.embed_tokens; }
  bool is_tied() const { return !untied_lm_head_; }

  // A fresh sequence state. `context` 0 means min(max_position_embeddings, 4096).
  Session<T> new_session(Index context = 0) const {
    if (context == 0) context = std::min<Index>(config().max_position_embeddings, 4096);
    Session<T> session(config(), context);
    session.activations().reserve_threads(threads());
    return session;
  }

  // Feeds ids after what the session holds; returns the logits of the new positions
  // [ids.size(), vocab], or of the last one only [1, vocab] when `all_positions` is false.
  // The view is valid until the session's next forward.
  auto forward(Session<T>& session, std::span<const int32_t> ids, bool all_positions = true) const {
    Activations<T>& act = session.activations();
    act.work.pool = pool_.get();
    act.reserve_threads(threads());
    model.forward(ids, session);
    const Index n = static_cast<Index>(ids.size());
    const Index first = all_positions ? 0 : n - 1;
    auto logits = act.logits.middleRows(0, n - first);
    lm_head().logits(act.normed.middleRows(first, n - first), logits, act.work);
    return logits;
  }

  // The full recompute: logits at every position of ids [ids.size(), vocab], as upstream's
  // model(ids).logits[0].
  MatrixRM<T> forward(std::span<const int32_t> ids) const {
    if (ids.empty()) throw Error("forward: no token ids");
    if (static_cast<int64_t>(ids.size()) > config().max_position_embeddings) {
      throw Error("sequence of " + std::to_string(ids.size()) + " tokens exceeds max_position_embeddings " +
                  std::to_string(config().max_position_embeddings));
    }
    Session<T> session(config(), static_cast<Index>(ids.size()));
    return forward(session, ids);
  }

  // Parameters, the tied matrix counted once.
  size_t num_parameters() const {
    return model.num_parameters() + (untied_lm_head_ ? untied_lm_head_->num_parameters() : 0);
  }
  // Bytes of weights this process holds (viewed in the file or converted), in their format.
  size_t weight_bytes() const {
    size_t total = model.embed_tokens.weight().bytes() + model.norm.weight().bytes();
    for (const auto& layer : model.layers) total += layer.weight_bytes();
    if (untied_lm_head_) total += untied_lm_head_->weight().bytes();
    return total;
  }
  WeightFormat format() const { return format_; }
  // Threads one forward pass runs on; set_threads replaces the pool (not while a forward runs).
  int threads() const { return pool_ ? pool_->size() : 1; }
  void set_threads(int threads) {
    if (threads <= 0) threads = kernels::ThreadPool::default_threads();
    if (threads == this->threads()) return;
    pool_ = threads > 1 ? std::make_shared<kernels::ThreadPool>(threads) : nullptr;
  }

  MiniMindModel<T> model;

 private:
  static MiniMindForCausalLM build(const Config& config, const WeightLoader<T>& w, const LoadOptions& options) {
    config.validate("config");
    MiniMindForCausalLM m;
    m.format_ = options.format;
    m.set_threads(options.threads);
    m.model = MiniMindModel<T>(w, config);
    if (!config.tie_word_embeddings) {
      m.untied_lm_head_ = TiedEmbedding<T>(w.matrix(
          "lm_head.weight", config.vocab_size, config.hidden_size,
          "vocab_size " + std::to_string(config.vocab_size) + ", hidden_size " + std::to_string(config.hidden_size)));
    }
    // A tied checkpoint may also store lm_head.weight; it is the same matrix and is not loaded.
    return m;
  }

  std::optional<TiedEmbedding<T>> untied_lm_head_;  // [vocab, hidden], only when untied
  WeightFormat format_ = WeightFormat::F32;
  std::shared_ptr<kernels::ThreadPool> pool_;  // null when running on one thread
};

}  // namespace minimind
