// Config from config.json: each generation's defaults, inference from tensor shapes, and errors
// that name the field.
#include <doctest/doctest.h>
#include <minimind/config.hpp>

#include "checkpoint_writer.hpp"

#include <limits>

using namespace minimind;
using namespace minimind::testing;

namespace {
Config parse(const io::Json& json, const io::TensorTable* tensors = nullptr) {
  return Config::from_json(json, tensors, "config.json");
}
}  // namespace

TEST_CASE("MiniMind2 defaults are upstream's 2025 MiniMindConfig") {
  const Config c = parse({{"architectures", {"MiniMindForCausalLM"}}});
  CHECK(c.generation == Generation::MiniMind2);
  CHECK(c.hidden_size == 512);
  CHECK(c.num_key_value_heads == 2);
  CHECK(c.intermediate_size == 1408);  // 8/3 * 512 rounded up to 64
  CHECK(c.head_dim == 64);
  CHECK(c.rms_norm_eps == 1e-5);
  CHECK(c.rope_theta == 1e6);
  CHECK(c.tie_word_embeddings);
  CHECK_FALSE(c.use_qk_norm);
  CHECK_FALSE(c.rope_scaling);
  CHECK(c.num_experts == 0);
}

TEST_CASE("minimind-3 defaults are upstream's 2026 MiniMindConfig") {
  const Config c = parse({{"architectures", {"Qwen3ForCausalLM"}}});
  CHECK(c.generation == Generation::MiniMind3);
  CHECK(c.hidden_size == 768);
  CHECK(c.num_key_value_heads == 4);
  CHECK(c.head_dim == 96);
  CHECK(c.intermediate_size == 2432);  // ceil(pi * 768 / 64) * 64
  CHECK(c.rms_norm_eps == 1e-6);
  CHECK(c.use_qk_norm);
}

TEST_CASE("model_type stands in for a missing architectures list") {
  CHECK(parse({{"model_type", "qwen3_moe"}}).num_experts == 4);
  CHECK(parse({{"model_type", "llama"}}).generation == Generation::MiniMind2);
}

TEST_CASE("MoE keys of each generation") {
  const Config mm2 = parse({{"architectures", {"MiniMindForCausalLM"}}, {"use_moe", true}, {"num_experts_per_tok", 1}});
  CHECK(mm2.num_experts == 4);
  CHECK(mm2.n_shared_experts == 1);
  CHECK(mm2.moe_intermediate_size == mm2.intermediate_size);
  CHECK_FALSE(mm2.normalize_single_expert);  // MiniMind2 leaves a top-1 weight as the raw score
  const Config off = parse({{"architectures", {"MiniMindForCausalLM"}}, {"use_moe", false}, {"n_routed_experts", 8}});
  CHECK(off.num_experts == 0);  // the keys mean nothing without use_moe
  const Config mm3 = parse({{"architectures", {"Qwen3MoeForCausalLM"}}, {"num_experts", 8}, {"num_experts_per_tok", 2},
                            {"moe_intermediate_size", 96}, {"mlp_only_layers", {0}}});
  CHECK(mm3.num_experts == 8);
  CHECK(mm3.moe_intermediate_size == 96);
  CHECK(mm3.n_shared_experts == 0);
  CHECK(mm3.normalize_single_expert);
  CHECK_FALSE(mm3.layer_is_moe(0));
  CHECK(mm3.layer_is_moe(1));
}

TEST_CASE("rope scaling: MiniMind2's preset, explicit YaRN objects, and refusals") {
  const Config mm2 = parse({{"architectures", {"MiniMindForCausalLM"}}, {"inference_rope_scaling", true}});
  REQUIRE(mm2.rope_scaling);
  CHECK(mm2.rope_scaling->rule == YarnRule::MiniMind2);
  CHECK(mm2.rope_scaling->factor == 4);
  CHECK(mm2.rope_scaling->beta_fast == 4);
  const Config mm3 = parse({{"architectures", {"Qwen3ForCausalLM"}},
                            {"rope_scaling", {{"type", "yarn"}, {"factor", 8}, {"original_max_position_embeddings", 1024}}}});
  REQUIRE(mm3.rope_scaling);
  CHECK(mm3.rope_scaling->rule == YarnRule::Ramp);
  CHECK(mm3.rope_scaling->factor == 8);
  CHECK(mm3.rope_scaling->beta_fast == 32);
  CHECK_THROWS_WITH_AS(parse({{"architectures", {"Qwen3ForCausalLM"}}, {"rope_scaling", {{"type", "linear"}}}}),
                       doctest::Contains("rope_scaling type \"linear\" is not supported"), Error);
}

