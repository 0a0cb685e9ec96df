// The JSON constraint: the byte grammar accepts and refuses what JSON and the schema say, schemas
// outside the subset are refused by name, and decoding driven by random logits, random-weight
// models and the demo model always ends in a document within max_tokens. Every generated document
// is parsed here (nlohmann) and written to build/bin/json_constraint_*.jsonl, which the ctest
// json_constraint_validate then checks with a JSON Schema validator (python3-jsonschema).
#include <doctest/doctest.h>
#include <minimind/batch.hpp>
#include <minimind/generate.hpp>
#include <minimind/json_constraint.hpp>

#include "test_support.hpp"

#include <fstream>
#include <numeric>

using namespace minimind;
using Json = nlohmann::json;
using json_grammar::Grammar;

namespace {

// Feeds `text` byte by byte: -1 if a byte is refused, else 1 if the text is a whole document, 0
// if only a prefix of one.
int run_bytes(const Grammar& g, std::string_view text) {
  json_grammar::State a, b;
  g.start(a);
  for (const char c : text) {
    g.step(a, static_cast<uint8_t>(c), b);
    if (b.threads == 0) return -1;
    std::swap(a, b);
  }
  return g.complete(a) ? 1 : 0;
}

struct Case {
  const char* schema;
  std::vector<std::string> documents;  // accepted whole
  std::vector<std::string> refused;    // refused, or only a prefix
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name"]})",
       {R"({"name":"Ann"})", R"({"age":3,"name":"Bo"})", R"({"name": "x", "age": -12})", R"({"name":""})"},
       {R"({})", R"({"age":3})", R"({"name":"a","name":"b"})", R"({"name":"a","x":1})", R"({"name":"a",})",
        R"({"name":"a"}  )", R"( {"name":"a"})", R"({"name":  "a"})", R"({"name":"a"}
)", R"({"age":1.5,"name":"a"})", R"({"age":1e3,"name":"a"})", R"({"age":01,"name":"a"})", R"({"name":"a"}{})"}},
      {R"({"type":"object","properties":{"inner":{"type":"object","properties":{"deep":{"type":"array","items":{"type":"boolean"}}},"required":["deep"]}},"required":["inner"]})",
       {R"({"inner":{"deep":[]}})", R"({"inner":{"deep":[true,false, true]}})"},
       {R"({"inner":{}})", R"({"inner":{"deep":[1]}})", R"({"inner":{"deep":[true,]}})"}},
      {R"({"type":"array","items":{"type":"number"},"minItems":2,"maxItems":3})",
       {"[1,2]", "[-0.5,2e10,3E-2]", "[0, 1.25e+7]", "[-1.0,0]"},
       {"[]", "[1]", "[1,2,3,4]", "[1,,2]", "[+1,2]", "[.5,1]", "[1.,2]", "[1e,2]", "[1e999,2]", "[1234567890123456,1]"}},
      {R"({"type":"array","maxItems":0})", {"[]"}, {"[1]", "[ ]"}},
      {R"({"type":"object","additionalProperties":false})", {"{}"}, {R"({"a":1})", "{ }"}},
      {R"({"type":"object","properties":{}})", {"{}"}, {R"({"a":1})"}},
      {R"({"type":"object"})", {"{}", R"({"a":[1,{"b":"c"}],"d":null})"}, {"[]", "{,}"}},
      {R"({"enum":["红色","blue","ü\"q",3,null,{"k":[1,"二"]}]})",
       {R"("红色")", R"("blue")", R"("ü\"q")", "3", "null", R"({"k":[1,"二"]})"},
       {R"("红")", R"("红色 ")", "4", R"("blu")", R"({"k":[1,"二"],"j":1})"}},
      {R"({"const":"ok"})", {R"("ok")"}, {R"("no")", "ok"}},
      {R"({"type":"object","properties":{"q\"t":{"type":"integer"},"b\\":{"type":"null"}},"required":["q\"t"]})",
       {R"({"q\"t":1})", R"({"b\\":null,"q\"t":2})"}, {R"({"q\"t\"":1})", R"({"q":1})", R"({"b\":null,"q\"t":2})"}},
      {R"({"anyOf":[{"type":"string"},{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"type":"array","items":{"const":1}}]})",
       {R"("x")", R"({"a":1})", "[1,1]", "[]"},
       {R"({"b":1})", "[2]", "1", "null"}},
      {R"({"anyOf":[{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]},{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}]})",
       {R"({"a":"s"})", R"({"a":5})"}, {R"({"a":null})", "{}"}},
      {R"({"type":["string","null"]})", {R"("é\n\u00e9\uABCD\\\/\"\t")", "null"},
       {R"("\x")", R"("\ud800")", R"("\uDFFF")", "\"\x01\"", "\"\xC0\x80\"", "\"\xED\xA0\x80\"", "\"\xF4\x90\x80\x80\"", "\"\xE4\xBD\""}},
      {R"({"type":"string"})", {"\"\xE4\xBD\xA0\xF0\x9F\x98\x80\"", "\"\x7F\""}, {"\"a"}},
      {R"({"type":"integer"})", {"0", "-7", "123456789012345"}, {"-", "1.0", "1e2", "-01", "1234567890123456"}},
      {R"({"type":"number"})", {"0", "-0.0", "1.5e-3", "2E+99"}, {"1e100", "NaN", "Infinity", "0x1"}},
      {R"({"type":"boolean"})", {"true", "false"}, {"tru", "True", "1"}},
      {R"({"type":"object","properties":{"a":{"type":"null"}},"additionalProperties":{"type":"integer"}})",
       {R"({"a":null,"b":1})", R"({"zz":2,"a":null})", R"({"ab":3})", "{}"},
       {R"({"a":1})", R"({"b":null})", R"({"b\u0061":1})", R"({"a":null,"a":null})"}},
      {R"({"type":"object","properties":{"x":{"type":"array","items":{"type":"array","items":{"type":"string"},"minItems":1}}},"required":["x"],"additionalProperties":true})",
       {R"({"x":[["a"],["b","c"]],"free":{"n":[1,{"m":null}]}})", R"({"x":[]})"}, {R"({"x":[[]]})"}},
      {R"({})", {"1", R"({"a":[1,"b",null,true,{"c":-1.5}]})", "[]"}, {"nul", "{,}"}},
      {R"(true)", {"false"}, {"fals"}},
      {R"({"title":"t","description":"d","type":"object","properties":{"名字":{"type":"string","description":"x"}},"required":["名字"]})",
       {R"({"名字":"张三"})"}, {R"({"名":"x"})"}},
  };
  return all;
}

}  // namespace

