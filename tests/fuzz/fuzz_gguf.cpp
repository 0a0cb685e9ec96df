// A GGUF file from a stranger: io::gguf::File::parse over arbitrary bytes, then everything a
// loader does with a parsed file: the tensor table under our names (dequantizing, undoing the
// llama permutation), the config from metadata, the model and a short forward pass, and the
// tokenizer from metadata with an encode/decode round trip.
// Properties: every tensor's data lies inside the image at an aligned offset; every table
// tensor's bytes lie inside the image or in a buffer of its own, sized numel * dtype size (ggml
// blocks: blocks * block size).
#include "fuzz_support.hpp"

#include <minimind/detail/io/gguf.hpp>
#include <minimind/detail/io/gguf_model.hpp>
#include <minimind/instances.hpp>  // the model, compiled once in minimind_fuzz_model

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

using namespace minimind;

namespace {

void check_file(const io::gguf::File& file, const std::vector<std::byte>& image) {
  for (const auto& t : file.tensors()) {
    const auto bytes = file.tensor_data(t);
    fuzz::require(bytes.data() >= image.data() && bytes.data() + bytes.size() <= image.data() + image.size(),
                  "tensor \"" + t.name + "\" lies outside the file");
    fuzz::require(t.offset % file.alignment() == 0, "tensor \"" + t.name + "\" is misaligned");
  }
}

// A table tensor's size: elements times the element's size, or for ggml blocks held as stored,
// blocks times the block's size.
uint64_t expected_bytes(const io::TensorRef& t) {
  const auto numel = static_cast<uint64_t>(t.numel());
  if (t.dtype != io::Dtype::GGML) return numel * io::dtype_size(t.dtype);
  const auto traits = io::gguf::type_traits(t.ggml_type);
  return traits.block ? numel / traits.block * traits.bytes : 0;
}

void check_table(const io::TensorTable& table, const std::vector<std::byte>& image) {
  for (const auto& [name, t] : table.tensors()) {
    const bool inside = t.bytes.data() >= image.data() && t.bytes.data() + t.bytes.size() <= image.data() + image.size();
    fuzz::require(inside || t.owner != nullptr, "tensor \"" + name + "\" lies outside the file and owns nothing");
    fuzz::require(expected_bytes(t) == t.bytes.size(), "tensor \"" + name + "\": bytes disagree with shape and dtype");
  }
}

void run_model(const io::gguf::File& file, const std::vector<std::byte>& image) {
  std::optional<io::TensorTable> table;
  if (fuzz::refused([&] { table.emplace(io::gguf::tensor_table(file)); })) return;
  check_table(*table, image);
  std::optional<Config> config;
  if (fuzz::refused([&] { config.emplace(Config::from_json(io::gguf::config_json(file), &*table, "fuzz.gguf")); })) return;
  LoadOptions options;
  options.threads = 1;
  std::optional<MiniMindForCausalLM<float>> model;
  if (fuzz::refused([&] { model.emplace(MiniMindForCausalLM<float>::from_tensors(*config, *table, options)); })) return;
  const int32_t vocab = static_cast<int32_t>(model->config().vocab_size);
  (void)fuzz::refused([&] {  // e.g. a context of one position
    const auto logits = model->forward(std::vector<int32_t>{0, vocab - 1});
    fuzz::require(logits.rows() == 2 && logits.cols() == vocab, "logits have the wrong shape");
  });
}

void run_tokenizer(const io::gguf::File& file) {
  std::optional<Tokenizer> tok;
  if (fuzz::refused([&] {
        auto json = io::gguf::tokenizer_json(file);
        if (!json) return;
        const io::Json config = io::gguf::tokenizer_config_json(file);
        tok.emplace(Tokenizer::from_json(*json, "fuzz.gguf", &config));
      }) || !tok) {
    return;
  }
  for (const char* text : {"The cat eats fish.", "今天天气很好", "<|im_start|>user\nhi<|im_end|>", "  12345 \n"}) {
    const auto ids = tok->encode(text);
    for (int32_t id : ids) fuzz::require(id >= 0 && id < tok->vocab_size(), "encode gave an id out of range");
    (void)tok->decode(ids);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> image(size);
  if (size) std::memcpy(image.data(), data, size);
  std::optional<io::gguf::File> file;
  if (fuzz::refused([&] { file.emplace(io::gguf::File::parse(image, "fuzz.gguf", nullptr)); })) return 0;
  check_file(*file, image);
  run_model(*file, image);
  run_tokenizer(*file);
  return 0;
}