TEST_CASE("head_dim and intermediate_size come from tensor shapes when null or absent") {
  auto image = safetensors_image({{"model.layers.0.self_attn.q_norm.weight", {12}}, {"model.layers.0.mlp.gate_proj.weight", {40, 48}}});
  const auto dir = scratch_dir("config_infer");
  write_file(dir / "model.safetensors", image);
  const auto table = io::read_safetensors(dir / "model.safetensors");
  const Config c = parse({{"architectures", {"Qwen3ForCausalLM"}}, {"hidden_size", 48}, {"num_attention_heads", 4},
                          {"num_key_value_heads", 2}, {"head_dim", nullptr}, {"intermediate_size", nullptr}},
                         &table);
  CHECK(c.head_dim == 12);
  CHECK(c.intermediate_size == 40);
  // A native MiniMind file with q_norm tensors is a minimind-3 export.
  const Config native = parse({{"architectures", {"MiniMindForCausalLM"}}, {"hidden_size", 48}, {"num_attention_heads", 4},
                               {"num_key_value_heads", 2}},
                              &table);
  CHECK(native.generation == Generation::MiniMind3);
  CHECK(native.use_qk_norm);
}

TEST_CASE("errors name the field") {
  CHECK_THROWS_WITH_AS(parse({{"architectures", {"GPT2LMHeadModel"}}}), doctest::Contains("unknown architecture \"GPT2LMHeadModel\""), Error);
  CHECK_THROWS_WITH_AS(parse({{"architectures", {"Qwen3ForCausalLM"}}, {"hidden_size", "big"}}),
                       doctest::Contains("field \"hidden_size\" has the wrong type"), Error);
  CHECK_THROWS_WITH_AS(parse({{"architectures", {"Qwen3ForCausalLM"}}, {"num_hidden_layers", 0}}),
                       doctest::Contains("\"num_hidden_layers\" must be positive"), Error);
  CHECK_THROWS_WITH_AS(parse({{"architectures", {"Qwen3ForCausalLM"}}, {"vocab_size", -5}}),
                       doctest::Contains("\"vocab_size\" must be positive"), Error);
  CHECK_THROWS_WITH_AS(parse({{"architectures", {"Qwen3ForCausalLM"}}, {"num_attention_heads", 0}}),
                       doctest::Contains("num_attention_heads"), Error);
  CHECK_THROWS_WITH_AS(parse({{"architectures", {"Qwen3ForCausalLM"}}, {"num_attention_heads", 6}, {"num_key_value_heads", 4}, {"head_dim", 8}}),
                       doctest::Contains("not a multiple of num_key_value_heads"), Error);
  CHECK_THROWS_WITH_AS(parse({{"architectures", {"MiniMindForCausalLM"}}, {"hidden_size", 100}, {"num_attention_heads", 8}}),
                       doctest::Contains("not divisible by num_attention_heads"), Error);
  CHECK_THROWS_WITH_AS(parse({{"architectures", {"Qwen3MoeForCausalLM"}}, {"num_experts", 4}, {"num_experts_per_tok", 5}}),
                       doctest::Contains("num_experts_per_tok"), Error);
  CHECK_THROWS_WITH_AS(parse(io::Json::array()), doctest::Contains("not a JSON object"), Error);
}

TEST_CASE("a missing or malformed config.json names the file") {
  const auto dir = scratch_dir("config_files");
  CHECK_THROWS_WITH_AS(Config::from_pretrained(dir), doctest::Contains("config.json: missing"), Error);
  write_file(dir / "config.json", "{\"hidden_size\": 64,");
  CHECK_THROWS_WITH_AS(Config::from_pretrained(dir), doctest::Contains("config.json: malformed JSON"), Error);
}

TEST_CASE("a truncated config.json at every eighth of its length names the file") {
  const auto dir = scratch_dir("config_truncated");
  const std::string text = tiny_config().dump(2);
  for (int eighth = 0; eighth < 8; ++eighth) {
    CAPTURE(eighth);
    write_file(dir / "config.json", text.substr(0, text.size() * eighth / 8));
    CHECK_THROWS_WITH_AS(Config::from_pretrained(dir), doctest::Contains(((dir / "config.json").string() + ": malformed JSON").c_str()), Error);
  }
  write_file(dir / "config.json", text);
  CHECK(Config::from_pretrained(dir).hidden_size == 8);
}

