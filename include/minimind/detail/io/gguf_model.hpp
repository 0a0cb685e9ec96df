#pragma once
// What a GGUF file (gguf.hpp) means for MiniMind: llama.cpp's tensor names mapped to the HF ones
// the model loads (token_embd -> model.embed_tokens.weight, blk.N.attn_q -> ...q_proj, ...;
// no `output` tensor = tied), the metadata turned into an HF config.json that Config reads, and
// the tokenizer metadata into an HF tokenizer.json.
//
// Architectures: `llama` (MiniMind2 exported as LlamaForCausalLM) and `qwen3` / `qwen3moe`
// (minimind-3). llama.cpp's converter permutes the q and k rows of `llama` so that RoPE pairs
// are adjacent (interleaved); that is undone exactly here, giving back the HF rows (rotate-half
// pairs), in place in the loaded image (our private copy of the file), so q and k are views
// into it like every other tensor and a LoRA adapter's rows, in HF order, meet theirs. Tensor types: F32, F16 and BF16 are viewed in place; the quantized ones (Q4_0 ... IQ4_XS,
// kernels/ggml_kquants.hpp's list) too, as Dtype::GGML with their ggml type, their scales checked
// here (the loader holds them as stored or widens them, weights.hpp).
#include "minimind/error.hpp"
#include "minimind/detail/io/gguf.hpp"
#include "minimind/detail/io/json.hpp"
#include "minimind/detail/io/safetensors.hpp"
#include "minimind/detail/tokenizer/unicode.hpp"

#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace minimind::io::gguf {

namespace detail {

// Where a GGUF tensor goes: our name ("{e}" for each expert of a 3-D expert tensor) and which
// head count llama's row permutation of it used, if any.
struct Target {
  std::string name;
  bool experts = false;
  enum class Permute { None, Heads, KvHeads } permute = Permute::None;
};

inline std::optional<Target> map_name(const std::string& name, bool llama) {
  if (name == "token_embd.weight") return Target{"model.embed_tokens.weight"};
  if (name == "output_norm.weight") return Target{"model.norm.weight"};
  if (name == "output.weight") return Target{"lm_head.weight"};
  if (name.rfind("blk.", 0) != 0) return std::nullopt;
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4 || dot - 4 > 6) return std::nullopt;
  for (size_t i = 4; i < dot; ++i)
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
  const std::string layer = "model.layers." + std::to_string(std::stoll(name.substr(4, dot - 4))) + ".";
  static const std::unordered_map<std::string, std::string> kLayer = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      {"ffn_gate_inp.weight", "mlp.gate.weight"},
      {"ffn_gate_exps.weight", "mlp.experts.{e}.gate_proj.weight"},
      {"ffn_up_exps.weight", "mlp.experts.{e}.up_proj.weight"},
      {"ffn_down_exps.weight", "mlp.experts.{e}.down_proj.weight"},
      {"ffn_gate_shexp.weight", "mlp.shared_experts.{e}.gate_proj.weight"},
      {"ffn_up_shexp.weight", "mlp.shared_experts.{e}.up_proj.weight"},
      {"ffn_down_shexp.weight", "mlp.shared_experts.{e}.down_proj.weight"},
  };
  const std::string suffix = name.substr(dot + 1);
  auto it = kLayer.find(suffix);
  if (it == kLayer.end()) return std::nullopt;
  Target t{layer + it->second};
  t.experts = t.name.find("{e}") != std::string::npos;
  if (llama && suffix == "attn_q.weight") t.permute = Target::Permute::Heads;
  if (llama && suffix == "attn_k.weight") t.permute = Target::Permute::KvHeads;
  return t;
}

// llama.cpp reorders each head's rows [r_0 .. r_{h/2-1} | r_{h/2} .. r_{h-1}] to
// [r_0, r_{h/2}, r_1, r_{h/2+1}, ...]; HF row j*h/2 + i is GGUF row 2i + j of the same head.
inline size_t unpermuted_source_row(size_t row, size_t rows_per_head) {
  const size_t head = row / rows_per_head, within = row % rows_per_head, half = rows_per_head / 2;
  return head * rows_per_head + 2 * (within % half) + within / half;
}

