// GGUF files (io/gguf.hpp, io/gguf_model.hpp): the committed files of every architecture and type
// give the safetensors path's logits (F32 and F16 exactly; Q8_0 / Q4_0 with the same top-1 and a
// stated bound), the tokenizer from the metadata encodes like tokenizer.json, and every kind of
// broken file is refused with an Error that says what and where.
#include <doctest/doctest.h>
#include <minimind/detail/io/gguf.hpp>
#include <minimind/detail/io/gguf_model.hpp>
#include <minimind/minimind.hpp>
#include <minimind/tokenizer.hpp>

#include "format_files.hpp"
#include "gguf_builder.hpp"

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

// The builder's image must be refused with an Error whose message contains `message`.
void check_refused(const GgufBuilder& g, const char* message) {
  CAPTURE(message);
  CHECK_THROWS_WITH_AS(load_everything(g.build()), doctest::Contains(message), Error);
}

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
    // Held as stored, the activations are rounded to int16 per block of 32 (kernels/ggml.hpp).
    const double relative_l2 = std::sqrt(diff2 / ref2);
    MESSAGE(file << " held as stored: max |logit diff| " << stored_worst << ", relative L2 " << relative_l2
                 << " vs widened to f32");
    CHECK(relative_l2 <= 1e-4);
    CHECK(stored.weight_bytes() * 10 < model.weight_bytes() * 3);  // 4-bit blocks, not floats
  }
  // What the presets wrote for these shapes (the list): all of it was read above.
  CHECK(types_seen == std::set<std::string>{"F32", "Q4_0", "Q4_K", "Q5_0", "Q6_K", "Q8_0"});
}

