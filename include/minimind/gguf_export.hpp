#pragma once
// A MiniMind checkpoint (anything load_checkpoint reads) as the GGUF file llama.cpp's own
// converter would write for the same model, so llama.cpp, ollama and LM Studio run it:
//   - MiniMind2 as `llama`: its q and k rows permuted per head the way convert_hf_to_gguf.py's
//     LlamaModel does (rotate-half pairs made adjacent; gguf_model.hpp undoes it on reading);
//     MiniMind2's MoE as `llama` with Mixtral-style experts when it has no shared expert and
//     renormalises its top-k (more than one) weights, else refused (llama.cpp's llama has no
//     shared experts and always renormalises);
//   - minimind-3 as `qwen3`, its MoE as `qwen3moe` (every layer sparse, top-k renormalised, as
//     llama.cpp's qwen3moe computes it);
//   - the hyper-parameters, RoPE and YaRN under llama.cpp's keys, and the tokenizer (gpt2 BPE,
//     pre-tokenizer "gpt-2", the tokens, merges, token types, special ids, add_bos/add_eos and
//     the chat template) from tokenizer.json and tokenizer_config.json.
// LoRA adapters (GgufExportOptions::adapters) are merged into the matrices before they are
// encoded, as the model's loader merges them.
// Tensor types follow llama-quantize: 1-D tensors (norms) and the MoE router stay F32; the other
// matrices take the chosen type, except that in a 4- or 5-bit file the output matrix (the tied
// embedding when there is no output.weight) is Q6_K. The Q4_K_M mix is llama-quantize's for these
// shapes without an importance matrix (see q4_k_m_type). A row that is not whole blocks of its
// type falls back the way llama-quantize falls back (Q4_K to Q5_0, Q6_K to Q8_0, then F16).
#include "minimind/checkpoint.hpp"
#include "minimind/config.hpp"
#include "minimind/error.hpp"
#include "minimind/gguf_writer.hpp"
#include "minimind/lora.hpp"
#include "minimind/tokenizer.hpp"
#include "minimind/detail/io/json.hpp"
#include "minimind/detail/kernels/ggml_kquants.hpp"

#include <Eigen/Core>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace minimind {

struct GgufExportOptions {
  GgufType type = GgufType::F16;  // of the matrices; see the top of this file for the exceptions
  // llama-quantize's Q4_K_M mix instead of one type (`type` is then not used).
  bool q4_k_m = false;
  // LoRA adapters merged into the matrices they change, in float32 before encoding, exactly as
  // LoadOptions::adapters merges them at load.
  std::vector<LoraUse> adapters;
  std::string name;               // general.name; empty: the checkpoint's directory or file name
  // Called before each tensor is encoded: its GGUF name, its index and the tensor count.
  std::function<void(const std::string& name, size_t index, size_t count)> progress;
};

// The GGUF architecture a checkpoint is written as, or an Error saying why llama.cpp could not
// run it.
inline std::string gguf_architecture(const Config& c) {
  if (c.generation == Generation::MiniMind2) {
    if (c.num_experts > 0) {
      if (c.n_shared_experts > 0) {
        throw Error("MiniMind2 MoE with " + std::to_string(c.n_shared_experts) +
                    " shared expert(s) cannot be written for llama.cpp: its llama architecture has routed experts only "
                    "(Mixtral's), no always-on shared expert");
      }
      if (!c.norm_topk_prob || c.num_experts_per_tok < 2) {
        throw Error("MiniMind2 MoE without renormalised top-k weights (norm_topk_prob false, or one expert per token) "
                    "cannot be written for llama.cpp: its llama architecture always renormalises the chosen experts' weights");
      }
    }
    return "llama";
  }
  if (c.num_experts == 0) return "qwen3";
  if (!c.norm_topk_prob) {
    throw Error("minimind-3 MoE with norm_topk_prob false cannot be written for llama.cpp: its qwen3moe always "
                "renormalises the chosen experts' weights");
  }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (!c.layer_is_moe(l)) {
      throw Error("minimind-3 MoE with a dense layer (" + std::to_string(l) +
                  ", from decoder_sparse_step / mlp_only_layers) cannot be written for llama.cpp: its qwen3moe makes every layer sparse");
    }
  }
  return "qwen3moe";
}

