// minimind/tokenizer.hpp: Tokenizer and StreamingDecoder, on a small tokenizer.json written here
// and on the two real MiniMind tokenizers against Hugging Face's golden ids.
#include "minimind/tokenizer.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test_support.hpp"

using minimind::Error;
using minimind::StreamingDecoder;
using minimind::Tokenizer;
using Json = nlohmann::json;
using Ids = std::vector<std::int32_t>;

namespace {

// Ids of the small tokenizer: bytes 0-255 are their own byte-level characters, then merges.
// kGT ("Ġt") is only an intermediate merge, named for the list; clang warns it is unused.
[[maybe_unused]] constexpr std::int32_t kEG = 256, kGT = 257, kHe = 258, kGThe = 259, kZhongHead = 260;
constexpr std::int32_t kImStart = 261, kImEnd = 262, kThink = 263, kVocabSize = 264;
constexpr std::int32_t kZhongTail = 0xAD;  // 中 is E4 B8 AD; 0xAD is spelled 'Ń'

std::string spelled(unsigned char byte) {
  return minimind::byte_level::to_byte_level(std::string(1, static_cast<char>(byte)));
}

// A byte-level BPE tokenizer.json: all 256 bytes, five merges (in the given form), three added
// tokens; `change` edits it before writing.
Json small_tokenizer(bool merges_as_pairs = true) {
  Json vocab = Json::object();
  for (unsigned byte = 0; byte < 256; ++byte) vocab[spelled(static_cast<unsigned char>(byte))] = byte;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"e", "Ġ"}, {"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"ä", "¸"}};
  Json merge_list = Json::array();
  for (const auto& [left, right] : merges) {
    vocab[left + right] = vocab.size();
    merge_list.push_back(merges_as_pairs ? Json::array({left, right}) : Json(left + " " + right));
  }
  const auto added = [](std::int32_t id, const char* content, bool special) {
    return Json{{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", special}};
  };
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens",
           {added(kImStart, "<|im_start|>", true), added(kImEnd, "<|im_end|>", true),
            added(kThink, "<think>", false)}},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
            {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}}},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
            {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
            {"vocab", vocab}, {"merges", merge_list}}}};
}

// Writes tokenizer.json (and tokenizer_config.json when given) into a fresh directory.
std::filesystem::path write_model_dir(const std::string& name, const Json& tokenizer,
                                      const Json& config = nullptr) {
  const std::filesystem::path dir = minimind::testing::scratch_dir(name);
  minimind::testing::write_file(dir / "tokenizer.json", tokenizer.dump());
  if (!config.is_null()) minimind::testing::write_file(dir / "tokenizer_config.json", config.dump());
  return dir;
}

Tokenizer load(const Json& tokenizer, const std::string& name = "tokenizer_small") {
  return Tokenizer::from_file(write_model_dir(name, tokenizer) / "tokenizer.json");
}

// The message of the minimind::Error that loading throws, without the file's directory.
std::string load_error(const Json& tokenizer, const Json& config = nullptr) {
  const std::filesystem::path dir = write_model_dir("tokenizer_error", tokenizer, config);
  try {
    Tokenizer::from_pretrained(dir);
  } catch (const Error& error) {
    std::string message = error.what();
    const std::string prefix = dir.string() + "/";
    if (message.starts_with(prefix)) message.erase(0, prefix.size());
    return message;
  }
  return "no error";
}