TEST_CASE("the byte grammar accepts the schema's documents and refuses the rest") {
  for (const Case& c : cases()) {
    CAPTURE(c.schema);
    const Grammar g = Grammar::from_schema(Json::parse(c.schema));
    for (const std::string& doc : c.documents) {
      CAPTURE(doc);
      CHECK(run_bytes(g, doc) == 1);
      CHECK(Json::accept(doc));
    }
    for (const std::string& doc : c.refused) {
      CAPTURE(doc);
      CHECK(run_bytes(g, doc) != 1);
    }
    // The shortest document is one, and as short as any given.
    CAPTURE(g.shortest_document());
    CHECK(run_bytes(g, g.shortest_document()) == 1);
    for (const std::string& doc : c.documents) CHECK(g.shortest_document().size() <= doc.size());
  }
  CHECK(Grammar::from_schema(Json::parse(R"({"type":"object","properties":{"b":{"type":"string"},"a":{"enum":[10,1]}},"required":["a","b"]})"))
            .shortest_document() == R"({"a":1,"b":""})");
  CHECK(Grammar::any_object().shortest_document() == "{}");
  CHECK(run_bytes(Grammar::any_object(), "[]") == -1);
  CHECK(run_bytes(Grammar::any_object(), R"({"k": [1, {"j":"v"}]})") == 1);
}

