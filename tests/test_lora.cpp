// LoRA adapters (lora.hpp) against tools/make_lora.py's PyTorch reference (tests/data/lora): every
// case merged at load and run unmerged per sequence, f32 within the case's 1e-4 (both f32
// layouts), bf16 and q8 held as test_formats.cpp holds them (the same top-1 token at >= 90% of
// each case's positions, >= 98% / 95% pooled); a batch mixing adapters gives each sequence its
// greedy ids alone; bad adapters are refused with one line naming the file and the tensor.
#include "golden.hpp"

#include <map>
#include <tuple>

using namespace minimind;
using minimind::testing::data_dir;
using minimind::testing::max_abs_diff;
using minimind::testing::worse;

namespace {

struct LoraPrompt {
  std::vector<int32_t> ids;
  MatrixRM<float> logits;  // [len, vocab]
  std::vector<int32_t> greedy_ids;
};

struct LoraCase {
  std::string name;
  std::filesystem::path base;
  std::vector<LoraUse> adapters;
  double tolerance = 0;
  std::vector<LoraPrompt> prompts;
};

std::filesystem::path lora_dir() { return data_dir() / "lora"; }

std::shared_ptr<const LoraAdapter> adapter(const std::string& relative) {
  return std::make_shared<const LoraAdapter>(LoraAdapter::load(lora_dir() / relative));
}

LoraCase read_case(const std::string& name) {
  const auto json = io::read_json_file(lora_dir() / name / "expected.json");
  LoraCase c{name, data_dir() / json.at("base").get<std::string>(), {}, json.at("tolerance").at("logits_max_abs").get<double>(), {}};
  for (const auto& a : json.at("adapters")) c.adapters.push_back({adapter(a.at("path").get<std::string>()), a.at("scale").get<float>()});
  for (const auto& p : json.at("prompts")) {
    LoraPrompt prompt{p.at("ids").get<std::vector<int32_t>>(), {}, p.at("greedy_ids").get<std::vector<int32_t>>()};
    const auto shape = p.at("logits_shape").get<std::vector<Index>>();
    const std::string bytes = minimind::testing::read_file(lora_dir() / name / p.at("logits_file").get<std::string>());
    REQUIRE(bytes.size() == static_cast<size_t>(shape[0] * shape[1]) * sizeof(float));
    prompt.logits.resize(shape[0], shape[1]);
    std::memcpy(prompt.logits.data(), bytes.data(), bytes.size());
    c.prompts.push_back(std::move(prompt));
  }
  return c;
}

std::vector<std::string> case_names() {
  return io::read_json_file(lora_dir() / "cases.json").get<std::vector<std::string>>();
}

struct Agreement {
  size_t positions = 0, same_top1 = 0;
  double max_diff = 0;
  bool greedy_same = true;
  double rate() const { return positions ? static_cast<double>(same_top1) / static_cast<double>(positions) : 1.0; }
};

// Every position's logits by the full prompt in one step, then the last 4 positions again one at
// a time from a cache, then greedy decoding; `adapters` run unmerged on the sessions.
Agreement compare(const MiniMindForCausalLM<float>& model, const LoraCase& c, const std::vector<LoraUse>& adapters) {
  Agreement a;
  auto count = [&](const auto& got, const auto& want) {
    Index best = 0, expected = 0;
    got.maxCoeff(&best);
    want.maxCoeff(&expected);
    ++a.positions;
    a.same_top1 += best == expected;
    a.max_diff = worse(a.max_diff, max_abs_diff(got, want));
  };
  for (const LoraPrompt& p : c.prompts) {
    const Index len = static_cast<Index>(p.ids.size());
    auto session = model.new_session(len + static_cast<Index>(p.greedy_ids.size()));
    session.set_adapters(adapters);
    const MatrixRM<float> full = model.forward(session, p.ids);
    for (Index i = 0; i < len; ++i) count(full.row(i), p.logits.row(i));

    auto stepwise = model.new_session(len);
    stepwise.set_adapters(adapters);
    const Index split = std::max<Index>(len - 4, 1);
    model.forward(stepwise, std::span<const int32_t>(p.ids.data(), static_cast<size_t>(split)), false);
    for (Index i = split; i < len; ++i) count(model.forward(stepwise, {&p.ids[static_cast<size_t>(i)], 1}).row(0), p.logits.row(i));

    session.truncate(len - 1);  // greedy from the prompt's last position
    std::vector<int32_t> greedy;
    int32_t next = p.ids.back();
    for (size_t step = 0; step < p.greedy_ids.size(); ++step) {
      next = minimind::testing::argmax(model.forward(session, {&next, 1}).row(0));
      greedy.push_back(next);
    }
    a.greedy_same = a.greedy_same && greedy == p.greedy_ids;
  }
  return a;
}

LoadOptions options(WeightFormat format, std::vector<LoraUse> adapters = {}) {
  LoadOptions o;
  o.format = format;
  o.threads = 2;
  o.f32_panels = format == WeightFormat::F32Panels;
  if (format == WeightFormat::F32Panels) o.format = WeightFormat::F32;
  o.adapters = std::move(adapters);
  return o;
}

}  // namespace

