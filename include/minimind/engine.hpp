#pragma once
// Continuous batching for many requests at once, from any threads: an Engine owns one scheduler
// thread that advances every running request in one forward pass (a Batch step) per step, a fixed
// number of slots (requests generated at once, each on its own Session) and a bounded FIFO queue
// in front of them. A request joins the batch at the next step once it holds a slot and leaves
// after the step that ends it; a long prompt is prefilled in chunks so it does not stall the
// others. Sampling, the stop rules (eos, max_new_tokens, a full context), a JSON-schema
// constraint (GenerationConfig::json_grammar) and LoRA adapters stay per request.
// Every request's KV cache is made of blocks of one pool; the full blocks of finished and running
// requests stay cached (EngineOptions::cache_mb, least recently used first out), indexed by the ids
// they hold, so a request whose prompt starts like an earlier one reuses those blocks and
// prefills only the rest (EngineOutcome::cached_tokens; docs/design-prompt-cache.md).
//
//   minimind::Engine engine(model);                        // EngineOptions: slots, queue, context
//   minimind::RequestHandle reply = engine.submit({ids, config});  // from any thread
//   std::vector<int32_t> new_ids;
//   while (reply.next(new_ids)) { ... }  // blocks until ids arrive; false at the end
//   reply.outcome().stop;                 // why it ended (or .error, .cancelled, .shut_down)
//
// A RequestHandle is read by one thread at a time; cancel() may come from any thread.
// Text, and stop strings (which are text), are made on the reader's thread by read_text(), so
// the scheduler's step, which every running request waits for, does no decoding.
#include "minimind/batch.hpp"
#include "minimind/error.hpp"
#include "minimind/generate.hpp"
#include "minimind/lora.hpp"
#include "minimind/kv_cache.hpp"
#include "minimind/model.hpp"
#include "minimind/prefix_index.hpp"
#include "minimind/session.hpp"
#include "minimind/tokenizer.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace minimind {

// What one scheduler step did, for monitoring (EngineOptions::on_step).
struct EngineStep {
  size_t sequences = 0;  // requests the step advanced in its one forward pass: its batch size
  double seconds = 0;    // from choosing what to feed to the sampled ids: the forward pass and sampling
};

struct EngineOptions {
  int slots = 4;          // requests generated at once, each with its own KV cache
  size_t max_queue = 16;  // requests that may wait for a slot; submit() refuses more (QueueFull)
  Index context = 0;      // positions a request may reach; 0: min(max_position_embeddings, kDefaultContext)
  // At most this many prompt positions are prefilled per step, shared by the requests that prefill.
  size_t prefill_rows = 256;
  // Mebibytes of KV blocks kept for later requests to reuse (a prompt cache), besides those the
  // running requests hold; 0 turns the cache off. A request's cache grows by blocks of
  // KVCache::kBlockPositions positions as it advances, so a slot holds what it has used.
  size_t cache_mb = 256;
  // Called on the scheduler thread after every step, outside the engine's lock, before the step's
  // ids reach their readers (a server's /metrics records step times and batch sizes with it).
  // Every running request waits for it, so it must be quick, and safe against the threads that
  // read what it records.
  std::function<void(const EngineStep&)> on_step;
};

struct EngineRequest {
  EngineRequest(std::vector<int32_t> prompt_, GenerationConfig config_, std::vector<LoraUse> adapters_ = {}, size_t notify_every_ = 1)
      : prompt(std::move(prompt_)), config(std::move(config_)), adapters(std::move(adapters_)), notify_every(notify_every_) {}
  std::vector<int32_t> prompt;  // at least one id, at most the engine's context
  GenerationConfig config;
  std::vector<LoraUse> adapters;  // unmerged, for this request only (Session::set_adapters)
  // The reader is woken once this many ids wait, or at the end. A reader that does not stream
  // sets more: on two cores, reader threads waking at every step made each step markedly slower.
  size_t notify_every = 1;
  // false: neither reuse cached blocks nor leave this request's blocks for others (as with
  // adapters, whose keys and values the cache does not tell apart).
  bool cache_prompt = true;
};

// submit() when every slot is busy and the queue is full.
class QueueFull : public Error {
 public:
  QueueFull(size_t slots, size_t waiting, size_t max_queue)
      : Error("all " + std::to_string(slots) + " slots are in use and " + std::to_string(waiting) + " requests are waiting (queue of " +
              std::to_string(max_queue) + ")"),
        slots(slots),
        waiting(waiting),
        max_queue(max_queue) {}
  size_t slots, waiting, max_queue;
};

