// GGUF files (io/gguf.hpp, io/gguf_model.hpp): the committed files of every architecture and type
// give the safetensors path's logits (F32 and F16 exactly; Q8_0 / Q4_0 with the same top-1 and a
// stated bound), the tokenizer from the metadata encodes like tokenizer.json, and every kind of
// broken file is refused with an Error that says what and where.
#include <doctest/doctest.h>
#include <minimind/detail/io/gguf.hpp>
#include <minimind/detail/io/gguf_model.hpp>
#include <minimind/minimind.hpp>
#include <minimind/tokenizer.hpp>

#include <minimind/gguf_writer.hpp>

#include "checkpoint_writer.hpp"
#include "format_files.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <utility>

using namespace minimind;
using namespace minimind::testing;

namespace {

// A model from a GGUF file, the way load_checkpoint builds it.
MiniMindForCausalLM<float> gguf_model(const io::gguf::File& file, LoadOptions options = one_thread()) {
  const io::TensorTable table = io::gguf::tensor_table(file);
  const Config config = Config::from_json(io::gguf::config_json(file), &table, file.source());
  return MiniMindForCausalLM<float>::from_tensors(config, table, options);
}

// Parses everything a GGUF holds, as a loader would: container, tensors, config, tokenizer.
void load_everything(std::string image, const std::string& name = "test.gguf") {
  const auto file = io::gguf::File::parse(as_bytes(image), name, nullptr);
  if (!file.tensors().empty()) {  // (a tokenizer-only file has no model)
    const io::TensorTable table = io::gguf::tensor_table(file);
    const Config config = Config::from_json(io::gguf::config_json(file), &table, name);
    MiniMindForCausalLM<float>::from_tensors(config, table, one_thread());
  }
  if (auto tok = io::gguf::tokenizer_json(file)) {
    const io::Json tok_config = io::gguf::tokenizer_config_json(file);
    Tokenizer::from_json(*tok, name, &tok_config);
  }
}

// The bad-input tests' base: a one-layer llama (MiniMind2) of checkpoint_writer's tiny shape,
// F32, tied, with a 16-token byte-level tokenizer.
GgufWriter tiny_llama() {
  GgufWriter g;
  g.add_string("general.architecture", "llama")
      .add_u32("llama.block_count", 1)
      .add_u32("llama.embedding_length", 8)
      .add_u32("llama.feed_forward_length", 16)
      .add_u32("llama.attention.head_count", 2)
      .add_u32("llama.attention.head_count_kv", 1)
      .add_u32("llama.context_length", 64)
      .add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .add_f32("llama.rope.freq_base", 1e6f);
  g.add_string("tokenizer.ggml.model", "gpt2")
      .add_strings("tokenizer.ggml.tokens", {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "c", "ab", "Ġ", "Ġa", "d",
                                             "e", "f", "g", "h", "i", "j"})
      .add_i32s("tokenizer.ggml.token_type", {3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
      .add_strings("tokenizer.ggml.merges", {"a b", "Ġ a"})
      .add_u32("tokenizer.ggml.bos_token_id", 1)
      .add_u32("tokenizer.ggml.eos_token_id", 2);
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
    std::string name;
    for (const auto& [hf, gguf] : names)
      if (t.name == hf) name = gguf;
    std::vector<float> values(static_cast<size_t>(t.shape.size() == 2 ? t.shape[0] * t.shape[1] : t.shape[0]));
    for (auto& v : values) {
      pattern = pattern * 1664525u + 1013904223u;
      v = static_cast<float>(pattern >> 8) / 16777216.0f - 0.5f;
    }
    g.add_tensor(name, t.shape, GgufType::F32, values);
  }
  return g;
}

// A valid image changed byte by byte, for the files the writer refuses to make.
struct Image {
  std::string bytes;

  template <class T>
  Image& put(size_t at, T v) {
    REQUIRE(at + sizeof v <= bytes.size());
    std::memcpy(bytes.data() + at, &v, sizeof v);
    return *this;
  }
  // Where `s` is stored as a GGUF string (length, then the characters).
  size_t string_at(std::string_view s) const {
    std::string encoded(8, '\0');
    const uint64_t n = s.size();
    std::memcpy(encoded.data(), &n, 8);
    encoded += s;
    const size_t at = bytes.find(encoded);
    REQUIRE(at != std::string::npos);
    return at;
  }
  // The value type of metadata `key` (its value follows).
  size_t type_of(std::string_view key) const { return string_at(key) + 8 + key.size(); }
  // A tensor info's fields: the dimension count, then the dimensions, the type and the offset.
  size_t dims_of(std::string_view tensor) const { return string_at(tensor) + 8 + tensor.size(); }
  size_t type_of_tensor(std::string_view tensor, uint32_t n_dims) const { return dims_of(tensor) + 4 + 8 * n_dims; }
  size_t offset_of(std::string_view tensor, uint32_t n_dims) const { return type_of_tensor(tensor, n_dims) + 4; }
  // Renames a key or tensor to another name of the same length.
  Image& rename(std::string_view from, std::string_view to) {
    REQUIRE(from.size() == to.size());
    bytes.replace(string_at(from) + 8, from.size(), to);
    return *this;
  }
};
Image image_of(const GgufWriter& g) { return {g.image()}; }

// The image must be refused with an Error whose message contains `message`.
void check_refused(const std::string& image, const char* message) {
  CAPTURE(message);
  CHECK_THROWS_WITH_AS(load_everything(image), doctest::Contains(message), Error);
}
void check_refused(const GgufWriter& g, const char* message) { check_refused(g.image(), message); }
void check_refused(const Image& i, const char* message) { check_refused(i.bytes, message); }

io::gguf::File open_committed(const std::string& name) { return io::gguf::File::open(formats_dir() / "gguf" / name); }

// A GGUF file (a manifest entry) gives the logits of the checkpoint it was made from: exactly, or
// within the entry's stated bound when quantized.
void check_gguf_entry(const io::Json& entry) {
  const std::string file = entry.at("file").get<std::string>();
  const std::string compare = entry.at("compare").get<std::string>();
  CAPTURE(file);
  const auto reference_dir = repo_path(entry.at("reference"));
  const auto gguf = io::gguf::File::open(source_dir() / file);
  const auto model = gguf_model(gguf);
  const auto prompts = reference_prompts(entry);
  if (compare == "f16-matrices") {
    // The F32 source with every matrix rounded to F16 is what the file holds: exactly equal.
    const io::TensorTable rounded = rounded_to_f16(io::read_safetensors_checkpoint(reference_dir), true);
    const Config config = Config::from_pretrained(reference_dir, &rounded);
    const auto reference = MiniMindForCausalLM<float>::from_tensors(config, rounded, one_thread());
    const Comparison c = compare_logits(reference, model, prompts);
    MESSAGE(file << ": max |logit diff| " << c.max_abs << " vs the F16-rounded safetensors");
    CHECK(c.max_abs == 0.0);
    return;
  }
  const auto reference = MiniMindForCausalLM<float>::from_pretrained(reference_dir, one_thread());
  const Comparison c = compare_logits(reference, model, prompts);
  if (compare == "exact") {
    MESSAGE(file << ": max |logit diff| " << c.max_abs << " vs safetensors");
    CHECK(c.max_abs <= 1e-5);
    CHECK(c.top1_all);
  } else {
    REQUIRE(compare == "quantized");
    const double bound = entry.at("max_abs").get<double>();
    MESSAGE(file << ": max |logit diff| " << c.max_abs << " (stated bound " << bound << ", top-1 "
                 << entry.at("top1").get<std::string>() << ")");
    CHECK(c.max_abs <= bound);
    CHECK(c.max_abs > 0);  // really quantized
    if (entry.at("top1") == "all") CHECK(c.top1_all);
    CHECK(c.top1_last);
  }
}

const io::Json& manifest_entry(const std::string& file) {
  const auto& entries = formats_manifest().at("gguf");
  const auto it = std::find_if(entries.begin(), entries.end(), [&](const io::Json& e) { return e.at("file") == file; });
  REQUIRE_MESSAGE(it != entries.end(), "no manifest entry for " << file);
  return *it;
}

}  // namespace

TEST_CASE("every committed GGUF gives the logits of the checkpoint it was made from") {
  for (const auto& entry : formats_manifest().at("gguf")) check_gguf_entry(entry);
}

// Files our writer did not make (tests/data/formats/llamacpp/README.md): gguf-py's GGUFWriter
// (F32, F16) and llama-quantize (Q8_0), from the model of quant-mm2-q8_0.gguf.
TEST_CASE("GGUF files written by llama.cpp's gguf-py and llama-quantize give their checkpoint's logits") {
  const io::Json& ours = manifest_entry("tests/data/formats/gguf/quant-mm2-q8_0.gguf");
  const std::string dir = "tests/data/formats/llamacpp/";
  for (const auto& [file, compare] : std::vector<std::pair<std::string, std::string>>{
           {"quant-mm2-f32.gguf", "exact"}, {"quant-mm2-f16.gguf", "f16-matrices"}, {"quant-mm2-q8_0.gguf", "quantized"}}) {
    io::Json entry = ours;
    entry["file"] = dir + file;
    entry["compare"] = compare;
    check_gguf_entry(entry);
  }
  // llama-quantize rounds to the same Q8_0 blocks as our writer: the same logits, to the bit.
  const auto theirs = gguf_model(io::gguf::File::open(source_dir() / dir / "quant-mm2-q8_0.gguf"));
  const auto mine = gguf_model(open_committed("quant-mm2-q8_0.gguf"));
  CHECK(compare_logits(mine, theirs, reference_prompts(ours)).max_abs == 0.0);
}

namespace {

uint64_t fnv1a64(const void* data, size_t n) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(data)[i]) * 0x100000001B3ull;
  return h;
}

}  // namespace

