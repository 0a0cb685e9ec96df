// gguf_export.hpp and minimind-convert: the metadata, tensor names, types and bytes are those
// llama.cpp's own converter writes for the same Llama / Qwen3 checkpoint (tests/data/convert,
// made by tools/make_gguf_reference.py); a converted checkpoint of either generation, read back by
// our reader, computes exactly the logits of its source with each matrix rounded or quantized the
// way the file stores it; what llama.cpp cannot run is refused with the reason.
#include <doctest/doctest.h>
#include <minimind/detail/io/gguf.hpp>
#include <minimind/detail/kernels/ggml_kquants.hpp>
#include <minimind/detail/io/gguf_model.hpp>
#include <minimind/gguf_export.hpp>
#include <minimind/minimind.hpp>

#include "checkpoint_writer.hpp"
#include "format_files.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace minimind;
using namespace minimind::testing;

namespace {

uint32_t fnv1a32(std::string_view s) {
  uint32_t h = 0x811C9DC5u;
  for (unsigned char c : s) h = (h ^ c) * 0x01000193u;
  return h;
}
uint64_t fnv1a64(std::span<const std::byte> bytes) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (std::byte b : bytes) h = (h ^ std::to_integer<uint8_t>(b)) * 0x100000001B3ull;
  return h;
}
std::string hex(uint64_t v) {
  char buffer[17];
  std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(v));
  return buffer;
}

// The reference's weights (tools/make_gguf_reference.py's `weights`).
std::string reference_weights(const std::string& name, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  const uint64_t seed = fnv1a32(name);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint64_t bits = (i * 2654435761ull + seed) & 0xFFFFFFFFull;
    v[i] = static_cast<float>(static_cast<double>(bits) / 2147483648.0 - 1.0);
  }
  return f32_bytes(v);
}

// The reference's HF checkpoint, written again: its config, weights and the shared tokenizer.
std::filesystem::path reference_checkpoint(const io::Json& reference, const std::filesystem::path& tokenizer_dir) {
  const io::Json& c = reference.at("config");
  const int64_t h = c["hidden_size"], heads = c["num_attention_heads"], kv = c["num_key_value_heads"];
  const int64_t hd = c.contains("head_dim") ? c["head_dim"].get<int64_t>() : h / heads;
  const int64_t ff = c["intermediate_size"], vocab = c["vocab_size"];
  const bool qk_norm = c.contains("head_dim");
  std::vector<TensorBytes> tensors;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    tensors.emplace_back(name, shape, "F32", reference_weights(name, n));
  };
  add("model.embed_tokens.weight", {vocab, h});
  for (int64_t l = 0; l < c["num_hidden_layers"].get<int64_t>(); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {h});
    add(p + "self_attn.q_proj.weight", {heads * hd, h});
    add(p + "self_attn.k_proj.weight", {kv * hd, h});
    add(p + "self_attn.v_proj.weight", {kv * hd, h});
    add(p + "self_attn.o_proj.weight", {h, heads * hd});
    if (qk_norm) add(p + "self_attn.q_norm.weight", {hd}), add(p + "self_attn.k_norm.weight", {hd});
    add(p + "post_attention_layernorm.weight", {h});
    add(p + "mlp.gate_proj.weight", {ff, h});
    add(p + "mlp.up_proj.weight", {ff, h});
    add(p + "mlp.down_proj.weight", {h, ff});
  }
  add("model.norm.weight", {h});
  const auto dir = write_checkpoint("gguf_export_" + c["model_type"].get<std::string>(), c, safetensors_image(tensors));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) write_file(dir / f, read_file(tokenizer_dir / f));
  return dir;
}