// submit() after shutdown().
class ShuttingDown : public Error {
 public:
  ShuttingDown() : Error("the engine is shutting down") {}
};

// How a request ended. Exactly one of: `stop` (a stop rule ended it), `cancelled`, `shut_down`
// (the engine shut down first), a non-empty `error` (its step failed; the message).
struct EngineOutcome {
  std::optional<StopReason> stop;
  bool cancelled = false;
  bool shut_down = false;
  std::string error;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;  // ids sampled, an eos that ended it included
  int64_t cached_tokens = 0;     // prompt positions reused from the cache, not computed
  // When the steps that sampled the first and the last of them ended (none when nothing was
  // sampled): the latencies a reader cannot see itself, since it is woken every notify_every ids.
  std::optional<std::chrono::steady_clock::time_point> first_token_at, last_token_at;
};

struct EngineStatus {
  size_t slots, idle, queued;
};

template <class T>
class Engine;

namespace detail {

// One request's state, shared by its RequestHandle and the engine. The session and sampler are
// used only by the scheduler thread while the request runs; everything else is guarded by the
// engine's mutex (EngineShared::mutex).
template <class T>
struct EngineSequence {
  GenerationConfig config;  // before `sampler`, which points at it
  std::vector<int32_t> prompt;
  std::optional<Session<T>> session;
  std::optional<SequenceSampler> sampler;
  size_t notify_every = 1;
  bool holds_slot_only = false;  // Engine::reserve_slot(): no generation
  size_t prefilled = 0;          // prompt ids fed so far
  int32_t last = 0;              // the id to feed next, once prefilled
  // The scheduler's record of the session's blocks: the ids run so far (the prompt, then each fed
  // id), and per block table entry its node in the prefix index (PrefixIndex::kRoot: a block of
  // its own). Entries [0, shared) are nodes.
  bool cache_prompt = true;
  bool attached = false;  // has looked up its prompt (and got its first blocks)
  bool failed = false;    // a step failed: its last block is not to be cached
  std::vector<int32_t> history, nodes;
  size_t shared = 0;

  std::vector<int32_t> ids;  // sampled, not yet taken by the reader
  EngineOutcome outcome;
  bool started = false, cancel = false, finished = false;
  std::condition_variable changed;  // ids, start or end, for the reader
};

// What outlives the Engine as long as a RequestHandle does: the lock they share and the queue a
// cancelled handle leaves.
template <class T>
struct EngineShared {
  std::mutex mutex;
  std::condition_variable work;  // the scheduler's: a request joined, was cancelled, or the engine stops
  std::deque<std::shared_ptr<EngineSequence<T>>> waiting;
  std::vector<std::shared_ptr<EngineSequence<T>>> joining;  // hold a slot, not yet in the batch
  size_t busy = 0;                                          // slots held
  size_t slots = 0;
  std::atomic<bool> stopping{false};

  // Under the mutex: ends a request that the scheduler is not running (queued, or a reserved slot).
  void finish_locked(EngineSequence<T>& seq) {
    seq.finished = true;
    seq.session.reset();
    seq.changed.notify_all();
  }
  // Under the mutex: gives free slots to the requests waiting first.
  void admit_locked() {
    while (busy < slots && !waiting.empty()) {
      auto seq = std::move(waiting.front());
      waiting.pop_front();
      ++busy;
      seq->started = true;
      seq->changed.notify_all();
      if (!seq->holds_slot_only) joining.push_back(std::move(seq));
    }
    if (!joining.empty()) work.notify_all();
  }
  void release_slot_locked() {
    --busy;
    admit_locked();
  }
};

}  // namespace detail

// A submitted request: its ids as they are generated, and how it ended. Destroying it cancels
// the request (nobody would read it). Movable, not copyable; a default-made or moved-from handle
// holds no request, and may only be assigned to or destroyed.
template <class T>
class RequestHandle {
 public:
  RequestHandle() = default;
  RequestHandle(RequestHandle&&) noexcept = default;
  RequestHandle& operator=(RequestHandle&& other) noexcept {
    if (this != &other) {
      cancel();
      seq_ = std::move(other.seq_);
      shared_ = std::move(other.shared_);
    }
    return *this;
  }
  ~RequestHandle() { cancel(); }