TEST_CASE("LoRA golden cases in f32, merged at load and unmerged per sequence, match PyTorch within 1e-4") {
  const auto names = case_names();
  REQUIRE(names.size() >= 8);
  for (const std::string& name : names) {
    const LoraCase c = read_case(name);
    for (const WeightFormat format : {WeightFormat::F32, WeightFormat::F32Panels}) {
      CAPTURE(name);
      const std::string format_text = format_name(format);
      CAPTURE(format_text);
      const auto merged = MiniMindForCausalLM<float>::from_pretrained(c.base, options(format, c.adapters));
      const auto base = MiniMindForCausalLM<float>::from_pretrained(c.base, options(format));
      const Agreement m = compare(merged, c, {}), u = compare(base, c, c.adapters);
      MESSAGE(name << " " << format_text << ": merged max |logit difference| " << m.max_diff << ", unmerged " << u.max_diff);
      CHECK(m.max_diff <= c.tolerance);
      CHECK(u.max_diff <= c.tolerance);
      CHECK(m.greedy_same);
      CHECK(u.greedy_same);
      // Without its adapters the base model is far from these logits: the comparison can fail.
      CHECK(compare(base, c, {}).max_diff > 0.1);
    }
  }
}

TEST_CASE("LoRA golden cases held as bf16 and q8, merged and unmerged") {
  std::map<std::string, Agreement> pooled;
  for (const std::string& name : case_names()) {
    const LoraCase c = read_case(name);
    for (const WeightFormat format : {WeightFormat::BF16, WeightFormat::Q8}) {
      CAPTURE(name);
      const std::string format_text = format_name(format);
      CAPTURE(format_text);
      const auto merged = MiniMindForCausalLM<float>::from_pretrained(c.base, options(format, c.adapters));
      const auto base = MiniMindForCausalLM<float>::from_pretrained(c.base, options(format));
      for (const auto& [how, a] : {std::pair{"merged", compare(merged, c, {})}, std::pair{"unmerged", compare(base, c, c.adapters)}}) {
        MESSAGE(name << " " << format_text << " " << std::string(how) << ": max |logit difference| " << a.max_diff << ", top-1 agreement "
                     << a.same_top1 << "/" << a.positions);
        CHECK(a.rate() >= 0.90);
        Agreement& p = pooled[format_name(format)];
        p.positions += a.positions;
        p.same_top1 += a.same_top1;
      }
    }
  }
  CHECK(pooled["bf16"].rate() >= 0.98);
  CHECK(pooled["q8"].rate() >= 0.95);
}