TEST_CASE("dimensions of 0, negative or beyond any model are refused, naming the field") {
  for (const char* field : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                            "head_dim", "intermediate_size", "max_position_embeddings"}) {
    CAPTURE(field);
    for (const int64_t bad : {int64_t{0}, int64_t{-1}, int64_t{-4096}}) {
      auto json = tiny_config();
      json[field] = bad;
      CHECK_THROWS_WITH_AS(parse(json), doctest::Contains((std::string("field \"") + field + "\" must be positive, got " + std::to_string(bad)).c_str()),
                           Error);
    }
    auto json = tiny_config();
    json[field] = int64_t{1} << 40;  // products of two such would overflow int64 further on
    CHECK_THROWS_WITH_AS(parse(json), doctest::Contains((std::string("field \"") + field + "\" is 1099511627776, larger than any model").c_str()),
                         Error);
  }
  auto moe = tiny_config();
  moe["use_moe"] = true;
  moe["n_routed_experts"] = -2;
  CHECK_THROWS_WITH_AS(parse(moe), doctest::Contains("\"num_experts\" must not be negative"), Error);
}

TEST_CASE("numbers an int64 cannot hold are out of range, not undefined behaviour or a wrap") {
  auto json = tiny_config();
  json["hidden_size"] = 1e300;
  CHECK_THROWS_WITH_AS(parse(json), doctest::Contains("field \"hidden_size\" is out of range (1e+300)"), Error);
  json["hidden_size"] = 18446744073709551615ull;  // would wrap to -1
  CHECK_THROWS_WITH_AS(parse(json), doctest::Contains("field \"hidden_size\" is out of range (18446744073709551615)"), Error);
  json["hidden_size"] = -9.3e18;
  CHECK_THROWS_WITH_AS(parse(json), doctest::Contains("out of range"), Error);
  json["hidden_size"] = 8.0;  // a whole float is an integer
  CHECK(parse(json).hidden_size == 8);
  json["hidden_size"] = 8.5;
  CHECK_THROWS_WITH_AS(parse(json), doctest::Contains("field \"hidden_size\" has the wrong type"), Error);
}

TEST_CASE("rope_scaling values that would make every angle NaN are refused") {
  // A file cannot hold an infinity (1e999 is malformed JSON, below), but a caller's Json can.
  const double inf = std::numeric_limits<double>::infinity();
  const auto with_scaling = [](io::Json scaling) {
    scaling["type"] = "yarn";
    return parse({{"architectures", {"Qwen3ForCausalLM"}}, {"rope_scaling", scaling}});
  };
  CHECK_THROWS_WITH_AS(with_scaling({{"factor", inf}}), doctest::Contains("rope_scaling.factor must be finite and >= 1"), Error);
  CHECK_THROWS_WITH_AS(with_scaling({{"beta_fast", inf}}), doctest::Contains("beta_fast and beta_slow must be positive"), Error);
  CHECK_THROWS_WITH_AS(with_scaling({{"original_max_position_embeddings", inf}}),
                       doctest::Contains("original_max_position_embeddings must be positive"), Error);
  CHECK_THROWS_WITH_AS(with_scaling({{"attention_factor", 0}}), doctest::Contains("rope_scaling.attention_factor must be positive"),
                       Error);
  CHECK(with_scaling({{"factor", 4}}).rope_scaling->factor == 4);
}

TEST_CASE("a number too large for a double is malformed JSON naming the file, not a stray exception") {
  // nlohmann throws out_of_range (not parse_error) for it; both must become minimind::Error.
  const auto dir = scratch_dir("config_overflow");
  write_file(dir / "config.json", R"({"architectures": ["Qwen3ForCausalLM"], "rope_theta": 1e999})");
  CHECK_THROWS_WITH_AS(Config::from_pretrained(dir), doctest::Contains("config.json: malformed JSON: [json.exception.out_of_range.406]"),
                       Error);
}

TEST_CASE("shapes to infer from that have no first dimension fall back to the formula") {
  // A scalar gate_proj (shape []) once reached shape.at(0) and threw std::out_of_range.
  auto image = safetensors_image({{"model.layers.0.mlp.gate_proj.weight", {}}});
  const auto dir = scratch_dir("config_scalar");
  write_file(dir / "model.safetensors", image);
  const auto table = io::read_safetensors(dir / "model.safetensors");
  auto json = tiny_config();
  json.erase("intermediate_size");
  CHECK(parse(json, &table).intermediate_size == 64);  // MiniMind2: 8/3 * 8 rounded up to 64
}
