#pragma once
// One entry point for every form a MiniMind checkpoint comes in:
//   - an HF directory: config.json + model.safetensors (or its sharded index), or + pytorch_model.bin;
//   - a .safetensors file with config.json beside it;
//   - a PyTorch state dict (.pth / .pt / .bin, as torch.save writes it): config.json beside it,
//     or the dimensions inferred from the tensor shapes where they determine them;
//   - a GGUF file: config and tokenizer from its metadata.
// The format is recognised from the file's first bytes, not its name. load_checkpoint returns
// the Config, the tensors under HF names, and a GGUF's tokenizer metadata; it sits below the
// model (MiniMindForCausalLM::from_pretrained reads every format through it) and above nothing
// but the config and the file readers, so the model does not depend on the tokenizer.
#include "minimind/config.hpp"
#include "minimind/error.hpp"
#include "minimind/detail/io/gguf.hpp"
#include "minimind/detail/io/gguf_model.hpp"
#include "minimind/detail/io/json.hpp"
#include "minimind/detail/io/pth.hpp"
#include "minimind/detail/io/safetensors.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace minimind {

enum class CheckpointFormat { Safetensors, Pth, Gguf };

struct CheckpointOptions {
  // Config fields that override config.json, the GGUF metadata or what the .pth shapes imply,
  // e.g. {"num_attention_heads": 8} for a MiniMind2 .pth without config.json (its shapes do
  // not tell the head count), or {"num_experts_per_tok": 2, "rope_theta": 1e4}.
  io::Json config_overrides = io::Json::object();
  // Whether to read a GGUF's tokenizer metadata into tokenizer_json. A model alone has no use for
  // it (MiniMindForCausalLM::from_pretrained turns it off): as JSON it is a few MiB of heap that
  // stays in the process after it is freed.
  bool tokenizer = true;
};

struct Checkpoint {
  std::filesystem::path path;  // as given
  CheckpointFormat format = CheckpointFormat::Safetensors;
  io::Json config_json;  // what Config was read from: config.json, or made from metadata / shapes
  Config config;
  io::TensorTable tensors;
  std::optional<io::Json> tokenizer_json;         // a GGUF's tokenizer, as tokenizer.json
  std::optional<io::Json> tokenizer_config_json;  // ... and its tokenizer_config.json

  // The checkpoint directory, or the directory a file is in (where tokenizer.json and
  // generation_config.json are looked for).
  std::filesystem::path directory() const {
    return std::filesystem::is_directory(path) ? path : path.parent_path().empty() ? "." : path.parent_path();
  }
};

namespace checkpoint_detail {

inline std::string first_bytes(const std::filesystem::path& path, size_t n) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open");
  std::string s(n, '\0');
  in.read(s.data(), static_cast<std::streamsize>(n));
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

// A tied checkpoint may store lm_head.weight too (upstream's state_dict always does); it is tied
// when that copy holds the embedding's bytes.
inline bool lm_head_is_embedding(const io::TensorTable& t) {
  const io::TensorRef* head = t.find("lm_head.weight");
  const io::TensorRef* embed = t.find("model.embed_tokens.weight");
  if (!head) return true;
  return embed && head->dtype == embed->dtype && head->shape == embed->shape &&
         std::memcmp(head->bytes.data(), embed->bytes.data(), head->bytes.size()) == 0;
}

inline const io::TensorRef& shaped(const io::TensorTable& t, const std::string& name, size_t dims) {
  const io::TensorRef& ref = t.require(name);
  if (ref.shape.size() != dims) {
    throw Error(t.describe() + ": tensor \"" + name + "\" has shape " + ref.shape_string() + ", expected " +
                std::to_string(dims) + " dimensions");
  }
  return ref;
}

// When `rest` is "<prefix><digits>.<more>", the number, and `rest` becomes "<more>".
inline std::optional<int64_t> leading_index(std::string_view& rest, std::string_view prefix) {
  if (rest.substr(0, prefix.size()) != prefix) return std::nullopt;
  size_t i = prefix.size();
  int64_t n = 0;
  while (i < rest.size() && i - prefix.size() < 9 && rest[i] >= '0' && rest[i] <= '9') n = n * 10 + (rest[i++] - '0');
  if (i == prefix.size() || i >= rest.size() || rest[i] != '.') return std::nullopt;
  rest.remove_prefix(i + 1);
  return n;
}

// config.json for a state dict without one, from what its shapes determine: vocab, hidden,
// layers, FFN width, experts, tying, and with q_norm (minimind-3) head_dim and both head counts.
// MiniMind2 shapes only give the ratio of query to kv heads, so num_attention_heads is taken from
// `overrides` or upstream's default 8. Everything else (rope_theta, eps, context, top-k) takes
// upstream's defaults for the generation unless overridden.
inline io::Json infer_config(const io::TensorTable& t, const io::Json& overrides) {
  const std::string source = t.describe();
  const auto& embed = shaped(t, "model.embed_tokens.weight", 2);
  const int64_t vocab = embed.shape[0], hidden = embed.shape[1];
  int64_t layers = 0;
  std::set<int64_t> experts, shared;
  for (const auto& [name, ref] : t.tensors()) {
    std::string_view rest = name;
    const auto layer = leading_index(rest, "model.layers.");
    if (!layer) continue;
    layers = std::max(layers, *layer + 1);
    if (*layer != 0) continue;
    if (auto e = leading_index(rest, "mlp.experts.")) experts.insert(*e);
    if (auto e = leading_index(rest, "mlp.shared_experts.")) shared.insert(*e);
  }
  if (layers == 0) throw Error(source + ": no model.layers.N tensors, so the layer count cannot be inferred");
  const auto& q = shaped(t, "model.layers.0.self_attn.q_proj.weight", 2);
  const auto& k = shaped(t, "model.layers.0.self_attn.k_proj.weight", 2);
  io::Json c = {{"architectures", {"MiniMindForCausalLM"}}, {"model_type", "minimind"}, {"vocab_size", vocab},
                {"hidden_size", hidden}, {"num_hidden_layers", layers},
                {"tie_word_embeddings", lm_head_is_embedding(t)}};
  int64_t head_dim = 0, heads = 0;
  if (const io::TensorRef* q_norm = t.find("model.layers.0.self_attn.q_norm.weight")) {
    head_dim = shaped(t, q_norm->name, 1).shape[0];
    if (head_dim <= 0 || q.shape[0] % head_dim != 0) {
      throw Error(source + ": q_proj rows " + std::to_string(q.shape[0]) + " are not a multiple of q_norm's head_dim " +
                  std::to_string(head_dim));
    }
    heads = q.shape[0] / head_dim;
    c["head_dim"] = head_dim;
  } else {
    heads = overrides.contains("num_attention_heads") && overrides["num_attention_heads"].is_number_integer()
                ? overrides["num_attention_heads"].get<int64_t>()
                : 8;
    if (heads <= 0 || hidden % heads != 0 || q.shape[0] != hidden) {
      throw Error(source + ": a MiniMind2 state dict needs hidden_size " + std::to_string(hidden) +
                  " divisible by num_attention_heads " + std::to_string(heads) + " and q_proj rows equal to it (got " +
                  std::to_string(q.shape[0]) + "); give num_attention_heads or a config.json");
    }
    head_dim = hidden / heads;
  }
  if (k.shape[0] % head_dim != 0) {
    throw Error(source + ": k_proj rows " + std::to_string(k.shape[0]) + " are not a multiple of head_dim " +
                std::to_string(head_dim));
  }
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] = k.shape[0] / head_dim;
  if (const io::TensorRef* gate = t.find("model.layers.0.mlp.gate_proj.weight")) {
    c["intermediate_size"] = shaped(t, gate->name, 2).shape[0];
  }
  if (!experts.empty()) {
    const int64_t width = shaped(t, "model.layers.0.mlp.experts.0.gate_proj.weight", 2).shape[0];
    c["use_moe"] = true;
    c["n_routed_experts"] = c["num_experts"] = static_cast<int64_t>(experts.size());
    c["n_shared_experts"] = static_cast<int64_t>(shared.size());
    c["moe_intermediate_size"] = width;
    if (!c.contains("intermediate_size")) c["intermediate_size"] = width;
  }
  return c;
}