TEST_CASE("schemas outside the subset are refused, naming the keyword and where it is") {
  const std::vector<std::pair<const char*, const char*>> refused = {
      {R"({"type":"object","properties":{"name":{"type":"string","pattern":"^a"}}})", "keyword \"pattern\" is not supported at /properties/name/pattern"},
      {R"({"type":"string","format":"date"})", "keyword \"format\" is not supported at /format"},
      {R"({"$ref":"#/$defs/x"})", "keyword \"$ref\" is not supported at /$ref"},
      {R"({"oneOf":[{"type":"string"}]})", "keyword \"oneOf\""},
      {R"({"type":"array","items":{"type":"integer","minimum":0}})", "at /items/minimum"},
      {R"({"type":"object","properties":{"a~b/c":{"maxLength":3}}})", "at /properties/a~0b~1c/maxLength"},
      {R"({"type":"object","required":["x"],"additionalProperties":false})", "\"x\" is required but not a property"},
      {R"({"type":"array","minItems":3,"maxItems":2})", "minItems is larger than maxItems at /minItems"},
      {R"({"enum":[]})", "enum must be a non-empty array at /enum"},
      {R"({"type":"string","enum":[1,2]})", "no value of the enum has the schema's type at /enum"},
      {R"({"type":"text"})", "type must be one of"},
      {R"(false)", "the schema false admits no value"},
      {R"({"anyOf":[{"type":"string"}],"type":"string"})", "type beside anyOf is not supported at /type"},
      {R"([1])", "a schema must be an object or a boolean at / (the root)"},
  };
  for (const auto& case_ : refused) {
    const auto& [schema, message] = case_;
    CAPTURE(case_.first);  // (clang 14 cannot capture a structured binding)
    try {
      Grammar::from_schema(Json::parse(schema));
      FAIL("not refused");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find(message) != std::string::npos);
      CHECK(std::string(e.what()).rfind("json schema: ", 0) == 0);
    }
  }
}

namespace {

// Writes (schema, document) lines for the validator test.
class DocumentLog {
 public:
  explicit DocumentLog(const std::string& name) : out_(minimind::testing::bin_dir() / ("json_constraint_" + name + ".jsonl")) {}
  void add(const Json& schema, const std::string& document) {
    out_ << Json{{"schema", schema}, {"document", document}}.dump() << "\n";
    ++count_;
  }
  int count() const { return count_; }