// llama-quantize's presets Q4_0 and Q4_K_M on random MiniMind2 and minimind-3 models with rows of
// 256 (tests/data/formats/llamacpp/README.md): every tensor widens to the bits gguf-py's
// dequantization gives, and the model's logits are the PyTorch reference's over those weights.
TEST_CASE("files made by llama-quantize's Q4_0 and Q4_K_M presets: gguf-py's weights, the reference's logits") {
  const auto dir = formats_dir() / "llamacpp";
  const io::Json manifest = io::Json::parse(read_file(dir / "quants.json"));
  std::set<std::string> types_seen;
  for (const auto& entry : manifest) {
    const std::string file = entry.at("file").get<std::string>();
    CAPTURE(file);
    const auto gguf = io::gguf::File::open(dir / file);
    const auto& sums = entry.at("dequantized_fnv1a64");
    REQUIRE(sums.size() == gguf.tensors().size());
    for (const auto& info : gguf.tensors()) {
      CAPTURE(info.name);
      types_seen.insert(info.type_name());
      std::vector<float> values(static_cast<size_t>(info.numel()));
      if (info.type == static_cast<uint32_t>(io::gguf::GgmlType::F32)) {
        std::memcpy(values.data(), gguf.tensor_data(info).data(), values.size() * sizeof(float));
      } else {
        io::gguf::dequantize(gguf, info, values.data());
      }
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a64(values.data(), values.size() * 4)));
      CHECK(std::string(hex) == sums.at(info.name).get<std::string>());
    }
    LoadOptions widened = one_thread();
    widened.quantized_as_stored = false;
    const auto model = gguf_model(gguf, widened);
    const auto stored = gguf_model(gguf);  // held as stored, the default
    const std::string logits_bytes = read_file(dir / entry.at("logits").get<std::string>());
    const auto vocab = entry.at("vocab_size").get<Index>();
    size_t at = 0;
    double worst = 0, largest = 0, stored_worst = 0, diff2 = 0, ref2 = 0;
    for (const auto& prompt : entry.at("prompts")) {
      const auto ids = prompt.get<std::vector<int32_t>>();
      const MatrixRM<float> got = model.forward(ids);
      REQUIRE(got.cols() == vocab);
      REQUIRE(logits_bytes.size() >= (at + got.size()) * sizeof(float));
      MatrixRM<float> want(got.rows(), got.cols());
      std::memcpy(want.data(), logits_bytes.data() + at * sizeof(float), got.size() * sizeof(float));
      at += static_cast<size_t>(got.size());
      worst = worse(worst, max_abs_diff(got, want));
      const MatrixRM<float> native = stored.forward(ids);
      stored_worst = worse(stored_worst, max_abs_diff(native, got));
      diff2 += (native - got).squaredNorm(), ref2 += got.squaredNorm();
      largest = std::max(largest, static_cast<double>(want.cwiseAbs().maxCoeff()));
    }
    CHECK(at * sizeof(float) == logits_bytes.size());
    MESSAGE(file << ": max |logit diff| " << worst << " vs the PyTorch reference over gguf-py's weights (largest |logit| "
                 << largest << ")");
    CHECK(worst <= 1e-5 * largest);
    // Held as stored, the activations are rounded per block of 32 (kernels/ggml.hpp): to int8 for
    // these 4- to 6-bit types, as llama.cpp rounds them (Q8_0), each by up to 1/254 of its block's
    // largest; on these random-weight files that measured a relative L2 of 0.0123-0.0136
    // (int16 had 8e-5).
    const double relative_l2 = std::sqrt(diff2 / ref2);
    MESSAGE(file << " held as stored: max |logit diff| " << stored_worst << ", relative L2 " << relative_l2
                 << " vs widened to f32");
    CHECK(relative_l2 <= 0.03);
    CHECK(stored.weight_bytes() * 10 < model.weight_bytes() * 3);  // 4-bit blocks, not floats
    // A prompt of 40 ids runs prefill on the GEMM (the int8 GEMM for Q4_0, Q5_0, Q4_K, Q6_K on
    // x86) and decode one id at a time on the matrix-vector products: the same rounding of the
    // activations, the float sums in another order. A sum that lands the other side of an int8
    // rounding changes the next layer's inputs by a rounding step, which flips more of them, so
    // the two may differ by up to what the rounding itself moves the logits (held as stored
    // against widened, above; these files measured 2e-7 to 4e-3, a MiniMind2-Small of random
    // weights 0.018 over 128 ids); a wrong product moves them much further.
    std::vector<int32_t> long_prompt;
    for (int32_t i = 0; i < 40; ++i) long_prompt.push_back((i * 37 + 11) % static_cast<int32_t>(vocab));
    const MatrixRM<float> prefilled = stored.forward(long_prompt);
    auto session = stored.new_session(40);
    double step_diff2 = 0, step_ref2 = 0;
    for (size_t i = 0; i < long_prompt.size(); ++i) {
      const MatrixRM<float> step = stored.forward(session, std::span<const int32_t>(&long_prompt[i], 1)).topRows(1);
      step_diff2 += (step - prefilled.middleRows(static_cast<Index>(i), 1)).squaredNorm();
      step_ref2 += step.squaredNorm();
    }
    MESSAGE(file << " held as stored: prefill against decode, relative L2 " << std::sqrt(step_diff2 / step_ref2));
    CHECK(std::sqrt(step_diff2 / step_ref2) <= 0.03);
  }
  // What the presets wrote for these shapes (the list): all of it was read above.
  CHECK(types_seen == std::set<std::string>{"F32", "Q4_0", "Q4_K", "Q5_0", "Q6_K", "Q8_0"});
}