  // Waits up to `timeout` for the request to hold a slot; true once it does, or has ended.
  bool wait_started(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(shared_->mutex);
    return seq_->changed.wait_for(lock, timeout, [&] { return seq_->started || seq_->finished; });
  }

  // Replaces `ids` with the ids generated since the last call, waiting for the request's
  // notify_every of them or its end; false once it has ended and every id was taken.
  bool next(std::vector<int32_t>& ids) {
    std::unique_lock<std::mutex> lock(shared_->mutex);
    seq_->changed.wait(lock, [&] { return seq_->ids.size() >= seq_->notify_every || seq_->finished; });
    ids.swap(seq_->ids);
    seq_->ids.clear();
    return !ids.empty();
  }

  // Ends the request: a queued one leaves the queue at once, a running one at the scheduler's
  // next step (ids it made before stay readable), a reserved slot is released. Any thread; no
  // effect on a request that has ended.
  void cancel() {
    if (!seq_) return;
    std::lock_guard<std::mutex> lock(shared_->mutex);
    if (seq_->finished || seq_->cancel) return;
    seq_->cancel = true;
    if (auto it = std::find(shared_->waiting.begin(), shared_->waiting.end(), seq_); it != shared_->waiting.end()) {
      shared_->waiting.erase(it);
      seq_->outcome.cancelled = true;
      shared_->finish_locked(*seq_);
    } else if (seq_->holds_slot_only) {
      seq_->outcome.cancelled = true;
      shared_->finish_locked(*seq_);
      shared_->release_slot_locked();
    } else {
      shared_->work.notify_all();  // the scheduler ends it at its next step
    }
  }

  bool finished() const {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    return seq_->finished;
  }
  // How it ended; meaningful once next() has returned false (or finished() is true).
  EngineOutcome outcome() const {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    return seq_->outcome;
  }
  // Whether the engine is shutting down (the request ends with shut_down at the next step).
  bool engine_stopping() const { return shared_->stopping; }

 private:
  friend class Engine<T>;
  RequestHandle(std::shared_ptr<detail::EngineSequence<T>> seq, std::shared_ptr<detail::EngineShared<T>> shared)
      : seq_(std::move(seq)), shared_(std::move(shared)) {}

  std::shared_ptr<detail::EngineSequence<T>> seq_;
  std::shared_ptr<detail::EngineShared<T>> shared_;
};