 private:
  std::ofstream out_;
  int count_ = 0;
};

// A random schema of the subset, at most `depth` levels of objects and arrays deep.
struct SchemaMaker {
  Rng rng;
  int pick(int n) { return static_cast<int>(rng.next() % static_cast<uint64_t>(n)); }
  Json word() {
    static const char* const words[] = {"a", "name", "名字", "ü", "x y", "q\"t", "tab\t", "emoji😀", "k", "数量"};
    return words[pick(10)];
  }
  Json scalar_value() {
    switch (pick(6)) {
      case 0: return word();
      case 1: return pick(200) - 100;
      case 2: return (pick(2000) - 1000) / 8.0;
      case 3: return pick(2) == 1;
      case 4: return nullptr;
      default: return "红色";
    }
  }
  // An object, an array or an anyOf at the top, as tool arguments and response formats are.
  Json make_structured(int depth) { return make(depth, 8 + pick(4)); }
  Json make(int depth) { return make(depth, pick(depth > 0 ? 12 : 8)); }
  Json make(int depth, int kind) {
    switch (kind) {
      case 0: return {{"type", "string"}};
      case 1: return {{"type", "number"}};
      case 2: return {{"type", "integer"}};
      case 3: return {{"type", "boolean"}};
      case 4: return {{"type", pick(2) ? Json("null") : Json::array({"string", "null"})}};
      case 5: {
        Json values = Json::array();
        for (int i = 0, n = 1 + pick(4); i < n; ++i) values.push_back(scalar_value());
        return {{"enum", values}};
      }
      case 6: return {{"const", scalar_value()}};
      case 7: return pick(3) ? Json{{"description", "anything"}} : Json(true);
      case 8:
      case 9: {
        Json object = {{"type", "object"}, {"properties", Json::object()}};
        Json required = Json::array();
        for (int i = 0, n = pick(4); i < n; ++i) {
          const std::string key = word();
          object["properties"][key] = make(depth - 1);
          if (pick(2)) required.push_back(key);
        }
        std::sort(required.begin(), required.end());
        required.erase(std::unique(required.begin(), required.end()), required.end());
        if (!required.empty()) object["required"] = required;
        if (const int extra = pick(4); extra == 1) object["additionalProperties"] = false;
        else if (extra == 2) object["additionalProperties"] = make(depth - 1);
        return object;
      }
      case 10: {
        Json array = {{"type", "array"}, {"items", make(depth - 1)}};
        const int min = pick(3);
        if (pick(2)) array["minItems"] = min;
        if (pick(2)) array["maxItems"] = min + pick(3);
        return array;
      }
      default: {
        Json any_of = Json::array();
        for (int i = 0, n = 2 + pick(2); i < n; ++i) any_of.push_back(make(depth - 1));
        return {{"anyOf", any_of}};
      }
    }
  }
};

std::string text_of(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, int32_t eos) {
  std::string text;
  for (const int32_t id : ids)
    if (id != eos) text += tokenizer.token_to_piece(id);
  return text;
}

// Decodes under `grammar` with logits from `rng` (a draw at temperature 1 from uniform random
// logits), checking each step; returns the ids, the last one `eos`.
std::vector<int32_t> random_reply(const std::shared_ptr<const JsonGrammar>& grammar, int64_t max_tokens, int32_t eos, Rng& rng) {
  const std::vector<int32_t> eos_ids = {eos};
  JsonConstraint constraint(grammar, max_tokens, eos_ids);
  SamplingParams params;
  params.temperature = 1;
  params.top_k = 0;
  params.top_p = 1;
  params.seed = rng.next();
  Sampler sampler(params, grammar->vocab_size());
  std::vector<float> logits(static_cast<size_t>(grammar->vocab_size()));
  std::vector<int32_t> ids;
  while (!constraint.finished()) {
    REQUIRE(static_cast<int64_t>(ids.size()) < max_tokens);
    for (float& l : logits) l = static_cast<float>(rng.uniform() * 8);
    constraint.apply(logits);
    const int32_t id = sampler.sample(logits, {});
    REQUIRE(constraint.allowed(id));
    constraint.accept(id);
    ids.push_back(id);
  }
  REQUIRE(ids.back() == eos);
  return ids;
}

std::vector<std::pair<std::string, std::filesystem::path>> tokenizers() {
  std::vector<std::pair<std::string, std::filesystem::path>> all = {
      {"demo", minimind::testing::source_dir() / "examples" / "models" / "demo" / "tokenizer.json"}};
  for (const char* name : {"minimind-3", "minimind2"}) {
    if (auto dir = minimind::testing::shared_dir(std::string("minimind/") + name)) all.emplace_back(name, *dir / "tokenizer.json");
  }
  return all;
}

}  // namespace

TEST_CASE("random logits over the real tokenizers always give a document of the schema") {
  DocumentLog log("random_logits");
  for (const auto& named : tokenizers()) {
    const auto& [name, path] = named;
    CAPTURE(named.first);  // (clang 14 cannot capture a structured binding)
    const Tokenizer tokenizer = Tokenizer::from_file(path);
    Rng rng(7);
    std::vector<Json> schemas;
    for (const Case& c : cases()) schemas.push_back(Json::parse(c.schema));
    SchemaMaker maker{Rng(11)};
    for (int i = 0; i < 40; ++i) schemas.push_back(i % 2 ? maker.make(3) : maker.make_structured(3));
    for (const Json& schema : schemas) {
      CAPTURE(schema.dump());
      const auto grammar = JsonGrammar::from_schema(schema, tokenizer);
      for (int run = 0; run < 3; ++run) {
        // Budgets from just enough to plenty: the tight ones end on the shortest ending.
        const int64_t max_tokens = grammar->shortest_document_tokens() + 1 + (run == 0 ? 0 : run == 1 ? 6 : 60);
        const auto ids = random_reply(grammar, max_tokens, 2, rng);
        CHECK(static_cast<int64_t>(ids.size()) <= max_tokens);
        const std::string text = text_of(tokenizer, ids, 2);
        CAPTURE(text);
        CHECK(Json::accept(text));
        CHECK(run_bytes(grammar->grammar(), text) == 1);
        log.add(schema, text);
      }
    }
    const auto object = JsonGrammar::any_object(tokenizer);
    for (int run = 0; run < 20; ++run) {
      const auto ids = random_reply(object, 8 + run * 6, 2, rng);
      const std::string text = text_of(tokenizer, ids, 2);
      CAPTURE(text);
      CHECK(Json::accept(text));
      if (Json::accept(text)) CHECK(Json::parse(text).is_object());
      log.add(Json{{"type", "object"}}, text);
    }
  }
  MESSAGE(log.count() << " documents written");
}

