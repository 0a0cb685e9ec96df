#pragma once
// LoRA adapters: low-rank changes W + scale * B A to the model's matrices, read as their trainers
// save them, then either merged into the weights at load (LoadOptions::adapters) or run beside an
// unchanged base model per sequence (Session::set_adapters), so one model serves several.
//
// Two file formats:
//   upstream (MiniMind's model/model_lora.py): a torch.save'd dict, "<module>.lora.A.weight"
//     [rank, in] and "<module>.lora.B.weight" [out, rank], float16 or float32, an optional DDP
//     "module." prefix; every nn.Linear with in == out gets a pair; forward W x + B (A x), no factor.
//   PEFT: a directory with adapter_config.json (r, lora_alpha, use_rslora, target_modules) and
//     adapter_model.safetensors (or .bin), "base_model.model.<module>.lora_A.weight" / "lora_B.weight";
//     delta (lora_alpha / r) B A, lora_alpha / sqrt(r) with rsLoRA.
// <module> is a checkpoint name such as model.layers.0.self_attn.q_proj or
// model.layers.1.mlp.experts.3.down_proj; the same names in both generations. The format's factor
// is folded into B at load, so every adapter's delta is B A.
#include "minimind/checkpoint.hpp"
#include "minimind/config.hpp"
#include "minimind/error.hpp"
#include "minimind/detail/io/json.hpp"
#include "minimind/detail/io/pth.hpp"
#include "minimind/detail/io/safetensors.hpp"
#include "minimind/tensor.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace minimind {

template <class T>
struct SequenceRows;  // kv_cache.hpp, which needs LoraUse from here

enum class LoraFormat { Upstream, Peft };

inline const char* lora_format_name(LoraFormat format) { return format == LoraFormat::Upstream ? "minimind" : "peft"; }

// The matrices of a decoder layer an adapter may change.
enum class LoraSlot { Q, K, V, O, Gate, Up, Down };

// One matrix of the model: its layer, its slot, and for a feed-forward slot which FFN of the layer.
struct LoraSite {
  enum class Ffn { Dense, Expert, SharedExpert };
  int64_t layer = 0;
  LoraSlot slot = LoraSlot::Q;
  Ffn ffn = Ffn::Dense;
  int64_t expert = 0;  // routed or shared expert index
};

// One matrix's low-rank pair.
struct LoraModule {
  std::string name;  // the module, e.g. model.layers.0.self_attn.q_proj (its weight: name + ".weight")
  LoraSite site;
  std::string a_tensor, b_tensor;  // as named in the file, for errors
  MatrixRM<float> A;               // [rank, in]
  MatrixRM<float> B;               // [out, rank], times the format's factor
  Index rank() const { return A.rows(); }
};

class LoraAdapter {
 public:
  // Reads an upstream .pth/.pt, a PEFT directory, or a PEFT adapter_model file with its
  // adapter_config.json beside it. Checks what the file alone can tell: names, shapes of each
  // pair, one rank, finite values. Errors name the file and the tensor.
  static LoraAdapter load(const std::filesystem::path& path);
  // An adapter made in memory (tests, benchmarks, a trainer in the same process): module name ->
  // (A [rank, in], B [out, rank]), delta B A; checked as a file's would be. `source` names it.
  struct Pair {
    std::string module;
    MatrixRM<float> A, B;
  };
  static LoraAdapter from_pairs(const std::string& source, std::vector<Pair> pairs);

  const std::filesystem::path& path() const { return path_; }
  LoraFormat format() const { return format_; }
  Index rank() const { return rank_; }
  float factor() const { return factor_; }  // the format's factor, already in B (1 for upstream)
  const std::vector<LoraModule>& modules() const { return modules_; }
  size_t num_parameters() const {
    size_t n = 0;
    for (const auto& m : modules_) n += static_cast<size_t>(m.A.size() + m.B.size());
    return n;
  }