template <class T>
class Engine {
 public:
  // `model` must outlive the engine; it is shared, const, with the caller's other uses.
  Engine(const MiniMindForCausalLM<T>& model, EngineOptions options = {})
      : model_(model), options_(options), batch_(model), shared_(std::make_shared<detail::EngineShared<T>>()) {
    const Index max_context = model.config().max_position_embeddings;
    if (options_.context == 0) options_.context = std::min<Index>(max_context, MiniMindForCausalLM<T>::kDefaultContext);
    if (options_.slots < 1) throw Error("engine: slots must be >= 1, got " + std::to_string(options_.slots));
    if (options_.context < 1 || options_.context > max_context) {
      throw Error("engine: context " + std::to_string(options_.context) + " must be in [1, max_position_embeddings " +
                  std::to_string(max_context) + "]");
    }
    if (options_.prefill_rows < 1) throw Error("engine: prefill_rows must be >= 1");
    // Enough blocks for every slot at a full context besides the cache's, so that a running
    // request never lacks one: the cache gives blocks back (evicting) only to itself.
    const Index B = KVCache<T>::kBlockPositions;
    const size_t cache_blocks = options_.cache_mb * (size_t{1} << 20) / KVBlockPool<T>::block_bytes(model.config());
    pool_.emplace(model.config(), options_.slots * ((options_.context + B - 1) / B) + static_cast<Index>(cache_blocks));
    if (cache_blocks > 0) index_.emplace(B, cache_blocks);
    shared_->slots = static_cast<size_t>(options_.slots);
    thread_ = std::thread([this] { loop(); });
  }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  // Shuts down (see shutdown()) and waits for the scheduler thread.
  ~Engine() {
    shutdown();
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      exiting_ = true;
    }
    shared_->work.notify_all();
    thread_.join();
  }

  // Queues `request`; it starts at once if a slot is free. Throws QueueFull when every slot is
  // busy and the queue is full, ShuttingDown after shutdown(), Error for a request that cannot
  // run (an empty or too long prompt, an id outside the vocabulary, invalid sampling values, an
  // adapter of another model). The request's session is made here, on the caller's thread.
  RequestHandle<T> submit(EngineRequest request) {
    if (request.prompt.empty()) throw Error("engine: the prompt has no tokens");
    if (static_cast<Index>(request.prompt.size()) > options_.context) {
      throw Error("engine: the prompt has " + std::to_string(request.prompt.size()) + " tokens, more than the context of " +
                  std::to_string(options_.context));
    }
    for (int32_t id : request.prompt) model_.lm_head().check_id(id);
    request.config.validate();
    auto seq = std::make_shared<detail::EngineSequence<T>>();
    seq->config = std::move(request.config);
    seq->prompt = std::move(request.prompt);
    seq->notify_every = std::max<size_t>(1, request.notify_every);
    seq->outcome.prompt_tokens = static_cast<int64_t>(seq->prompt.size());
    // Keys and values depend on the adapters that made them, and the index knows only ids: a
    // request with adapters neither reuses cached blocks nor leaves its own.
    seq->cache_prompt = request.cache_prompt && request.adapters.empty();
    if (seq->config.max_new_tokens == 0) {  // as generate(): nothing to run
      seq->outcome.stop = StopReason::MaxNewTokens;
      seq->started = seq->finished = true;
      return RequestHandle<T>(std::move(seq), shared_);
    }
    seq->sampler.emplace(seq->config, model_.config().vocab_size, seq->prompt, options_.context - static_cast<Index>(seq->prompt.size()));
    seq->session.emplace(model_.config(), *pool_);
    if (!request.adapters.empty()) seq->session->set_adapters(std::move(request.adapters));
    enqueue(seq);
    return RequestHandle<T>(std::move(seq), shared_);
  }

  // A slot held without generating, in the same queue as requests, until the handle is cancelled
  // or destroyed: for work outside the engine that should count against the slots (the server's
  // /v1/inspect). Throws as submit() does when the queue is full or the engine stops.
  RequestHandle<T> reserve_slot() {
    auto seq = std::make_shared<detail::EngineSequence<T>>();
    seq->holds_slot_only = true;
    enqueue(seq);
    return RequestHandle<T>(std::move(seq), shared_);
  }

  // Stops taking requests: queued ones end at once, running ones at the next step, both with
  // outcome().shut_down. Any thread; the scheduler thread stays until the Engine is destroyed.
  void shutdown() {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->stopping = true;
    for (auto& seq : shared_->waiting) {
      seq->outcome.shut_down = true;
      shared_->finish_locked(*seq);
    }
    shared_->waiting.clear();
    shared_->work.notify_all();
  }
  bool stopping() const { return shared_->stopping; }

  EngineStatus status() const {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    return {shared_->slots, shared_->slots - shared_->busy, shared_->waiting.size()};
  }
  const EngineOptions& options() const { return options_; }
  // Positions the prompt cache keeps at most: cache_mb in whole blocks (0 when it is off).
  size_t cache_positions() const { return index_ ? index_->max_nodes() * static_cast<size_t>(KVCache<T>::kBlockPositions) : 0; }

 private:
  void enqueue(const std::shared_ptr<detail::EngineSequence<T>>& seq) {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    if (shared_->stopping) throw ShuttingDown();
    // Free slots are always given out at once, so a waiting request means none is free.
    if (shared_->busy == shared_->slots && shared_->waiting.size() >= options_.max_queue) {
      throw QueueFull(shared_->slots, shared_->waiting.size(), options_.max_queue);
    }
    shared_->waiting.push_back(seq);
    shared_->admit_locked();
  }

  using Sequence = detail::EngineSequence<T>;

  void loop() {
    std::vector<std::shared_ptr<Sequence>> running, left;
    // Per step: which running sequences were fed, and whether that ends their prompt.
    std::vector<Sequence*> fed;
    std::vector<std::span<const int32_t>> feeds;
    std::vector<bool> samples;
    std::vector<std::optional<StopReason>> stops;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(shared_->mutex);
        shared_->work.wait(lock, [&] { return exiting_ || !shared_->joining.empty() || !running.empty(); });
        for (auto& seq : shared_->joining) running.push_back(std::move(seq));
        shared_->joining.clear();
        for (auto& seq : running) {
          if (exiting_ || shared_->stopping) seq->outcome.shut_down = true;
          else if (seq->cancel) seq->outcome.cancelled = true;
          else continue;
          end_locked(*seq);
        }
        leave_locked(running, left);
        if (exiting_) return;
      }
      // Their blocks go back (to the cache or the pool) and their sessions are freed here,
      // outside the lock.
      for (auto& seq : left) give_back(*seq);
      left.clear();
      if (running.empty()) continue;
      const auto step_began = std::chrono::steady_clock::now();
      fed.clear();
      feeds.clear();
      samples.clear();
      size_t prefill_budget = options_.prefill_rows;
      for (auto& seq : running) {
        // A request looks its prompt up when it first gets prefill rows, not when it joins: those
        // that arrive together then share what the first of them has prefilled meanwhile.
        if (!seq->attached && prefill_budget > 0) attach(*seq);
        if (seq->prefilled < seq->prompt.size()) {
          const size_t chunk = std::min(seq->prompt.size() - seq->prefilled, prefill_budget);
          if (chunk == 0) continue;
          feeds.push_back(std::span<const int32_t>(seq->prompt).subspan(seq->prefilled, chunk));
          seq->prefilled += chunk;
          prefill_budget -= chunk;
          samples.push_back(seq->prefilled == seq->prompt.size());
        } else {
          feeds.push_back(std::span<const int32_t>(&seq->last, 1));
          seq->history.push_back(seq->last);
          samples.push_back(true);
        }
        fed.push_back(seq.get());
      }
      std::string error;
      stops.assign(fed.size(), std::nullopt);
      try {
        for (size_t i = 0; i < fed.size(); ++i) {
          Session<T>& session = *fed[i]->session;
          const Index needed = session.position() + static_cast<Index>(feeds[i].size());
          session.reserve(needed);
          batch_.add(session, feeds[i]);
        }
        const auto logits = batch_.step();
        for (Sequence* seq : fed) publish_full(*seq);
        for (size_t i = 0; i < fed.size(); ++i) {
          if (!samples[i]) continue;
          Sequence& seq = *fed[i];
          seq.last = seq.sampler->next(logits.row(static_cast<Index>(i)).data());
          stops[i] = seq.sampler->stop(options_.context - seq.session->position());
        }
      } catch (const std::exception& e) {
        batch_.clear();
        error = e.what();
      }
      const auto step_ended = std::chrono::steady_clock::now();
      // Before the readers hear of the step, so that a request's steps are all reported by the time it ends.
      if (options_.on_step) options_.on_step({fed.size(), std::chrono::duration<double>(step_ended - step_began).count()});
      std::lock_guard<std::mutex> lock(shared_->mutex);
      for (size_t i = 0; i < fed.size(); ++i) {
        Sequence& seq = *fed[i];
        if (!error.empty()) {
          seq.failed = true;
          seq.outcome.error = error;
          end_locked(seq);
          continue;
        }
        if (!samples[i]) continue;
        seq.ids.push_back(seq.last);
        if (seq.outcome.generated_tokens++ == 0) seq.outcome.first_token_at = step_ended;
        seq.outcome.last_token_at = step_ended;
        if (stops[i]) {
          seq.outcome.stop = stops[i];
          end_locked(seq);
        } else if (seq.ids.size() >= seq.notify_every) {
          seq.changed.notify_all();
        }
      }
      leave_locked(running, left);
    }
  }

  bool caches(const Sequence& seq) const { return index_ && seq.cache_prompt; }

  // A sequence joining the batch takes the longest cached prefix of its prompt: the full blocks
  // as they are, and the rows of a partly matching block copied into a block of its own (which it
  // goes on writing). At most prompt - 1 positions, so that the last one runs and gives logits.
  void attach(Sequence& seq) {
    seq.attached = true;
    seq.history.reserve(static_cast<size_t>(options_.context));
    const size_t table = static_cast<size_t>((options_.context + KVCache<T>::kBlockPositions - 1) / KVCache<T>::kBlockPositions);
    seq.nodes.reserve(table);
    KVCache<T>& cache = seq.session->cache();
    cache.blocks.reserve(table);
    seq.history.assign(seq.prompt.begin(), seq.prompt.end());
    if (!caches(seq)) return;
    const PrefixIndex::Match match = index_->find(seq.prompt, static_cast<Index>(seq.prompt.size()) - 1);
    for (const int32_t node : match.nodes) {
      cache.blocks.push_back(index_->block(node));
      seq.nodes.push_back(node);
    }
    seq.shared = match.nodes.size();
    if (match.copy_rows > 0) {
      const int32_t own = pool_->allocate();
      pool_->copy_rows(index_->block(match.copy_from), own, match.copy_rows);
      cache.blocks.push_back(own);
      seq.nodes.push_back(PrefixIndex::kRoot);
    }
    const Index cached = index_->positions(match);
    cache.capacity = static_cast<Index>(cache.blocks.size()) * KVCache<T>::kBlockPositions;
    seq.session->advance(cached);
    seq.prefilled = static_cast<size_t>(cached);
    std::lock_guard<std::mutex> lock(shared_->mutex);
    seq.outcome.cached_tokens = cached;
  }

  // Puts `ids` (a block's worth, or fewer for the last, partly filled one) of table entry `entry`
  // into the index after the entry before it; false when the index is full of referenced blocks.
  // An equal node already there replaces the sequence's own block, which is freed.
  bool publish(Sequence& seq, size_t entry, std::span<const int32_t> ids) {
    const int32_t parent = entry == 0 ? PrefixIndex::kRoot : seq.nodes[entry - 1];
    int32_t& block = seq.session->cache().blocks[entry];
    bool adopted = false;
    int32_t node = index_->insert(parent, ids, block, adopted);
    while (node == PrefixIndex::kRoot) {
      const int32_t evicted = index_->evict();
      if (evicted == PrefixIndex::kRoot) return false;
      pool_->free(evicted);
      node = index_->insert(parent, ids, block, adopted);
    }
    if (adopted) {
      pool_->free(block);
      block = index_->block(node);
    }
    seq.nodes[entry] = node;
    ++seq.shared;
    return true;
  }

  // After a step: the blocks the sequence has filled go into the index at once, so that requests
  // arriving while it runs share them too.
  void publish_full(Sequence& seq) {
    if (!caches(seq)) return;
    const Index B = KVCache<T>::kBlockPositions;
    const size_t filled = static_cast<size_t>(seq.session->position() / B);
    seq.nodes.resize(seq.session->cache().blocks.size(), PrefixIndex::kRoot);
    while (seq.shared < filled) {
      const auto ids = std::span<const int32_t>(seq.history).subspan(seq.shared * static_cast<size_t>(B), static_cast<size_t>(B));
      if (!publish(seq, seq.shared, ids)) {
        seq.cache_prompt = false;  // the index is full of blocks in use: the rest stays its own
        return;
      }
    }
  }

  // A sequence that has left gives its blocks back: its partly filled last block goes into the
  // index too (nobody writes it any more), its references on nodes are dropped (they stay cached
  // until evicted), its other blocks go back to the pool.
  void give_back(Sequence& seq) {
    if (!seq.session) return;
    KVCache<T>& cache = seq.session->cache();
    seq.nodes.resize(cache.blocks.size(), PrefixIndex::kRoot);
    if (!seq.failed) {
      publish_full(seq);
      const Index B = KVCache<T>::kBlockPositions, position = seq.session->position();
      const size_t last = static_cast<size_t>(position / B);
      if (caches(seq) && position % B > 0 && seq.shared == last) {
        publish(seq, last, std::span<const int32_t>(seq.history).subspan(last * static_cast<size_t>(B), static_cast<size_t>(position % B)));
      }
    }
    // In path order, so that a block is never used more recently than the one after it.
    for (size_t i = 0; i < cache.blocks.size(); ++i) {
      if (seq.nodes[i] != PrefixIndex::kRoot) index_->release(seq.nodes[i]);
      else pool_->free(cache.blocks[i]);
    }
    seq.session.reset();
  }

  // Under the mutex: a running sequence has ended; its slot is released when it leaves.
  void end_locked(Sequence& seq) {
    seq.finished = true;
    seq.changed.notify_all();
  }
  // Under the mutex: moves the ended sequences out of `running` into `left` (whose sessions the
  // caller frees after unlocking) and gives their slots to waiting requests.
  void leave_locked(std::vector<std::shared_ptr<Sequence>>& running, std::vector<std::shared_ptr<Sequence>>& left) {
    for (auto& seq : running) {
      if (!seq->finished) continue;
      left.push_back(seq);
      shared_->release_slot_locked();
    }
    std::erase_if(running, [](const auto& seq) { return seq->finished; });
  }

  const MiniMindForCausalLM<T>& model_;
  EngineOptions options_;
  Batch<T> batch_;
  // Used by the scheduler thread only.
  std::optional<KVBlockPool<T>> pool_;
  std::optional<PrefixIndex> index_;  // when options_.cache_mb holds a block
  std::shared_ptr<detail::EngineShared<T>> shared_;
  bool exiting_ = false;  // guarded by shared_->mutex
  std::thread thread_;    // last: starts once the rest is built
};