TEST_CASE("the mask allows exactly the tokens that continue the document") {
  const auto dir = minimind::testing::shared_dir("minimind/minimind-3");
  if (!dir) return;
  const Tokenizer tokenizer = Tokenizer::from_file(*dir / "tokenizer.json");
  const Json schema = Json::parse(R"({"type":"object","properties":{"名字":{"type":"string"},"n":{"type":"integer"}},"required":["名字"]})");
  const auto grammar = JsonGrammar::from_schema(schema, tokenizer);
  const std::vector<int32_t> eos = {2};
  JsonConstraint constraint(grammar, 64, eos);
  std::vector<float> logits(static_cast<size_t>(tokenizer.vocab_size()));
  // Every step, a token is allowed exactly when its bytes keep the text a prefix the byte
  // grammar takes (the budget being ample), and the end only at the end.
  std::string text;
  for (int step = 0; step < 12 && !constraint.finished(); ++step) {
    constraint.apply(logits);
    int allowed = 0;
    for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
      const bool continues = !tokenizer.is_added(id) && run_bytes(grammar->grammar(), text + tokenizer.token_to_piece(id)) >= 0;
      const bool expected = id == 2 ? run_bytes(grammar->grammar(), text) == 1 : continues;
      if (constraint.allowed(id) != expected) {
        CAPTURE(text);
        CAPTURE(id);
        CHECK(constraint.allowed(id) == expected);
      }
      allowed += constraint.allowed(id);
    }
    CHECK(allowed > 0);
    // Walk a fixed document where it can, else take any allowed token.
    const std::string target = R"({"名字":"张三","n":-12})";
    int32_t choice = -1;
    for (int32_t id = 0; id < tokenizer.vocab_size() && choice < 0; ++id) {
      const std::string piece = tokenizer.token_to_piece(id);
      if (constraint.allowed(id) && id != 2 && target.compare(text.size(), piece.size(), piece) == 0) choice = id;
    }
    if (choice < 0) choice = 2;
    constraint.accept(choice);
    if (choice != 2) text += tokenizer.token_to_piece(choice);
  }
  CHECK(text.size() > 5);
  CHECK_THROWS_AS(constraint.accept(static_cast<int32_t>(*tokenizer.token_to_id("{"))), Error);
}