// llama.cpp's general.file_type (enum llama_ftype) for a file whose matrices are `type`.
inline uint32_t gguf_file_type(GgufType type) {
  switch (type) {
    case GgufType::Q4_K: return 15;  // MOSTLY_Q4_K_M, the mix of Q4_K matrices written (q4_k_m)
    case GgufType::Q6_K: return 18;
    case GgufType::F32: return 0;
    case GgufType::F16: return 1;
    case GgufType::Q4_0: return 2;
    case GgufType::Q4_1: return 3;
    case GgufType::Q8_0: return 7;
    case GgufType::Q5_0: return 8;
    case GgufType::Q5_1: return 9;
    case GgufType::BF16: return 32;
  }
  return 0;
}

namespace gguf_export_detail {

// llama-quantize's "use more bits" layers of the Q4_K_M mix: the first and last eighth and every
// third layer between (of 8: layers 0, 3, 6 and 7).
inline bool more_bits_layer(int64_t layer, int64_t layers) {
  return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

// The type llama-quantize's Q4_K_M gives the matrix `name` (of layer `layer`, blk.N.*) of a model
// with `layers` layers and `experts` experts: Q6_K for the output matrix and for attn_v and
// ffn_down in the more-bits layers, Q8_0 for attn_k and attn_v of an 8-expert model, else Q4_K.
// (llama-quantize would give an 8-expert model's attn_output Q5_K, which is not written here.)
inline GgufType q4_k_m_type(const std::string& name, bool output_matrix, int64_t layer, int64_t layers, int64_t experts) {
  if (output_matrix) return GgufType::Q6_K;
  if (name.find("attn_v.weight") != std::string::npos) {
    if (experts == 8) return GgufType::Q8_0;
    return more_bits_layer(layer, layers) ? GgufType::Q6_K : GgufType::Q4_K;
  }
  if (name.find("attn_k.weight") != std::string::npos && experts == 8) return GgufType::Q8_0;
  if (name.find("attn_output.weight") != std::string::npos && experts == 8) {
    throw Error("Q4_K_M: an 8-expert model's attn_output is Q5_K in llama-quantize's Q4_K_M, and Q5_K is not written here");
  }
  if (name.find("ffn_down") != std::string::npos && more_bits_layer(layer, layers)) return GgufType::Q6_K;
  return GgufType::Q4_K;
}

// llama-quantize's type for a row of `cols` values that is not whole blocks of `type`.
inline GgufType fallback_type(GgufType type, int64_t cols) {
  const auto fits = [&](GgufType t) { return cols % io::gguf::type_traits(static_cast<uint32_t>(t)).block == 0; };
  if (fits(type)) return type;
  if (type == GgufType::Q4_K) type = GgufType::Q5_0;
  if (type == GgufType::Q6_K) type = GgufType::Q8_0;
  return fits(type) ? type : GgufType::F16;
}

// The type GGUF tensor `name` of `shape` (outermost first) is written as (see the top of this file).
inline GgufType tensor_type(const GgufExportOptions& options, const Config& c, const std::string& name, const std::vector<int64_t>& shape) {
  if (shape.size() == 1 || name.ends_with("ffn_gate_inp.weight")) return GgufType::F32;  // norms and the router
  const bool output_matrix = name == "output.weight" || (name == "token_embd.weight" && c.tie_word_embeddings);
  GgufType type = options.type;
  if (options.q4_k_m) {
    const int64_t layer = name.starts_with("blk.") ? std::stoll(name.substr(4)) : -1;
    type = q4_k_m_type(name, output_matrix, layer, c.num_hidden_layers, c.num_experts);
  } else if (output_matrix && (type == GgufType::Q4_0 || type == GgufType::Q4_1 || type == GgufType::Q5_0 || type == GgufType::Q5_1)) {
    type = GgufType::Q6_K;
  }
  return fallback_type(type, shape.back());
}

// HF tensor names (per layer, after "model.layers.N.") to llama.cpp's (after "blk.N.").
inline const std::map<std::string, std::string>& layer_names() {
  static const std::map<std::string, std::string> names = {
      {"input_layernorm.weight", "attn_norm.weight"},       {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},         {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},    {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},          {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},          {"mlp.gate.weight", "ffn_gate_inp.weight"}};
  return names;
}

// One stored tensor widened to float32, exactly; non-finite values are refused by name.
inline std::vector<float> to_floats(const io::TensorRef& t) {
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  const std::byte* p = t.bytes.data();
  if (t.dtype == io::Dtype::GGML) {  // a quantized GGUF as the source: its blocks widened as gguf-py does
    kernels::ggml::with_type(t.ggml_type, [&]<class Q>() { kernels::ggml::dequantize_blocks<Q>(p, n / Q::kValues, out.data()); });
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = io::widen(t.dtype, p + i * io::dtype_size(t.dtype));
  }
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i])) {
      throw Error(t.file + ": tensor \"" + t.name + "\" holds " + (std::isnan(out[i]) ? "NaN" : "an infinity") + " at element " +
                  std::to_string(i) + "; a GGUF of it would compute garbage");
    }
  }
  return out;
}