TEST_CASE("llama's q/k row permutation is undone exactly, in place in the loaded file") {
  const auto gguf = open_committed("mm2-dense-f32.gguf");
  const auto* raw_q = gguf.find_tensor("blk.1.attn_q.weight");
  REQUIRE(raw_q != nullptr);
  const std::vector<std::byte> as_read(gguf.tensor_data(*raw_q).begin(), gguf.tensor_data(*raw_q).end());
  const io::TensorTable table = io::gguf::tensor_table(gguf);
  const Config config = Config::from_json(io::gguf::config_json(gguf), &table, gguf.source());
  const io::TensorTable hf = io::read_safetensors_checkpoint(data_dir() / "golden" / "mm2-dense-f32");
  for (int layer = 0; layer < config.num_hidden_layers; ++layer) {
    for (const std::string proj : {"q_proj", "k_proj"}) {
      const std::string name = "model.layers." + std::to_string(layer) + ".self_attn." + proj + ".weight";
      CAPTURE(name);
      const auto* raw = gguf.find_tensor("blk." + std::to_string(layer) + (proj == "q_proj" ? ".attn_q.weight" : ".attn_k.weight"));
      REQUIRE(raw != nullptr);
      // A view of the file's bytes (no buffer of its own), now in HF's row order.
      const auto& ours = table.require(name);
      CHECK(ours.bytes.data() == gguf.tensor_data(*raw).data());
      CHECK(ours.owner == gguf.owner());
      const auto& want = hf.require(name);
      REQUIRE(ours.bytes.size() == want.bytes.size());
      CHECK(std::memcmp(ours.bytes.data(), want.bytes.data(), want.bytes.size()) == 0);
    }
  }
  // The file held another row order: there was a permutation to undo.
  const auto& want_q = hf.require("model.layers.1.self_attn.q_proj.weight");
  CHECK(std::memcmp(as_read.data(), want_q.bytes.data(), want_q.bytes.size()) != 0);
  // Undone once: the table read again, through a copy of the File too, is the same.
  const io::gguf::File copy = gguf;
  for (const io::gguf::File* f : {&gguf, &copy}) {
    const io::TensorTable again = io::gguf::tensor_table(*f);
    CHECK(std::memcmp(again.require("model.layers.1.self_attn.q_proj.weight").bytes.data(), want_q.bytes.data(),
                      want_q.bytes.size()) == 0);
  }
  // The logits are those of the same weights stored in HF's order, bit for bit.
  const std::vector<int32_t> ids{1, 7, 42, 3, 99, 250};
  const auto from_gguf = MiniMindForCausalLM<float>::from_tensors(config, table, one_thread());
  const auto from_hf = MiniMindForCausalLM<float>::from_tensors(config, hf, one_thread());
  CHECK(max_abs_diff(from_gguf.forward(ids), from_hf.forward(ids)) == 0);

  // A file of llama-quantize's (Q4_0 blocks): its q and k are held as stored, in the file.
  const auto quantized = io::gguf::File::open(formats_dir() / "llamacpp" / "mm2-256-q4_0.gguf");
  const auto model = gguf_model(quantized);
  const auto& attention = model.model.layers[0].self_attn;
  for (const auto& held : {std::pair{&attention.q_proj, "blk.0.attn_q.weight"}, {&attention.k_proj, "blk.0.attn_k.weight"}}) {
    const std::string name = held.second;
    CAPTURE(name);
    REQUIRE(held.first->format() == WeightFormat::Ggml);
    CHECK(held.first->format_view<kernels::ggml::Format>().data == quantized.tensor_data(*quantized.find_tensor(name)).data());
  }
  // qwen3 has no permutation: its q rows are the file's bytes, as read.
  const auto qwen = open_committed("mm3-dense-f32.gguf");
  const auto* qwen_q = qwen.find_tensor("blk.0.attn_q.weight");
  const std::vector<std::byte> qwen_read(qwen.tensor_data(*qwen_q).begin(), qwen.tensor_data(*qwen_q).end());
  const io::TensorTable qt = io::gguf::tensor_table(qwen);
  const auto& q = qt.require("model.layers.0.self_attn.q_proj.weight");
  CHECK(q.bytes.data() == qwen.tensor_data(*qwen_q).data());
  CHECK(std::memcmp(q.bytes.data(), qwen_read.data(), qwen_read.size()) == 0);
}

