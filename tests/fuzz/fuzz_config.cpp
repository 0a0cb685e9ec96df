// config.json from a stranger: arbitrary bytes parsed as JSON, then Config::from_json without
// tensors and with a small table to infer head_dim and intermediate_size from. An accepted config
// must be one a model can be built from: positive dimensions, heads that divide, an even
// head_dim; its rotary tables are computed, and when its shape is small a random-weight model of
// it runs a forward pass (MoE routing, YaRN, qk-norm and all).
#include "fuzz_support.hpp"

#include <minimind/config.hpp>
#include <minimind/detail/io/safetensors.hpp>
#include <minimind/instances.hpp>  // the model, compiled once in minimind_fuzz_model
#include <minimind/rope.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

using namespace minimind;

namespace {

// q_norm [4] and gate_proj [16, 8]: what from_json reads head_dim and intermediate_size from.
const io::TensorTable& inference_table() {
  static std::vector<std::byte> image;
  static const io::TensorTable table = [] {
    const std::string header =
        R"({"model.layers.0.self_attn.q_norm.weight":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
        R"("model.layers.0.mlp.gate_proj.weight":{"dtype":"F32","shape":[16,8],"data_offsets":[16,528]}})";
    image.assign(8 + header.size() + 528, std::byte{0});
    const uint64_t n = header.size();
    std::memcpy(image.data(), &n, 8);
    std::memcpy(image.data() + 8, header.data(), header.size());
    io::TensorTable t;
    for (auto& ref : io::parse_safetensors(image, "inference.safetensors")) t.add(std::move(ref), "inference.safetensors");
    return t;
  }();
  return table;
}

// Weights of a model of this shape, computed in double so no product overflows.
double parameters(const Config& c) {
  const double hidden = static_cast<double>(c.hidden_size);
  const double attention = hidden * static_cast<double>(c.head_dim) *
                           static_cast<double>(2 * c.num_attention_heads + 2 * c.num_key_value_heads);
  const double ffn = c.num_experts > 0 ? 3 * hidden * static_cast<double>(c.moe_intermediate_size) *
                                             static_cast<double>(c.num_experts + c.n_shared_experts)
                                       : 3 * hidden * static_cast<double>(c.intermediate_size);
  return static_cast<double>(c.vocab_size) * hidden * (c.tie_word_embeddings ? 1 : 2) +
         static_cast<double>(c.num_hidden_layers) * (attention + ffn + 3 * hidden);
}

void check_config(const Config& c, size_t size) {
  fuzz::require(c.vocab_size > 0 && c.hidden_size > 0 && c.num_hidden_layers > 0 && c.num_attention_heads > 0 &&
                    c.num_key_value_heads > 0 && c.head_dim > 0 && c.intermediate_size > 0 && c.max_position_embeddings > 0,
                "an accepted config has a dimension that is not positive");
  fuzz::require(c.num_attention_heads % c.num_key_value_heads == 0, "accepted heads that do not divide");
  fuzz::require(c.head_dim % 2 == 0, "accepted an odd head_dim");
  fuzz::require(!fuzz::refused([&] { c.validate("config.json"); }), "from_json accepted a config validate refuses");

  if (c.head_dim <= 4096) {
    RotaryEmbedding<float> rope(c);
    std::vector<float> cos(static_cast<size_t>(rope.half_dim())), sin(cos.size());
    for (int64_t position : {int64_t{0}, c.max_position_embeddings - 1}) rope.angles(position, cos.data(), sin.data());
  }
  if (parameters(c) > 2e5 || c.num_hidden_layers > 4) return;
  LoadOptions options;
  options.format = static_cast<WeightFormat>(size % 3);
  options.threads = 1;
  const auto model = MiniMindForCausalLM<float>::random(c, 7, options);
  auto session = model.new_session(std::min<Index>(c.max_position_embeddings, 3));
  const int32_t last = static_cast<int32_t>(c.vocab_size - 1);
  const std::vector<int32_t> ids = {0, last, last / 2};
  const auto logits = model.forward(session, std::span<const int32_t>(ids.data(), static_cast<size_t>(session.context())));
  fuzz::require(logits.cols() == c.vocab_size, "logits have the wrong width");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  io::Json json;
  if (fuzz::refused([&] { json = io::parse_json(text, "config.json"); })) return 0;
  for (const io::TensorTable* tensors : {static_cast<const io::TensorTable*>(nullptr), &inference_table()}) {
    std::optional<Config> config;
    if (fuzz::refused([&] { config.emplace(Config::from_json(json, tensors, "config.json")); })) continue;
    check_config(*config, size);
  }
  return 0;
}