// A tensor whose rows are in llama's order: `rows` rows, `per_head` to a head.
struct PermutedRows {
  std::span<std::byte> bytes;
  size_t rows, per_head;
};

// Puts the rows back in HF order where they lie, one head at a time through a copy of its rows.
inline void unpermute_in_place(const PermutedRows& t) {
  const size_t row_bytes = t.bytes.size() / t.rows, head_bytes = t.per_head * row_bytes;
  std::vector<std::byte> head(head_bytes);
  for (size_t first = 0; first < t.rows; first += t.per_head) {
    std::byte* rows = t.bytes.data() + first * row_bytes;
    std::memcpy(head.data(), rows, head_bytes);
    for (size_t r = 0; r < t.per_head; ++r) {
      std::memcpy(rows + r * row_bytes, head.data() + unpermuted_source_row(r, t.per_head) * row_bytes, row_bytes);
    }
  }
}

inline std::string key(const std::string& arch, const char* suffix) { return arch + "." + suffix; }

}  // namespace detail

inline std::string architecture(const File& f) {
  auto arch = f.get_string("general.architecture");
  if (!arch) throw Error(f.source() + ": metadata \"general.architecture\" is missing");
  if (*arch != "llama" && *arch != "qwen3" && *arch != "qwen3moe") {
    f.fail_key("general.architecture", "\"" + *arch + "\" is not supported (llama, qwen3, qwen3moe)");
  }
  return *arch;
}

inline int64_t required_int(const File& f, const std::string& key) {
  auto v = f.get_int(key);
  if (!v) throw Error(f.source() + ": metadata \"" + key + "\" is missing");
  return *v;
}

// The tensors under our names, converted as the header comment says.
inline TensorTable tensor_table(const File& f) {
  const std::string arch = architecture(f);
  const bool llama = arch == "llama";
  const int64_t heads = llama ? required_int(f, detail::key(arch, "attention.head_count")) : 0;
  const int64_t kv_heads = llama ? f.get_int(detail::key(arch, "attention.head_count_kv")).value_or(heads) : 0;
  TensorTable table;
  std::vector<detail::PermutedRows> permuted;
  for (const TensorInfo& info : f.tensors()) {
    const std::string where = f.source() + ": tensor \"" + info.name + "\"";
    auto target = detail::map_name(info.name, llama);
    if (!target) throw Error(where + " has no MiniMind counterpart (a bias, or another architecture's tensor?)");
    const size_t max_dims = target->experts ? 3 : 2;
    if (info.dims.empty() || info.dims.size() > max_dims) {
      throw Error(where + ": " + std::to_string(info.dims.size()) + " dimensions (expected " +
                  (target->experts ? "2 or 3" : "1 or 2") + ")");
    }
    std::vector<int64_t> shape(info.dims.rbegin(), info.dims.rend());  // ours: outermost first
    Dtype dtype = Dtype::F32;
    std::span<std::byte> bytes = f.tensor_data(info);
    switch (info.type) {
      case static_cast<uint32_t>(GgmlType::F32): dtype = Dtype::F32; break;
      case static_cast<uint32_t>(GgmlType::F16): dtype = Dtype::F16; break;
      case static_cast<uint32_t>(GgmlType::BF16): dtype = Dtype::BF16; break;
      default: {
        if (!kernels::ggml::with_type(info.type, []<class>() {})) {
          throw Error(where + ": ggml type " + std::string(info.type_name()) + " is not supported (" + supported_types() + " are)");
        }
        check_scales(f, info);
        dtype = Dtype::GGML;
      }
    }
    if (target->permute != detail::Target::Permute::None) {
      const int64_t n_head = target->permute == detail::Target::Permute::Heads ? heads : kv_heads;
      const size_t rows = shape.size() == 2 ? static_cast<size_t>(shape[0]) : 0;
      if (n_head <= 0 || rows == 0 || rows % static_cast<size_t>(n_head) != 0 || (rows / static_cast<size_t>(n_head)) % 2 != 0) {
        throw Error(where + ": " + std::to_string(rows) + " rows cannot be split into " + std::to_string(n_head) +
                    " heads of an even size, so llama's q/k permutation cannot be undone");
      }
      permuted.push_back({bytes, rows, rows / static_cast<size_t>(n_head)});
    }
    TensorRef t;
    t.dtype = dtype;
    t.ggml_type = dtype == Dtype::GGML ? info.type : 0;
    t.file = f.source();
    t.owner = f.owner();
    if (!target->experts || shape.size() == 2) {
      t.name = target->name;
      if (target->experts) t.name.replace(t.name.find("{e}"), 3, "0");  // one shared expert, stored 2-D
      t.shape = shape;
      t.bytes = bytes;
      table.add(std::move(t), f.source());
      continue;
    }
    // [experts, rows, cols]: expert e is the e-th contiguous slice.
    const auto experts = static_cast<size_t>(shape[0]);
    const size_t slice = bytes.size() / experts;
    for (size_t e = 0; e < experts; ++e) {
      TensorRef expert = t;
      expert.name = target->name;
      expert.name.replace(expert.name.find("{e}"), 3, std::to_string(e));
      expert.shape = {shape[1], shape[2]};
      expert.bytes = bytes.subspan(e * slice, slice);
      table.add(std::move(expert), f.source());
    }
  }
  // Only once every tensor has been checked: a file refused above is left as it was read.
  f.change_once([&] {
    for (const detail::PermutedRows& t : permuted) detail::unpermute_in_place(t);
  });
  return table;
}