TEST_CASE("beside quantized matrices held as stored, a GGUF's f32 norms are viewed in the file too, whatever the format") {
  const auto file = io::gguf::File::open(formats_dir() / "llamacpp" / "mm3-256-q4_k_m.gguf");
  for (const WeightFormat format : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::Q8}) {
    CAPTURE(format_name(format));
    LoadOptions options = one_thread();
    options.format = format;
    const auto model = gguf_model(file, options);
    CHECK(model.model.norm.weight().is_view());
    CHECK(model.model.layers[1].input_layernorm.weight().is_view());
    CHECK(model.model.layers[1].self_attn.q_norm->weight().is_view());
    // Widened, the matrices leave the file behind, so the norms do not keep it alive.
    options.quantized_as_stored = false;
    if (format != WeightFormat::F32) CHECK_FALSE(gguf_model(file, options).model.norm.weight().is_view());
  }
}

TEST_CASE("F32, F16 and BF16 tensors are viewed in the mapped file; the model uses them in place") {
  for (const std::string name : {"mm3-dense-f32.gguf", "f16-f16.gguf", "bf16-bf16.gguf"}) {
    CAPTURE(name);
    const auto gguf = open_committed(name);
    const io::TensorTable table = io::gguf::tensor_table(gguf);
    const auto& embed = table.require("model.embed_tokens.weight");
    CHECK(embed.bytes.data() == gguf.tensor_data(*gguf.find_tensor("token_embd.weight")).data());
    CHECK(embed.owner == gguf.owner());
  }
  LoadOptions row_major = one_thread();
  row_major.f32_panels = false;  // (held in f32_panels, the weights are a copy in another layout)
  const auto model = gguf_model(open_committed("mm3-dense-f32.gguf"), row_major);
  CHECK(model.model.embed_tokens.weight().is_view());
}

TEST_CASE("a file's tensor data is moved onto a cache line, wherever its data section starts, and keeps its values") {
  const auto dir = scratch_dir("gguf_alignment");
  const std::vector<int32_t> ids{1, 3, 4};
  std::string plain = tiny_llama().image();
  const MatrixRM<float> expected = gguf_model(io::gguf::File::parse(as_bytes(plain), "tiny.gguf", nullptr)).forward(ids);
  std::set<uint64_t> starts;  // the data sections' offsets in the files, modulo a line
  for (size_t pad = 0; pad < 64; pad += 8) {
    CAPTURE(pad);
    const auto path = dir / "tiny.gguf";
    write_file(path, tiny_llama().add_string("test.padding", std::string(pad, 'x')).image());
    const auto file = io::gguf::File::open(path);
    starts.insert(file.data_offset() % 64);
    const auto& first = file.tensors().front();
    REQUIRE(first.offset == 0);
    CHECK(reinterpret_cast<uintptr_t>(file.tensor_data(first).data()) % 64 == 0);
    CHECK(max_abs_diff(gguf_model(file).forward(ids), expected) == 0);
  }
  CHECK(starts == std::set<uint64_t>{0, 32});  // both: the files the test wrote needed the move and did not
}