// llama.cpp's converter orders each head's rows [r_0 .. r_{h/2-1} | r_{h/2} .. r_{h-1}] as
// [r_0, r_{h/2}, r_1, r_{h/2+1}, ...]: GGUF row 2i + j of a head is HF row j * h/2 + i.
inline std::vector<float> llama_permute(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t heads,
                                        const std::string& what) {
  if (heads <= 0 || rows % heads != 0 || (rows / heads) % 2 != 0) {
    throw Error(what + ": " + std::to_string(rows) + " rows do not split into " + std::to_string(heads) + " heads of an even size");
  }
  const int64_t per_head = rows / heads, half = per_head / 2;
  std::vector<float> out(w.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = r / per_head, within = r % per_head;
    const int64_t source = head * per_head + (within % 2) * half + within / 2;
    std::memcpy(&out[static_cast<size_t>(r * cols)], &w[static_cast<size_t>(source * cols)], static_cast<size_t>(cols) * 4);
  }
  return out;
}

// A special token named in tokenizer_config.json: a string, or an AddedToken object with "content".
inline std::optional<std::string> special_token(const io::Json& config, const char* field) {
  auto it = config.find(field);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  throw Error("tokenizer_config.json: field \"" + std::string(field) + "\" is neither a string nor an object with \"content\"");
}