TEST_CASE("llama's q/k row permutation is undone exactly") {
  const auto gguf = open_committed("mm2-dense-f32.gguf");
  const io::TensorTable table = io::gguf::tensor_table(gguf);
  // The rows are written into new buffers, each on a cache line (a heap buffer lies 16 bytes off
  // one as often as not, and every load of the decode kernels then straddles two).
  const Config config = Config::from_json(io::gguf::config_json(gguf), &table, gguf.source());
  for (int layer = 0; layer < config.num_hidden_layers; ++layer) {
    for (const std::string proj : {"q_proj", "k_proj"}) {
      const auto& t = table.require("model.layers." + std::to_string(layer) + ".self_attn." + proj + ".weight");
      CHECK(reinterpret_cast<uintptr_t>(t.bytes.data()) % kCacheLine == 0);
    }
  }
  const io::TensorTable hf = io::read_safetensors_checkpoint(data_dir() / "golden" / "mm2-dense-f32");
  for (const std::string proj : {"q_proj", "k_proj"}) {
    const std::string name = "model.layers.1.self_attn." + proj + ".weight";
    CAPTURE(name);
    const auto& ours = table.require(name);
    const auto& want = hf.require(name);
    REQUIRE(ours.bytes.size() == want.bytes.size());
    CHECK(std::memcmp(ours.bytes.data(), want.bytes.data(), want.bytes.size()) == 0);
    // The file itself holds other row orders: the permutation was there to undo.
    const auto* raw = gguf.find_tensor(proj == "q_proj" ? "blk.1.attn_q.weight" : "blk.1.attn_k.weight");
    REQUIRE(raw != nullptr);
    CHECK(std::memcmp(gguf.tensor_data(*raw).data(), want.bytes.data(), want.bytes.size()) != 0);
  }
  // qwen3 has no permutation: its q rows are the file's bytes, in place.
  const auto qwen = open_committed("mm3-dense-f32.gguf");
  const io::TensorTable qt = io::gguf::tensor_table(qwen);
  const auto& q = qt.require("model.layers.0.self_attn.q_proj.weight");
  CHECK(q.bytes.data() == qwen.tensor_data(*qwen.find_tensor("blk.0.attn_q.weight")).data());
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
  std::string plain = GgufBuilder::tiny_llama().build();
  const MatrixRM<float> expected = gguf_model(io::gguf::File::parse(as_bytes(plain), "tiny.gguf", nullptr)).forward(ids);
  std::set<uint64_t> starts;  // the data sections' offsets in the files, modulo a line
  for (size_t pad = 0; pad < 64; pad += 8) {
    CAPTURE(pad);
    const auto path = dir / "tiny.gguf";
    write_file(path, GgufBuilder::tiny_llama().kv_str("test.padding", std::string(pad, 'x')).build());
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
  std::string image = GgufBuilder::tiny_llama().build();
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
  std::string image = GgufBuilder::tiny_llama().build();
  CHECK_THROWS_WITH_AS(load_everything(image.substr(0, 20)), doctest::Contains("metadata count"), Error);
}

TEST_CASE("bad magic and unsupported versions") {
  auto g = GgufBuilder::tiny_llama();
  g.magic = "GGML";
  check_refused(g, "not a GGUF file");
  for (uint32_t version : {1u, 4u, 0x03000000u}) {
    g = GgufBuilder::tiny_llama();
    g.version = version;
    CAPTURE(version);
    check_refused(g, "at byte 4");
  }
  g.version = 0x03000000u;
  check_refused(g, "big-endian");
  g.version = 2;  // v2 has the same layout
  CHECK_NOTHROW(load_everything(g.build()));
}

TEST_CASE("counts and lengths larger than the file") {
  auto g = GgufBuilder::tiny_llama();
  g.kv_count = uint64_t{1} << 60;
  check_refused(g, "metadata count");
  g = GgufBuilder::tiny_llama();
  g.tensor_count = 1000000;
  check_refused(g, "tensor count");
  g = GgufBuilder::tiny_llama();
  g.kvs.insert(g.kvs.begin(), GgufBuilder::u64(uint64_t{1} << 62) + "key");  // a key's length
  check_refused(g, "string length 4611686018427387904 exceeds");
  g = GgufBuilder::tiny_llama();
  g.kv("general.name", GgufBuilder::STRING, GgufBuilder::u64(~uint64_t{0}) + "x");
  check_refused(g, "metadata \"general.name\": string length");
  g = GgufBuilder::tiny_llama();
  g.kv("big.array", GgufBuilder::ARRAY, GgufBuilder::u32(GgufBuilder::U32) + GgufBuilder::u64(uint64_t{1} << 40));
  check_refused(g, "array of 1099511627776 uint32 elements is larger");
  g = GgufBuilder::tiny_llama();
  g.tensors[0].dims = {uint64_t{1} << 40, uint64_t{1} << 40};
  check_refused(g, "shape is larger than the file");
  g = GgufBuilder::tiny_llama();
  g.tensors[0].dims = {8, 16, 1, 1, 1};
  check_refused(g, "5 dimensions");
}

TEST_CASE("unknown value and tensor types") {
  auto g = GgufBuilder::tiny_llama();
  g.kv("x", 13, "");
  check_refused(g, "unknown metadata value type 13");
  g = GgufBuilder::tiny_llama();
  g.kv("x", GgufBuilder::ARRAY, GgufBuilder::u32(99) + GgufBuilder::u64(1));
  check_refused(g, "unknown array element type 99");
  g = GgufBuilder::tiny_llama();
  g.tensors[2].type = 99;
  check_refused(g, "tensor \"blk.0.attn_q.weight\": unknown ggml type 99");
  g = GgufBuilder::tiny_llama();
  g.kv("x", GgufBuilder::BOOL, std::string(1, '\x02'));
  check_refused(g, "bool value 2");
}

TEST_CASE("known but unsupported tensor types are refused by name") {
  auto g = GgufBuilder::tiny_llama();
  auto& t = *g.find("blk.0.ffn_up.weight");
  t.dims = {256, 16};  // IQ2_XXS rows are 256 long
  t.type = 16;
  t.data = std::string(16 * 66, '\0');
  CHECK_THROWS_WITH_AS(load_everything(g.build()),
                       doctest::Contains("tensor \"blk.0.ffn_up.weight\": ggml type IQ2_XXS is not supported (F32, F16, BF16, "
                                         "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS are)"),
                       Error);
  g = GgufBuilder::tiny_llama();
  g.find("blk.0.ffn_up.weight")->type = 8;  // Q8_0 with rows of 8: not whole blocks
  check_refused(g, "row length 8 is not a multiple of the Q8_0 block size 32");
  g = GgufBuilder::tiny_llama();
  g.find("blk.0.ffn_up.weight")->type = 14;  // Q6_K: rows of 256
  check_refused(g, "tensor \"blk.0.ffn_up.weight\": row length 8 is not a multiple of the Q6_K block size 256");
}

TEST_CASE("a quantized block whose scale is infinite or NaN is refused by tensor, block and byte") {
  struct Case {
    uint32_t type;
    uint64_t block;                // values per block, the rows' length here
    size_t block_bytes, scale_at;  // the block's size and where its d (or m / dmin) lies
    uint16_t scale;
  };
  for (const Case c : {Case{2, 32, 18, 0, 0x7C00}, Case{3, 32, 20, 2, 0xFE00}, Case{8, 32, 34, 0, 0xFC00},
                       Case{12, 256, 144, 2, 0x7E00}, Case{14, 256, 210, 208, 0x7C00}, Case{23, 256, 136, 0, 0xFFFF}}) {
    CAPTURE(c.type);
    auto g = GgufBuilder::tiny_llama();
    auto& t = *g.find("blk.0.ffn_up.weight");
    t.dims = {c.block, 16};
    t.type = c.type;
    const size_t blocks = 16, bad = 13;
    t.data = std::string(blocks * c.block_bytes, '\0');
    std::memcpy(t.data.data() + bad * c.block_bytes + c.scale_at, &c.scale, 2);
    std::string image = g.build();
    const auto file = io::gguf::File::parse(as_bytes(image), "test.gguf", nullptr);
    const auto* info = file.find_tensor("blk.0.ffn_up.weight");
    const std::string message = "test.gguf: tensor \"blk.0.ffn_up.weight\": " + std::string(info->type_name()) + " block " +
                                std::to_string(bad) + " (at byte " + std::to_string(file.data_offset() + info->offset + bad * c.block_bytes) +
                                ") has a scale that is not finite";
    CHECK_THROWS_WITH_AS(load_everything(image), message.c_str(), Error);
  }
}

TEST_CASE("tensor data out of range, misaligned or overlapping") {
  auto g = GgufBuilder::tiny_llama();
  g.tensors.back().offset = 1 << 20;
  std::string beyond = g.build();
  beyond.resize(GgufBuilder::tiny_llama().build().size());  // the file ends where it did
  CHECK_THROWS_WITH_AS(load_everything(beyond), doctest::Contains(": tensor \"output_norm.weight\": data [1048576, +32) lies outside the"), Error);
  g = GgufBuilder::tiny_llama();
  g.tensors[1].offset = 4;
  check_refused(g, "data offset 4 is not a multiple of the alignment 32");
  g = GgufBuilder::tiny_llama();
  g.tensors[1].offset = 0;  // on top of token_embd
  check_refused(g, "overlap");
  // A file cut inside the last tensor: the header is whole, the data is not.
  std::string image = GgufBuilder::tiny_llama().build();
  image.resize(image.size() - 4);
  CHECK_THROWS_WITH_AS(load_everything(image), doctest::Contains("tensor \"output_norm.weight\": data"), Error);
}

TEST_CASE("bad general.alignment") {
  for (uint32_t a : {0u, 3u, 48u}) {
    auto g = GgufBuilder::tiny_llama();
    g.kv_u32("general.alignment", a);
    CAPTURE(a);
    check_refused(g, "not a power of two");
  }
  auto g = GgufBuilder::tiny_llama();
  g.kv_str("general.alignment", "32");
  check_refused(g, "general.alignment\": must be a uint32");
}

TEST_CASE("metadata that does not describe a MiniMind model") {
  auto g = GgufBuilder::tiny_llama();
  g.erase("general.architecture").kv_str("general.architecture", "gpt2");
  check_refused(g, "\"gpt2\" is not supported (llama, qwen3, qwen3moe)");
  g = GgufBuilder::tiny_llama();
  g.erase("llama.block_count");
  check_refused(g, "metadata \"llama.block_count\" is missing");
  g = GgufBuilder::tiny_llama();
  g.erase("llama.embedding_length").kv_str("llama.embedding_length", "8");
  check_refused(g, "llama.embedding_length\": must be an integer, not string");
  g = GgufBuilder::tiny_llama();
  g.kv_u32("llama.block_count", 1);
  check_refused(g, "metadata \"llama.block_count\" appears twice");
  g = GgufBuilder::tiny_llama();
  g.kv_str("llama.rope.scaling.type", "linear");
  check_refused(g, "\"linear\" is not supported");
  g = GgufBuilder::tiny_llama();
  g.kv_u32("llama.rope.dimension_count", 2);
  check_refused(g, "partial RoPE");
  g = GgufBuilder::tiny_llama();
  g.tensors.push_back({"blk.0.attn_q.bias", {8}, 0, std::string(32, '\0'), std::nullopt});
  check_refused(g, "tensor \"blk.0.attn_q.bias\" has no MiniMind counterpart");
  g = GgufBuilder::tiny_llama();
  g.tensors.push_back(g.tensors[1]);
  check_refused(g, "tensor \"blk.0.attn_norm.weight\" appears twice");
  g = GgufBuilder::tiny_llama();
  g.erase("llama.attention.head_count").kv_u32("llama.attention.head_count", 3);  // 8 q rows in 3 heads
  check_refused(g, "cannot be split into 3 heads");
  g = GgufBuilder::tiny_llama();
  g.find("blk.0.attn_k.weight")->dims = {8, 8};  // the config implies 4 rows of k
  g.find("blk.0.attn_k.weight")->data += std::string(128, '\0');
  check_refused(g, "k_proj");
}

TEST_CASE("broken tokenizer metadata") {
  auto g = GgufBuilder::tiny_llama();
  g.erase("tokenizer.ggml.model").kv_str("tokenizer.ggml.model", "llama");
  check_refused(g, "\"llama\" is not supported (only gpt2");
  g = GgufBuilder::tiny_llama();
  g.erase("tokenizer.ggml.tokens").kv_strings("tokenizer.ggml.tokens", {"a", "b", "a"});
  g.erase("tokenizer.ggml.token_type").erase("tokenizer.ggml.merges").kv_strings("tokenizer.ggml.merges", {});
  g.erase("tokenizer.ggml.bos_token_id").erase("tokenizer.ggml.eos_token_id");
  check_refused(g, "\"a\" appears at ids 0 and 2");
  g = GgufBuilder::tiny_llama();
  g.erase("tokenizer.ggml.token_type").kv_i32s("tokenizer.ggml.token_type", {1, 1});
  check_refused(g, "2 entries for 16 tokens");
  g = GgufBuilder::tiny_llama();
  g.erase("tokenizer.ggml.tokens").kv_strings("tokenizer.ggml.tokens", {"a", "\xff\xfe", "ab", "b"});
  g.erase("tokenizer.ggml.token_type").erase("tokenizer.ggml.bos_token_id").erase("tokenizer.ggml.eos_token_id");
  check_refused(g, "tokenizer.ggml.tokens\"[1]: invalid UTF-8");
  g = GgufBuilder::tiny_llama();
  g.erase("tokenizer.ggml.eos_token_id").kv_u32("tokenizer.ggml.eos_token_id", 99);
  check_refused(g, "id 99 is not a token id (16 tokens)");
  g = GgufBuilder::tiny_llama();
  g.erase("tokenizer.ggml.merges").kv_strings("tokenizer.ggml.merges", {"a zz"});
  check_refused(g, "'zz' is not in model.vocab");
  g = GgufBuilder::tiny_llama();
  g.erase("tokenizer.ggml.merges");
  check_refused(g, "tokenizer.ggml.merges\" is missing");
}
