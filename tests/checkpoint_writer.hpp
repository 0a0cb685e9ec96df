#pragma once
// Writes small safetensors checkpoints for tests, valid or broken on purpose.
#include <minimind/detail/io/json.hpp>

#include "test_support.hpp"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace minimind::testing {

struct TensorBytes {
  TensorBytes(std::string name_, std::vector<int64_t> shape_, std::string dtype_ = "F32", std::string data_ = {})
      : name(std::move(name_)), shape(std::move(shape_)), dtype(std::move(dtype_)), data(std::move(data_)) {}
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;
  std::string data;  // raw little-endian bytes; filled with a pattern when empty
};

// u64 header length + header + data, the header padded with spaces to a multiple of 8.
inline std::string safetensors_image(std::string header, const std::string& data) {
  while (header.size() % 8 != 0) header += ' ';
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

inline std::string f32_bytes(const std::vector<float>& values) {
  std::string s(values.size() * 4, '\0');
  if (!values.empty()) std::memcpy(s.data(), values.data(), s.size());  // an empty vector's data() may be null
  return s;
}

inline std::string safetensors_image(std::vector<TensorBytes> tensors) {
  io::Json header = io::Json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  uint32_t pattern = 12345;
  for (auto& t : tensors) {
    if (t.data.empty()) {
      int64_t n = 1;
      for (auto d : t.shape) n *= d;
      std::vector<float> values(static_cast<size_t>(n));
      for (auto& v : values) {
        pattern = pattern * 1664525u + 1013904223u;
        v = static_cast<float>(pattern >> 8) / 16777216.0f - 0.5f;
      }
      if (t.name.find("norm") != std::string::npos) std::fill(values.begin(), values.end(), 1.0f);
      t.data = f32_bytes(values);
    }
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.data.size()}}};
    data += t.data;
  }
  return safetensors_image(header.dump(), data);
}

// A one-layer MiniMind2-style model: hidden 8, 2 heads of 4, 1 kv head, FFN 16, vocab 16.
inline io::Json tiny_config() {
  return {{"architectures", {"MiniMindForCausalLM"}},
          {"model_type", "minimind"},
          {"hidden_size", 8},
          {"num_hidden_layers", 1},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 1},
          {"intermediate_size", 16},
          {"vocab_size", 16},
          {"max_position_embeddings", 64},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 1e6},
          {"tie_word_embeddings", true}};
}

inline std::vector<TensorBytes> tiny_tensors() {
  const std::string l = "model.layers.0.";
  return {{"model.embed_tokens.weight", {16, 8}},
          {l + "input_layernorm.weight", {8}},
          {l + "self_attn.q_proj.weight", {8, 8}},
          {l + "self_attn.k_proj.weight", {4, 8}},
          {l + "self_attn.v_proj.weight", {4, 8}},
          {l + "self_attn.o_proj.weight", {8, 8}},
          {l + "post_attention_layernorm.weight", {8}},
          {l + "mlp.gate_proj.weight", {16, 8}},
          {l + "mlp.up_proj.weight", {16, 8}},
          {l + "mlp.down_proj.weight", {8, 16}},
          {"model.norm.weight", {8}}};
}

// A checkpoint directory with config.json and model.safetensors.
inline std::filesystem::path write_checkpoint(const std::string& name, const io::Json& config,
                                              const std::string& safetensors) {
  const auto dir = scratch_dir(name);
  write_file(dir / "config.json", config.dump(2));
  write_file(dir / "model.safetensors", safetensors);
  return dir;
}

inline std::filesystem::path write_tiny_checkpoint(const std::string& name) {
  return write_checkpoint(name, tiny_config(), safetensors_image(tiny_tensors()));
}

}  // namespace minimind::testing