// The hyper-parameters as an HF config.json that Config::from_json reads. llama becomes
// LlamaForCausalLM (MiniMind2 semantics), or MiniMindForCausalLM with use_moe when it has experts
// (Config's Llama has none); qwen3 / qwen3moe become Qwen3ForCausalLM / Qwen3MoeForCausalLM.
inline Json config_json(const File& f) {
  using detail::key;
  const std::string arch = architecture(f);
  const bool llama = arch == "llama";
  Json c = Json::object();
  const int64_t experts = f.get_int(key(arch, "expert_count")).value_or(0);
  if (arch == "qwen3moe" && experts <= 0) f.fail_key(key(arch, "expert_count"), "must be positive for qwen3moe");
  if (arch == "qwen3" && experts > 0) f.fail_key(key(arch, "expert_count"), "qwen3 has no experts (use qwen3moe)");
  if (llama) {
    c["architectures"] = {experts > 0 ? "MiniMindForCausalLM" : "LlamaForCausalLM"};
    c["model_type"] = experts > 0 ? "minimind" : "llama";
  } else {
    c["architectures"] = {arch == "qwen3" ? "Qwen3ForCausalLM" : "Qwen3MoeForCausalLM"};
    c["model_type"] = arch == "qwen3" ? "qwen3" : "qwen3_moe";
  }
  c["hidden_size"] = required_int(f, key(arch, "embedding_length"));
  c["num_hidden_layers"] = required_int(f, key(arch, "block_count"));
  const int64_t heads = required_int(f, key(arch, "attention.head_count"));
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] = f.get_int(key(arch, "attention.head_count_kv")).value_or(heads);
  if (auto ffn = f.get_int(key(arch, "feed_forward_length"))) c["intermediate_size"] = *ffn;
  const auto key_length = f.get_int(key(arch, "attention.key_length"));
  if (key_length) c["head_dim"] = *key_length;
  if (auto value_length = f.get_int(key(arch, "attention.value_length")); value_length && key_length && *value_length != *key_length) {
    f.fail_key(key(arch, "attention.value_length"), "differs from key_length (MiniMind uses one head_dim)");
  }
  if (auto rope_dim = f.get_int(key(arch, "rope.dimension_count"))) {
    const int64_t head_dim = key_length ? *key_length : c["hidden_size"].get<int64_t>() / std::max<int64_t>(heads, 1);
    if (*rope_dim != head_dim) {
      f.fail_key(key(arch, "rope.dimension_count"), std::to_string(*rope_dim) + " differs from head_dim " +
                                                        std::to_string(head_dim) + " (partial RoPE is not supported)");
    }
  }
  if (auto eps = f.get_float(key(arch, "attention.layer_norm_rms_epsilon"))) c["rms_norm_eps"] = *eps;
  c["rope_theta"] = f.get_float(key(arch, "rope.freq_base")).value_or(10000.0);  // llama.cpp's default
  if (auto ctx = f.get_int(key(arch, "context_length"))) c["max_position_embeddings"] = *ctx;
  if (auto vocab = f.get_int(key(arch, "vocab_size"))) {
    c["vocab_size"] = *vocab;
  } else if (const TensorInfo* embd = f.find_tensor("token_embd.weight"); embd && embd->dims.size() == 2) {
    c["vocab_size"] = embd->dims[1];
  }

  if (experts > 0) {
    const auto used = f.get_int(key(arch, "expert_used_count"));
    const auto norm = f.get_bool(key(arch, "expert_weights_norm"));
    if (llama) {
      c["use_moe"] = true;
      c["n_routed_experts"] = experts;
      c["n_shared_experts"] = f.get_int(key(arch, "expert_shared_count")).value_or(0);
      if (used) c["num_experts_per_tok"] = *used;
      if (norm) c["norm_topk_prob"] = *norm;
      c["scoring_func"] = "softmax";
    } else {
      c["num_experts"] = experts;
      if (used) c["num_experts_per_tok"] = *used;
      if (auto width = f.get_int(key(arch, "expert_feed_forward_length"))) c["moe_intermediate_size"] = *width;
      c["norm_topk_prob"] = norm.value_or(true);  // llama.cpp's qwen3moe always renormalises
      c["decoder_sparse_step"] = 1;
      c["mlp_only_layers"] = Json::array();
    }
  }

  if (auto type = f.get_string(key(arch, "rope.scaling.type")); type && *type != "none") {
    if (*type != "yarn") f.fail_key(key(arch, "rope.scaling.type"), "\"" + *type + "\" is not supported (only none or yarn)");
    Json s = {{"type", "yarn"}};
    if (auto v = f.get_float(key(arch, "rope.scaling.factor"))) s["factor"] = *v;
    if (auto v = f.get_int(key(arch, "rope.scaling.original_context_length"))) s["original_max_position_embeddings"] = *v;
    if (auto v = f.get_float(key(arch, "rope.scaling.yarn_beta_fast"))) s["beta_fast"] = *v;
    if (auto v = f.get_float(key(arch, "rope.scaling.yarn_beta_slow"))) s["beta_slow"] = *v;
    if (auto v = f.get_float(key(arch, "rope.scaling.attn_factor"))) s["attention_factor"] = *v;
    c["rope_scaling"] = s;
  }

  // Tied unless an output matrix with other contents is stored.
  const TensorInfo* output = f.find_tensor("output.weight");
  const TensorInfo* embd = f.find_tensor("token_embd.weight");
  bool tied = output == nullptr;
  if (output && embd && output->type == embd->type && output->dims == embd->dims) {
    auto a = f.tensor_data(*output), b = f.tensor_data(*embd);
    tied = std::memcmp(a.data(), b.data(), a.size()) == 0;
  }
  c["tie_word_embeddings"] = tied;
  if (auto bos = f.get_int("tokenizer.ggml.bos_token_id")) c["bos_token_id"] = *bos;
  if (auto eos = f.get_int("tokenizer.ggml.eos_token_id")) c["eos_token_id"] = *eos;
  return c;
}