// One metadata value as the reference records it.
io::Json describe(const io::gguf::File& f, const std::string& key) {
  const io::gguf::Value& v = *f.find(key);
  static const char* const names[] = {"UINT8", "INT8",   "UINT16", "INT16", "UINT32", "INT32",  "FLOAT32",
                                      "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64", "FLOAT64"};
  io::Json out = {{"type", names[static_cast<uint32_t>(v.type)]}};
  if (v.type == io::gguf::ValueType::ARRAY) {
    out["element_type"] = names[static_cast<uint32_t>(v.element_type)];
    out["count"] = v.count;
    std::string encoded;  // FNV-1a 64 of the elements, as the reference hashes them
    io::Json all = io::Json::array();
    if (v.element_type == io::gguf::ValueType::STRING) {
      for (auto s : v.strings) encoded.append(s).push_back('\0'), all.push_back(std::string(s));
    } else {
      const std::vector<int64_t> ints = *f.get_ints(key);
      for (int64_t i : ints) {
        const auto i32 = static_cast<int32_t>(i);
        encoded.append(reinterpret_cast<const char*>(&i32), 4);
        all.push_back(i);
      }
    }
    out["fnv1a64"] = hex(fnv1a64(std::as_bytes(std::span(encoded))));
    io::Json first = io::Json::array(), last = io::Json::array();
    const size_t n = all.size(), k = std::min<size_t>(3, n);
    for (size_t i = 0; i < k; ++i) first.push_back(all[i]), last.push_back(all[n - k + i]);
    out["first"] = first;
    out["last"] = last;
  } else if (v.type == io::gguf::ValueType::STRING) {
    out["value"] = *f.get_string(key);
  } else if (v.type == io::gguf::ValueType::BOOL) {
    out["value"] = *f.get_bool(key);
  } else if (v.type == io::gguf::ValueType::FLOAT32) {
    out["value"] = *f.get_float(key);
  } else {
    out["value"] = *f.get_int(key);
  }
  return out;
}

// A checkpoint tensor's GGUF name (gguf_export.hpp's plan), experts by their stacked tensor.
std::string gguf_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "lm_head.weight") return "output.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  const size_t layer_end = hf.find('.', 13);  // after "model.layers."
  const std::string blk = "blk." + hf.substr(13, layer_end - 13) + ".", suffix = hf.substr(layer_end + 1);
  if (suffix.starts_with("mlp.experts.")) {  // mlp.experts.E.<proj>_proj.weight
    const std::string module = suffix.substr(0, suffix.size() - std::string("_proj.weight").size());
    return blk + "ffn_" + module.substr(module.rfind('.') + 1) + "_exps.weight";
  }
  return blk + gguf_export_detail::layer_names().at(suffix);
}

// The source's tensors as a file written with `options` stores them, widened back to F32: what
// our reader of that file must compute with, exactly.
io::TensorTable as_stored(const io::TensorTable& source, const GgufExportOptions& options, const Config& config) {
  io::TensorTable out;
  for (const auto& [name, t] : source.tensors()) {
    io::TensorRef copy = t;
    const GgufType stored = gguf_export_detail::tensor_type(options, config, gguf_name(name), t.shape);
    if (stored != GgufType::F32) {
      const std::vector<float> src = gguf_export_detail::to_floats(t);
      const size_t n = src.size();
      std::vector<std::byte> encoded(io::gguf::quantized_size(static_cast<uint32_t>(stored), n, name));
      io::gguf::quantize(static_cast<uint32_t>(stored), src, encoded.data(), name);
      auto values = std::make_shared<std::vector<float>>(n);
      for (size_t i = 0; i < n; ++i) {
        uint16_t bits;
        if (stored == GgufType::F16 || stored == GgufType::BF16) std::memcpy(&bits, &encoded[2 * i], 2);
        if (stored == GgufType::F16) (*values)[i] = static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(bits));
        if (stored == GgufType::BF16) (*values)[i] = kernels::bf16::to_float(bits);
      }
      kernels::ggml::with_type(static_cast<uint32_t>(stored), [&]<class Q>() {
        kernels::ggml::dequantize_blocks<Q>(encoded.data(), n / Q::kValues, values->data());
      });
      copy.dtype = io::Dtype::F32;
      copy.bytes = {reinterpret_cast<std::byte*>(values->data()), n * 4};
      copy.owner = values;
    }
    out.add(std::move(copy), "as-stored");
  }
  return out;
}

// The names of the tensors whose values differ between two tables, and those only one holds.
std::vector<std::string> differing_tensors(const io::TensorTable& a, const io::TensorTable& b) {
  std::vector<std::string> out;
  for (const auto& [name, t] : a.tensors()) {
    const io::TensorRef* other = b.find(name);
    if (!other || other->shape != t.shape || gguf_export_detail::to_floats(t) != gguf_export_detail::to_floats(*other)) out.push_back(name);
  }
  for (const auto& [name, t] : b.tensors())
    if (!a.find(name)) out.push_back(name);
  return out;
}

