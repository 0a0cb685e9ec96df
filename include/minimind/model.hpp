#pragma once
// The whole network. MiniMindModel holds the weights, named like the checkpoint's tensors:
// embed_tokens, layers (Block), norm, and the RoPE table. MiniMindForCausalLM adds lm_head, which
// for a tied checkpoint IS embed_tokens (one matrix, used the other way round), and runs the
// forward recipe: one function, top to bottom, for every generation (their differences are data
// in Config). Both are immutable after loading and may be shared by any number of threads, each
// running its own Session. LoadOptions choose the format the matrices are held in (f32, bf16, q8)
// and how many threads one forward pass uses (a persistent pool owned by the model; concurrent
// sessions take turns on it or run on their own thread). The non-const members (set_threads,
// writes through mutable_weight) are the exception: call them only while no other thread uses
// the model.
#include "minimind/block.hpp"
#include "minimind/checkpoint.hpp"
#include "minimind/config.hpp"
#include "minimind/embedding.hpp"
#include "minimind/error.hpp"
#include "minimind/detail/kernels/thread_pool.hpp"
#include "minimind/kv_cache.hpp"
#include "minimind/observer.hpp"
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
#include <variant>
#include <vector>

namespace minimind {

template <class T>
class MiniMindModel {
 public:
  MiniMindModel() = default;
  MiniMindModel(const WeightLoader<T>& w, const Config& c) : config_(c) {
    embed_tokens = Embedding<T>(w.matrix("model.embed_tokens.weight", c.vocab_size, c.hidden_size,
                                             "vocab_size " + std::to_string(c.vocab_size) + ", hidden_size " +
                                                 std::to_string(c.hidden_size)));
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) layers.emplace_back(w, l, c);
    norm = RMSNorm<T>(w.vector("model.norm.weight", c.hidden_size, "hidden_size " + std::to_string(c.hidden_size)),
                      c.rms_norm_eps);
    // Last: its table is sized by head_dim, which only the tensors above have confirmed.
    rotary_emb = RotaryEmbedding<T>(c);
  }

  const Config& config() const { return config_; }

  size_t num_parameters() const {
    size_t total = embed_tokens.num_parameters() + static_cast<size_t>(norm.dim());
    for (const auto& layer : layers) total += layer.num_parameters();
    return total;
  }

  Embedding<T> embed_tokens;  // E [vocab, hidden]
  std::vector<Block<T>> layers;
  RMSNorm<T> norm;  // [hidden]
  RotaryEmbedding<T> rotary_emb;

 private:
  Config config_;
};

template <class T>
class MiniMindForCausalLM {
 public:
  // The model of any checkpoint load_checkpoint reads: an HF directory, or a .safetensors, .pth
  // or .gguf file; held as options.format says.
  static MiniMindForCausalLM from_pretrained(const std::filesystem::path& path, const LoadOptions& options = {},
                                             const CheckpointOptions& checkpoint_options = {});

  // Builds the model over an already-parsed tensor table (the weights keep its files alive).
  static MiniMindForCausalLM from_tensors(const Config& config, const io::TensorTable& tensors,
                                          const LoadOptions& options = {}) {
    return build(config,
                 WeightLoader<T>(tensors, options.format, options.f32_panels, options.quantized_as_stored, options.adapters),
                 options);
  }

  // A model of the given shape with deterministic random weights (benchmarks, shape tests).
  static MiniMindForCausalLM random(const Config& config, uint64_t seed = 0, const LoadOptions& options = {}) {
    return build(config, WeightLoader<T>::random(seed, options.format, options.f32_panels, options.adapters), options);
  }

  const Config& config() const { return model.config(); }
  const Embedding<T>& lm_head() const { return untied_lm_head_ ? *untied_lm_head_ : model.embed_tokens; }
  bool is_tied() const { return !untied_lm_head_; }

  // Positions a session holds when none is asked for (at most max_position_embeddings).
  static constexpr Index kDefaultContext = 4096;
  // The most threads one forward pass runs on (LoadOptions::threads, set_threads).
  static constexpr int kMaxThreads = 256;

  // A fresh sequence state. `context` 0 means min(max_position_embeddings, kDefaultContext).
  Session<T> new_session(Index context = 0) const {
    if (context == 0) context = std::min<Index>(config().max_position_embeddings, kDefaultContext);
    return Session<T>(config(), context);
  }

  // Feeds ids after what the session holds; returns the logits of the new positions
  // [ids.size(), vocab], or of the last one only [1, vocab] when `all_positions` is false.
  // The view is valid until the session's next forward. An observer sees every step.
  TopRows<T> forward(Session<T>& session, std::span<const int32_t> ids, bool all_positions = true,
                     ForwardObserver<T>* observer = nullptr) const;