// tokenizer.json + tokenizer_config.json as llama.cpp's tokenizer.* keys (its _set_vocab_gpt2
// and gguf-py's SpecialVocab).
inline void add_tokenizer(GgufWriter& w, const io::Json& tok, const io::Json& config, int64_t vocab_size, const std::string& arch,
                          const std::string& source) {
  const io::Json& model = tok.at("model");
  std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
  std::vector<int32_t> types(static_cast<size_t>(vocab_size), 1);  // NORMAL
  std::vector<bool> seen(static_cast<size_t>(vocab_size));
  auto place = [&](const std::string& token, int64_t id, int32_t type) {
    if (id < 0 || id >= vocab_size) {
      throw Error(source + ": token \"" + token + "\" has id " + std::to_string(id) + ", outside the model's vocab_size " +
                  std::to_string(vocab_size));
    }
    tokens[static_cast<size_t>(id)] = token;
    types[static_cast<size_t>(id)] = type;
    seen[static_cast<size_t>(id)] = true;
  };
  for (const auto& [token, id] : model.at("vocab").items()) place(token, id.get<int64_t>(), 1);
  // Added tokens: CONTROL (3) when special, USER_DEFINED (4) otherwise; llama.cpp's converter
  // also makes CONTROL the non-special ones that look special (<|...|>, as minimind-3's
  // <|buffer1|>), and so does this.
  for (const auto& a : tok.value("added_tokens", io::Json::array())) {
    const std::string content = a.at("content").get<std::string>();
    const bool looks_special = content.starts_with("<|") && content.ends_with("|>");
    place(content, a.at("id").get<int64_t>(), a.value("special", false) || looks_special ? 3 : 4);
  }
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!seen[id]) tokens[id] = "[PAD" + std::to_string(id) + "]", types[id] = 5;  // UNUSED, as llama.cpp pads
  }
  std::vector<std::string> merges;
  for (const auto& m : model.value("merges", io::Json::array())) {
    if (m.is_string()) merges.push_back(m.get<std::string>());
    else if (m.is_array() && m.size() == 2) merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    else throw Error(source + ": a merge is neither \"a b\" nor [\"a\", \"b\"]");
  }
  // llama.cpp's LlamaModel passes add_prefix_space on; its Qwen models do not.
  if (auto it = config.find("add_prefix_space"); arch == "llama" && it != config.end() && it->is_boolean()) {
    w.add_bool("tokenizer.ggml.add_space_prefix", it->get<bool>());
  }
  w.add_string("tokenizer.ggml.model", "gpt2");
  // MiniMind's pre-tokenizer is ByteLevel with GPT-2's split (use_regex): llama.cpp's "gpt-2".
  w.add_string("tokenizer.ggml.pre", "gpt-2");
  w.add_strings("tokenizer.ggml.tokens", tokens);
  w.add_i32s("tokenizer.ggml.token_type", types);
  w.add_strings("tokenizer.ggml.merges", merges);
  auto id_of = [&](const std::string& token) -> std::optional<uint32_t> {
    for (size_t id = 0; id < tokens.size(); ++id)
      if (tokens[id] == token) return static_cast<uint32_t>(id);
    return std::nullopt;
  };
  const std::pair<const char*, const char*> specials[] = {{"bos_token", "tokenizer.ggml.bos_token_id"},
                                                          {"eos_token", "tokenizer.ggml.eos_token_id"},
                                                          {"unk_token", "tokenizer.ggml.unknown_token_id"},
                                                          {"pad_token", "tokenizer.ggml.padding_token_id"}};
  for (const auto& [field, key] : specials) {
    const auto token = special_token(config, field);
    if (!token) continue;
    const auto id = id_of(*token);
    if (!id) throw Error(source + ": " + field + " \"" + *token + "\" is not a token of tokenizer.json");
    w.add_u32(key, *id);
  }
  for (const char* field : {"add_bos_token", "add_eos_token"}) {
    if (auto it = config.find(field); it != config.end() && it->is_boolean()) w.add_bool(std::string("tokenizer.ggml.") + field, it->get<bool>());
  }
  if (auto it = config.find("chat_template"); it != config.end() && !it->is_null()) {
    if (!it->is_string()) throw Error(source + ": field \"chat_template\" is not a string (named template lists are not supported)");
    w.add_string("tokenizer.chat_template", it->get<std::string>());
  }
}