TEST_CASE("Q8_0 and Q4_0 values are within one quantization step of the source weights") {
  struct Case {
    const char* file;
    const char* reference;
    double steps;  // |x - dequantized| <= steps * |d|, d the block's f16 scale
  };
  // Q8_0: half a step from rounding, plus the f16 rounding of d (127 * 2^-11 of a step).
  // Q4_0: the value of largest magnitude is exact; the far end clips by up to one step.
  for (const Case c : {Case{"quant-mm2-q8_0.gguf", "tests/data/formats/ref/quant-mm2", 0.5 + 127.0 / 2048},
                       Case{"demo-q4_0.gguf", "examples/models/demo", 1.0 + 8.0 / 2048}}) {
    CAPTURE(c.file);
    const auto gguf = open_committed(c.file);
    const io::TensorTable table = io::gguf::tensor_table(gguf);
    const io::TensorTable ref = io::read_safetensors_checkpoint(source_dir() / c.reference);
    const bool q8 = std::string(c.file).find("q8_0") != std::string::npos;
    size_t checked = 0;
    for (const auto& info : gguf.tensors()) {
      // llama's q/k rows are permuted in the file; every other tensor's element i is HF's element i.
      const auto target = io::gguf::detail::map_name(info.name, true);
      if (info.type != (q8 ? 8u : 2u) || !target || target->permute != io::gguf::detail::Target::Permute::None) continue;
      // Held as stored: the table's bytes are the file's blocks, in place.
      CHECK(table.require(target->name).bytes.data() == gguf.tensor_data(info).data());
      std::vector<float> values(static_cast<size_t>(info.numel()));
      io::gguf::dequantize(gguf, info, values.data());
      const float* got = values.data();
      const float* want = reinterpret_cast<const float*>(ref.require(target->name).bytes.data());
      const std::byte* blocks = gguf.tensor_data(info).data();
      const size_t block_bytes = q8 ? 34 : 18;
      double worst = 0;
      for (uint64_t i = 0; i < info.numel(); ++i) {
        uint16_t bits;
        std::memcpy(&bits, blocks + (i / 32) * block_bytes, 2);
        const float d = kernels::ggml::half_to_float(bits);
        worst = worse(worst, static_cast<double>(std::abs(got[i] - want[i]) / std::max(std::abs(d), 1e-30f)));
        ++checked;
      }
      CAPTURE(info.name);
      CHECK(worst <= c.steps);
    }
    CHECK(checked > 0);
  }
}

TEST_CASE("hyper-parameters come from the metadata") {
  SUBCASE("llama with YaRN: MiniMind2's rule") {
    const auto gguf = open_committed("mm2-yarn-f32.gguf");
    const auto table = io::gguf::tensor_table(gguf);
    const Config c = Config::from_json(io::gguf::config_json(gguf), &table, "mm2-yarn");
    CHECK(c.architecture == "LlamaForCausalLM");
    CHECK(c.generation == Generation::MiniMind2);
    CHECK_FALSE(c.use_qk_norm);
    REQUIRE(c.rope_scaling);
    CHECK(c.rope_scaling->rule == YarnRule::MiniMind2);
    CHECK(c.rope_scaling->factor == 4);
    CHECK(c.rope_scaling->original_max_position_embeddings == 2048);
    CHECK(c.rms_norm_eps == doctest::Approx(1e-5));
  }
  SUBCASE("qwen3 with YaRN: the ramp rule and its attention factor") {
    const auto gguf = open_committed("mm3-yarn-f32.gguf");
    const auto table = io::gguf::tensor_table(gguf);
    const Config c = Config::from_json(io::gguf::config_json(gguf), &table, "mm3-yarn");
    CHECK(c.generation == Generation::MiniMind3);
    REQUIRE(c.rope_scaling);
    CHECK(c.rope_scaling->rule == YarnRule::Ramp);
    CHECK(c.rope_scaling->attention_factor == doctest::Approx(1.2));
    CHECK(c.max_position_embeddings == 8192);
  }
  SUBCASE("qwen3moe: experts split out of the 3-D tensors") {
    const auto gguf = open_committed("mm3-moe-f32.gguf");
    const auto table = io::gguf::tensor_table(gguf);
    const Config c = Config::from_json(io::gguf::config_json(gguf), &table, "mm3-moe");
    CHECK(c.architecture == "Qwen3MoeForCausalLM");
    CHECK(c.num_experts == 4);
    CHECK(c.num_experts_per_tok == 2);
    CHECK(c.moe_intermediate_size == 16);
    CHECK(c.intermediate_size == 32);
    CHECK(table.require("model.layers.1.mlp.experts.3.down_proj.weight").shape == std::vector<int64_t>{16, 16});
    CHECK(table.require("model.layers.1.mlp.gate.weight").shape == std::vector<int64_t>{4, 16});
  }
  SUBCASE("llama with experts and a shared expert: MiniMind2 MoE") {
    const auto gguf = open_committed("mm2-moe-f32.gguf");
    const auto table = io::gguf::tensor_table(gguf);
    const Config c = Config::from_json(io::gguf::config_json(gguf), &table, "mm2-moe");
    CHECK(c.architecture == "MiniMindForCausalLM");
    CHECK(c.generation == Generation::MiniMind2);
    CHECK(c.num_experts == 4);
    CHECK(c.n_shared_experts == 1);
    CHECK_FALSE(c.normalize_single_expert);
    CHECK(table.contains("model.layers.0.mlp.shared_experts.0.up_proj.weight"));
  }
  SUBCASE("tying: no output tensor, or one equal to the embedding, is tied; a different one is not") {
    CHECK(io::gguf::config_json(open_committed("mm3-dense-f32.gguf"))["tie_word_embeddings"] == true);
    CHECK(io::gguf::config_json(open_committed("tied-lm-head-stored-f32.gguf"))["tie_word_embeddings"] == true);
    CHECK(io::gguf::config_json(open_committed("untied-f32.gguf"))["tie_word_embeddings"] == false);
    const auto gguf = open_committed("tied-lm-head-stored-f32.gguf");
    CHECK(gguf_model(gguf).is_tied());
  }
  SUBCASE("general.alignment other than 32") {
    const auto gguf = open_committed("mha-f32.gguf");
    CHECK(gguf.alignment() == 64);
    CHECK(gguf.data_offset() % 64 == 0);
  }
}

