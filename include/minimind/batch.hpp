#pragma once
// Many sequences advanced together (continuous batching). Each step gathers every member's new
// tokens, one decode token each or a chunk of a prompt, into one matrix: every projection and FFN
// then reads its weights once for all of them (decode is bound by reading weights, so N
// sequences cost far less than N steps), while attention runs per sequence over its own KV cache.
// Sequences join and leave between steps simply by being added or not; sampling stays with the
// caller, per sequence. A sequence's logits are those it gets alone, up to float summation order.
// Each sequence runs with its session's unmerged LoRA adapters (Session::set_adapters), so one
// step may mix sequences with different adapters, or none.
//
//   Batch<float> batch(model);
//   batch.add(session_a, prompt_a);          // a prompt (or a chunk of one)
//   batch.add(session_b, {&next_b, 1});      // one decode token
//   auto logits = batch.step();              // [2, vocab]: row i is the i-th add's last position
#include "minimind/error.hpp"
#include "minimind/kv_cache.hpp"
#include "minimind/model.hpp"
#include "minimind/session.hpp"

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace minimind {

template <class T>
class Batch {
 public:
  explicit Batch(const MiniMindForCausalLM<T>& model) : model_(&model) {}

  // Queues `ids` to run after what `session` holds, in the next step. Throws, queueing nothing,
  // if they do not fit the session or the session is already in this step. `ids` must stay
  // alive until step().
  void add(Session<T>& session, std::span<const int32_t> ids) {
    if (std::find(sessions_.begin(), sessions_.end(), &session) != sessions_.end()) {
      throw Error("batch: a session can join a step only once");
    }
    for (int32_t id : ids) model_->lm_head().check_id(id);
    rows_.push_back(model_->rows_of(session, ids.size(), rows()));
    sessions_.push_back(&session);
    ids_.push_back(ids);
  }

  Index sequences() const { return static_cast<Index>(sessions_.size()); }
  // Positions queued for the next step.
  Index rows() const { return rows_.empty() ? 0 : rows_.back().first_row + rows_.back().rows; }

  // Runs the queued step and advances each session; returns [sequences(), vocab]: row i holds the
  // logits after the i-th add's last id. Valid until the next step. The batch is empty afterwards.
  auto step() {
    if (rows_.empty()) throw Error("batch: nothing to run");
    Index longest = 0;
    for (const SequenceRows<T>& seq : rows_) longest = std::max(longest, seq.length());
    model_->prepare(scratch_, rows(), longest);
    model_->forward_rows(rows_, ids_, /*all_positions=*/false, scratch_, nullptr);
    const Index count = sequences();
    for (size_t i = 0; i < sessions_.size(); ++i) sessions_[i]->advance(rows_[i].rows);
    clear();
    return scratch_.logits.topRows(count);
  }

  // Drops what is queued (the sessions are unchanged).
  void clear() {
    sessions_.clear();
    rows_.clear();
    ids_.clear();
  }

 private:
  const MiniMindForCausalLM<T>* model_;
  std::vector<Session<T>*> sessions_;
  std::vector<SequenceRows<T>> rows_;
  std::vector<std::span<const int32_t>> ids_;
  ForwardScratch<T> scratch_;  // sized for the largest step so far
};

}  // namespace minimind