TEST_CASE("unmerged adapters give the merged model's logits within 1e-4, and a merged matrix gets its own copy") {
  const LoraCase c = read_case("mm2-two-scaled");
  const auto merged = MiniMindForCausalLM<float>::from_pretrained(c.base, options(WeightFormat::F32, c.adapters));
  const auto base = MiniMindForCausalLM<float>::from_pretrained(c.base, options(WeightFormat::F32));
  auto with = base.new_session();
  with.set_adapters(c.adapters);
  auto plain = merged.new_session();
  const auto& ids = c.prompts[1].ids;
  const MatrixRM<float> a = base.forward(with, ids), b = merged.forward(plain, ids);
  CHECK(max_abs_diff(a, b) <= 1e-4);
  CHECK(max_abs_diff(a, b) > 0);  // different summation, so not the same code path by accident
  // Row-major f32: the changed matrices are copies, the others still views of the file.
  CHECK_FALSE(merged.model.layers[0].self_attn.q_proj.is_view());
  CHECK(merged.model.embed_tokens.weight().is_view());
  CHECK(base.model.layers[0].self_attn.q_proj.is_view());
  // Merged is free at decode: the same matrices, the same bytes held.
  CHECK(merged.weight_bytes() == base.weight_bytes());
}

TEST_CASE("a batch mixing three adapters and none gives each sequence its greedy ids alone") {
  for (const auto& [base_case, one, two] : {std::tuple{"mm2-dense-f32", "mm2-upstream-f32", "mm2-peft"},
                                            std::tuple{"mm3-moe", "mm3-moe-upstream", "mm3-moe-peft"}}) {
    const std::string base_text = base_case;
    CAPTURE(base_text);
    const auto model = MiniMindForCausalLM<float>::from_pretrained(data_dir() / "golden" / base_case, options(WeightFormat::F32));
    const auto a = adapter(std::string("adapters/") + one + (std::string(one).find("peft") != std::string::npos ? "" : ".pth"));
    const auto b = adapter(std::string("adapters/") + two);
    const std::vector<std::vector<LoraUse>> choices = {{{a, 1.0f}}, {{b, 1.0f}}, {{a, 0.5f}, {b, -1.25f}}, {}};
    const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9, 3}, {1, 17}, {1, 40, 2, 33, 7, 8}, {1, 5, 9, 3}};
    constexpr size_t kSteps = 12;
    std::vector<std::vector<int32_t>> alone(choices.size());
    for (size_t i = 0; i < choices.size(); ++i) {
      auto session = model.new_session();
      session.set_adapters(choices[i]);
      int32_t next = minimind::testing::argmax(model.forward(session, prompts[i], false).row(0));
      for (size_t step = 0; step < kSteps; ++step) {
        alone[i].push_back(next);
        next = minimind::testing::argmax(model.forward(session, {&next, 1}).row(0));
      }
    }
    CHECK(alone[1] != alone[3]);  // the adapters change what is generated
    CHECK(alone[2] != alone[3]);
    Batch<float> batch(model);
    std::vector<Session<float>> sessions;
    for (size_t i = 0; i < choices.size(); ++i) {
      sessions.push_back(model.new_session());
      sessions.back().set_adapters(choices[i]);
    }
    for (size_t i = 0; i < choices.size(); ++i) batch.add(sessions[i], prompts[i]);  // prefill together
    auto logits = batch.step();
    std::vector<std::vector<int32_t>> together(choices.size());
    std::vector<int32_t> next(choices.size());
    for (size_t step = 0; step < kSteps; ++step) {
      for (size_t i = 0; i < choices.size(); ++i) together[i].push_back(next[i] = minimind::testing::argmax(logits.row(static_cast<Index>(i))));
      for (size_t i = 0; i < choices.size(); ++i) batch.add(sessions[i], {&next[i], 1});
      logits = batch.step();
    }
    for (size_t i = 0; i < choices.size(); ++i) CHECK(together[i] == alone[i]);
  }
}

TEST_CASE("an adapter reports its format, rank, modules and parameters") {
  const auto upstream = adapter("adapters/mm2-moe-upstream-ddp.pth");
  CHECK(upstream->format() == LoraFormat::Upstream);
  CHECK(upstream->rank() == 4);
  CHECK(upstream->factor() == 1.0f);
  // "module." (DDP) stripped; q and o of 2 layers, 4 experts and 1 shared expert x 3 matrices each.
  CHECK(upstream->modules().size() == 2 * (2 + 5 * 3));
  CHECK(upstream->find("model.layers.1.mlp.experts.3.down_proj.weight") != nullptr);
  CHECK(upstream->find(LoraSite{0, LoraSlot::Up, LoraSite::Ffn::SharedExpert, 0}) != nullptr);
  CHECK(upstream->find(LoraSite{0, LoraSlot::K}) == nullptr);
  CHECK(upstream->num_parameters() == 34 * (4 * 16 + 16 * 4));
  const auto peft = adapter("adapters/mm3-peft-rslora");
  CHECK(peft->format() == LoraFormat::Peft);
  CHECK(peft->rank() == 8);
  CHECK(peft->factor() == doctest::Approx(16 / std::sqrt(8.0)));
}