TEST_CASE("the tokenizer from GGUF metadata: a tiny one trained by tools/make_formats.py") {
  for (const auto& entry : formats_manifest().at("tokenizers")) {
    if (!entry.contains("expected")) continue;
    const auto gguf = io::gguf::File::open(repo_path(entry.at("file")));
    const auto json = io::gguf::tokenizer_json(gguf);
    REQUIRE(json);
    const io::Json config = io::gguf::tokenizer_config_json(gguf);
    const Tokenizer tok = Tokenizer::from_json(*json, gguf.source(), &config);
    CHECK(tok.adds_bos());
    CHECK(tok.bos_id() == 1);
    CHECK(tok.eos_id() == 2);
    CHECK_FALSE(tok.chat_template().empty());
    for (const auto& e : entry.at("expected")) {
      const std::string text = e.at("text").get<std::string>();
      CAPTURE(text);
      const auto ids = tok.encode(text);
      CHECK(ids == e.at("ids").get<std::vector<int32_t>>());
      CHECK(tok.decode(std::vector<int32_t>(ids.begin() + 1, ids.end())) == text);
    }
    // CONTROL tokens are special (skipped when asked); USER_DEFINED ones are added but not special.
    CHECK(tok.is_special(*tok.token_to_id("<|im_end|>")));
    for (const auto& t : entry.at("user_defined")) {
      const auto id = tok.token_to_id(t.get<std::string>());
      REQUIRE(id);
      CHECK_FALSE(tok.is_special(*id));
      CHECK(tok.encode("x" + t.get<std::string>() + "x")[2] == *id);
    }
  }
}

TEST_CASE("the tokenizer from GGUF metadata: the demo model's, id for id with its tokenizer.json") {
  const auto gguf = open_committed("demo-q4_0.gguf");
  const auto json = io::gguf::tokenizer_json(gguf);
  REQUIRE(json);
  const io::Json config = io::gguf::tokenizer_config_json(gguf);
  const Tokenizer from_gguf = Tokenizer::from_json(*json, gguf.source(), &config);
  const auto demo = source_dir() / "examples" / "models" / "demo";
  const Tokenizer from_json = Tokenizer::from_pretrained(demo);
  CHECK(from_gguf.vocab_size() == from_json.vocab_size());
  CHECK(from_gguf.chat_template() == from_json.chat_template());
  CHECK(from_gguf.eos_id() == from_json.eos_id());
  const auto golden = io::read_json_file(demo / "golden.json");
  for (const auto& p : golden.at("prompts")) {
    const std::string text = p.at("text").get<std::string>();
    CAPTURE(text);
    CHECK(from_gguf.encode(text) == p.at("ids").get<std::vector<int32_t>>());
  }
  for (const std::string text : {"今天天气很好，我们去公园散步。", "The cat eats fish.\n\n  2024 年", "<|im_start|>user\nhi<|im_end|>"}) {
    CHECK(from_gguf.encode(text) == from_json.encode(text));
  }
}

TEST_CASE("the tokenizer from GGUF metadata: MiniMind2's, on the shared golden lines") {
  const auto file = formats_dir() / "gguf" / "minimind2-tokenizer.gguf";
  const auto lines = shared_dir("golden/tokenizer/minimind2.jsonl");
  if (!lines) return;
  REQUIRE(std::filesystem::exists(file));
  const auto gguf = io::gguf::File::open(file);
  CHECK(gguf.get_string("tokenizer.ggml.pre") == "qwen2");  // written, and deliberately not used
  const auto json = io::gguf::tokenizer_json(gguf);
  REQUIRE(json);
  const io::Json config = io::gguf::tokenizer_config_json(gguf);
  const Tokenizer tok = Tokenizer::from_json(*json, gguf.source(), &config);
  std::ifstream in(*lines);
  std::string line;
  size_t n = 0, same = 0;
  while (std::getline(in, line)) {
    const auto record = io::parse_json(line, lines->string());
    ++n;
    same += tok.encode(record.at("text").get<std::string>()) == record.at("ids").get<std::vector<int32_t>>();
  }
  MESSAGE("minimind2-tokenizer.gguf: " << same << "/" << n << " golden lines id for id");
  CHECK(n > 0);
  CHECK(same == n);
}

TEST_CASE("an in-memory GGUF (the bad-input tests' base) loads") {
  std::string image = tiny_llama().image();
  const auto file = io::gguf::File::parse(as_bytes(image), "tiny.gguf", nullptr);
  CHECK(file.version() == 3);
  CHECK(file.tensors().size() == 11);
  const auto model = gguf_model(file);
  CHECK(model.config().hidden_size == 8);
  CHECK(model.forward(std::vector<int32_t>{1, 3, 4}).rows() == 3);
  const Tokenizer tok = Tokenizer::from_json(*io::gguf::tokenizer_json(file), "tiny.gguf");
  CHECK(tok.encode("ab a") == std::vector<int32_t>{6, 8});
}

// ---- bad input: each a minimind::Error naming what is wrong ----

TEST_CASE("truncated GGUF files, at every eighth of their length") {
  for (const std::string name : {"mm2-dense-f32.gguf", "demo-q4_0.gguf", "tiny-tokenizer.gguf"}) {
    const std::string image = read_file(formats_dir() / "gguf" / name);
    load_everything(image, name);  // whole, it loads
    for (const auto& prefix : truncations(image)) {
      CAPTURE(name);
      CAPTURE(prefix.size());
      CHECK_THROWS_AS(load_everything(prefix, name), Error);
    }
  }
  std::string image = tiny_llama().image();
  CHECK_THROWS_WITH_AS(load_everything(image.substr(0, 20)), doctest::Contains("metadata count"), Error);
}