template <class Call>
std::string error_of(Call&& call) {
  try {
    call();
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("a small byte-level tokenizer.json: encode, decode and the vocabulary") {
  const Tokenizer tokenizer = load(small_tokenizer());
  CHECK(tokenizer.vocab_size() == kVocabSize);
  CHECK(tokenizer.encode(" the") == Ids{kGThe});
  CHECK(tokenizer.encode("the") == Ids{'t', kHe});
  CHECK(tokenizer.encode("he the") == Ids{kHe, kGThe});  // "eĠ" would cross the word boundary
  CHECK(tokenizer.encode("") == Ids{});
  CHECK(tokenizer.encode("中") == Ids{kZhongHead, kZhongTail});
  CHECK(tokenizer.decode(tokenizer.encode("he the 中 x\n")) == "he the 中 x\n");
  CHECK(tokenizer.id_to_token(kGThe) == "Ġthe");
  CHECK(tokenizer.id_to_token(kImEnd) == "<|im_end|>");
  CHECK(tokenizer.token_to_piece(kGThe) == " the");
  CHECK(tokenizer.token_to_piece(kZhongHead) == "\xE4\xB8");
  CHECK(tokenizer.token_to_id("Ġthe") == kGThe);
  CHECK(tokenizer.token_to_id("<think>") == kThink);
  CHECK_FALSE(tokenizer.token_to_id(" the").has_value());
  CHECK(tokenizer.is_special(kImStart));
  CHECK_FALSE(tokenizer.is_special(kThink));
  CHECK_FALSE(tokenizer.is_special(kGThe));
  // from_file reads no tokenizer_config.json: no BOS/EOS, no template.
  CHECK_FALSE(tokenizer.bos_id().has_value());
  CHECK(tokenizer.chat_template().empty());
  const Tokenizer copy = tokenizer;  // copies are independent (each has its own word cache)
  CHECK(copy.encode("he the") == Ids{kHe, kGThe});
}

TEST_CASE("merges written as \"a b\" strings give the same ids as [a, b] pairs") {
  const Tokenizer pairs = load(small_tokenizer(true), "tokenizer_pairs");
  const Tokenizer strings = load(small_tokenizer(false), "tokenizer_strings");
  for (const char* text : {" the", "he the", "the then 中文", "<think> the"}) {
    CHECK(pairs.encode(text) == strings.encode(text));
  }
}

TEST_CASE("added tokens inside text come out whole; look-alikes are ordinary text") {
  const Tokenizer tokenizer = load(small_tokenizer());
  CHECK(tokenizer.encode("<|im_start|>the<think> the<|im_end|>") ==
        Ids{kImStart, 't', kHe, kThink, kGThe, kImEnd});
  CHECK(tokenizer.encode("<|im_start") == Ids{'<', '|', 'i', 'm', '_', 's', 't', 'a', 'r', 't'});
  CHECK(tokenizer.encode("<think >").size() == 8);
  CHECK(tokenizer.encode("<THINK>") == Ids{'<', 'T', 'H', 'I', 'N', 'K', '>'});
  CHECK(tokenizer.decode(Ids{kImStart, 't', kImEnd}) == "<|im_start|>t<|im_end|>");
  CHECK(tokenizer.decode(Ids{kImStart, 't', kThink, kImEnd}, true) == "t<think>");
}

TEST_CASE("pre_tokenizer options: add_prefix_space per piece, use_regex=false keeps one word") {
  Json json = small_tokenizer();
  json["pre_tokenizer"]["add_prefix_space"] = true;
  const Tokenizer prefixed = load(json, "tokenizer_prefix");
  CHECK(prefixed.encode("the") == Ids{kGThe});
  CHECK(prefixed.encode(" the") == Ids{kGThe});  // already starts with a space
  CHECK(prefixed.encode("<think>the") == Ids{kThink, kGThe});
  json = small_tokenizer();
  json["pre_tokenizer"]["use_regex"] = false;
  const Tokenizer unsplit = load(json, "tokenizer_no_regex");
  CHECK(unsplit.encode("he the") == Ids{'h', kEG, 't', kHe});  // "eĠ" now merges first
}

TEST_CASE("from_pretrained reads tokenizer_config.json: special tokens, BOS/EOS, chat template") {
  const Json config = {{"bos_token", "<|im_start|>"},
                       {"eos_token", {{"content", "<|im_end|>"}, {"__type", "AddedToken"}}},
                       {"pad_token", "<think>"},
                       {"unk_token", nullptr},
                       {"add_bos_token", true},
                       {"add_eos_token", true},
                       {"chat_template", "{{ messages }}"}};
  const Tokenizer tokenizer =
      Tokenizer::from_pretrained(write_model_dir("tokenizer_config", small_tokenizer(), config));
  CHECK(tokenizer.bos_id() == kImStart);
  CHECK(tokenizer.eos_id() == kImEnd);
  CHECK(tokenizer.pad_id() == kThink);
  CHECK_FALSE(tokenizer.unk_id().has_value());
  CHECK(tokenizer.encode(" the") == Ids{kImStart, kGThe, kImEnd});
  CHECK(tokenizer.chat_template() == "{{ messages }}");

  Json listed = config;
  listed["add_bos_token"] = false;
  listed["add_eos_token"] = false;
  listed["chat_template"] = Json::array({{{"name", "tool_use"}, {"template", "T"}},
                                         {{"name", "default"}, {"template", "D"}}});
  const Tokenizer named =
      Tokenizer::from_pretrained(write_model_dir("tokenizer_config_list", small_tokenizer(), listed));
  CHECK(named.chat_template() == "D");
  CHECK(named.encode(" the") == Ids{kGThe});

  const std::filesystem::path bare = write_model_dir("tokenizer_config_jinja", small_tokenizer());
  minimind::testing::write_file(bare / "chat_template.jinja", "J");
  const Tokenizer from_jinja = Tokenizer::from_pretrained(bare);
  CHECK(from_jinja.chat_template() == "J");
  CHECK_FALSE(from_jinja.eos_id().has_value());
}

TEST_CASE("tokenizer.json parts this code does not implement are refused, naming the field") {
  const auto with = [](const char* key, Json value) {
    Json json = small_tokenizer();
    json[key] = std::move(value);
    return load_error(json);
  };
  CHECK(with("normalizer", {{"type", "NFC"}}) ==
        "tokenizer.json: normalizer.type: 'NFC' is not supported (only null)");
  CHECK(with("pre_tokenizer", {{"type", "Metaspace"}}) ==
        "tokenizer.json: pre_tokenizer.type: 'Metaspace' is not supported (only ByteLevel)");
  CHECK(with("pre_tokenizer", nullptr) ==
        "tokenizer.json: pre_tokenizer.type: 'null' is not supported (only ByteLevel)");
  CHECK(with("pre_tokenizer", {{"type", "ByteLevel"}}) ==
        "tokenizer.json: pre_tokenizer.add_prefix_space: missing");
  CHECK(with("decoder", nullptr) ==
        "tokenizer.json: decoder.type: 'null' is not supported (only ByteLevel)");
  CHECK(with("decoder", {{"type", "WordPiece"}}) ==
        "tokenizer.json: decoder.type: 'WordPiece' is not supported (only ByteLevel)");
  CHECK(with("post_processor", {{"type", "TemplateProcessing"}}) ==
        "tokenizer.json: post_processor.type: 'TemplateProcessing' is not supported (only null or "
        "ByteLevel)");
  CHECK(with("post_processor", {{"type", "ByteLevel"}, {"trim_offsets", true}}) == "no error");
  CHECK(with("truncation", {{"max_length", 8}}) ==
        "tokenizer.json: truncation: must be null: it would change encode's ids");
  CHECK(with("padding", {{"length", 8}}) ==
        "tokenizer.json: padding: must be null: it would change encode's ids");
  CHECK(with("version", "2.0") == "tokenizer.json: version: '2.0' is not supported (only 1.0)");
  Json json = small_tokenizer();
  json["model"]["byte_fallback"] = true;
  CHECK(load_error(json).starts_with("tokenizer.json: model.byte_fallback: true is not supported"));
  json = small_tokenizer();
  json["model"]["type"] = "WordPiece";
  CHECK(load_error(json) == "tokenizer.json: model.type: 'WordPiece' is not supported (only BPE)");
}

TEST_CASE("inconsistent vocabularies and added tokens are refused, naming the field") {
  Json json = small_tokenizer();
  json["model"]["vocab"]["extra"] = 300;
  CHECK(load_error(json) ==
        "tokenizer.json: model.vocab.extra: id 300 is not below the vocabulary size 262 (ids must "
        "run from 0 without gaps)");
  json = small_tokenizer();
  json["model"]["vocab"]["Ġthe"] = 258;
  CHECK(load_error(json).ends_with(": id 258 is given to two tokens"));
  json = small_tokenizer();
  json["added_tokens"][2]["id"] = 270;
  CHECK(load_error(json) ==
        "tokenizer.json: added_tokens[2].id: 270 disagrees with the id Hugging Face gives "
        "'<think>': 263 (the next free id)");
  json = small_tokenizer();
  json["added_tokens"].push_back({{"id", 5}, {"content", "Ġthe"}});
  CHECK(load_error(json) ==
        "tokenizer.json: added_tokens[3].id: 5 disagrees with the id Hugging Face gives 'Ġthe': "
        "259 (its model.vocab id)");
  json = small_tokenizer();
  json["added_tokens"].push_back(json["added_tokens"][0]);
  CHECK(load_error(json) == "tokenizer.json: added_tokens[3].content: '<|im_start|>' is listed twice");
  json = small_tokenizer();
  json["added_tokens"][0]["content"] = "";
  CHECK(load_error(json) == "tokenizer.json: added_tokens[0].content: is empty");
  json = small_tokenizer();
  json["added_tokens"][0].erase("id");
  CHECK(load_error(json) == "tokenizer.json: added_tokens[0].id: missing");
  json = small_tokenizer();
  json["added_tokens"][0]["special"] = "yes";
  CHECK(load_error(json) ==
        "tokenizer.json: added_tokens[0].special: expected true or false, found string");
}

TEST_CASE("tokenizer_config.json settings that cannot be honoured are refused, naming the field") {
  const auto with = [](Json config) { return load_error(small_tokenizer(), config); };
  CHECK(with({{"bos_token", "<s>"}}) ==
        "tokenizer_config.json: bos_token: '<s>' is not in the tokenizer's vocabulary");
  CHECK(with({{"add_bos_token", true}}) ==
        "tokenizer_config.json: add_bos_token: is true but bos_token is not set");
  CHECK(with({{"add_eos_token", true}}) ==
        "tokenizer_config.json: add_eos_token: is true but eos_token is not set");
  CHECK(with({{"clean_up_tokenization_spaces", true}}) ==
        "tokenizer_config.json: clean_up_tokenization_spaces: true is not supported (decode keeps "
        "spaces)");
  CHECK(with({{"add_prefix_space", true}}) ==
        "tokenizer_config.json: add_prefix_space: disagrees with tokenizer.json's pre_tokenizer");
  CHECK(with({{"added_tokens_decoder", {{"300", {{"content", "<extra>"}}}}}}) ==
        "tokenizer_config.json: added_tokens_decoder.300: '<extra>' is not an added token with id "
        "300 in tokenizer.json");
  CHECK(with({{"added_tokens_decoder", {{"263", {{"content", "<think>"}, {"special", true}}}}}}) ==
        "tokenizer_config.json: added_tokens_decoder.263.special: disagrees with tokenizer.json's "
        "added_tokens");
  CHECK(with({{"added_tokens_decoder", {{"261", {{"content", "<|im_start|>"}, {"special", true}}}}}}) ==
        "no error");
  CHECK(with({{"additional_special_tokens", {"<think>"}}}) ==
        "tokenizer_config.json: additional_special_tokens[0]: '<think>' is not a special added "
        "token of tokenizer.json");
  CHECK(with({{"chat_template", Json::array({{{"name", "x"}, {"template", "T"}}})}}) ==
        "tokenizer_config.json: chat_template: has no template named \"default\"");
  CHECK(with({{"chat_template", 3}}) ==
        "tokenizer_config.json: chat_template: expected a JSON array, found number");
  CHECK(with(Json::array()) == "tokenizer_config.json: expected a JSON object, found array");
}

TEST_CASE("unreadable files are reported with their path") {
  const std::filesystem::path dir = minimind::testing::scratch_dir("tokenizer_files");
  CHECK(error_of([&] { Tokenizer::from_file(dir / "none.json"); }) ==
        (dir / "none.json").string() + ": cannot open file");
  CHECK(error_of([&] { Tokenizer::from_pretrained(dir); }) ==
        (dir / "tokenizer.json").string() + ": cannot open file");
  minimind::testing::write_file(dir / "broken.json", "{\"model\": ");
  CHECK(error_of([&] { Tokenizer::from_file(dir / "broken.json"); })
            .starts_with((dir / "broken.json").string() + ": not valid JSON ("));
  minimind::testing::write_file(dir / "empty.json", "{}");
  CHECK(error_of([&] { Tokenizer::from_file(dir / "empty.json"); }) ==
        (dir / "empty.json").string() + ": model: missing");
}

TEST_CASE("from_json_text loads tokenizer.json text from memory, naming its source in errors") {
  const Json json = small_tokenizer();
  const Tokenizer from_text = Tokenizer::from_json_text(json.dump(), "embedded tokenizer.json");
  const Tokenizer from_file = load(json);
  CHECK(from_text.vocab_size() == from_file.vocab_size());
  CHECK(from_text.encode(" the 中<|im_end|>") == from_file.encode(" the 中<|im_end|>"));
  CHECK(error_of([] { Tokenizer::from_json_text("{\"model\": [", "embedded"); }).starts_with("embedded: not valid JSON ("));
  CHECK(error_of([] { Tokenizer::from_json_text("{}", "embedded"); }) == "embedded: model: missing");
  // nlohmann throws out_of_range, not parse_error, for a number no double holds.
  CHECK(error_of([] { Tokenizer::from_json_text(R"({"version": 1e999})", "embedded"); })
            .starts_with("embedded: not valid JSON ([json.exception.out_of_range.406]"));
}

TEST_CASE("a truncated tokenizer.json at every eighth of its length is refused, naming the file") {
  const std::filesystem::path dir = minimind::testing::scratch_dir("tokenizer_truncated");
  const std::string text = small_tokenizer().dump(1);
  for (int eighth = 0; eighth < 8; ++eighth) {
    CAPTURE(eighth);
    const std::string cut = text.substr(0, text.size() * static_cast<std::size_t>(eighth) / 8);
    minimind::testing::write_file(dir / "tokenizer.json", cut);
    CHECK(error_of([&] { Tokenizer::from_file(dir / "tokenizer.json"); })
              .starts_with((dir / "tokenizer.json").string() + ": not valid JSON ("));
    CHECK(error_of([&] { Tokenizer::from_json_text(cut, "cut"); }).starts_with("cut: not valid JSON ("));
  }
  minimind::testing::write_file(dir / "tokenizer.json", text);
  CHECK(Tokenizer::from_file(dir / "tokenizer.json").vocab_size() == kVocabSize);
}

TEST_CASE("encode rejects ill-formed UTF-8 with the byte offset; ids out of range are errors") {
  const Tokenizer tokenizer = load(small_tokenizer());
  CHECK(error_of([&] { tokenizer.encode("abc\xFF" "def"); }) ==
        "Tokenizer::encode: text: invalid UTF-8 at byte offset 3");
  CHECK(error_of([&] { tokenizer.encode("中\xE4\xB8"); }) ==
        "Tokenizer::encode: text: invalid UTF-8 at byte offset 3 (truncated sequence at the end)");
  const std::string out_of_range = "token id 264 is out of range (vocab size 264)";
  CHECK(error_of([&] { tokenizer.decode(Ids{1, kVocabSize}); }) == out_of_range);
  CHECK(error_of([&] { tokenizer.decode(Ids{-1}); }) == "token id -1 is out of range (vocab size 264)");
  CHECK(error_of([&] { tokenizer.decode(Ids{1, INT32_MIN}); }) == "token id -2147483648 is out of range (vocab size 264)");
  CHECK(error_of([&] { tokenizer.decode(Ids{INT32_MAX}); }) == "token id 2147483647 is out of range (vocab size 264)");
  CHECK(error_of([&] { tokenizer.token_to_piece(kVocabSize); }) == out_of_range);
  CHECK(error_of([&] { tokenizer.id_to_token(kVocabSize); }) == out_of_range);
  CHECK(error_of([&] { tokenizer.is_special(kVocabSize); }) == out_of_range);
  StreamingDecoder stream(tokenizer);
  CHECK(error_of([&] { stream.push(kVocabSize); }) == out_of_range);
}

TEST_CASE("decode renders bytes that are not UTF-8 as U+FFFD, as Hugging Face does") {
  const Tokenizer tokenizer = load(small_tokenizer());
  const std::string fffd = "\xEF\xBF\xBD";
  CHECK(tokenizer.decode(Ids{kZhongHead}) == fffd);  // E4 B8: one maximal subpart
  CHECK(tokenizer.decode(Ids{kZhongHead, 'a'}) == fffd + "a");
  CHECK(tokenizer.decode(Ids{kZhongTail, kZhongTail}) == fffd + fffd);
  CHECK(tokenizer.decode(Ids{kZhongHead, kZhongTail}) == "中");
}

TEST_CASE("StreamingDecoder emits a character split across tokens once it is complete") {
  const Tokenizer tokenizer = load(small_tokenizer());
  StreamingDecoder stream(tokenizer);
  CHECK(stream.push(' ') == " ");
  CHECK(stream.push(kZhongHead) == "");  // E4 B8: two bytes of three
  CHECK(stream.push(kZhongTail) == "中");
  CHECK(stream.push(kGThe) == " the");
  CHECK(stream.flush() == "");
  CHECK(stream.push(kZhongHead) == "");
  CHECK(stream.flush() == "\xEF\xBF\xBD");  // cut off at the end: as decode renders it
  CHECK(stream.push(kZhongTail) == "\xEF\xBF\xBD");  // can never complete: out at once

  StreamingDecoder skipping(tokenizer, true);
  CHECK(skipping.push(kZhongHead) == "");
  CHECK(skipping.push(kImEnd) == "");  // skipped, so the character can still complete
  CHECK(skipping.push(kZhongTail) == "中");
  CHECK(skipping.push(kThink) == "<think>");  // not special
}

TEST_CASE("StreamingDecoder's pieces always join to decode's text (random id sequences)") {
  const Tokenizer tokenizer = load(small_tokenizer());
  std::mt19937 random(1234);
  // Mostly bytes >= 0x80, so sequences are full of partial and broken characters.
  std::uniform_int_distribution<std::int32_t> high_byte(0x80, 0xFF);
  std::uniform_int_distribution<std::int32_t> any_id(0, kVocabSize - 1);
  std::size_t compared = 0;
  for (int sequence = 0; sequence < 2000; ++sequence) {
    Ids ids(static_cast<std::size_t>(sequence % 9));
    for (std::int32_t& id : ids) id = random() % 4 == 0 ? any_id(random) : high_byte(random);
    for (const bool skip : {false, true}) {
      StreamingDecoder stream(tokenizer, skip);
      std::string joined;
      for (const std::int32_t id : ids) joined += stream.push(id);
      joined += stream.flush();
      compared += joined == tokenizer.decode(ids, skip);
    }
  }
  CHECK(compared == 4000);
}

namespace {

struct GoldenLine {
  std::string text;
  Ids ids;
};

std::vector<GoldenLine> read_golden(const std::filesystem::path& file) {
  std::vector<GoldenLine> lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    const Json entry = Json::parse(line);
    lines.push_back({entry.at("text").get<std::string>(), entry.at("ids").get<Ids>()});
  }
  return lines;
}

}  // namespace

TEST_CASE("the MiniMind tokenizers give Hugging Face's ids for every golden line") {
  const auto golden = minimind::testing::shared_dir("golden/tokenizer");
  const auto models = minimind::testing::shared_dir("minimind");
  if (!golden || !models) return;
  for (const std::string name : {"minimind2", "minimind-3"}) {
    CAPTURE(name);
    const Tokenizer tokenizer = Tokenizer::from_pretrained(*models / name);
    const std::vector<GoldenLine> lines = read_golden(*golden / (name + ".jsonl"));
    REQUIRE(lines.size() == 473);
    std::size_t ids_match = 0, round_trips = 0, streams_match = 0;
    for (const GoldenLine& line : lines) {
      const Ids ids = tokenizer.encode(line.text);
      ids_match += ids == line.ids;
      if (ids != line.ids && ids_match + 5 > lines.size()) {  // name a few, not hundreds
        MESSAGE("ids differ for " << Json(line.text).dump());
      }
      round_trips += tokenizer.decode(ids) == line.text;
      StreamingDecoder stream(tokenizer);
      std::string streamed;
      for (const std::int32_t id : line.ids) streamed += stream.push(id);
      streams_match += streamed + stream.flush() == line.text;
    }
    MESSAGE(name << ": " << ids_match << "/" << lines.size() << " lines id-for-id, " << round_trips
                 << " decode(encode(text)) == text, " << streams_match << " streamed");
    CHECK(ids_match == lines.size());
    CHECK(round_trips == lines.size());
    CHECK(streams_match == lines.size());
  }
}

TEST_CASE("the MiniMind tokenizer_config.json: special tokens and chat template") {
  const auto models = minimind::testing::shared_dir("minimind");
  if (!models) return;
  for (const std::string name : {"minimind2", "minimind-3"}) {
    CAPTURE(name);
    const Tokenizer tokenizer = Tokenizer::from_pretrained(*models / name);
    CHECK(tokenizer.vocab_size() == 6400);
    CHECK(tokenizer.bos_id() == 1);  // <|im_start|>
    CHECK(tokenizer.eos_id() == 2);  // <|im_end|>
    CHECK(tokenizer.pad_id() == 0);  // <|endoftext|>
    CHECK(tokenizer.unk_id() == 0);
    CHECK_FALSE(tokenizer.adds_bos());
    CHECK(tokenizer.chat_template().starts_with("{%- if tools %}"));
    CHECK(tokenizer.decode(tokenizer.encode("<|im_start|>user\n你好<|im_end|>"), true) ==
          "user\n你好");
  }
  const Tokenizer minimind3 = Tokenizer::from_pretrained(*models / "minimind-3");
  CHECK(minimind3.is_special(minimind3.token_to_id("<|image_pad|>").value()));
  CHECK_FALSE(minimind3.is_special(minimind3.token_to_id("<think>").value()));
}

TEST_CASE("one const Tokenizer shared by several threads gives every thread the same ids") {
  const auto golden = minimind::testing::shared_dir("golden/tokenizer");
  const auto models = minimind::testing::shared_dir("minimind");
  if (!golden || !models) return;
  const Tokenizer tokenizer = Tokenizer::from_pretrained(*models / "minimind-3");
  const std::vector<GoldenLine> lines = read_golden(*golden / "minimind-3.jsonl");
  std::vector<std::size_t> matches(4, 0);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < matches.size(); ++t) {
    threads.emplace_back([&, t] {
      // Each thread starts at another line, so they fill the cache with different words at once.
      for (std::size_t i = 0; i < lines.size(); ++i) {
        const GoldenLine& line = lines[(i + t * 97) % lines.size()];
        matches[t] += tokenizer.encode(line.text) == line.ids;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(matches == std::vector<std::size_t>(4, lines.size()));
}