inline void add_hyper_parameters(GgufWriter& w, const Config& c, const std::string& arch) {
  const auto key = [&](const char* suffix) { return arch + "." + suffix; };
  w.add_u32(key("block_count"), static_cast<uint32_t>(c.num_hidden_layers));
  w.add_u32(key("context_length"), static_cast<uint32_t>(c.max_position_embeddings));
  w.add_u32(key("embedding_length"), static_cast<uint32_t>(c.hidden_size));
  w.add_u32(key("feed_forward_length"), static_cast<uint32_t>(c.intermediate_size));
  w.add_u32(key("attention.head_count"), static_cast<uint32_t>(c.num_attention_heads));
  w.add_u32(key("attention.head_count_kv"), static_cast<uint32_t>(c.num_key_value_heads));
  if (c.rope_scaling) {
    const RopeScaling& s = *c.rope_scaling;
    w.add_string(key("rope.scaling.type"), "yarn");
    w.add_f32(key("rope.scaling.factor"), static_cast<float>(s.factor));
    w.add_u32(key("rope.scaling.original_context_length"), static_cast<uint32_t>(s.original_max_position_embeddings));
    if (s.attention_factor != 1.0) w.add_f32(key("rope.scaling.attn_factor"), static_cast<float>(s.attention_factor));
    w.add_f32(key("rope.scaling.yarn_beta_fast"), static_cast<float>(s.beta_fast));
    w.add_f32(key("rope.scaling.yarn_beta_slow"), static_cast<float>(s.beta_slow));
  }
  w.add_f32(key("rope.freq_base"), static_cast<float>(c.rope_theta));
  w.add_f32(key("attention.layer_norm_rms_epsilon"), static_cast<float>(c.rms_norm_eps));
  if (c.num_experts > 0) {
    w.add_u32(key("expert_count"), static_cast<uint32_t>(c.num_experts));
    w.add_u32(key("expert_used_count"), static_cast<uint32_t>(c.num_experts_per_tok));
  }
  if (arch != "llama" || c.head_dim * c.num_attention_heads != c.hidden_size) {
    w.add_u32(key("attention.key_length"), static_cast<uint32_t>(c.head_dim));
    w.add_u32(key("attention.value_length"), static_cast<uint32_t>(c.head_dim));
  }
  if (arch == "llama") {
    w.add_u32(key("vocab_size"), static_cast<uint32_t>(c.vocab_size));
    w.add_u32(key("rope.dimension_count"), static_cast<uint32_t>(c.head_dim));
  }
  if (arch == "qwen3moe") w.add_u32(key("expert_feed_forward_length"), static_cast<uint32_t>(c.moe_intermediate_size));
}

}  // namespace gguf_export_detail

