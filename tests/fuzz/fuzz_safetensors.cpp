// A safetensors file from a stranger: io::parse_safetensors over arbitrary bytes, then, when the
// table parses, Config::from_json and MiniMindForCausalLM::from_tensors over it, and a short
// forward and greedy generation when the model loads. The config is the header's
// __metadata__.config string when there is one (safetensors metadata values are strings), else a
// one-layer MiniMind2 shape, so the seeds carry matching configs and mutations reach the loader.
// Properties of a parsed table: every tensor's bytes lie inside the data section, their size is
// numel * dtype size, dimensions are non-negative, and no two tensors share a byte.
#include "fuzz_support.hpp"

#include <minimind/generate.hpp>
#include <minimind/detail/io/safetensors.hpp>
#include <minimind/instances.hpp>  // the model, compiled once in minimind_fuzz_model

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

using namespace minimind;

namespace {

const char* const kDefaultConfig = R"({"architectures": ["MiniMindForCausalLM"], "hidden_size": 8,
  "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 16,
  "vocab_size": 16, "max_position_embeddings": 64})";

// The header's __metadata__.config, if the header is JSON and has one.
std::string config_text(const std::vector<std::byte>& image) {
  uint64_t header_len = 0;
  std::memcpy(&header_len, image.data(), 8);
  const std::string_view header(reinterpret_cast<const char*>(image.data() + 8), header_len);
  const io::Json json = io::Json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (json.is_object()) {
    if (auto meta = json.find("__metadata__"); meta != json.end() && meta->is_object()) {
      if (auto config = meta->find("config"); config != meta->end() && config->is_string()) return config->get<std::string>();
    }
  }
  return kDefaultConfig;
}

void check_table(const std::vector<io::TensorRef>& tensors, const std::vector<std::byte>& image) {
  const std::byte* begin = image.data();
  const std::byte* end = image.data() + image.size();
  std::vector<std::pair<const std::byte*, const std::byte*>> ranges;
  for (const auto& t : tensors) {
    fuzz::require(t.bytes.empty() || (t.bytes.data() >= begin + 8 && t.bytes.data() + t.bytes.size() <= end),
                  "tensor \"" + t.name + "\" lies outside the file");
    for (int64_t d : t.shape) fuzz::require(d >= 0, "tensor \"" + t.name + "\" has a negative dimension");
    fuzz::require(static_cast<uint64_t>(t.numel()) * io::dtype_size(t.dtype) == t.bytes.size(),
                  "tensor \"" + t.name + "\": bytes disagree with shape and dtype");
    if (!t.bytes.empty()) ranges.emplace_back(t.bytes.data(), t.bytes.data() + t.bytes.size());
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) fuzz::require(ranges[i].first >= ranges[i - 1].second, "two tensors overlap");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> image(size);
  if (size) std::memcpy(image.data(), data, size);
  std::vector<io::TensorRef> tensors;
  if (fuzz::refused([&] { tensors = io::parse_safetensors(image, "fuzz.safetensors"); })) return 0;
  check_table(tensors, image);

  io::TensorTable table;
  for (auto& t : tensors) table.add(std::move(t), "fuzz.safetensors");
  const io::Json config_json = io::Json::parse(config_text(image), nullptr, false);
  if (config_json.is_discarded()) return 0;
  std::optional<Config> config;
  if (fuzz::refused([&] { config.emplace(Config::from_json(config_json, &table, "config.json")); })) return 0;

  // Every weight format, chosen by the input so each seed's mutations try all three.
  LoadOptions options;
  options.format = static_cast<WeightFormat>(size % 3);
  options.threads = 1;
  std::optional<MiniMindForCausalLM<float>> model;
  if (fuzz::refused([&] { model.emplace(MiniMindForCausalLM<float>::from_tensors(*config, table, options)); })) return 0;

  const int32_t vocab = static_cast<int32_t>(model->config().vocab_size);
  const std::vector<int32_t> ids = {0, vocab - 1, vocab / 2};
  const Index context = std::min<Index>(model->config().max_position_embeddings, 6);
  auto session = model->new_session(context);
  const std::span<const int32_t> prompt(ids.data(), std::min<size_t>(ids.size(), static_cast<size_t>(context)));
  const auto logits = model->forward(session, prompt);
  fuzz::require(logits.rows() == static_cast<Index>(prompt.size()) && logits.cols() == vocab, "logits have the wrong shape");
  session.reset();
  // Generation may refuse logits that extreme weights made NaN, but must never give an id out
  // of range or fail any other way.
  for (const float temperature : {0.0f, 0.85f}) {
    session.reset();
    GenerationConfig config;
    config.sampling.temperature = temperature;
    config.sampling.repetition_penalty = 1.3f;
    config.max_new_tokens = 3;
    (void)fuzz::refused([&] {
      const auto result = generate(*model, session, prompt, config);
      for (int32_t id : result.ids) fuzz::require(id >= 0 && id < vocab, "generate gave an id out of range");
    });
  }
  return 0;
}