  // The full recompute: logits at every position of ids [ids.size(), vocab], as upstream's
  // model(ids).logits[0].
  MatrixRM<T> forward(std::span<const int32_t> ids) const {
    Session<T> session(config(), std::clamp<Index>(static_cast<Index>(ids.size()), 1, config().max_position_embeddings));
    return forward(session, ids);
  }

  // Where `count` new positions of `session` go as rows [first_row, first_row + count) of a step;
  // throws, changing nothing, unless they fit the model and the session.
  SequenceRows<T> rows_of(Session<T>& session, size_t count, Index first_row) const {
    session.check_shape(config());
    const Index n = static_cast<Index>(count), start = session.position();
    if (n == 0) throw Error("forward: no token ids");
    if (start + n > config().max_position_embeddings) {
      throw Error("sequence of " + std::to_string(start + n) + " tokens exceeds max_position_embeddings " +
                  std::to_string(config().max_position_embeddings));
    }
    if (start + n > session.context()) {
      throw Error("sequence of " + std::to_string(start + n) + " tokens exceeds the session's context of " +
                  std::to_string(session.context()));
    }
    return {&session.cache(), first_row, n, start, session.adapters()};
  }
  // Makes `scratch` ready for a step of `rows` positions over at most `context` keys on this
  // model's threads (allocates only when the step is larger than any before).
  void prepare(ForwardScratch<T>& scratch, Index rows, Index context) const {
    scratch.reserve(config(), rows, context, threads());
    scratch.work.pool = pool_.get();
  }

  // The forward recipe, for a step whose rows are the new positions of one or more sequences
  // (seqs[q] gets ids[q]), one after another. Leaves in scratch.logits the logits of every row
  // (all_positions) or of each sequence's last row, in order; the caller advances the sessions.
  // Defined below the class, like the other heavy members.
  void forward_rows(std::span<const SequenceRows<T>> seqs, std::span<const std::span<const int32_t>> ids,
                    bool all_positions, ForwardScratch<T>& s, ForwardObserver<T>* observer) const;

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
    if (threads <= 0) threads = std::min(kernels::ThreadPool::default_threads(), kMaxThreads);
    if (threads > kMaxThreads) {
      throw Error("threads: " + std::to_string(threads) + " is more than " + std::to_string(kMaxThreads));
    }
    if (threads == this->threads()) return;
    pool_ = threads > 1 ? std::make_shared<kernels::ThreadPool>(threads) : nullptr;
  }

  MiniMindModel<T> model;

 private:
  static MiniMindForCausalLM build(const Config& config, const WeightLoader<T>& w, const LoadOptions& options);

  // A contiguous block of rows as the observer's view type.
  template <class Rows>
  static ConstMatrixMap<T> view(const Rows& rows) {
    return {rows.data(), rows.rows(), rows.cols()};
  }
  static void report_attention(ForwardObserver<T>& observer, size_t layer, bool with_probs, const AttentionScratch<T>& attn,
                               ConstMatrixMap<T> x) {
    const auto l = static_cast<int64_t>(layer);
    if (with_probs) {
      const Index rows = x.rows(), heads = attn.probs.rows() / rows, keys = attn.probs.cols();
      for (Index h = 0; h < heads; ++h) observer.attention(l, h, {attn.probs.data() + h * rows * keys, rows, keys});
    }
    observer.residual_after_attention(l, x);
  }

  std::optional<Embedding<T>> untied_lm_head_;  // [vocab, hidden], only when untied
  WeightFormat format_ = WeightFormat::F32;
  std::shared_ptr<kernels::ThreadPool> pool_;  // null when running on one thread
};

// The heavy members are defined out of the class, so they are not implicitly inline: a program
// that explicitly instantiates the model in one translation unit (as the tests do) can declare it
// `extern template` elsewhere and compile the forward pass once.
template <class T>
MiniMindForCausalLM<T> MiniMindForCausalLM<T>::from_pretrained(const std::filesystem::path& path, const LoadOptions& options,
                                                               const CheckpointOptions& checkpoint_options) {
  CheckpointOptions model_only = checkpoint_options;
  model_only.tokenizer = false;
  const Checkpoint checkpoint = load_checkpoint(path, model_only);
  return from_tensors(checkpoint.config, checkpoint.tensors, options);
}

template <class T>
TopRows<T> MiniMindForCausalLM<T>::forward(Session<T>& session, std::span<const int32_t> ids, bool all_positions,
                                           ForwardObserver<T>* observer) const {
  const SequenceRows<T> seq = rows_of(session, ids.size(), 0);
  ForwardScratch<T>& scratch = session.scratch();
  prepare(scratch, seq.rows, session.context());
  forward_rows({&seq, 1}, {&ids, 1}, all_positions, scratch, observer);
  session.advance(seq.rows);
  return scratch.logits.topRows(all_positions ? seq.rows : 1);
}

