#pragma once
// Weights as views over the loaded bytes, in the format chosen at load (LoadOptions::format).
// Every loaded value must be finite: a tensor holding NaN or an infinity is refused at load with
// an Error naming the file, the tensor and the element (see WeightLoader::check_finite). Finite
// weights that overflow during a forward pass give inf/NaN logits, which the Sampler refuses.
// A tensor stored as that format is used in place inside the loaded file (zero copy): F32 held as
// row-major f32, BF16 held as bf16. Anything else is converted once into an owned buffer: F16/BF16
// widened exactly to f32, or f32 values rounded to bf16, quantized to q8 or q4 (kernels/q8.hpp,
// kernels/q4.hpp) or laid out in f32_panels (which f32 models are held in where the active kernels
// read that faster, LoadOptions::f32_panels), held in a WeightArena (huge pages: decode reads them
// faster). A GGUF file's quantized matrices are held as stored, in place (kernels/ggml.hpp), unless
// LoadOptions::quantized_as_stored is false; then they are widened like the rest. Shapes
// are checked here against the config, with the tensor's name and the config field in the message.
// LoRA adapters given to the loader (LoadOptions::adapters) are merged here: a matrix an adapter
// changes becomes W + scale * B A in float32, in a buffer of its own, before it is converted to
// the held format, so every format, present or future, holds the merged values.
#include "minimind/error.hpp"
#include "minimind/detail/io/safetensors.hpp"
#include "minimind/detail/kernels/targets.hpp"
#include "minimind/detail/kernels/weight.hpp"
#include "minimind/tensor.hpp"
#include "minimind/detail/weight_arena.hpp"
#include "minimind/lora.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace minimind {

// How a model is held in memory and run.
struct LoadOptions {
  WeightFormat format = WeightFormat::F32;  // of the matrices; norms always stay f32
  int threads = 0;                          // threads per forward pass; 0 = one per core
  // f32 matrices in f32_panels (kernels/f32_panels.hpp) where the active kernels read that faster
  // (AVX-512, on the CPUs where that was measured: kernels::f32_panels_preferred); false keeps
  // them row-major, viewed in place in the loaded file.
  bool f32_panels = true;
  // A GGUF file's quantized matrices (Q4_0, Q4_K, ...) held as stored, read in place in the file
  // (format ggml, kernels/ggml.hpp); false widens them and holds them as `format` like the rest.
  bool quantized_as_stored = true;
  // LoRA adapters merged into the weights at load, each delta scale * B A added once.
  std::vector<LoraUse> adapters = {};
};

// Turns checkpoint tensors into Weights of compute type T in the chosen format, checking each
// shape. Without a table it makes deterministic random weights of the requested shapes instead
// (benchmarks and tests of published shapes need no checkpoint): matrices uniform in
// +-1/sqrt(cols), norms near 1.
template <class T>
class WeightLoader {
 public:
  explicit WeightLoader(const io::TensorTable& table, WeightFormat format = WeightFormat::F32, bool f32_panels = true,
                        bool quantized_as_stored = true, std::vector<LoraUse> adapters = {})
      : table_(&table), format_(held(format, f32_panels)), quantized_as_stored_(quantized_as_stored),
        keeps_file_(quantized_as_stored && std::is_same_v<T, float> &&
                    std::any_of(table.tensors().begin(), table.tensors().end(),
                                [](const auto& t) { return t.second.dtype == io::Dtype::GGML; })),
        adapters_(std::move(adapters)) {}
  static WeightLoader random(uint64_t seed, WeightFormat format = WeightFormat::F32, bool f32_panels = true,
                             std::vector<LoraUse> adapters = {}) {
    WeightLoader w;
    w.seed_ = seed;
    w.format_ = held(format, f32_panels);
    w.adapters_ = std::move(adapters);
    return w;
  }
  // How the matrices of a model asked for in `format` are held (LoadOptions::f32_panels).
  static WeightFormat held(WeightFormat format, bool f32_panels = true) {
    if constexpr (std::is_same_v<T, float>) {
      if (format == WeightFormat::F32 && f32_panels && kernels::f32_panels_preferred()) return WeightFormat::F32Panels;
    }
    return format;
  }
  WeightFormat format() const { return format_; }