  // The pair that changes a matrix, or null.
  const LoraModule* find(const LoraSite& site) const {
    if (site.layer < 0 || static_cast<size_t>(site.layer) >= layers_.size()) return nullptr;
    const LayerModules& l = layers_[static_cast<size_t>(site.layer)];
    const auto slot = static_cast<size_t>(site.slot);
    int32_t i = -1;
    if (site.ffn == LoraSite::Ffn::Dense) i = l.dense[slot];
    else {
      const auto& experts = site.ffn == LoraSite::Ffn::Expert ? l.experts : l.shared;
      if (site.expert >= 0 && static_cast<size_t>(site.expert) < experts.size() && slot >= kFirstFfnSlot) {
        i = experts[static_cast<size_t>(site.expert)][slot - kFirstFfnSlot];
      }
    }
    return i < 0 ? nullptr : &modules_[static_cast<size_t>(i)];
  }
  // The pair that changes the checkpoint tensor `weight` ("<module>.weight"), or null.
  const LoraModule* find(const std::string& weight) const {
    auto it = by_weight_.find(weight);
    return it == by_weight_.end() ? nullptr : &modules_[it->second];
  }

  // Throws unless every pair names a matrix of a model of `config` with the same shape: an
  // adapter trained on another base model (another hidden_size, fewer layers, no experts) is
  // refused naming the file, the tensor and both sizes.
  void check(const Config& config) const;

 private:
  static constexpr size_t kFirstFfnSlot = static_cast<size_t>(LoraSlot::Gate);
  struct LayerModules {  // indices into modules_, -1 where none
    std::array<int32_t, 7> dense{-1, -1, -1, -1, -1, -1, -1};
    std::vector<std::array<int32_t, 3>> experts, shared;
  };

  void read_tensors(const io::TensorTable& table);
  void add_pair(const std::string& module, const std::string& a_name, const std::string& b_name, MatrixRM<float> A,
                MatrixRM<float> B);
  void index();

  std::filesystem::path path_;
  std::string source_;  // path_ as errors name it
  LoraFormat format_ = LoraFormat::Upstream;
  Index rank_ = 0;
  float factor_ = 1;
  std::optional<Index> config_rank_;  // PEFT's r
  std::vector<LoraModule> modules_;
  std::vector<LayerModules> layers_;
  std::map<std::string, size_t> by_weight_;
};

// An adapter and the scale a model or a sequence runs it with: delta = scale * B A.
struct LoraUse {
  std::shared_ptr<const LoraAdapter> adapter;
  float scale = 1;
};

// Throws unless every adapter fits `config` and every scale is finite.
inline void check_adapters(std::span<const LoraUse> adapters, const Config& config) {
  for (const LoraUse& use : adapters) {
    if (!use.adapter) throw Error("lora: an adapter is missing (null)");
    if (!std::isfinite(use.scale)) {
      throw Error(use.adapter->path().string() + ": lora scale " + std::to_string(use.scale) + " is not a finite number");
    }
    use.adapter->check(config);
  }
}

// The pairs (and their scales) of the adapters that change one checkpoint tensor.
using LoraDeltas = std::vector<std::pair<const LoraModule*, float>>;
inline LoraDeltas lora_deltas(std::span<const LoraUse> adapters, const std::string& weight) {
  LoraDeltas deltas;
  for (const LoraUse& use : adapters) {
    if (const LoraModule* m = use.adapter->find(weight)) deltas.emplace_back(m, use.scale);
  }
  return deltas;
}
// W [rows, cols] (row-major) += scale * B A of each pair (shapes checked against the config
// beforehand): the one merge the model's loader and the GGUF export share, so both hold the same
// merged values.
template <class T>
void merge_lora(T* data, Index rows, Index cols, const LoraDeltas& deltas) {
  MatrixMap<T> w(data, rows, cols);
  for (const auto& [m, scale] : deltas) {
    if constexpr (std::is_same_v<T, float>) w.noalias() += scale * (m->B * m->A);
    else w.noalias() += T(scale) * (m->B.template cast<T>() * m->A.template cast<T>());
  }
}

