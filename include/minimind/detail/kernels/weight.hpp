#pragma once
// A weight matrix [rows, cols] in one of the formats of kernels/formats.hpp, as the kernels read
// it: f32 values of the compute type T (float or double), or for float one packed format's view.
// Below the loader (weights.hpp), which makes these from checkpoint tensors.
#include "minimind/detail/kernels/formats.hpp"
#include "minimind/detail/weight_arena.hpp"
#include "minimind/error.hpp"
#include "minimind/tensor.hpp"

#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>

namespace minimind {

namespace kernels {
template <class List>
struct PackedViewsOf;
template <class... Fs>
struct PackedViewsOf<FormatList<Fs...>> {
  using type = std::tuple<typename Fs::View...>;
};
using PackedViews = PackedViewsOf<Formats>::type;
}  // namespace kernels

template <class T>
class Weight {
 public:
  // bf16 and q8 have float32 kernels only; a Weight<double> is always held as f32 (in double).
  static constexpr bool kHasPackedFormats = std::is_same_v<T, float>;

  Weight() = default;

  // Takes ownership of a matrix (weights made in memory: tests, random benchmark shapes).
  static Weight owned(MatrixRM<T> matrix) {
    Weight w;
    auto storage = std::make_shared<MatrixRM<T>>(std::move(matrix));
    w.data_ = storage->data();
    w.rows_ = storage->rows();
    w.cols_ = storage->cols();
    w.owner_ = std::move(storage);
    w.is_view_ = false;
    return w;
  }
  // Values [rows, cols] in a buffer of ours (a WeightArena piece) kept alive by `owner`.
  static Weight owned(std::shared_ptr<const void> owner, T* data, Index rows, Index cols) {
    Weight w = view(std::move(owner), data, rows, cols);
    w.is_view_ = false;
    return w;
  }
  static Weight view(std::shared_ptr<const void> owner, T* data, Index rows, Index cols) {
    Weight w;
    w.owner_ = std::move(owner);
    w.data_ = data;
    w.rows_ = rows;
    w.cols_ = cols;
    w.is_view_ = true;
    return w;
  }
  // Values held in packed format F (not f32), kept alive by `owner` (the loaded file, or an owned
  // buffer).
  template <class F>
  static Weight packed(std::shared_ptr<const void> owner, const typename F::View& values, bool is_view)
    requires kHasPackedFormats
  {
    Weight w;
    w.format_ = F::id;
    w.owner_ = std::move(owner);
    std::get<typename F::View>(w.packed_) = values;
    w.rows_ = values.rows;
    w.cols_ = values.cols;
    w.is_view_ = is_view;
    return w;
  }

  // A copy of this f32 weight in `format` (itself when format is f32), its bytes from `arena`.
  Weight to_format(WeightFormat format, WeightArena& arena) const {
    if (format == format_) return *this;
    if (format_ != WeightFormat::F32) throw Error("a weight can only be converted from f32");
    if constexpr (!kHasPackedFormats) {
      throw Error(std::string("weight format ") + format_name(format) + " needs a float model");
    } else {
      return kernels::with_format(format, [&]<class F>() {
        if constexpr (std::is_same_v<F, kernels::f32::Format>) {
          return *this;  // not reached: format != format_
        } else {
          std::shared_ptr<const void> storage;
          const typename F::View values = F::convert(data_, rows_, cols_, arena, storage);
          return packed<F>(std::move(storage), values, false);
        }
      });
    }
  }
  // The same with an arena of its own (a weight made alone, as in tests).
  Weight to_format(WeightFormat format) const {
    WeightArena arena;
    return to_format(format, arena);
  }

  WeightFormat format() const { return format_; }
  // The f32 matrix; only for weights held as f32.
  ConstMatrixMap<T> matrix() const { return {f32_data(), rows_, cols_}; }
  // Writable: the storage is either ours or a private copy-on-write mapping of the file.
  MatrixMap<T> mutable_matrix() { return {const_cast<T*>(f32_data()), rows_, cols_}; }
  ConstVectorMap<T> vector() const { return {f32_data(), rows_ * cols_}; }
  const T* data() const { return f32_data(); }
  // The values as format F's kernels see them; F must be format().
  template <class F>
  typename F::View format_view() const {
    if constexpr (std::is_same_v<F, kernels::f32::Format>) return {f32_data(), rows_, cols_};
    else return std::get<typename F::View>(packed_);
  }
  const uint16_t* bf16_data() const { return format_view<kernels::bf16::Format>().data; }
  kernels::q8::View q8_view() const { return format_view<kernels::q8::Format>(); }
  Index rows() const { return rows_; }
  Index cols() const { return cols_; }
  size_t bytes() const {
    if constexpr (!kHasPackedFormats) {
      return static_cast<size_t>(rows_ * cols_) * sizeof(T);
    } else {
      return kernels::with_format(format_, [&]<class F>() {
        if constexpr (requires { F::bytes(format_view<F>()); }) return F::bytes(format_view<F>());  // per type (ggml)
        else return F::bytes(rows_, cols_);
      });
    }
  }
  // True when the weight is read in place from the checkpoint file.
  bool is_view() const { return is_view_; }

  // Row r widened to the compute type: out [cols] (an embedding lookup).
  void row_to(Index r, T* out) const {
    if constexpr (!kHasPackedFormats) {
      std::memcpy(out, data_ + r * cols_, static_cast<size_t>(cols_) * sizeof(T));
    } else {
      kernels::with_format(format_, [&]<class F>() { F::row_to(format_view<F>(), r, out); });
    }
  }

 private:
  const T* f32_data() const {
    if (format_ != WeightFormat::F32 && rows_ * cols_ > 0) {
      throw Error(std::string("this weight is held as ") + format_name(format_) + ", not as f32");
    }
    return data_;
  }

  WeightFormat format_ = WeightFormat::F32;
  std::shared_ptr<const void> owner_;
  T* data_ = nullptr;  // f32
  kernels::PackedViews packed_;  // the other formats: the one of format_ is set
  Index rows_ = 0, cols_ = 0;
  bool is_view_ = false;
};

}  // namespace minimind