  // A [rows, cols] matrix; `dims` explains the expected shape in config terms for the error.
  // `packed` false keeps it in f32 whatever the format (the MoE router: small, and its choices
  // are discrete).
  Weight<T> matrix(const std::string& name, int64_t rows, int64_t cols, const std::string& dims,
                   bool packed = true) const {
    const WeightFormat format = packed ? format_ : WeightFormat::F32;
    const LoraDeltas deltas = lora_deltas(adapters_, name);
    if (!table_) return random_weight(name, rows, cols, T(1) / std::sqrt(static_cast<T>(cols)), T(0), format, deltas);
    const io::TensorRef& t = table_->require(name);
    if (t.shape.size() != 2 || t.shape[0] != rows || t.shape[1] != cols) {
      throw Error(t.file + ": tensor \"" + name + "\" has shape " + t.shape_string() + " but the config implies [" +
                  std::to_string(rows) + ", " + std::to_string(cols) + "] (" + dims + ")");
    }
    if constexpr (std::is_same_v<T, float>) {
      if (t.dtype == io::Dtype::GGML && packed && quantized_as_stored_ && deltas.empty()) {
        kernels::ggml::View v{t.bytes.data(), t.ggml_type, static_cast<Index>(rows), static_cast<Index>(cols),
                              static_cast<Index>(t.bytes.size() / static_cast<size_t>(rows))};
        // Q4_0 relaid in place for the decode kernels (ggml.hpp); each matrix is asked for once.
        if (v.type == kernels::ggml::Q4_0::kType && kernels::ggml_groups_rows()) {
          kernels::ggml::group_rows(t.bytes.data(), v.rows, v.cols);
          v.grouped = true;
        }
        return Weight<T>::template packed<kernels::ggml::Format>(t.owner, v, true);
      }
    }
    return load(t, rows, cols, format, deltas);
  }
  Weight<T> vector(const std::string& name, int64_t size, const std::string& dims) const {
    if (!table_) return random_weight(name, 1, size, T(0.1), T(1), WeightFormat::F32);
    const io::TensorRef& t = table_->require(name);
    if (t.shape.size() != 1 || t.shape[0] != size) {
      throw Error(t.file + ": tensor \"" + name + "\" has shape " + t.shape_string() + " but the config implies [" +
                  std::to_string(size) + "] (" + dims + ")");
    }
    return load(t, 1, size, WeightFormat::F32, {});
  }

 private:
  WeightLoader() = default;