namespace lora_detail {

// "model.layers.<L>.<rest>" -> the site, or nullopt for any name that is not a matrix an adapter
// may change (embeddings, lm_head, norms, the MoE router mlp.gate).
inline std::optional<LoraSite> parse_site(std::string_view name) {
  LoraSite site;
  const auto layer = checkpoint_detail::leading_index(name, "model.layers.");
  if (!layer) return std::nullopt;
  site.layer = *layer;
  static constexpr std::array<std::pair<std::string_view, LoraSlot>, 4> kAttention{
      {{"self_attn.q_proj", LoraSlot::Q}, {"self_attn.k_proj", LoraSlot::K}, {"self_attn.v_proj", LoraSlot::V}, {"self_attn.o_proj", LoraSlot::O}}};
  for (const auto& [text, slot] : kAttention) {
    if (name == text) return site.slot = slot, site;
  }
  if (name.substr(0, 4) != "mlp.") return std::nullopt;
  name.remove_prefix(4);
  if (const auto e = checkpoint_detail::leading_index(name, "experts.")) site.ffn = LoraSite::Ffn::Expert, site.expert = *e;
  else if (const auto s = checkpoint_detail::leading_index(name, "shared_experts.")) site.ffn = LoraSite::Ffn::SharedExpert, site.expert = *s;
  static constexpr std::array<std::pair<std::string_view, LoraSlot>, 3> kFfn{
      {{"gate_proj", LoraSlot::Gate}, {"up_proj", LoraSlot::Up}, {"down_proj", LoraSlot::Down}}};
  for (const auto& [text, slot] : kFfn) {
    if (name == text) return site.slot = slot, site;
  }
  return std::nullopt;
}

// A 2-D tensor widened to float32, every value finite.
inline MatrixRM<float> read_matrix(const io::TensorRef& t) {
  if (t.shape.size() != 2) {
    throw Error(t.file + ": tensor \"" + t.name + "\" has shape " + t.shape_string() + ", not a matrix");
  }
  MatrixRM<float> m(t.shape[0], t.shape[1]);
  const size_t es = io::dtype_size(t.dtype);
  for (Index i = 0; i < m.size(); ++i) {
    const float v = io::widen(t.dtype, t.bytes.data() + static_cast<size_t>(i) * es);
    if (!std::isfinite(v)) {
      throw Error(t.file + ": tensor \"" + t.name + "\" holds " + (std::isnan(v) ? "NaN" : "an infinity") + " at [" +
                  std::to_string(i / m.cols()) + ", " + std::to_string(i % m.cols()) + "]; non-finite adapters are refused");
    }
    m.data()[i] = v;
  }
  return m;
}

inline std::string_view slot_name(LoraSlot slot) {
  static constexpr std::array<std::string_view, 7> kNames{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return kNames[static_cast<size_t>(slot)];
}

}  // namespace lora_detail

inline LoraAdapter LoraAdapter::load(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  LoraAdapter a;
  a.path_ = path;
  a.source_ = path.string();
  if (!fs::exists(path)) throw Error(a.source_ + ": no such file or directory");
  const fs::path config_path = (fs::is_directory(path) ? path : (path.parent_path().empty() ? "." : path.parent_path())) /
                               "adapter_config.json";
  io::TensorTable table;
  if (fs::is_directory(path)) {
    if (!fs::exists(config_path)) throw Error(config_path.string() + ": missing (a PEFT adapter directory needs adapter_config.json)");
    if (fs::exists(path / "adapter_model.safetensors")) table = io::read_safetensors(path / "adapter_model.safetensors");
    else if (fs::exists(path / "adapter_model.bin")) table = io::read_pth(path / "adapter_model.bin");
    else throw Error(a.source_ + ": no adapter_model.safetensors or adapter_model.bin");
  } else {
    const std::string magic = checkpoint_detail::first_bytes(path, 4);
    if (magic == std::string("PK\x03\x04", 4) || magic.rfind("\x80\x02", 0) == 0) table = io::read_pth(path);
    else if (path.extension() == ".safetensors") table = io::read_safetensors(path);
    else throw Error(a.source_ + ": not a LoRA adapter (a torch.save'd .pth, a PEFT directory or adapter_model.safetensors)");
  }
  // PEFT names its tensors base_model.model.<module>.lora_A.weight; upstream <module>.lora.A.weight.
  bool peft = false;
  for (const auto& [name, t] : table.tensors()) peft = peft || name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
  if (peft || fs::is_directory(path) || path.extension() == ".safetensors") {
    a.format_ = LoraFormat::Peft;
    if (!fs::exists(config_path)) throw Error(config_path.string() + ": missing (a PEFT adapter needs adapter_config.json beside its weights)");
    const io::Json config = io::read_json_file(config_path);
    const std::string where = config_path.string();
    if (!config.is_object()) throw Error(where + ": not a JSON object");
    if (config.contains("peft_type") && config["peft_type"] != "LORA") {
      throw Error(where + ": peft_type " + config["peft_type"].dump() + " is not supported (only LORA)");
    }
    if (!config.contains("r") || !config["r"].is_number_integer() || config["r"].get<int64_t>() <= 0) {
      throw Error(where + ": \"r\" must be a positive integer");
    }
    const auto r = config["r"].get<int64_t>();
    if (!config.contains("lora_alpha") || !config["lora_alpha"].is_number()) throw Error(where + ": \"lora_alpha\" must be a number");
    const double alpha = config["lora_alpha"].get<double>();
    for (const char* flag : {"use_dora", "fan_in_fan_out"}) {
      if (config.contains(flag) && config[flag].is_boolean() && config[flag].get<bool>()) {
        throw Error(where + ": \"" + flag + "\": true is not supported");
      }
    }
    for (const char* pattern : {"rank_pattern", "alpha_pattern"}) {
      if (config.contains(pattern) && !config[pattern].is_null() && !config[pattern].empty()) {
        throw Error(where + ": \"" + pattern + "\" (a rank or alpha per module) is not supported");
      }
    }
    if (config.contains("bias") && config["bias"] != "none") throw Error(where + ": \"bias\": " + config["bias"].dump() + " is not supported (only \"none\")");
    const bool rslora = config.value("use_rslora", false);
    a.factor_ = static_cast<float>(alpha / (rslora ? std::sqrt(static_cast<double>(r)) : static_cast<double>(r)));
    a.config_rank_ = r;
  }
  a.read_tensors(table);
  return a;
}

inline void LoraAdapter::read_tensors(const io::TensorTable& table) {
  const bool peft = format_ == LoraFormat::Peft;
  const std::string prefix = peft ? "base_model.model." : "";
  const std::string a_suffix = peft ? ".lora_A.weight" : ".lora.A.weight", b_suffix = peft ? ".lora_B.weight" : ".lora.B.weight";
  auto ends_with = [](const std::string& s, const std::string& end) {
    return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
  };
  for (const auto& [name, t] : table.tensors()) {
    const bool is_a = ends_with(name, a_suffix), is_b = ends_with(name, b_suffix);
    if ((!is_a && !is_b) || name.rfind(prefix, 0) != 0) {
      throw Error(t.file + ": tensor \"" + name + "\" is not a LoRA tensor (expected " + prefix + "<module>" + a_suffix +
                  " and " + prefix + "<module>" + b_suffix + ")");
    }
    if (!is_a) continue;
    const std::string module = name.substr(prefix.size(), name.size() - prefix.size() - a_suffix.size());
    const std::string b_name = prefix + module + b_suffix;
    const io::TensorRef* b = table.find(b_name);
    if (!b) throw Error(t.file + ": tensor \"" + name + "\" has no partner \"" + b_name + "\"");
    add_pair(module, name, b_name, lora_detail::read_matrix(t), lora_detail::read_matrix(*b));
  }
  for (const auto& [name, t] : table.tensors()) {  // a B whose A is missing
    if (!ends_with(name, b_suffix)) continue;
    const std::string module = name.substr(prefix.size(), name.size() - prefix.size() - b_suffix.size());
    if (!by_weight_.count(module + ".weight")) {
      throw Error(t.file + ": tensor \"" + name + "\" has no partner \"" + prefix + module + a_suffix + "\"");
    }
  }
  if (modules_.empty()) throw Error(source_ + ": no LoRA tensors");
  index();
}

inline LoraAdapter LoraAdapter::from_pairs(const std::string& source, std::vector<Pair> pairs) {
  LoraAdapter a;
  a.path_ = a.source_ = source;
  for (Pair& p : pairs) {
    if (!p.A.allFinite() || !p.B.allFinite()) throw Error(source + ": the pair of " + p.module + " holds a non-finite value");
    a.add_pair(p.module, p.module + ".lora.A.weight", p.module + ".lora.B.weight", std::move(p.A), std::move(p.B));
  }
  if (a.modules_.empty()) throw Error(source + ": no LoRA pairs");
  a.index();
  return a;
}

inline void LoraAdapter::add_pair(const std::string& module, const std::string& a_name, const std::string& b_name,
                                  MatrixRM<float> A, MatrixRM<float> B) {
  const auto site = lora_detail::parse_site(module);
  if (!site) {
    throw Error(source_ + ": tensor \"" + a_name + "\" names module " + module +
                ", which no adapter can change here (model.layers.N.self_attn.{q,k,v,o}_proj, "
                "model.layers.N.mlp[.experts.E|.shared_experts.E].{gate,up,down}_proj)");
  }
  LoraModule m{module, *site, a_name, b_name, std::move(A), std::move(B)};
  if (m.B.cols() != m.rank()) {
    throw Error(source_ + ": tensor \"" + b_name + "\" has shape [" + std::to_string(m.B.rows()) + ", " + std::to_string(m.B.cols()) +
                "] but its A \"" + a_name + "\" has rank " + std::to_string(m.rank()) + " (A is [rank, in], B [out, rank])");
  }
  const Index expected = config_rank_ ? *config_rank_ : modules_.empty() ? m.rank() : rank_;
  if (m.rank() != expected || m.rank() == 0) {
    throw Error(source_ + ": tensor \"" + a_name + "\" has rank " + std::to_string(m.rank()) + " but the adapter's rank is " +
                std::to_string(expected) + (config_rank_ ? " (\"r\" of adapter_config.json)" : ""));
  }
  rank_ = m.rank();
  m.B *= factor_;
  by_weight_[module + ".weight"] = modules_.size();
  modules_.push_back(std::move(m));
}

inline void LoraAdapter::index() {
  layers_.clear();
  for (size_t i = 0; i < modules_.size(); ++i) {
    const LoraSite& s = modules_[i].site;
    if (static_cast<size_t>(s.layer) >= layers_.size()) layers_.resize(static_cast<size_t>(s.layer) + 1);
    LayerModules& l = layers_[static_cast<size_t>(s.layer)];
    const auto slot = static_cast<size_t>(s.slot);
    if (s.ffn == LoraSite::Ffn::Dense) {
      l.dense[slot] = static_cast<int32_t>(i);
      continue;
    }
    auto& experts = s.ffn == LoraSite::Ffn::Expert ? l.experts : l.shared;
    if (static_cast<size_t>(s.expert) >= experts.size()) experts.resize(static_cast<size_t>(s.expert) + 1, {-1, -1, -1});
    experts[static_cast<size_t>(s.expert)][slot - kFirstFfnSlot] = static_cast<int32_t>(i);
  }
}

inline void LoraAdapter::check(const Config& c) const {
  for (const LoraModule& m : modules_) {
    const LoraSite& s = m.site;
    const std::string& file = source_;
    auto refuse = [&](const std::string& tensor, const std::string& why) { throw Error(file + ": tensor \"" + tensor + "\" " + why); };
    if (s.layer >= c.num_hidden_layers) {
      refuse(m.a_tensor, "names " + m.name + " but the model has " + std::to_string(c.num_hidden_layers) + " layers");
    }
    const bool moe = c.layer_is_moe(s.layer);
    const bool ffn = s.slot >= LoraSlot::Gate;
    if (ffn && s.ffn == LoraSite::Ffn::Dense && moe) refuse(m.a_tensor, "names " + m.name + " but that layer of the model is MoE (mlp.experts.E)");
    if (ffn && s.ffn != LoraSite::Ffn::Dense && !moe) refuse(m.a_tensor, "names " + m.name + " but that layer of the model has no experts");
    if (s.ffn == LoraSite::Ffn::Expert && s.expert >= c.num_experts) {
      refuse(m.a_tensor, "names " + m.name + " but the model has " + std::to_string(c.num_experts) + " experts");
    }
    if (s.ffn == LoraSite::Ffn::SharedExpert && s.expert >= c.n_shared_experts) {
      refuse(m.a_tensor, "names " + m.name + " but the model has " + std::to_string(c.n_shared_experts) + " shared experts");
    }
    const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
    const int64_t width = s.ffn == LoraSite::Ffn::Dense ? c.intermediate_size : c.moe_intermediate_size;
    int64_t out = 0, in = 0;
    switch (s.slot) {
      case LoraSlot::Q: out = q, in = c.hidden_size; break;
      case LoraSlot::K:
      case LoraSlot::V: out = kv, in = c.hidden_size; break;
      case LoraSlot::O: out = c.hidden_size, in = q; break;
      case LoraSlot::Gate:
      case LoraSlot::Up: out = width, in = c.hidden_size; break;
      case LoraSlot::Down: out = c.hidden_size, in = width; break;
    }
    // The side that is the residual stream tells another base model apart first.
    const bool hidden_in = s.slot != LoraSlot::O && s.slot != LoraSlot::Down;
    const Index adapter_hidden = hidden_in ? m.A.cols() : m.B.rows();
    if (adapter_hidden != c.hidden_size) {
      refuse(hidden_in ? m.a_tensor : m.b_tensor,
             "has shape [" + std::to_string(hidden_in ? m.A.rows() : m.B.rows()) + ", " + std::to_string(hidden_in ? m.A.cols() : m.B.cols()) +
                 "]: the adapter was made for a model of hidden_size " + std::to_string(adapter_hidden) +
                 ", this model's hidden_size is " + std::to_string(c.hidden_size));
    }
    if (m.A.cols() != in) {
      refuse(m.a_tensor, "has shape [" + std::to_string(m.A.rows()) + ", " + std::to_string(m.A.cols()) + "] but this model's " +
                             m.name + " takes " + std::to_string(in) + " inputs (A is [rank, in])");
    }
    if (m.B.rows() != out) {
      refuse(m.b_tensor, "has shape [" + std::to_string(m.B.rows()) + ", " + std::to_string(m.B.cols()) + "] but this model's " +
                             m.name + " has " + std::to_string(out) + " outputs (B is [out, rank])");
    }
  }
}

// The unmerged adapters of one forward step: the rows of each sequence get scale * B (A x) of
// each adapter it runs with, added to the output of the matrix the pair changes. A step without
// adapters costs one test per matrix.
template <class T>
class LoraStep {
 public:
  // The step's sequences; grows the scratch of A x when this step needs more than any before.
  void begin(std::span<const SequenceRows<T>> seqs) {
    seqs_ = seqs;
    Index rank = 0, rows = 0;
    for (const SequenceRows<T>& seq : seqs) {
      for (const LoraUse& use : seq.adapters) rank = std::max(rank, use.adapter->rank()), rows = std::max(rows, seq.rows);
    }
    active_ = rank > 0;
    reserve(rows, rank);
  }
  void reserve(Index rows, Index rank) {
    if (rows > low_.rows() || rank > low_.cols()) low_.resize(std::max(rows, low_.rows()), std::max(rank, low_.cols()));
  }
  bool active() const { return active_; }