inline io::Json with_overrides(io::Json config, const io::Json& overrides, const std::string& source) {
  if (!overrides.is_object()) throw Error(source + ": config overrides must be a JSON object");
  for (const auto& [key, value] : overrides.items()) config[key] = value;
  return config;
}

}  // namespace checkpoint_detail

// Reads any supported checkpoint (see the top of this file). Errors name the file and what is
// wrong with it.
inline Checkpoint load_checkpoint(const std::filesystem::path& path, const CheckpointOptions& options = {}) {
  namespace fs = std::filesystem;
  using namespace checkpoint_detail;
  Checkpoint c;
  c.path = path;
  if (!fs::exists(path)) throw Error(path.string() + ": no such file or directory");
  std::string config_source;
  if (fs::is_directory(path)) {
    const auto config_path = path / "config.json";
    if (!fs::exists(config_path)) throw Error(config_path.string() + ": missing (every checkpoint directory needs config.json)");
    c.config_json = io::read_json_file(config_path);  // first: a broken config.json is named before the weights
    const bool has_safetensors = fs::exists(path / "model.safetensors") || fs::exists(path / "model.safetensors.index.json");
    if (!has_safetensors && fs::exists(path / "pytorch_model.bin")) {
      c.format = CheckpointFormat::Pth;
      c.tensors = io::read_pth(path / "pytorch_model.bin");
    } else {
      c.tensors = io::read_safetensors_checkpoint(path);
    }
    config_source = config_path.string();
  } else {
    const std::string magic = first_bytes(path, 4);
    const auto beside = c.directory() / "config.json";
    if (magic == "GGUF") {
      c.format = CheckpointFormat::Gguf;
      const io::gguf::File file = io::gguf::File::open(path);
      c.tensors = io::gguf::tensor_table(file);
      c.config_json = io::gguf::config_json(file);
      if (options.tokenizer) c.tokenizer_json = io::gguf::tokenizer_json(file);
      if (c.tokenizer_json) c.tokenizer_config_json = io::gguf::tokenizer_config_json(file);
      config_source = path.string() + " (metadata)";
    } else if (magic == std::string("PK\x03\x04", 4) || magic.rfind("\x80\x02", 0) == 0) {
      c.format = CheckpointFormat::Pth;
      c.tensors = io::read_pth(path);
      if (fs::exists(beside)) {
        c.config_json = io::read_json_file(beside);
        config_source = beside.string();
      } else {
        c.config_json = infer_config(c.tensors, options.config_overrides);
        config_source = path.string() + " (config inferred from the tensor shapes)";
      }
    } else if (path.extension() == ".safetensors") {
      if (!fs::exists(beside)) throw Error(beside.string() + ": missing (a .safetensors file needs config.json beside it)");
      c.tensors = io::read_safetensors(path);
      c.config_json = io::read_json_file(beside);
      config_source = beside.string();
    } else {
      throw Error(path.string() + ": not a checkpoint directory, a .safetensors file, a torch.save state dict or a GGUF file");
    }
  }
  c.config_json = with_overrides(std::move(c.config_json), options.config_overrides, config_source);
  c.config = Config::from_json(c.config_json, &c.tensors, config_source);
  return c;
}

}  // namespace minimind
