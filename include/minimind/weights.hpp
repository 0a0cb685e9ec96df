#pragma once
// Weights as views over the loaded bytes. A tensor stored in the compute dtype is used in place
// inside the mapped file (zero copy); one stored in F16/BF16 (or F32 for a double model) is
// widened once, exactly, into an owned buffer. Shapes are checked here against the config, with
// the tensor's name and the config field in the message.
#include "minimind/error.hpp"
#include "minimind/io/safetensors.hpp"
#include "minimind/tensor.hpp"

#include <Eigen/Core>

#include <cstdint>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>

namespace minimind {

template <class T>
class Weight {
 public:
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
  static Weight view(std::shared_ptr<const void> owner, T* data, Index rows, Index cols) {
    Weight w;
    w.owner_ = std::move(owner);
    w.data_ = data;
    w.rows_ = rows;
    w.cols_ = cols;
    w.is_view_ = true;
    return w;
  }

  ConstMatrixMap<T> matrix() const { return {data_, rows_, cols_}; }
  // Writable: the storage is either ours or a private copy-on-write mapping of the file.
  MatrixMap<T> mutable_matrix() { return {data_, rows_, cols_}; }
  ConstVectorMap<T> vector() const { return {data_, rows_ * cols_}; }
  const T* data() const { return data_; }
  Index rows() const { return rows_; }
  Index cols() const { return cols_; }
  size_t bytes() const { return static_cast<size_t>(rows_ * cols_) * sizeof(T); }
  // True when the weight is read in place from the checkpoint file.
  bool is_view() const { return is_view_; }

 private:
  std::shared_ptr<const void> owner_;
  T* data_ = nullptr;
  Index rows_ = 0, cols_ = 0;
  bool is_view_ = false;
};

// Turns checkpoint tensors into Weights of compute type T, checking each shape. Without a table it
// makes deterministic random weights of the requested shapes instead (benchmarks and tests of
// published shapes need no checkpoint): matrices uniform in +-1/sqrt(cols), norms near 1.
template <class T>
class WeightLoader {
 public:
  explicit WeightLoader(const io::TensorTable& table) : table_(&table) {}
  static WeightLoader random(uint64_t seed) {
    WeightLoader w;
    w.seed_ = seed;
    return w;
  }

  // A [rows, cols] matrix; `dims` explains the expected shape in config terms for the error.
  Weight<T> matrix(const std::string& name, int64_t rows, int64_t cols, const std::string& dims) const {
    if (!table_) return random_weight(name, rows, cols, T(1) / std::sqrt(static_cast<T>(cols)), T(0));
    const io::TensorRef& t = table_->require(name);
    if (t.shape.size() != 2 || t.shape[0] != rows || t.shape[1] != cols) {
      throw Error(t.file + ": tensor \"" + name + "\" has shape " + t.shape_string() + " but the config implies [" +
                  std::to_string(rows) + ", " + std::to_string(cols) + "] (" + dims + ")");
    }
    return load(t, rows, cols);
  }
  Weight<T> vector(const std::string& name, int64_t size, const std::string& dims) const {
    if (!table_) return random_weight(name, 1, size, T(0.1), T(1));
    const io::TensorRef& t = table_->require(name);
    if (t.shape.size() != 1 || t.shape[0] != size) {
      throw Error(t.file + ": tensor \"" + name + "\" has shape " + t.shape_string() + " but the config implies [" +
                  std::to_string(size) + "] (" + dims + ")");
    }
    return load(t, 1, size);
  }

 private:
  WeightLoader() = default;

  // Uniform in [center - spread, center + spread], from a splitmix64 stream keyed by the name, so
  // each tensor is the same whatever order the model loads them in.
  Weight<T> random_weight(const std::string& name, int64_t rows, int64_t cols, T spread, T center) const {
    uint64_t state = seed_ ^ std::hash<std::string>{}(name);
    auto next = [&state] {
      uint64_t z = (state += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return z ^ (z >> 31);
    };
    MatrixRM<T> m(rows, cols);
    for (Index i = 0; i < m.size(); ++i) {
      const T unit = static_cast<T>(next() >> 11) * static_cast<T>(1.0 / 9007199254740992.0);  // [0, 1)
      m.data()[i] = center + spread * (T(2) * unit - T(1));
    }
    return Weight<T>::owned(std::move(m));
  }

  static Weight<T> load(const io::TensorRef& t, Index rows, Index cols) {
    const bool same_dtype = std::is_same_v<T, float> && t.dtype == io::Dtype::F32;
    const bool aligned = reinterpret_cast<uintptr_t>(t.bytes.data()) % alignof(T) == 0;
    if (same_dtype && aligned) {
      return Weight<T>::view(t.owner, reinterpret_cast<T*>(t.bytes.data()), rows, cols);
    }
    MatrixRM<T> m(rows, cols);
    const std::byte* src = t.bytes.data();
    const Index n = rows * cols;
    for (Index i = 0; i < n; ++i) m.data()[i] = static_cast<T>(widen(t.dtype, src + i * io::dtype_size(t.dtype)));
    return Weight<T>::owned(std::move(m));
  }

  // Exact widening of one stored element to float.
  static float widen(io::Dtype dtype, const std::byte* p) {
    switch (dtype) {
      case io::Dtype::F32: {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      }
      case io::Dtype::F16: {
        uint16_t bits;
        std::memcpy(&bits, p, 2);
        return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(bits));
      }
      case io::Dtype::BF16: {
        uint16_t bits;
        std::memcpy(&bits, p, 2);
        return static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(bits));
      }
    }
    return 0.0f;
  }

  const io::TensorTable* table_ = nullptr;
  uint64_t seed_ = 0;
};

}  // namespace minimind