// The model a converted file's bytes hold (kept alive by `keep`); with `expected`, every tensor
// must hold its values.
MiniMindForCausalLM<float> model_of(const std::string& image_bytes, std::string& keep, const io::TensorTable* expected) {
  keep = image_bytes;
  const auto file = io::gguf::File::parse(as_bytes(keep), "converted.gguf", nullptr);
  const io::TensorTable table = io::gguf::tensor_table(file);
  if (expected) {
    for (const auto& name : differing_tensors(table, *expected)) FAIL_CHECK("tensor " << name << " is not what the file should hold");
  }
  LoadOptions widened = one_thread();
  widened.quantized_as_stored = false;  // the file's values exactly; held as stored, decode rounds activations
  return MiniMindForCausalLM<float>::from_tensors(Config::from_json(io::gguf::config_json(file), &table, "converted.gguf"), table,
                                                  widened);
}

const std::vector<std::vector<int32_t>> kPrompts = {{1, 5, 9, 200, 30, 17, 2}, {0, 255, 42}};  // (vocabularies of 256 up)

}  // namespace

TEST_CASE("metadata, tensor names, types and bytes are what llama.cpp's converter writes (Llama and Qwen3)") {
  for (const std::string arch : {"llama", "qwen3"}) {
    CAPTURE(arch);
    const io::Json reference = io::read_json_file(data_dir() / "convert" / (arch + "-reference.json"));
    const auto tokenizer_dir = shared_dir(reference.at("tokenizer").get<std::string>());
    if (!tokenizer_dir) return;
    const Checkpoint checkpoint = load_checkpoint(reference_checkpoint(reference, *tokenizer_dir));
    const auto [tok, tok_config] = checkpoint_tokenizer_files(checkpoint);
    for (const auto& named_type : {std::pair{"f16", GgufType::F16}, {"bf16", GgufType::BF16}, {"q8_0", GgufType::Q8_0}}) {
      const auto& [name, type] = named_type;
      CAPTURE(named_type.first);  // (clang 14 cannot capture a structured binding)
      GgufExportOptions options;
      options.type = type;
      std::string image = export_gguf(checkpoint, tok, tok_config, options).image();
      const auto f = io::gguf::File::parse(as_bytes(image), "converted.gguf", nullptr);
      // Every key of theirs, with its type and value; general.name is each file's own, and
      // general.size_label ("508K"), a label for people, is not written.
      std::set<std::string> theirs;
      for (const auto& item : reference.at("metadata").items()) {
        const std::string& key = item.key();
        const io::Json& expected = item.value();
        theirs.insert(key);
        CAPTURE(key);
        if (key == "general.name" || key == "general.size_label") continue;
        if (key == "general.file_type") {
          CHECK(f.get_int(key) == reference.at(std::string("file_type_") + name).get<int64_t>());
          continue;
        }
        REQUIRE(f.find(key) != nullptr);
        const io::Json ours = describe(f, key);
        CHECK(ours.at("type") == expected.at("type"));
        if (expected.contains("value") && expected["value"].is_number_float()) {
          CHECK(ours.at("value").get<double>() == doctest::Approx(expected["value"].get<double>()).epsilon(1e-7));
        } else {
          CHECK(ours == expected);
        }
      }
      for (const auto& entry : f.metadata()) {
        const auto& key = entry.first;
        CAPTURE(key);
        CHECK(theirs.count(key) == 1);  // nothing of ours that llama.cpp's converter does not write
      }
      const io::Json& tensors = reference.at(std::string("tensors_") + name);
      CHECK(f.tensors().size() == tensors.size());
      for (const auto& t : f.tensors()) {
        CAPTURE(t.name);
        REQUIRE(tensors.contains(t.name));
        const io::Json& expected = tensors[t.name];
        CHECK(t.type_name() == expected.at("type").get<std::string>());
        CHECK(t.dims == expected.at("dims").get<std::vector<uint64_t>>());
        CHECK(hex(fnv1a64(f.tensor_data(t))) == expected.at("fnv1a64").get<std::string>());
      }
    }
  }
}