// The tokenizer metadata as a tokenizer.json; nullopt when the file has none. Only the GPT-2
// byte-level BPE kind ("gpt2") exists in MiniMind. The pre-tokenizer is always the GPT-2 split
// (what MiniMind's tokenizer.json says); tokenizer.ggml.pre is not consulted, because a pre-type
// such as "qwen2" splits digits differently from the HF tokenizer the model was trained with.
inline std::optional<Json> tokenizer_json(const File& f) {
  const auto model = f.get_string("tokenizer.ggml.model");
  if (!model) return std::nullopt;
  if (*model != "gpt2") f.fail_key("tokenizer.ggml.model", "\"" + *model + "\" is not supported (only gpt2, byte-level BPE)");
  const auto* tokens = f.get_strings("tokenizer.ggml.tokens");
  if (!tokens) throw Error(f.source() + ": metadata \"tokenizer.ggml.tokens\" is missing");
  const auto* merges = f.get_strings("tokenizer.ggml.merges");
  if (!merges) throw Error(f.source() + ": metadata \"tokenizer.ggml.merges\" is missing (a gpt2 tokenizer needs them)");
  const auto types = f.get_ints("tokenizer.ggml.token_type");
  if (types && types->size() != tokens->size()) {
    f.fail_key("tokenizer.ggml.token_type", std::to_string(types->size()) + " entries for " + std::to_string(tokens->size()) + " tokens");
  }
  Json vocab = Json::object();
  Json added = Json::array();
  for (size_t id = 0; id < tokens->size(); ++id) {
    const std::string token((*tokens)[id]);
    unicode::validate_utf8(token, f.source() + ": metadata \"tokenizer.ggml.tokens\"[" + std::to_string(id) + "]");
    if (vocab.contains(token)) {
      f.fail_key("tokenizer.ggml.tokens", "\"" + token + "\" appears at ids " + std::to_string(vocab[token].get<int64_t>()) +
                                              " and " + std::to_string(id));
    }
    vocab[token] = id;
    // llama_token_type: 3 CONTROL (a special added token), 4 USER_DEFINED (a plain added token).
    const int64_t type = types ? (*types)[id] : 1;
    if (type == 3 || type == 4) {
      added.push_back({{"id", id}, {"content", token}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", type == 4}, {"special", type == 3}});
    }
  }
  Json merge_list = Json::array();
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string merge((*merges)[i]);
    unicode::validate_utf8(merge, f.source() + ": metadata \"tokenizer.ggml.merges\"[" + std::to_string(i) + "]");
    merge_list.push_back(merge);
  }
  const bool prefix_space = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(false);
  const Json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", prefix_space}, {"trim_offsets", true}, {"use_regex", true}};
  return Json{{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added},
              {"normalizer", nullptr},
              {"pre_tokenizer", byte_level},
              {"post_processor", nullptr},
              {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
              {"model",
               {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                {"vocab", vocab}, {"merges", merge_list}}}};
}

// The special tokens, BOS/EOS flags and chat template as a tokenizer_config.json.
inline Json tokenizer_config_json(const File& f) {
  Json c = {{"add_bos_token", f.get_bool("tokenizer.ggml.add_bos_token").value_or(false)},
            {"add_eos_token", f.get_bool("tokenizer.ggml.add_eos_token").value_or(false)},
            {"add_prefix_space", f.get_bool("tokenizer.ggml.add_space_prefix").value_or(false)}};
  const auto* tokens = f.get_strings("tokenizer.ggml.tokens");
  const std::pair<const char*, const char*> ids[] = {{"tokenizer.ggml.bos_token_id", "bos_token"},
                                                     {"tokenizer.ggml.eos_token_id", "eos_token"},
                                                     {"tokenizer.ggml.padding_token_id", "pad_token"},
                                                     {"tokenizer.ggml.unknown_token_id", "unk_token"}};
  for (const auto& [gguf_key, field] : ids) {
    auto id = f.get_int(gguf_key);
    if (!id) continue;
    if (!tokens || *id < 0 || static_cast<size_t>(*id) >= tokens->size()) {
      f.fail_key(gguf_key, "id " + std::to_string(*id) + " is not a token id (" +
                               std::to_string(tokens ? tokens->size() : 0) + " tokens)");
    }
    const std::string token((*tokens)[static_cast<size_t>(*id)]);
    unicode::validate_utf8(token, f.source() + ": metadata \"tokenizer.ggml.tokens\"[" + std::to_string(*id) + "]");
    c[field] = token;
  }
  if (auto chat = f.get_string("tokenizer.chat_template")) {
    unicode::validate_utf8(*chat, f.source() + ": metadata \"tokenizer.chat_template\"");
    c["chat_template"] = *chat;
  }
  return c;
}

}  // namespace minimind::io::gguf