TEST_CASE("bad magic and unsupported versions") {
  Image i = image_of(tiny_llama());
  i.bytes.replace(0, 4, "GGML");
  check_refused(i, "not a GGUF file");
  for (uint32_t version : {1u, 4u, 0x03000000u}) {
    CAPTURE(version);
    check_refused(image_of(tiny_llama()).put<uint32_t>(4, version), "at byte 4");
  }
  check_refused(image_of(tiny_llama()).put<uint32_t>(4, 0x03000000u), "big-endian");
  CHECK_NOTHROW(load_everything(image_of(tiny_llama()).put<uint32_t>(4, 2).bytes));  // v2 has the same layout
}

TEST_CASE("counts and lengths larger than the file") {
  check_refused(image_of(tiny_llama()).put<uint64_t>(16, uint64_t{1} << 60), "metadata count");
  check_refused(image_of(tiny_llama()).put<uint64_t>(8, 1000000), "tensor count");
  check_refused(image_of(tiny_llama()).put<uint64_t>(24, uint64_t{1} << 62), "string length 4611686018427387904 exceeds");  // a key's
  Image i = image_of(tiny_llama().add_string("general.name", "x"));
  check_refused(i.put<uint64_t>(i.type_of("general.name") + 4, ~uint64_t{0}), "metadata \"general.name\": string length");
  i = image_of(tiny_llama().add_i32s("big.array", {}));
  i.put<uint32_t>(i.type_of("big.array") + 4, static_cast<uint32_t>(io::gguf::ValueType::UINT32));
  check_refused(i.put<uint64_t>(i.type_of("big.array") + 8, uint64_t{1} << 40), "array of 1099511627776 uint32 elements is larger");
  i = image_of(tiny_llama());
  const size_t dims = i.dims_of("token_embd.weight");
  check_refused(i.put<uint64_t>(dims + 4, uint64_t{1} << 40).put<uint64_t>(dims + 12, uint64_t{1} << 40), "shape is larger than the file");
  i = image_of(tiny_llama());
  check_refused(i.put<uint32_t>(i.dims_of("token_embd.weight"), 5), "5 dimensions");
}

TEST_CASE("unknown value and tensor types") {
  Image i = image_of(tiny_llama().add_u8("x", 0));
  check_refused(i.put<uint32_t>(i.type_of("x"), 13), "unknown metadata value type 13");
  i = image_of(tiny_llama().add_i32s("x", {1}));
  check_refused(i.put<uint32_t>(i.type_of("x") + 4, 99), "unknown array element type 99");
  i = image_of(tiny_llama());
  check_refused(i.put<uint32_t>(i.type_of_tensor("blk.0.attn_q.weight", 2), 99), "tensor \"blk.0.attn_q.weight\": unknown ggml type 99");
  i = image_of(tiny_llama().add_bool("x", true));
  check_refused(i.put<uint8_t>(i.type_of("x") + 4, 2), "bool value 2");
}

TEST_CASE("known but unsupported tensor types are refused by name") {
  auto g = tiny_llama();  // IQ2_XXS rows are 256 long
  g.erase_tensor("blk.0.ffn_up.weight").add_tensor_bytes("blk.0.ffn_up.weight", {16, 256}, 16, std::vector<std::byte>(16 * 66));
  CHECK_THROWS_WITH_AS(load_everything(g.image()),
                       doctest::Contains("tensor \"blk.0.ffn_up.weight\": ggml type IQ2_XXS is not supported (F32, F16, BF16, "
                                         "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS are)"),
                       Error);
  Image i = image_of(tiny_llama());
  i.put<uint32_t>(i.type_of_tensor("blk.0.ffn_up.weight", 2), 8);  // Q8_0 with rows of 8: not whole blocks
  check_refused(i, "row length 8 is not a multiple of the Q8_0 block size 32");
  i = image_of(tiny_llama());
  i.put<uint32_t>(i.type_of_tensor("blk.0.ffn_up.weight", 2), 14);  // Q6_K: rows of 256
  check_refused(i, "tensor \"blk.0.ffn_up.weight\": row length 8 is not a multiple of the Q6_K block size 256");
}

TEST_CASE("a quantized block whose scale is infinite or NaN is refused by tensor, block and byte") {
  struct Case {
    uint32_t type;
    int64_t block;                 // values per block, the rows' length here
    size_t block_bytes, scale_at;  // the block's size and where its d (or m / dmin) lies
    uint16_t scale;
  };
  for (const Case c : {Case{2, 32, 18, 0, 0x7C00}, Case{3, 32, 20, 2, 0xFE00}, Case{8, 32, 34, 0, 0xFC00},
                       Case{12, 256, 144, 2, 0x7E00}, Case{14, 256, 210, 208, 0x7C00}, Case{23, 256, 136, 0, 0xFFFF}}) {
    CAPTURE(c.type);
    const size_t blocks = 16, bad = 13;
    std::vector<std::byte> data(blocks * c.block_bytes);
    std::memcpy(data.data() + bad * c.block_bytes + c.scale_at, &c.scale, 2);
    auto g = tiny_llama();
    g.erase_tensor("blk.0.ffn_up.weight").add_tensor_bytes("blk.0.ffn_up.weight", {16, c.block}, c.type, std::move(data));
    std::string image = g.image();
    const auto file = io::gguf::File::parse(as_bytes(image), "test.gguf", nullptr);
    const auto* info = file.find_tensor("blk.0.ffn_up.weight");
    const std::string message = "test.gguf: tensor \"blk.0.ffn_up.weight\": " + std::string(info->type_name()) + " block " +
                                std::to_string(bad) + " (at byte " + std::to_string(file.data_offset() + info->offset + bad * c.block_bytes) +
                                ") has a scale that is not finite";
    CHECK_THROWS_WITH_AS(load_everything(image), message.c_str(), Error);
  }
}