// What a reader made of a request's ids as text (read_text).
struct TextOutcome {
  EngineOutcome engine;
  int64_t completion_tokens = 0;  // ids read, an eos that ended the reply not counted
  bool stop_string = false;       // a stop string ended the text
  bool enough = false;            // the receiver said Delivery::enough
  bool gone = false;              // the receiver said Delivery::gone
  bool eos = false;               // the reply ended with an eos id, whole
  bool shut_down = false;         // the engine began shutting down before the reply's end
  bool complete = false;          // read to the end that a stop rule (eos, max_new_tokens, full context) set
};

// What a receiver of text says after each piece: go on, the reply is complete, or there is no
// one to deliver to any more.
enum class Delivery { more, enough, gone };

// Releases generated text as it comes, holding back a tail that could still grow into a stop
// string; when one appears, it and everything after it are dropped.
class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {
    std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
  }

  std::string push(std::string_view piece) {
    pending_ += piece;
    size_t first = std::string::npos;
    for (const auto& s : stops_) first = std::min(first, pending_.find(s));
    if (first != std::string::npos) {
      stopped_ = true;
      std::string out = pending_.substr(0, first);
      pending_.clear();
      return out;
    }
    // The longest suffix that is a proper prefix of some stop string may still become one.
    size_t hold = 0;
    for (const auto& s : stops_) {
      for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k) {
        if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
          hold = k;
          break;
        }
      }
    }
    std::string out = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
    return out;
  }
  // At the end of generation the held tail is text like any other.
  std::string finish() { return std::exchange(pending_, {}); }
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

