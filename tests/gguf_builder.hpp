#pragma once
// Writes GGUF images in memory for the bad-input tests: a valid small llama file by default,
// every field open to being made wrong on purpose.
#include "checkpoint_writer.hpp"

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace minimind::testing {

class GgufBuilder {
 public:
  enum : uint32_t { U8 = 0, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 };

  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;  // innermost first
    uint32_t type = 0;
    std::string data;
    std::optional<uint64_t> offset;  // default: packed at the alignment
  };

  std::string magic = "GGUF";
  uint32_t version = 3;
  uint64_t alignment = 32;
  std::optional<uint64_t> tensor_count, kv_count;  // override the true counts
  std::vector<std::string> kvs;                    // encoded key/type/value records
  std::vector<Tensor> tensors;

  static std::string u32(uint32_t v) { return raw(&v, 4); }
  static std::string u64(uint64_t v) { return raw(&v, 8); }
  static std::string f32(float v) { return raw(&v, 4); }
  static std::string str(const std::string& s) { return u64(s.size()) + s; }
  static std::string raw(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

  GgufBuilder& kv(const std::string& key, uint32_t type, const std::string& encoded_value) {
    kvs.push_back(str(key) + u32(type) + encoded_value);
    return *this;
  }
  GgufBuilder& kv_u32(const std::string& key, uint32_t v) { return kv(key, U32, u32(v)); }
  GgufBuilder& kv_f32(const std::string& key, float v) { return kv(key, F32, f32(v)); }
  GgufBuilder& kv_str(const std::string& key, const std::string& v) { return kv(key, STRING, str(v)); }
  GgufBuilder& kv_bool(const std::string& key, bool v) { return kv(key, BOOL, std::string(1, v ? '\1' : '\0')); }
  GgufBuilder& kv_strings(const std::string& key, const std::vector<std::string>& v) {
    std::string s = u32(STRING) + u64(v.size());
    for (const auto& x : v) s += str(x);
    return kv(key, ARRAY, s);
  }
  GgufBuilder& kv_i32s(const std::string& key, const std::vector<int32_t>& v) {
    std::string s = u32(I32) + u64(v.size());
    for (int32_t x : v) s += raw(&x, 4);
    return kv(key, ARRAY, s);
  }
  // Drops every record of `key` (to test missing fields).
  GgufBuilder& erase(const std::string& key) {
    const std::string prefix = str(key);
    std::erase_if(kvs, [&](const std::string& r) { return r.rfind(prefix, 0) == 0; });
    return *this;
  }
  Tensor* find(const std::string& name) {
    for (auto& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }

  std::string build() const {
    std::string out = magic + u32(version) + u64(tensor_count.value_or(tensors.size())) + u64(kv_count.value_or(kvs.size()));
    for (const auto& r : kvs) out += r;
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const auto& t : tensors) {
      offsets.push_back(t.offset.value_or(offset));
      offset = offsets.back() + t.data.size();
      offset += (alignment - offset % alignment) % alignment;
      out += str(t.name) + u32(static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) out += u64(d);
      out += u32(t.type) + u64(offsets.back());
    }
    out.resize(out.size() + (alignment - out.size() % alignment) % alignment, '\0');
    const size_t data_start = out.size();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const size_t at = data_start + offsets[i];
      if (out.size() < at + tensors[i].data.size()) out.resize(at + tensors[i].data.size(), '\0');
      std::memcpy(out.data() + at, tensors[i].data.data(), tensors[i].data.size());
    }
    return out;
  }

  // A one-layer llama (MiniMind2) of checkpoint_writer's tiny shape, F32, tied, with a 16-token
  // byte-level tokenizer.
  static GgufBuilder tiny_llama() {
    GgufBuilder g;
    g.kv_str("general.architecture", "llama")
        .kv_u32("llama.block_count", 1)
        .kv_u32("llama.embedding_length", 8)
        .kv_u32("llama.feed_forward_length", 16)
        .kv_u32("llama.attention.head_count", 2)
        .kv_u32("llama.attention.head_count_kv", 1)
        .kv_u32("llama.context_length", 64)
        .kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
        .kv_f32("llama.rope.freq_base", 1e6f);
    std::vector<std::string> tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "c", "ab", "Ġ",
                                       "Ġa", "d", "e", "f", "g", "h", "i", "j"};
    g.kv_str("tokenizer.ggml.model", "gpt2")
        .kv_strings("tokenizer.ggml.tokens", tokens)
        .kv_i32s("tokenizer.ggml.token_type", {3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
        .kv_strings("tokenizer.ggml.merges", {"a b", "Ġ a"})
        .kv_u32("tokenizer.ggml.bos_token_id", 1)
        .kv_u32("tokenizer.ggml.eos_token_id", 2);
    static const std::pair<const char*, const char*> names[] = {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight"},
        {"model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight"},
        {"model.layers.0.self_attn.k_proj.weight", "blk.0.attn_k.weight"},
        {"model.layers.0.self_attn.v_proj.weight", "blk.0.attn_v.weight"},
        {"model.layers.0.self_attn.o_proj.weight", "blk.0.attn_output.weight"},
        {"model.layers.0.post_attention_layernorm.weight", "blk.0.ffn_norm.weight"},
        {"model.layers.0.mlp.gate_proj.weight", "blk.0.ffn_gate.weight"},
        {"model.layers.0.mlp.up_proj.weight", "blk.0.ffn_up.weight"},
        {"model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight"},
        {"model.norm.weight", "output_norm.weight"}};
    uint32_t pattern = 777;
    for (const auto& t : tiny_tensors()) {
      Tensor out;
      for (const auto& [hf, gguf] : names)
        if (t.name == hf) out.name = gguf;
      out.dims.assign(t.shape.rbegin(), t.shape.rend());
      std::vector<float> values(static_cast<size_t>(t.shape.size() == 2 ? t.shape[0] * t.shape[1] : t.shape[0]));
      for (auto& v : values) {
        pattern = pattern * 1664525u + 1013904223u;
        v = static_cast<float>(pattern >> 8) / 16777216.0f - 0.5f;
      }
      out.data = f32_bytes(values);
      g.tensors.push_back(std::move(out));
    }
    return g;
  }
};

}  // namespace minimind::testing