  // out += scale * (x A^T) B^T for the rows of x of each sequence whose adapters change `site`.
  // Row i of x is the step's row i, or step_rows[i] (ascending) for the rows one expert serves.
  template <class In, class Out>
  void add(const LoraSite& site, const In& x, Out& out, const Index* step_rows) {
    for (const SequenceRows<T>& seq : seqs_) {
      if (seq.adapters.empty()) continue;
      Index first = seq.first_row, last = seq.first_row + seq.rows;
      if (step_rows) {
        first = std::lower_bound(step_rows, step_rows + x.rows(), first) - step_rows;
        last = std::lower_bound(step_rows, step_rows + x.rows(), last) - step_rows;
      }
      const Index n = last - first;
      if (n == 0) continue;
      for (const LoraUse& use : seq.adapters) {
        const LoraModule* m = use.adapter->find(site);
        if (!m) continue;
        auto low = low_.topLeftCorner(n, m->rank());
        // The scale goes into A x first: a product whose operand is an expression (scale * low)
        // would copy it to the heap each time.
        if constexpr (std::is_same_v<T, float>) {
          low.noalias() = x.middleRows(first, n) * m->A.transpose();
          low *= use.scale;
          out.middleRows(first, n).noalias() += low * m->B.transpose();
        } else {  // a double model (tests): the float pair widened on the way
          low.noalias() = x.middleRows(first, n) * m->A.transpose().template cast<T>();
          low *= T(use.scale);
          out.middleRows(first, n).noalias() += low * m->B.transpose().template cast<T>();
        }
      }
    }
  }

 private:
  std::span<const SequenceRows<T>> seqs_;
  bool active_ = false;
  MatrixRM<T> low_;  // [rows, rank] A x of one adapter
};

// Where a component's products are in the step, for its LoRA: the layer, which FFN, and for an
// expert the step rows it serves. Empty (no step) when nothing runs unmerged.
template <class T>
struct LoraAt {
  LoraStep<T>* step = nullptr;
  int64_t layer = 0;
  LoraSite::Ffn ffn = LoraSite::Ffn::Dense;
  int64_t expert = 0;
  const Index* step_rows = nullptr;

  template <class In, class Out>
  void add(LoraSlot slot, const In& x, Out&& out) const {
    if (step && step->active()) step->add(LoraSite{layer, slot, ffn, expert}, x, out, step_rows);
  }
  LoraAt expert_at(int64_t e, const Index* rows) const { return {step, layer, LoraSite::Ffn::Expert, e, rows}; }
  LoraAt shared_expert_at(int64_t e) const { return {step, layer, LoraSite::Ffn::SharedExpert, e, nullptr}; }
};

}  // namespace minimind