// The GGUF of `checkpoint`. `tokenizer` / `tokenizer_config`: the contents of tokenizer.json and
// tokenizer_config.json (a file without them has no tokenizer, and llama.cpp cannot load it).
inline GgufWriter export_gguf(const Checkpoint& checkpoint, const std::optional<io::Json>& tokenizer,
                              const std::optional<io::Json>& tokenizer_config, const GgufExportOptions& options = {}) {
  namespace d = gguf_export_detail;
  const Config& c = checkpoint.config;
  const std::string arch = gguf_architecture(c);
  check_adapters(options.adapters, c);
  const io::TensorTable& table = checkpoint.tensors;
  const std::string source = checkpoint.path.string();

  GgufWriter w;
  w.add_string("general.architecture", arch);
  w.add_string("general.type", "model");
  std::string name = options.name;
  if (name.empty()) name = std::filesystem::path(checkpoint.path).lexically_normal().filename().string();
  if (name.empty()) name = std::filesystem::path(checkpoint.path).lexically_normal().parent_path().filename().string();
  w.add_string("general.name", name);
  d::add_hyper_parameters(w, c, arch);
  w.add_u32("general.file_type", gguf_file_type(options.q4_k_m ? GgufType::Q4_K : options.type));
  w.add_u32("general.quantization_version", 2);  // GGML_QNT_VERSION, which gguf-py writes in every file
  if (tokenizer) d::add_tokenizer(w, *tokenizer, tokenizer_config.value_or(io::Json::object()), c.vocab_size, arch, source + " (tokenizer)");

  // The tensors in llama.cpp's order: the embedding, each layer, the final norm, the output.
  struct Planned {
    std::string gguf;
    std::vector<const io::TensorRef*> parts;  // several: experts stacked into one 3-D tensor
    int64_t permute_heads = 0;
  };
  std::vector<Planned> plan;
  plan.push_back({"token_embd.weight", {&table.require("model.embed_tokens.weight")}});
  const bool llama = arch == "llama";
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string hf = "model.layers." + std::to_string(l) + ".", blk = "blk." + std::to_string(l) + ".";
    for (const auto& [suffix, gguf] : d::layer_names()) {
      const io::TensorRef* t = table.find(hf + suffix);
      if (!t) continue;
      int64_t heads = 0;
      if (llama && suffix == "self_attn.q_proj.weight") heads = c.num_attention_heads;
      if (llama && suffix == "self_attn.k_proj.weight") heads = c.num_key_value_heads;
      plan.push_back({blk + gguf, {t}, heads});
    }
    if (c.num_experts > 0 && c.layer_is_moe(l)) {
      for (const char* proj : {"gate", "up", "down"}) {
        Planned p{blk + "ffn_" + proj + "_exps.weight", {}};
        for (int64_t e = 0; e < c.num_experts; ++e) {
          p.parts.push_back(&table.require(hf + "mlp.experts." + std::to_string(e) + "." + proj + "_proj.weight"));
        }
        plan.push_back(std::move(p));
      }
    }
  }
  plan.push_back({"output_norm.weight", {&table.require("model.norm.weight")}});
  if (!c.tie_word_embeddings) plan.push_back({"output.weight", {&table.require("lm_head.weight")}});

  // Every stored tensor has its place (a tied lm_head.weight is the embedding again).
  std::set<std::string> used;
  for (const Planned& p : plan)
    for (const io::TensorRef* part : p.parts) used.insert(part->name);
  for (const auto& [tensor, ref] : table.tensors()) {
    if (!used.count(tensor) && !(tensor == "lm_head.weight" && c.tie_word_embeddings)) {
      throw Error(source + ": tensor \"" + tensor + "\" has no place in a " + arch + " GGUF");
    }
  }

  for (size_t i = 0; i < plan.size(); ++i) {
    const Planned& p = plan[i];
    if (options.progress) options.progress(p.gguf, i, plan.size());
    const io::TensorRef& first = *p.parts[0];
    std::vector<int64_t> shape = first.shape;
    std::vector<float> values;
    for (const io::TensorRef* part : p.parts) {
      if (part->shape != first.shape) {
        throw Error(source + ": tensor \"" + part->name + "\" has shape " + part->shape_string() + ", unlike \"" + first.name + "\"'s " +
                    first.shape_string());
      }
      std::vector<float> v = d::to_floats(*part);
      if (shape.size() == 2) merge_lora(v.data(), shape[0], shape[1], lora_deltas(options.adapters, part->name));
      if (p.permute_heads) v = d::llama_permute(v, shape[0], shape[1], p.permute_heads, source + ": tensor \"" + part->name + "\"");
      values.insert(values.end(), v.begin(), v.end());
    }
    if (p.parts.size() > 1) shape.insert(shape.begin(), static_cast<int64_t>(p.parts.size()));
    w.add_tensor(p.gguf, shape, d::tensor_type(options, c, p.gguf, shape), values);
  }
  return w;
}

// The tokenizer a checkpoint carries: a GGUF's metadata, else tokenizer.json and
// tokenizer_config.json in its directory (nullopt each when absent).
inline std::pair<std::optional<io::Json>, std::optional<io::Json>> checkpoint_tokenizer_files(const Checkpoint& checkpoint) {
  if (checkpoint.tokenizer_json) return {checkpoint.tokenizer_json, checkpoint.tokenizer_config_json};
  const auto dir = checkpoint.directory();
  std::optional<io::Json> tok, config;
  if (std::filesystem::exists(dir / "tokenizer.json")) tok = io::read_json_file(dir / "tokenizer.json");
  if (std::filesystem::exists(dir / "tokenizer_config.json")) config = io::read_json_file(dir / "tokenizer_config.json");
  return {tok, config};
}

}  // namespace minimind
