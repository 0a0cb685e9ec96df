#pragma once
// The model's hyper-parameters, read from an HF config.json and checked against the checkpoint's
// tensor shapes. The two upstream generations (MiniMind2, 2025; minimind-3, 2026) differ in
// defaults and in a few formulas; that difference is decided once, here, and carried as data
// (flags and rules), so the math never asks which generation it is running.
#include "minimind/error.hpp"
#include "minimind/detail/io/json.hpp"
#include "minimind/detail/io/safetensors.hpp"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace minimind {

enum class Generation { MiniMind2, MiniMind3 };

// How YaRN rescales the rotary frequencies. Each generation's own code defines it.
enum class YarnRule {
  MiniMind2,  // per-dimension beta blend up to the first wavelength beyond the original context
  Ramp,       // the standard YaRN linear ramp between beta_fast and beta_slow (minimind-3, HF)
};

struct RopeScaling {
  double factor = 1.0;
  double original_max_position_embeddings = 2048;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 1.0;  // multiplies cos and sin (Ramp rule only)
  YarnRule rule = YarnRule::Ramp;
};

struct Config {
  std::string architecture;  // architectures[0] of config.json
  Generation generation = Generation::MiniMind3;

  int64_t vocab_size = 6400;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 8;
  int64_t num_attention_heads = 8;
  int64_t num_key_value_heads = 4;
  int64_t head_dim = 96;
  int64_t intermediate_size = 2432;
  int64_t max_position_embeddings = 32768;
  double rms_norm_eps = 1e-6;
  double rope_theta = 1e6;
  bool tie_word_embeddings = true;
  bool use_qk_norm = true;  // per-head RMSNorm of q and k before RoPE (minimind-3)
  std::optional<RopeScaling> rope_scaling;

  // Mixture of experts; num_experts == 0 means every layer is a dense FeedForward.
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 1;
  int64_t n_shared_experts = 0;       // MiniMind2 MoE: always-on experts, weight 1
  int64_t moe_intermediate_size = 0;  // each expert's hidden width
  bool norm_topk_prob = true;
  bool normalize_single_expert = true;  // with norm_topk_prob, is a top-1 weight normalised to 1?
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;

  int64_t bos_token_id = 1;
  std::vector<int64_t> eos_token_ids = {2};

  bool layer_is_moe(int64_t layer) const {
    if (num_experts == 0) return false;
    for (int64_t l : mlp_only_layers)
      if (l == layer) return false;
    return (layer + 1) % decoder_sparse_step == 0;
  }

  // The published shapes, for benchmarks and tests that need no checkpoint.
  static Config minimind2_small() {
    Config c;
    c.architecture = "MiniMindForCausalLM";
    c.generation = Generation::MiniMind2;
    c.hidden_size = 512, c.num_hidden_layers = 8, c.num_attention_heads = 8, c.num_key_value_heads = 2;
    c.head_dim = 64, c.intermediate_size = 1408, c.rms_norm_eps = 1e-5, c.use_qk_norm = false;
    c.normalize_single_expert = false;
    return c;
  }
  static Config minimind3() {
    Config c;
    c.architecture = "Qwen3ForCausalLM";
    return c;
  }

  // The largest dimension accepted: token ids are int32, and with every dimension below 2^31 no
  // product of two (a weight's element count, heads * head_dim) can overflow int64.
  static constexpr int64_t kMaxDimension = INT32_MAX;

  // Throws unless 0 < value <= kMaxDimension.
  static void check_dimension(int64_t value, const char* field, const std::string& source) {
    if (value <= 0) throw Error(source + ": field \"" + field + "\" must be positive, got " + std::to_string(value));
    if (value > kMaxDimension) {
      throw Error(source + ": field \"" + field + "\" is " + std::to_string(value) + ", larger than any model (at most " +
                  std::to_string(kMaxDimension) + ")");
    }
  }