TEST_CASE("a reply always ends within max_tokens, and a budget too small for the schema is refused") {
  const Tokenizer tokenizer = Tokenizer::from_file(minimind::testing::source_dir() / "examples" / "models" / "demo" / "tokenizer.json");
  const Json schema = Json::parse(
      R"({"type":"object","properties":{"items":{"type":"array","items":{"type":"string"},"minItems":2},"note":{"type":"string"}},"required":["items","note"]})");
  const auto grammar = JsonGrammar::from_schema(schema, tokenizer);
  CHECK(grammar->shortest_document() == R"({"items":["",""],"note":""})");
  const int64_t shortest = grammar->shortest_document_tokens();
  CHECK(shortest > 0);
  CHECK(shortest <= static_cast<int64_t>(grammar->shortest_document().size()));
  const std::vector<int32_t> eos = {2};
  try {
    JsonConstraint refused(grammar, shortest, eos);
    FAIL("not refused");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("a reply of at most " + std::to_string(shortest) + " tokens cannot hold") != std::string::npos);
  }
  DocumentLog log("budgets");
  Rng rng(5);
  for (int64_t max_tokens = shortest + 1; max_tokens < shortest + 40; ++max_tokens) {
    for (int run = 0; run < 5; ++run) {
      const auto ids = random_reply(grammar, max_tokens, 2, rng);
      CHECK(static_cast<int64_t>(ids.size()) <= max_tokens);
      const std::string text = text_of(tokenizer, ids, 2);
      CAPTURE(text);
      CHECK(Json::accept(text));
      log.add(schema, text);
    }
  }
  // generate(): the constraint through GenerationConfig, with its own budget check.
  const auto model = MiniMindForCausalLM<float>::from_pretrained(minimind::testing::source_dir() / "examples" / "models" / "demo");
  GenerationConfig config;
  config.json_grammar = grammar;
  config.eos_token_ids = {2};
  config.max_new_tokens = shortest;
  auto session = model.new_session(256);
  const auto prompt = tokenizer.encode("天气");
  CHECK_THROWS_WITH_AS(generate(model, session, prompt, config), doctest::Contains("cannot hold"), Error);
  config.max_new_tokens = shortest + 3;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    config.sampling.seed = seed;
    session.reset();
    const auto result = generate(model, session, prompt, config);
    CHECK(result.stop == StopReason::EndOfSequence);
    CHECK(static_cast<int64_t>(result.ids.size()) <= config.max_new_tokens);
    const std::string text = text_of(tokenizer, result.ids, 2);
    CHECK(Json::accept(text));
    log.add(schema, text);
  }
  config.ignore_eos = true;
  CHECK_THROWS_WITH_AS(generate(model, session, prompt, config), doctest::Contains("ignore_eos"), Error);
}

TEST_CASE("the demo model in JSON mode, one sequence alone and several in a Batch") {
  const auto demo = minimind::testing::source_dir() / "examples" / "models" / "demo";
  const auto model = MiniMindForCausalLM<float>::from_pretrained(demo);
  const Tokenizer tokenizer = Tokenizer::from_pretrained(demo);
  const Json schema = Json::parse(R"({"type":"object","properties":{"answer":{"type":"string"},"sure":{"type":"boolean"}},"required":["answer","sure"]})");
  GenerationConfig config = GenerationConfig::from_pretrained(demo, model.config(), &tokenizer);
  config.json_grammar = JsonGrammar::from_schema(schema, tokenizer);
  config.max_new_tokens = 40;
  DocumentLog log("demo_model");
  const std::vector<std::string> prompts = {"今天天气", "小明家养了一只", "Hello", "1+1="};
  // Alone, through generate().
  std::vector<std::string> alone;
  for (const std::string& text : prompts) {
    const auto prompt = tokenizer.encode(text);
    auto session = model.new_session(static_cast<Index>(prompt.size()) + config.max_new_tokens);
    const auto result = generate(model, session, prompt, config);
    CHECK(result.stop == StopReason::EndOfSequence);
    alone.push_back(tokenizer.decode(result.ids, /*skip_special_tokens=*/true));
    CAPTURE(alone.back());
    CHECK(Json::accept(alone.back()));
    log.add(schema, alone.back());
  }
  // Together, one SequenceSampler each over one Batch: the same replies (greedy would be too
  // easy; the same seed and the same logits give the same draws).
  std::vector<Session<float>> sessions;
  std::vector<std::vector<int32_t>> prompt_ids;
  std::vector<SequenceSampler> samplers;
  for (const std::string& text : prompts) {
    prompt_ids.push_back(tokenizer.encode(text));
    sessions.push_back(model.new_session(static_cast<Index>(prompt_ids.back().size()) + config.max_new_tokens));
  }
  for (size_t i = 0; i < prompts.size(); ++i) samplers.emplace_back(config, model.config().vocab_size, prompt_ids[i], sessions[i].remaining() - static_cast<Index>(prompt_ids[i].size()));
  Batch<float> batch(model);
  for (size_t i = 0; i < prompts.size(); ++i) batch.add(sessions[i], prompt_ids[i]);
  std::vector<int32_t> next(prompts.size());
  std::vector<bool> done(prompts.size(), false);
  for (int step = 0; step < config.max_new_tokens; ++step) {
    const auto logits = batch.step();
    std::vector<size_t> members;
    for (size_t i = 0, row = 0; i < prompts.size(); ++i) {
      if (done[i]) continue;
      next[i] = samplers[i].next(logits.row(static_cast<Index>(row++)).data());
      if (samplers[i].stop(sessions[i].remaining())) done[i] = true;
      else members.push_back(i);
    }
    if (members.empty()) break;
    for (const size_t i : members) batch.add(sessions[i], std::span<const int32_t>(&next[i], 1));
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    CHECK(done[i]);
    const std::string text = tokenizer.decode(samplers[i].ids(), true);
    CHECK(text == alone[i]);
    log.add(schema, text);
  }
}

