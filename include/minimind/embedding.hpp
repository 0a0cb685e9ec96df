#pragma once
// A [vocab, hidden] matrix read both ways. Reading a token is a row lookup (h = E[id]); predicting
// the next one is a dot product with every row (logits = h E^T), so the token whose embedding
// points the way h points scores highest. Weight tying: a tied model holds ONE Embedding,
// embed_tokens, and uses it as its lm_head too (one matrix in memory, never a copy); an untied
// checkpoint holds a second Embedding, its lm_head, used only for logits. Held as bf16 or q8 the matrix
// is still one tensor: a lookup widens one row, logits use the format's kernel.
#include "minimind/error.hpp"
#include "minimind/detail/kernels/linear.hpp"
#include "minimind/tensor.hpp"
#include "minimind/detail/kernels/weight.hpp"

#include <cstdint>
#include <span>
#include <string>

namespace minimind {

template <class T>
class Embedding {
 public:
  Embedding() = default;
  explicit Embedding(Weight<T> weight) : weight_(std::move(weight)) {}
  explicit Embedding(MatrixRM<T> matrix) : weight_(Weight<T>::owned(std::move(matrix))) {}

  Index vocab_size() const { return weight_.rows(); }
  Index hidden_size() const { return weight_.cols(); }
  const Weight<T>& weight() const { return weight_; }
  // Writable view of the single storage; a write is seen by lookup and logits alike.
  MatrixMap<T> mutable_weight() { return weight_.mutable_matrix(); }

  // Throws unless `id` names a row.
  void check_id(int64_t id) const {
    if (id < 0 || id >= vocab_size()) {
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(vocab_size()) + ")");
    }
  }

  // The embedding of each id, one row per id, into out [ids.size(), hidden].
  // out must be row-major (each row contiguous).
  template <class Out>
  void lookup(std::span<const int32_t> ids, Out&& out) const {
    for (size_t i = 0; i < ids.size(); ++i) {
      check_id(ids[i]);
      weight_.row_to(ids[i], &out(static_cast<Index>(i), 0));
    }
  }
  RowVector<T> lookup(int32_t id) const {
    check_id(id);
    RowVector<T> row(hidden_size());
    weight_.row_to(id, row.data());
    return row;
  }

  // logits [rows, vocab] = h [rows, hidden] E^T, on the workspace's threads.
  template <class In, class Out>
  void logits(const In& h, Out&& out, kernels::Workspace& work) const {
    kernels::linear(h, weight_, out, work);
  }
  template <class In, class Out>
  void logits(const In& h, Out&& out) const {
    kernels::Workspace work;
    logits(h, out, work);
  }
  RowVector<T> logits(const RowVector<T>& h) const {
    RowVector<T> out(vocab_size());
    logits(h, out);
    return out;
  }

  size_t num_parameters() const { return static_cast<size_t>(weight_.rows() * weight_.cols()); }

 private:
  Weight<T> weight_;  // E [vocab, hidden]
};

}  // namespace minimind