  // Checks that the dimensions make a model at all (shapes come later, from the tensors).
  void validate(const std::string& source) const {
    auto positive = [&](int64_t v, const char* field) { check_dimension(v, field, source); };
    positive(vocab_size, "vocab_size");
    positive(hidden_size, "hidden_size");
    positive(num_hidden_layers, "num_hidden_layers");
    positive(num_attention_heads, "num_attention_heads");
    positive(num_key_value_heads, "num_key_value_heads");
    positive(head_dim, "head_dim");
    positive(intermediate_size, "intermediate_size");
    positive(max_position_embeddings, "max_position_embeddings");
    if (num_attention_heads % num_key_value_heads != 0) {
      throw Error(source + ": num_attention_heads " + std::to_string(num_attention_heads) +
                  " is not a multiple of num_key_value_heads " + std::to_string(num_key_value_heads));
    }
    if (head_dim % 2 != 0) throw Error(source + ": head_dim " + std::to_string(head_dim) + " must be even for RoPE");
    if (!(rms_norm_eps > 0) || !std::isfinite(rms_norm_eps)) throw Error(source + ": field \"rms_norm_eps\" must be positive");
    if (!(rope_theta > 1) || !std::isfinite(rope_theta)) throw Error(source + ": field \"rope_theta\" must be > 1");
    if (num_experts < 0) throw Error(source + ": field \"num_experts\" must not be negative");
    if (num_experts > kMaxDimension) positive(num_experts, "num_experts");
    if (num_experts > 0) {
      positive(moe_intermediate_size, "moe_intermediate_size");
      positive(decoder_sparse_step, "decoder_sparse_step");
      if (num_experts_per_tok <= 0 || num_experts_per_tok > num_experts) {
        throw Error(source + ": field \"num_experts_per_tok\" must be in [1, " + std::to_string(num_experts) + "], got " +
                    std::to_string(num_experts_per_tok));
      }
      if (n_shared_experts < 0) throw Error(source + ": field \"n_shared_experts\" must not be negative");
      if (n_shared_experts > kMaxDimension) positive(n_shared_experts, "n_shared_experts");
    }
    if (rope_scaling) {
      // Infinities pass the comparisons but turn every rotary angle into NaN.
      const RopeScaling& r = *rope_scaling;
      if (!(r.factor >= 1) || !std::isfinite(r.factor)) throw Error(source + ": rope_scaling.factor must be finite and >= 1");
      if (!(r.original_max_position_embeddings > 0) || !std::isfinite(r.original_max_position_embeddings)) {
        throw Error(source + ": rope_scaling.original_max_position_embeddings must be positive");
      }
      if (!(r.beta_fast > 0) || !(r.beta_slow > 0) || !std::isfinite(r.beta_fast) || !std::isfinite(r.beta_slow)) {
        throw Error(source + ": rope_scaling.beta_fast and beta_slow must be positive");
      }
      if (!(r.attention_factor > 0) || !std::isfinite(r.attention_factor)) {
        throw Error(source + ": rope_scaling.attention_factor must be positive");
      }
    }
  }