TEST_CASE("a converted checkpoint computes, read back, exactly what its source does with the file's values") {
  struct Source {
    std::filesystem::path path;
    const char* what;
  };
  std::vector<Source> sources = {{source_dir() / "tests/data/formats/ref/quant-mm2", "MiniMind2 (llama)"},
                                 {source_dir() / "tests/data/formats/ref/quant-mm3-moe", "minimind-3 MoE (qwen3moe)"}};
  for (const char* golden : {"golden/tiny-mm3", "golden/tiny-untied", "golden/tiny-mm2-bf16"}) {
    if (auto dir = shared_dir(golden)) sources.push_back({*dir, golden});
  }
  for (const auto& source : sources) {
    const std::string what = source.what;
    CAPTURE(what);
    const Checkpoint checkpoint = load_checkpoint(source.path);
    const auto reference = MiniMindForCausalLM<float>::from_tensors(checkpoint.config, checkpoint.tensors, one_thread());
    for (const auto& named_type : {std::pair{"f32", GgufType::F32}, {"f16", GgufType::F16}, {"bf16", GgufType::BF16},
                                   {"q8_0", GgufType::Q8_0}, {"q4_0", GgufType::Q4_0}, {"q4_k_m", GgufType::Q4_K}}) {
      const std::string type_name = named_type.first;
      const GgufType type = named_type.second;
      CAPTURE(type_name);
      GgufExportOptions options;
      options.type = type;
      options.q4_k_m = type_name == "q4_k_m";
      std::string keep;
      const io::TensorTable stored = as_stored(checkpoint.tensors, options, checkpoint.config);
      const auto converted = model_of(export_gguf(checkpoint, std::nullopt, std::nullopt, options).image(), keep, &stored);
      const auto expected = MiniMindForCausalLM<float>::from_tensors(checkpoint.config, stored, one_thread());
      const Comparison exact = compare_logits(expected, converted, kPrompts);
      CHECK(exact.max_abs == 0.0);
      const Comparison error = compare_logits(reference, converted, kPrompts);
      MESSAGE(what << " as " << type_name << ": max |logit - source's| " << error.max_abs);
      if (type != GgufType::Q4_0 && type != GgufType::Q4_K) CHECK(error.top1_last);  // (4 bits move these tiny random models' logits by units)
      if (type == GgufType::F32) CHECK(error.max_abs == 0.0);
    }
  }
}

TEST_CASE("LoRA adapters merged into the file: it computes exactly the logits of the model that merges them at load") {
  for (const std::string lora_case : {"mm2-two-scaled", "mm3-moe-two-scaled"}) {
    CAPTURE(lora_case);
    const auto lora_dir = data_dir() / "lora";
    const io::Json expected = io::read_json_file(lora_dir / lora_case / "expected.json");
    const Checkpoint checkpoint = load_checkpoint(data_dir() / expected.at("base").get<std::string>());
    GgufExportOptions options;
    options.type = GgufType::F32;
    for (const auto& a : expected.at("adapters")) {
      options.adapters.push_back({std::make_shared<const LoraAdapter>(LoraAdapter::load(lora_dir / a.at("path").get<std::string>())),
                                  a.at("scale").get<float>()});
    }
    LoadOptions merging = one_thread();
    merging.adapters = options.adapters;
    const auto merged = MiniMindForCausalLM<float>::from_tensors(checkpoint.config, checkpoint.tensors, merging);
    std::string keep;
    const auto converted = model_of(export_gguf(checkpoint, std::nullopt, std::nullopt, options).image(), keep, nullptr);
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& p : expected.at("prompts")) prompts.push_back(p.at("ids").get<std::vector<int32_t>>());
    CHECK(compare_logits(merged, converted, prompts).max_abs == 0.0);
    // The adapters change the logits (a file without them differs).
    const auto plain = MiniMindForCausalLM<float>::from_tensors(checkpoint.config, checkpoint.tensors, one_thread());
    CHECK(compare_logits(plain, converted, prompts).max_abs > 1e-3);
  }
  // An adapter of another shape is refused before anything is written.
  GgufExportOptions options;
  options.adapters.push_back({std::make_shared<const LoraAdapter>(LoraAdapter::load(data_dir() / "lora/adapters/mm3-peft-rslora")), 1.0f});
  CHECK_THROWS_WITH_AS(export_gguf(load_checkpoint(data_dir() / "golden/mm2-dense-f32"), std::nullopt, std::nullopt, options),
                       doctest::Contains("mm3-peft-rslora"), Error);
}