// Reads `generation` to its end on this thread as text (TextStream: whole characters, no eos
// text), cut at the first of `stop`, passing each piece to `emit`. A reply cut short (a stop
// string, Delivery::enough or gone, or the engine shutting down) is cancelled. `config` is the
// request's. Throws Error when the request's step failed.
template <class T>
TextOutcome read_text(RequestHandle<T>& generation, const Tokenizer& tokenizer, const GenerationConfig& config, std::vector<std::string> stop,
                      const std::function<Delivery(std::string_view)>& emit) {
  TextOutcome outcome;
  StopStrings filter(std::move(stop));
  TextStream text(tokenizer, config);
  auto deliver = [&](std::string_view piece) {
    if (piece.empty()) return true;
    switch (emit(piece)) {
      case Delivery::more: return true;
      case Delivery::enough: outcome.enough = true; return false;
      case Delivery::gone: outcome.gone = true; return false;
    }
    return false;
  };
  bool keep_going = true;
  std::vector<int32_t> ids;
  while (keep_going && generation.next(ids)) {
    for (int32_t id : ids) {
      ++outcome.completion_tokens;
      if (generation.engine_stopping()) {
        outcome.shut_down = true;
      } else if (deliver(filter.push(text.push(id))) && !filter.stopped()) {
        continue;
      }
      keep_going = false;
      break;
    }
  }
  if (!keep_going) {
    // Waits for the end, so that the slot is free again when this returns.
    generation.cancel();
    while (generation.next(ids)) {
    }
  }
  outcome.engine = generation.outcome();
  outcome.stop_string = filter.stopped();
  if (keep_going) {
    if (!outcome.engine.error.empty()) throw Error(outcome.engine.error);
    if (outcome.engine.shut_down || outcome.engine.cancelled) {
      outcome.shut_down = outcome.engine.shut_down;
      keep_going = false;
    } else {
      // The eos id that ended the reply is not part of it.
      if (outcome.engine.stop == StopReason::EndOfSequence) --outcome.completion_tokens;
      deliver(filter.push(text.flush()));
      outcome.stop_string = filter.stopped();
    }
  }
  if (!outcome.gone && !outcome.shut_down && !outcome.engine.cancelled && !filter.stopped() && !outcome.enough) deliver(filter.finish());
  outcome.complete = keep_going;
  outcome.eos = keep_going && outcome.engine.stop == StopReason::EndOfSequence && !filter.stopped();
  return outcome;
}

}  // namespace minimind