  // Uniform in [center - spread, center + spread], from a splitmix64 stream keyed by the name, so
  // each tensor is the same whatever order the model loads them in.
  Weight<T> random_weight(const std::string& name, int64_t rows, int64_t cols, T spread, T center, WeightFormat format,
                          const LoraDeltas& deltas = {}) const {
    uint64_t state = seed_ ^ std::hash<std::string>{}(name);
    auto next = [&state] {
      uint64_t z = (state += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return z ^ (z >> 31);
    };
    return make_weight(rows, cols, format, [&](T* data) {
      for (Index i = 0; i < rows * cols; ++i) {
        const T unit = static_cast<T>(next() >> 11) * static_cast<T>(1.0 / 9007199254740992.0);  // [0, 1)
        data[i] = center + spread * (T(2) * unit - T(1));
      }
      merge_lora(data, rows, cols, deltas);
    });
  }

  // In place only in the model's own format, or where the model keeps the file anyway (its
  // quantized matrices held as stored): a view keeps the whole loaded file alive, so a norm
  // viewed in an f32 file whose matrices became q8 would keep all of those f32 matrices too. A
  // matrix with adapters to merge is never viewed: it gets a copy of its own.
  Weight<T> load(const io::TensorRef& t, Index rows, Index cols, WeightFormat format, const LoraDeltas& deltas) const {
    if (t.dtype == io::Dtype::GGML) {  // widened block by block (the reader checked their scales)
      return make_weight(rows, cols, format, [&](T* data) {
        kernels::ggml::with_type(t.ggml_type, [&]<class Q>() {
          const auto count = static_cast<uint64_t>(rows * cols / Q::kValues);
          if constexpr (std::is_same_v<T, float>) {
            kernels::ggml::dequantize_blocks<Q>(t.bytes.data(), count, data);
          } else {
            std::vector<float> values(static_cast<size_t>(rows * cols));
            kernels::ggml::dequantize_blocks<Q>(t.bytes.data(), count, values.data());
            std::copy(values.begin(), values.end(), data);
          }
        });
        merge_lora(data, rows, cols, deltas);
      });
    }
    check_finite(t);
    if constexpr (std::is_same_v<T, float>) {  // a double model widens every value below
      const auto address = reinterpret_cast<uintptr_t>(t.bytes.data());
      const bool f32_model = format_ == WeightFormat::F32, unchanged = deltas.empty();
      if (unchanged && (f32_model || keeps_file_) && format == WeightFormat::F32 && t.dtype == io::Dtype::F32 && address % alignof(T) == 0) {
        return Weight<T>::view(t.owner, reinterpret_cast<T*>(t.bytes.data()), rows, cols);
      }
      if (unchanged && format == WeightFormat::BF16 && t.dtype == io::Dtype::BF16 && address % 2 == 0) {
        return Weight<T>::template packed<kernels::bf16::Format>(
            t.owner, {reinterpret_cast<const uint16_t*>(t.bytes.data()), rows, cols}, true);
      }
      // Converted straight from the file's f32 values (no temporary f32 copy; nothing of the file kept).
      if (unchanged && t.dtype == io::Dtype::F32 && address % alignof(T) == 0 && format != WeightFormat::F32) {
        return Weight<T>::view(nullptr, reinterpret_cast<T*>(t.bytes.data()), rows, cols).to_format(format, *arena_);
      }
    }
    const std::byte* src = t.bytes.data();
    return make_weight(rows, cols, format, [&](T* data) {
      for (Index i = 0; i < rows * cols; ++i) data[i] = static_cast<T>(io::widen(t.dtype, src + i * io::dtype_size(t.dtype)));
      merge_lora(data, rows, cols, deltas);
    });
  }

  // A weight whose f32 values fill(data) writes, held as `format`. Kept as f32, the values go
  // straight into the arena; otherwise a temporary holds them until converted, so the arena
  // holds only what the model keeps.
  template <class Fill>
  Weight<T> make_weight(Index rows, Index cols, WeightFormat format, Fill&& fill) const {
    if (format == WeightFormat::F32) {
      auto storage = arena_->allocate(static_cast<size_t>(rows * cols) * sizeof(T));
      T* data = static_cast<T*>(storage.get());
      fill(data);
      return Weight<T>::owned(std::move(storage), data, rows, cols);
    }
    MatrixRM<T> m(rows, cols);
    fill(m.data());
    return Weight<T>::owned(std::move(m)).to_format(format, *arena_);
  }

  // Refuses a tensor holding NaN or an infinity, naming it and the first such element: a
  // checkpoint with one is broken (a diverged run, a bad conversion), and accepting it would turn
  // every logit into NaN, or into undefined behaviour when quantized. The test is on the exponent
  // bits (all ones), one pass over bytes that loading reads anyway.
  static void check_finite(const io::TensorRef& t) {
    const std::byte* p = t.bytes.data();
    const size_t n = t.bytes.size() / io::dtype_size(t.dtype);
    const size_t bad = t.dtype == io::Dtype::F32   ? first_non_finite<uint32_t>(p, n, 0x7F800000u)
                       : t.dtype == io::Dtype::F16 ? first_non_finite<uint16_t>(p, n, 0x7C00u)
                                                   : first_non_finite<uint16_t>(p, n, 0x7F80u);
    if (bad == n) return;
    const bool nan = std::isnan(io::widen(t.dtype, p + bad * io::dtype_size(t.dtype)));
    std::string at = "element " + std::to_string(bad);
    if (t.shape.size() == 2 && t.shape[1] > 0) {
      const auto cols = static_cast<size_t>(t.shape[1]);
      at += " [" + std::to_string(bad / cols) + ", " + std::to_string(bad % cols) + "]";
    }
    throw Error(t.file + ": tensor \"" + t.name + "\" holds " + (nan ? "NaN" : "an infinity") + " at " + at +
                "; non-finite weights are refused");
  }
  template <class Bits>
  static size_t first_non_finite(const std::byte* p, size_t n, Bits exponent) {
    for (size_t i = 0; i < n; ++i) {
      Bits bits;
      std::memcpy(&bits, p + i * sizeof(Bits), sizeof(Bits));
      if ((bits & exponent) == exponent) return i;
    }
    return n;
  }

  const io::TensorTable* table_ = nullptr;
  WeightFormat format_ = WeightFormat::F32;
  bool quantized_as_stored_ = true;
  bool keeps_file_ = false;  // a GGUF's quantized matrices are held in it, as stored
  std::shared_ptr<WeightArena> arena_ = std::make_shared<WeightArena>();  // shared by copies of the loader
  uint64_t seed_ = 0;
  std::vector<LoraUse> adapters_;  // merged into the matrices they change
};

}  // namespace minimind