TEST_CASE("bad adapters are refused with one line naming the file and the tensor") {
  const auto config = MiniMindForCausalLM<float>::from_pretrained(data_dir() / "golden" / "mm2-dense-f32").config();
  auto refused = [&](const std::filesystem::path& path, std::vector<std::string> parts) {
    CAPTURE(path.string());
    std::string message;
    try {
      LoraAdapter::load(path).check(config);
    } catch (const Error& e) {
      message = e.what();
    }
    INFO(message);
    CHECK(message.find(path.string()) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
    for (const auto& part : parts) CHECK(message.find(part) != std::string::npos);
  };
  const auto bad = lora_dir() / "bad";
  const std::string q = "model.layers.0.self_attn.q_proj";
  refused(bad / "rank-mismatch.pth", {"\"" + q + ".lora.B.weight\"", "shape [16, 3]", "rank 4"});
  refused(bad / "unknown-module.pth", {"model.layers.0.self_attn.x_proj.lora.A.weight", "no adapter can change"});
  refused(bad / "layer-out-of-range.pth", {"model.layers.5.self_attn.q_proj.lora.A.weight", "the model has 2 layers"});
  refused(bad / "nan.pth", {q + ".lora.B.weight", "NaN at [3, 1]"});
  refused(bad / "hidden-32.pth", {q + ".lora.A.weight", "hidden_size 32", "this model's hidden_size is 16"});
  refused(bad / "not-only-tensors.pth", {"\"step\" is an int, not a tensor"});
  refused(bad / "missing-b.pth", {q + ".lora.A.weight", "no partner"});
  // MoE experts on a dense model; a PEFT adapter of minimind-3 (FFN width 32) on MiniMind2 (48).
  refused(lora_dir() / "adapters" / "mm2-moe-upstream-ddp.pth", {"model.layers.0.mlp.experts.0.", "has no experts"});
  refused(lora_dir() / "adapters" / "mm3-peft-rslora", {"base_model.model.model.layers.0.mlp.down_proj.lora_A.weight", "takes 48 inputs"});

  // PEFT options this reader does not implement are refused, not ignored.
  const auto dir = minimind::testing::scratch_dir("lora_peft");
  std::filesystem::copy(lora_dir() / "adapters" / "mm2-peft", dir);
  auto json = io::read_json_file(dir / "adapter_config.json");
  json["use_dora"] = true;
  minimind::testing::write_file(dir / "adapter_config.json", json.dump());
  refused(dir, {"adapter_config.json", "\"use_dora\": true is not supported"});
  json["use_dora"] = false;
  json["r"] = 8;
  minimind::testing::write_file(dir / "adapter_config.json", json.dump());
  refused(dir, {"lora_A.weight\" has rank 4 but the adapter's rank is 8"});

  // A model refuses adapters of another base, merged or unmerged, and scales that are not finite.
  const auto wide = adapter("bad/hidden-32.pth");
  CHECK_THROWS_WITH_AS(MiniMindForCausalLM<float>::from_pretrained(data_dir() / "golden" / "mm2-dense-f32",
                                                                  options(WeightFormat::F32, {{wide, 1.0f}})),
                       doctest::Contains("hidden_size 32"), Error);
  const auto model = MiniMindForCausalLM<float>::from_pretrained(data_dir() / "golden" / "mm2-dense-f32");
  auto session = model.new_session();
  CHECK_THROWS_WITH_AS(session.set_adapters({{wide, 1.0f}}), doctest::Contains("this model's hidden_size is 16"), Error);
  CHECK_THROWS_WITH_AS(session.set_adapters({{adapter("adapters/mm2-peft"), std::nanf("")}}), doctest::Contains("not a finite number"), Error);
  CHECK(session.adapters().empty());  // a refused set leaves the session as it was
}