  // Reads config.json and completes it from the checkpoint's tensors: intermediate_size and
  // head_dim may be null or absent, and whether a MiniMindForCausalLM file is a MiniMind2 or a
  // minimind-3 export shows in its q_norm tensors. Every dimension is then checked against the
  // tensors by the weight loader.
  static Config from_json(const io::Json& json, const io::TensorTable* tensors, const std::string& source) {
    using io::optional_field;
    if (!json.is_object()) throw Error(source + ": config is not a JSON object");
    Config c;
    auto archs = json.find("architectures");
    if (archs != json.end() && archs->is_array() && !archs->empty() && (*archs)[0].is_string()) {
      c.architecture = (*archs)[0].get<std::string>();
    } else {
      auto model_type = optional_field<std::string>(json, "model_type", source);
      if (model_type == "minimind") c.architecture = "MiniMindForCausalLM";
      else if (model_type == "qwen3") c.architecture = "Qwen3ForCausalLM";
      else if (model_type == "qwen3_moe") c.architecture = "Qwen3MoeForCausalLM";
      else if (model_type == "llama") c.architecture = "LlamaForCausalLM";
      else throw Error(source + ": no \"architectures\" and no known \"model_type\"");
    }
    const bool has_qk_norm_tensors = tensors && tensors->contains("model.layers.0.self_attn.q_norm.weight");
    if (c.architecture == "MiniMindForCausalLM") {
      c.generation = has_qk_norm_tensors ? Generation::MiniMind3 : Generation::MiniMind2;
    } else if (c.architecture == "LlamaForCausalLM") {
      c.generation = Generation::MiniMind2;
    } else if (c.architecture == "Qwen3ForCausalLM" || c.architecture == "Qwen3MoeForCausalLM") {
      c.generation = Generation::MiniMind3;
    } else {
      throw Error(source + ": unknown architecture \"" + c.architecture +
                  "\" (known: MiniMindForCausalLM, LlamaForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM)");
    }
    const bool mm2 = c.generation == Generation::MiniMind2;
    const bool native_minimind = c.architecture == "MiniMindForCausalLM";

    // Upstream MiniMind's defaults for the generation.
    c.hidden_size = optional_field<int64_t>(json, "hidden_size", source).value_or(mm2 ? 512 : 768);
    c.num_hidden_layers = optional_field<int64_t>(json, "num_hidden_layers", source).value_or(8);
    c.num_attention_heads = optional_field<int64_t>(json, "num_attention_heads", source).value_or(8);
    c.num_key_value_heads = optional_field<int64_t>(json, "num_key_value_heads", source).value_or(mm2 ? 2 : 4);
    c.vocab_size = optional_field<int64_t>(json, "vocab_size", source).value_or(6400);
    c.max_position_embeddings = optional_field<int64_t>(json, "max_position_embeddings", source).value_or(32768);
    c.rms_norm_eps = optional_field<double>(json, "rms_norm_eps", source).value_or(mm2 ? 1e-5 : 1e-6);
    c.rope_theta = optional_field<double>(json, "rope_theta", source).value_or(1e6);
    c.tie_word_embeddings = optional_field<bool>(json, "tie_word_embeddings", source).value_or(true);
    c.use_qk_norm = !mm2;
    c.bos_token_id = optional_field<int64_t>(json, "bos_token_id", source).value_or(1);
    c.eos_token_ids = {2};
    if (auto eos = json.find("eos_token_id"); eos != json.end() && !eos->is_null()) {
      c.eos_token_ids.clear();
      auto add = [&](const io::Json& v) {
        if (!v.is_number_integer()) throw Error(source + ": field \"eos_token_id\" must be an integer or a list of them");
        c.eos_token_ids.push_back(v.get<int64_t>());
      };
      if (eos->is_array()) for (const auto& v : *eos) add(v);
      else add(*eos);
    }
    // Checked now: the head_dim and intermediate_size formulas below divide and multiply them.
    check_dimension(c.hidden_size, "hidden_size", source);
    check_dimension(c.num_attention_heads, "num_attention_heads", source);

    auto head_dim = optional_field<int64_t>(json, "head_dim", source);
    if (!head_dim && tensors) {
      if (auto* q_norm = tensors->find("model.layers.0.self_attn.q_norm.weight"); q_norm && q_norm->shape.size() == 1) {
        head_dim = q_norm->shape[0];
      }
    }
    if (!head_dim) {
      if (c.hidden_size % c.num_attention_heads != 0) {
        throw Error(source + ": hidden_size " + std::to_string(c.hidden_size) + " is not divisible by num_attention_heads " +
                    std::to_string(c.num_attention_heads) + " and no head_dim is given");
      }
      head_dim = c.hidden_size / c.num_attention_heads;
    }
    c.head_dim = *head_dim;

    // MoE keys: MiniMind2 names them use_moe / n_routed_experts / n_shared_experts and they mean
    // nothing without use_moe; Qwen3Moe and minimind-3 name them num_experts.
    const bool use_moe = native_minimind ? optional_field<bool>(json, "use_moe", source).value_or(false)
                                         : c.architecture == "Qwen3MoeForCausalLM";
    if (use_moe) {
      if (mm2) {
        c.num_experts = optional_field<int64_t>(json, "n_routed_experts", source).value_or(4);
        c.num_experts_per_tok = optional_field<int64_t>(json, "num_experts_per_tok", source).value_or(2);
        c.n_shared_experts = optional_field<int64_t>(json, "n_shared_experts", source).value_or(1);
        auto scoring = optional_field<std::string>(json, "scoring_func", source).value_or("softmax");
        if (scoring != "softmax") throw Error(source + ": field \"scoring_func\" \"" + scoring + "\" is not supported (only softmax)");
      } else {
        c.num_experts = optional_field<int64_t>(json, "num_experts", source).value_or(4);
        c.num_experts_per_tok = optional_field<int64_t>(json, "num_experts_per_tok", source).value_or(1);
        c.decoder_sparse_step = optional_field<int64_t>(json, "decoder_sparse_step", source).value_or(1);
        if (auto layers = json.find("mlp_only_layers"); layers != json.end() && layers->is_array()) {
          for (const auto& l : *layers) {
            if (!l.is_number_integer()) throw Error(source + ": field \"mlp_only_layers\" must list layer numbers");
            c.mlp_only_layers.push_back(l.get<int64_t>());
          }
        }
      }
      c.norm_topk_prob = optional_field<bool>(json, "norm_topk_prob", source).value_or(true);
      c.normalize_single_expert = !mm2;
    }

    auto intermediate = optional_field<int64_t>(json, "intermediate_size", source);
    if (!intermediate && tensors) {
      const std::string dense = "model.layers.0.mlp.gate_proj.weight";
      const std::string expert = "model.layers.0.mlp.experts.0.gate_proj.weight";
      if (auto* t = tensors->find(dense); t && !t->shape.empty()) intermediate = t->shape[0];
      else if (auto* e = tensors->find(expert); e && mm2 && !e->shape.empty()) intermediate = e->shape[0];
    }
    if (!intermediate) {
      // Upstream's formulas: MiniMind2 rounds 8/3 * hidden up to 64, minimind-3 pi * hidden.
      intermediate = mm2 ? 64 * ((c.hidden_size * 8 / 3 + 63) / 64)
                         : static_cast<int64_t>(std::ceil(static_cast<double>(c.hidden_size) * M_PI / 64.0)) * 64;
    }
    c.intermediate_size = *intermediate;
    if (c.num_experts > 0) {
      auto moe_width = mm2 ? std::optional<int64_t>(c.intermediate_size)
                           : optional_field<int64_t>(json, "moe_intermediate_size", source);
      if (!moe_width && tensors) {
        if (auto* e = tensors->find("model.layers.0.mlp.experts.0.gate_proj.weight"); e && !e->shape.empty()) {
          moe_width = e->shape[0];
        }
      }
      c.moe_intermediate_size = moe_width.value_or(c.intermediate_size);
    }

    c.rope_scaling = parse_rope_scaling(json, mm2, native_minimind, source);
    c.validate(source);
    return c;
  }

