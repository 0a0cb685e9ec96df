// A .pth from a stranger: io::parse_pth over arbitrary bytes, and when the table parses, the
// config its shapes imply, the model and a short forward pass. An input that starts like a pickle
// (0x80) goes to the pickle machine alone, because a mutated data.pkl inside a zip is almost
// always stopped by its CRC-32 before the machine sees it; the seeds have both kinds.
// Properties of a parsed table: each tensor's bytes lie inside the image or in a buffer of its
// own, and their size is numel * dtype size.
#include "fuzz_support.hpp"

#include <minimind/checkpoint.hpp>
#include <minimind/detail/io/pickle.hpp>
#include <minimind/detail/io/pth.hpp>
#include <minimind/instances.hpp>  // the model, compiled once in minimind_fuzz_model

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

using namespace minimind;

namespace {

void check_table(const io::TensorTable& table, const std::vector<std::byte>& image) {
  const std::byte* begin = image.data();
  const std::byte* end = image.data() + image.size();
  for (const auto& [name, t] : table.tensors()) {
    const bool inside = t.bytes.empty() || (t.bytes.data() >= begin && t.bytes.data() + t.bytes.size() <= end);
    fuzz::require(inside || t.owner != nullptr, "tensor \"" + name + "\" lies outside the file and owns nothing");
    for (int64_t d : t.shape) fuzz::require(d >= 0, "tensor \"" + name + "\" has a negative dimension");
    fuzz::require(static_cast<uint64_t>(t.numel()) * io::dtype_size(t.dtype) == t.bytes.size(),
                  "tensor \"" + name + "\": bytes disagree with shape and dtype");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> image(size);
  if (size) std::memcpy(image.data(), data, size);
  if (size > 0 && data[0] == 0x80) {
    (void)fuzz::refused([&] {
      for (const auto& [name, rec] : io::pickle::parse_state_dict(image, "fuzz.pkl")) {
        fuzz::require(rec.size.size() == rec.stride.size(), "\"" + name + "\": size and stride differ in length");
      }
    });
    return 0;
  }
  std::optional<io::TensorTable> table;
  if (fuzz::refused([&] { table.emplace(io::parse_pth(image, "fuzz.pth", nullptr)); })) return 0;
  check_table(*table, image);

  std::optional<Config> config;
  if (fuzz::refused([&] {
        config.emplace(Config::from_json(checkpoint_detail::infer_config(*table, io::Json::object()), &*table, "fuzz.pth"));
      })) {
    return 0;
  }
  LoadOptions options;
  options.threads = 1;
  std::optional<MiniMindForCausalLM<float>> model;
  if (fuzz::refused([&] { model.emplace(MiniMindForCausalLM<float>::from_tensors(*config, *table, options)); })) return 0;
  const int32_t vocab = static_cast<int32_t>(model->config().vocab_size);
  const std::vector<int32_t> ids = {0, vocab - 1};
  (void)fuzz::refused([&] {  // e.g. a context of one position
    const auto logits = model->forward(ids);
    fuzz::require(logits.rows() == 2 && logits.cols() == vocab, "logits have the wrong shape");
  });
  return 0;
}