TEST_CASE("--type q4_k_m chooses each tensor's type as llama-quantize's Q4_K_M does for the published shapes") {
  const io::Json reference = io::read_json_file(data_dir() / "kquants" / "q4_k_m_types.json");
  for (const auto& named_config : {std::pair{"minimind2-small", Config::minimind2_small()}, {"minimind-3", Config::minimind3()}}) {
    const std::string shape = named_config.first;
    CAPTURE(shape);
    GgufExportOptions options;
    options.q4_k_m = true;
    std::map<std::string, int> counts;
    REQUIRE(reference.at(shape).size() > 50);
    for (const auto& t : reference.at(shape)) {
      const std::string name = t[0];
      CAPTURE(name);
      std::vector<int64_t> dims = t[1];
      std::reverse(dims.begin(), dims.end());  // ggml's innermost-first to our outermost-first
      const GgufType type = gguf_export_detail::tensor_type(options, named_config.second, name, dims);
      CHECK(io::gguf::type_traits(static_cast<uint32_t>(type)).name == t[2].get<std::string>());
      ++counts[t[2].get<std::string>()];
    }
    // Every kind llama-quantize chose: Q6_K (output, attn_v / ffn_down of layers 0, 3, 6, 7),
    // Q8_0 and Q5_0 (ffn_down's rows not whole super-blocks: Q6_K's and Q4_K's fallbacks).
    CHECK(counts["Q6_K"] == 1 + 4);
    CHECK(counts["Q8_0"] == 4);
    CHECK(counts["Q5_0"] == 4);
  }
}

TEST_CASE("what llama.cpp cannot run is refused with the reason") {
  // MiniMind2's MoE has a shared expert, which llama.cpp's llama architecture cannot hold.
  const Checkpoint mm2_moe = load_checkpoint(formats_dir() / "gguf" / "mm2-moe-f32.gguf");
  CHECK_THROWS_WITH_AS(export_gguf(mm2_moe, std::nullopt, std::nullopt), doctest::Contains("no always-on shared expert"), Error);
  CheckpointOptions no_renormalising;
  no_renormalising.config_overrides = {{"norm_topk_prob", false}};
  const Checkpoint mm3_moe = load_checkpoint(source_dir() / "tests/data/formats/ref/quant-mm3-moe", no_renormalising);
  CHECK_THROWS_WITH_AS(export_gguf(mm3_moe, std::nullopt, std::nullopt), doctest::Contains("qwen3moe always renormalises"), Error);
  CheckpointOptions dense_layer;
  dense_layer.config_overrides = {{"mlp_only_layers", {0}}};
  CHECK_THROWS_WITH_AS(export_gguf(load_checkpoint(source_dir() / "tests/data/formats/ref/quant-mm3-moe", dense_layer), std::nullopt,
                                   std::nullopt),
                       doctest::Contains("dense layer (0"), Error);
  // A tensor with no place in the file.
  const auto dir = write_tiny_checkpoint("gguf_export_extra");
  auto tensors = tiny_tensors();
  tensors.emplace_back("model.layers.0.self_attn.q_proj.bias", std::vector<int64_t>{8});
  write_file(dir / "model.safetensors", safetensors_image(tensors));
  CHECK_THROWS_WITH_AS(export_gguf(load_checkpoint(dir), std::nullopt, std::nullopt),
                       doctest::Contains("tensor \"model.layers.0.self_attn.q_proj.bias\" has no place in a llama GGUF"), Error);
}