template <class T>
void MiniMindForCausalLM<T>::forward_rows(std::span<const SequenceRows<T>> seqs, std::span<const std::span<const int32_t>> ids,
                                          bool all_positions, ForwardScratch<T>& s, ForwardObserver<T>* observer) const {
  const MiniMindModel<T>& m = model;
  const Index n = seqs.back().first_row + seqs.back().rows;
  auto x = s.x.topRows(n), normed = s.normed.topRows(n), sublayer = s.sublayer.topRows(n);
  AttentionScratch<T>& attn = s.attention;
  kernels::Workspace& work = s.work;
  const bool keep_probs = observer && observer->wants_attention() && seqs.size() == 1;
  s.lora.begin(seqs);  // the unmerged adapters each sequence runs with, if any

  for (size_t q = 0; q < seqs.size(); ++q) {  // h = E[id], and each row's rotary angles
    m.embed_tokens.lookup(ids[q], x.middleRows(seqs[q].first_row, seqs[q].rows));
    for (Index row = seqs[q].first_row; row < seqs[q].first_row + seqs[q].rows; ++row) {
      m.rotary_emb.angles(seqs[q].start + row - seqs[q].first_row, &attn.cos(row, 0), &attn.sin(row, 0));
    }
  }
  if (observer) observer->embedding(view(x));
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const Block<T>& layer = m.layers[l];
    const LoraAt<T> lora{&s.lora, static_cast<int64_t>(l)};  // + scale B A x per sequence after each product
    layer.input_layernorm.forward(x, normed);
    layer.self_attn.project(normed, attn, work, lora);                    // q, k, v
    layer.self_attn.rotate_and_cache(seqs, l, m.rotary_emb, attn, work);  // q/k norm, RoPE, cache write
    layer.self_attn.attend(seqs, l, attn, work, keep_probs);              // softmax(q k^T / sqrt(d)) v
    kernels::linear(attn.out.topRows(n), layer.self_attn.o_proj, sublayer, work);
    lora.add(LoraSlot::O, attn.out.topRows(n), sublayer);
    x += sublayer;
    if (observer) report_attention(*observer, l, keep_probs, attn, view(x));

    layer.post_attention_layernorm.forward(x, normed);
    if (const auto* moe = std::get_if<MoEFeedForward<T>>(&layer.mlp)) {
      moe->forward(normed, sublayer, s.moe, s.mlp, work, lora);
      if (observer) {
        const auto picks = static_cast<size_t>(n * moe->top_k());
        observer->router(static_cast<int64_t>(l), {s.moe.chosen.data(), picks}, {s.moe.chosen_weight.data(), picks},
                         moe->top_k());
      }
    } else {
      std::get<FeedForward<T>>(layer.mlp).forward(normed, sublayer, s.mlp, work, lora);
    }
    x += sublayer;
    if (observer) observer->residual_after_ffn(static_cast<int64_t>(l), view(x));
  }
  m.norm.forward(x, normed);
  if (observer) observer->final_norm(view(normed));

  // logits = h E^T, of every row or of each sequence's last (gathered into s.sublayer).
  Index wanted = n;
  if (!all_positions) {
    wanted = static_cast<Index>(seqs.size());
    for (Index q = 0; q < wanted; ++q) s.sublayer.row(q) = normed.row(seqs[q].first_row + seqs[q].rows - 1);
  }
  auto logits = s.logits.topRows(wanted);
  lm_head().logits(all_positions ? s.normed.topRows(n) : s.sublayer.topRows(wanted), logits, work);
  if (observer) observer->logits(view(logits));
}

template <class T>
MiniMindForCausalLM<T> MiniMindForCausalLM<T>::build(const Config& config, const WeightLoader<T>& w, const LoadOptions& options) {
  config.validate("config");
  check_adapters(options.adapters, config);  // before any matrix is merged
  MiniMindForCausalLM m;
  m.format_ = options.format;
  m.set_threads(options.threads);
  m.model = MiniMindModel<T>(w, config);
  if (!config.tie_word_embeddings) {
    m.untied_lm_head_ = Embedding<T>(w.matrix(
        "lm_head.weight", config.vocab_size, config.hidden_size,
        "vocab_size " + std::to_string(config.vocab_size) + ", hidden_size " + std::to_string(config.hidden_size)));
  }
  // A tied checkpoint may also store lm_head.weight; it is the same matrix and is not loaded.
  return m;
}

}  // namespace minimind