TEST_CASE("200 random schemas on a random-weight minimind-3-shaped model: every reply a document") {
  const auto dir = minimind::testing::shared_dir("minimind/minimind-3");
  if (!dir) return;
  const Tokenizer tokenizer = Tokenizer::from_file(*dir / "tokenizer.json");
  const auto model = MiniMindForCausalLM<float>::random(Config::minimind3(), 44);
  SchemaMaker maker{Rng(2026)};
  DocumentLog log("random_model");
  constexpr int kReplies = 200, kMaxTokens = 48, kBatch = 50;
  const std::vector<int32_t> prompt = tokenizer.encode("<|im_start|>user\nJSON please<|im_end|>\n<|im_start|>assistant\n");
  int parsed = 0, too_long = 0;
  for (int first = 0; first < kReplies; first += kBatch) {
    std::vector<Json> schemas;
    std::vector<GenerationConfig> configs(kBatch);
    while (static_cast<int>(schemas.size()) < kBatch) {
      Json schema = maker.make_structured(3);
      auto grammar = JsonGrammar::from_schema(schema, tokenizer);
      if (grammar->shortest_document_tokens() + 1 > kMaxTokens) {
        ++too_long;
        continue;
      }
      GenerationConfig& config = configs[schemas.size()];
      config.json_grammar = grammar;
      config.max_new_tokens = kMaxTokens;
      config.eos_token_ids = {2};
      config.sampling.temperature = 1;
      config.sampling.seed = static_cast<uint64_t>(first) + schemas.size();
      schemas.push_back(std::move(schema));
    }
    std::vector<Session<float>> sessions;
    std::vector<SequenceSampler> samplers;
    for (int i = 0; i < kBatch; ++i) {
      sessions.push_back(model.new_session(static_cast<Index>(prompt.size()) + kMaxTokens));
      samplers.emplace_back(configs[static_cast<size_t>(i)], model.config().vocab_size, prompt, static_cast<Index>(kMaxTokens));
    }
    Batch<float> batch(model);
    for (auto& s : sessions) batch.add(s, prompt);
    std::vector<int32_t> next(kBatch);
    std::vector<int> live(kBatch);
    std::iota(live.begin(), live.end(), 0);
    while (!live.empty()) {
      const auto logits = batch.step();
      std::vector<int> still;
      for (size_t row = 0; row < live.size(); ++row) {
        const int i = live[row];
        next[static_cast<size_t>(i)] = samplers[static_cast<size_t>(i)].next(logits.row(static_cast<Index>(row)).data());
        const auto stop = samplers[static_cast<size_t>(i)].stop(sessions[static_cast<size_t>(i)].remaining());
        if (stop) CHECK(*stop == StopReason::EndOfSequence);
        else still.push_back(i);
      }
      live = still;
      for (const int i : live) batch.add(sessions[static_cast<size_t>(i)], std::span<const int32_t>(&next[static_cast<size_t>(i)], 1));
    }
    for (int i = 0; i < kBatch; ++i) {
      const auto& ids = samplers[static_cast<size_t>(i)].ids();
      CHECK(static_cast<int>(ids.size()) <= kMaxTokens);
      const std::string text = text_of(tokenizer, ids, 2);
      CAPTURE(schemas[static_cast<size_t>(i)].dump());
      CAPTURE(text);
      CHECK(Json::accept(text));
      parsed += Json::accept(text);
      log.add(schemas[static_cast<size_t>(i)], text);
    }
  }
  MESSAGE(parsed << " of " << kReplies << " replies parse (" << too_long << " schemas drawn were too long for "
                 << kMaxTokens << " tokens and redrawn); json_constraint_validate checks them against their schemas");
  CHECK(parsed == kReplies);
}