TEST_CASE("minimind-convert writes what export_gguf makes, and refuses to overwrite without --force") {
  const auto tokenizer_dir = shared_dir("golden/tiny-mm2");
  if (!tokenizer_dir) return;
  const auto out = scratch_dir("convert_program") / "tiny.gguf";
  std::filesystem::remove(out);
  const std::string convert = program("minimind-convert");
  const std::string in = tokenizer_dir->string();
  auto r = run_command(convert + " '" + in + "' '" + out.string() + "' --type q8_0 --name tiny");
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("minimind-convert: [1/") != std::string::npos);  // progress on stderr
  const Checkpoint checkpoint = load_checkpoint(in);
  const auto [tok, tok_config] = checkpoint_tokenizer_files(checkpoint);
  GgufExportOptions options;
  options.type = GgufType::Q8_0;
  options.name = "tiny";
  CHECK(read_file(out) == export_gguf(checkpoint, tok, tok_config, options).image());
  // The file's tokenizer encodes like the checkpoint's own.
  const auto p = load_pretrained<float>(out, one_thread());
  CHECK(p.require_tokenizer().encode("你好，世界 hello") == Tokenizer::from_pretrained(in).encode("你好，世界 hello"));

  r = run_command(convert + " '" + in + "' '" + out.string() + "'");
  CHECK(r.exit_code == 1);
  CHECK(r.err == "minimind-convert: error: " + out.string() + ": exists (use --force to replace it)\n");
  CHECK(run_command(convert + " '" + in + "' '" + out.string() + "' --force --type f32").exit_code == 0);
  CHECK(io::gguf::File::open(out).get_int("general.file_type") == 0);
  r = run_command(convert + " '" + in + "' '" + out.string() + "' --force --type q3");
  CHECK(r.exit_code == 1);
  CHECK(r.err == "minimind-convert: error: --type: unknown value \"q3\" (f32, f16, bf16, q8_0, q4_0 or q4_k_m)\n");

  // --type q4_k_m and LoRA adapters (a PEFT one written here: rank 2 on layer 0's q_proj and
  // layer 1's down_proj), once at scale 1 and once at 0.5.
  const auto adapter_dir = scratch_dir("convert_program_lora");
  write_file(adapter_dir / "adapter_config.json", R"({"r": 2, "lora_alpha": 4, "target_modules": ["q_proj", "down_proj"]})");
  std::vector<TensorBytes> pairs;
  auto add_pair = [&](const std::string& module, int64_t out_features, int64_t in_features) {
    const std::string prefix = "base_model.model." + module;
    pairs.emplace_back(prefix + ".lora_A.weight", std::vector<int64_t>{2, in_features}, "F32", reference_weights(prefix + "A", 2 * in_features));
    pairs.emplace_back(prefix + ".lora_B.weight", std::vector<int64_t>{out_features, 2}, "F32", reference_weights(prefix + "B", 2 * out_features));
  };
  const Config& c = checkpoint.config;
  add_pair("model.layers.0.self_attn.q_proj", c.num_attention_heads * c.head_dim, c.hidden_size);
  add_pair("model.layers.1.mlp.down_proj", c.hidden_size, c.intermediate_size);
  write_file(adapter_dir / "adapter_model.safetensors", safetensors_image(pairs));
  r = run_command(convert + " '" + in + "' '" + out.string() + "' --force --type q4_k_m --lora '" + adapter_dir.string() +
                  "' --lora-scaled '" + adapter_dir.string() + ":0.5' --name tiny");
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("minimind-convert: merging " + adapter_dir.string() + ": peft, rank 2") != std::string::npos);
  GgufExportOptions merged;
  merged.q4_k_m = true;
  merged.name = "tiny";
  const auto adapter = std::make_shared<const LoraAdapter>(LoraAdapter::load(adapter_dir));
  merged.adapters = {{adapter, 1.0f}, {adapter, 0.5f}};
  CHECK(read_file(out) == export_gguf(checkpoint, tok, tok_config, merged).image());
  CHECK(io::gguf::File::open(out).get_int("general.file_type") == 15);  // MOSTLY_Q4_K_M
  r = run_command(convert + " '" + in + "' '" + out.string() + "' --force --lora-scaled '" + adapter_dir.string() + "'");
  CHECK(r.exit_code == 1);
  CHECK(r.err == "minimind-convert: error: --lora-scaled: \"" + adapter_dir.string() + "\" is not PATH:SCALE\n");
  r = run_command(convert + " '" + in + "'");
  CHECK(r.err == "minimind-convert: error: give IN and OUT (see --help)\n");
  r = run_command(convert + " /nonexistent '" + out.string() + "' --force");
  CHECK(r.err.ends_with("\nminimind-convert: error: /nonexistent: no such file or directory\n"));
  r = run_command(convert + " --help");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("Usage: minimind-convert IN OUT [flags]") != std::string::npos);
}