  static Config from_pretrained(const std::filesystem::path& dir, const io::TensorTable* tensors = nullptr) {
    const auto path = dir / "config.json";
    if (!std::filesystem::exists(path)) throw Error(path.string() + ": missing (every checkpoint directory needs config.json)");
    return from_json(io::read_json_file(path), tensors, path.string());
  }

 private:
  static std::optional<RopeScaling> parse_rope_scaling(const io::Json& json, bool mm2, bool native_minimind,
                                                        const std::string& source) {
    using io::optional_field;
    const auto object = json.find("rope_scaling");
    const bool has_object = object != json.end() && !object->is_null();
    const bool inference_scaling = native_minimind && optional_field<bool>(json, "inference_rope_scaling", source).value_or(false);
    if (!has_object && !inference_scaling) return std::nullopt;

    RopeScaling s;
    s.rule = mm2 ? YarnRule::MiniMind2 : YarnRule::Ramp;
    if (mm2) {
      // MiniMind2's inference_rope_scaling preset.
      s.factor = 4, s.original_max_position_embeddings = 2048, s.beta_fast = 4, s.beta_slow = 1;
    } else {
      s.factor = 16, s.original_max_position_embeddings = 2048, s.beta_fast = 32, s.beta_slow = 1;
    }
    if (!has_object) return s;
    if (!object->is_object()) throw Error(source + ": field \"rope_scaling\" must be an object or null");
    const std::string where = source + " (rope_scaling)";
    auto type = optional_field<std::string>(*object, "type", where);
    if (!type) type = optional_field<std::string>(*object, "rope_type", where);
    if (type && *type == "default") return std::nullopt;
    if (type && *type != "yarn") throw Error(source + ": rope_scaling type \"" + *type + "\" is not supported (only yarn)");
    s.factor = optional_field<double>(*object, "factor", where).value_or(s.factor);
    s.original_max_position_embeddings =
        optional_field<double>(*object, "original_max_position_embeddings", where).value_or(s.original_max_position_embeddings);
    s.beta_fast = optional_field<double>(*object, "beta_fast", where).value_or(s.beta_fast);
    s.beta_slow = optional_field<double>(*object, "beta_slow", where).value_or(s.beta_slow);
    s.attention_factor = optional_field<double>(*object, "attention_factor", where).value_or(1.0);
    return s;
  }
};

}  // namespace minimind