TEST_CASE("tensor data out of range, misaligned or overlapping") {
  const std::string plain = tiny_llama().image();
  Image i{plain};
  check_refused(i.put<uint64_t>(i.offset_of("output_norm.weight", 1), 1 << 20), "data [1048576, +32) lies outside the");
  i = Image{plain};
  check_refused(i.put<uint64_t>(i.offset_of("blk.0.attn_norm.weight", 1), 4), "data offset 4 is not a multiple of the alignment 32");
  i = Image{plain};
  check_refused(i.put<uint64_t>(i.offset_of("blk.0.attn_norm.weight", 1), 0), "overlap");  // on top of token_embd
  // A file cut inside the last tensor: the header is whole, the data is not.
  check_refused(plain.substr(0, plain.size() - 4), "tensor \"output_norm.weight\": data");
}

TEST_CASE("bad general.alignment") {
  for (uint32_t a : {3u, 48u}) {
    CAPTURE(a);
    const std::string message = "alignment " + std::to_string(a) + " is not a power of two";
    CHECK_THROWS_WITH_AS(GgufWriter{a}, doctest::Contains(message.c_str()), Error);
  }
  for (uint32_t a : {0u, 3u, 48u}) {
    Image i = image_of(tiny_llama().add_u32("general.alignment", 32));
    CAPTURE(a);
    check_refused(i.put<uint32_t>(i.type_of("general.alignment") + 4, a), "not a power of two");
  }
  check_refused(tiny_llama().add_string("general.alignment", "32"), "general.alignment\": must be a uint32");
}

TEST_CASE("metadata that does not describe a MiniMind model") {
  check_refused(tiny_llama().erase("general.architecture").add_string("general.architecture", "gpt2"),
                "\"gpt2\" is not supported (llama, qwen3, qwen3moe)");
  check_refused(tiny_llama().erase("llama.block_count"), "metadata \"llama.block_count\" is missing");
  check_refused(tiny_llama().erase("llama.embedding_length").add_string("llama.embedding_length", "8"),
                "llama.embedding_length\": must be an integer, not string");
  CHECK_THROWS_WITH_AS(tiny_llama().add_u32("llama.block_count", 1), doctest::Contains("\"llama.block_count\" is added twice"), Error);
  check_refused(image_of(tiny_llama().add_u32("llama.block_counX", 1)).rename("llama.block_counX", "llama.block_count"),
                "metadata \"llama.block_count\" appears twice");
  check_refused(tiny_llama().add_string("llama.rope.scaling.type", "linear"), "\"linear\" is not supported");
  check_refused(tiny_llama().add_u32("llama.rope.dimension_count", 2), "partial RoPE");
  check_refused(tiny_llama().add_tensor_bytes("blk.0.attn_q.bias", {8}, 0, std::vector<std::byte>(32)),
                "tensor \"blk.0.attn_q.bias\" has no MiniMind counterpart");
  CHECK_THROWS_WITH_AS(tiny_llama().add_tensor_bytes("blk.0.attn_norm.weight", {8}, 0, std::vector<std::byte>(32)),
                       doctest::Contains("\"blk.0.attn_norm.weight\" is added twice"), Error);
  check_refused(image_of(tiny_llama().add_tensor_bytes("blk.0.attn_norm.weighX", {8}, 0, std::vector<std::byte>(32)))
                    .rename("blk.0.attn_norm.weighX", "blk.0.attn_norm.weight"),
                "tensor \"blk.0.attn_norm.weight\" appears twice");
  check_refused(tiny_llama().erase("llama.attention.head_count").add_u32("llama.attention.head_count", 3),
                "cannot be split into 3 heads");  // 8 q rows in 3 heads
  auto g = tiny_llama();
  g.erase_tensor("blk.0.attn_k.weight").add_tensor_bytes("blk.0.attn_k.weight", {8, 8}, 0, std::vector<std::byte>(256));
  check_refused(g, "k_proj");  // the config implies 4 rows of k
}

TEST_CASE("broken tokenizer metadata") {
  check_refused(tiny_llama().erase("tokenizer.ggml.model").add_string("tokenizer.ggml.model", "llama"),
                "\"llama\" is not supported (only gpt2");
  auto g = tiny_llama();
  g.erase("tokenizer.ggml.tokens").add_strings("tokenizer.ggml.tokens", {"a", "b", "a"});
  g.erase("tokenizer.ggml.token_type").erase("tokenizer.ggml.merges").add_strings("tokenizer.ggml.merges", {});
  g.erase("tokenizer.ggml.bos_token_id").erase("tokenizer.ggml.eos_token_id");
  check_refused(g, "\"a\" appears at ids 0 and 2");
  check_refused(tiny_llama().erase("tokenizer.ggml.token_type").add_i32s("tokenizer.ggml.token_type", {1, 1}),
                "2 entries for 16 tokens");
  g = tiny_llama();
  g.erase("tokenizer.ggml.tokens").add_strings("tokenizer.ggml.tokens", {"a", "\xff\xfe", "ab", "b"});
  g.erase("tokenizer.ggml.token_type").erase("tokenizer.ggml.bos_token_id").erase("tokenizer.ggml.eos_token_id");
  check_refused(g, "tokenizer.ggml.tokens\"[1]: invalid UTF-8");
  check_refused(tiny_llama().erase("tokenizer.ggml.eos_token_id").add_u32("tokenizer.ggml.eos_token_id", 99),
                "id 99 is not a token id (16 tokens)");
  check_refused(tiny_llama().erase("tokenizer.ggml.merges").add_strings("tokenizer.ggml.merges", {"a zz"}),
                "'zz' is not in model.vocab");
  check_refused(tiny_llama().erase("tokenizer.ggml.merges"), "tokenizer.ggml.merges\" is missing");
}
