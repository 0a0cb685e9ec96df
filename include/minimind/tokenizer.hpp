#pragma once
// minimind::Tokenizer: a Hugging Face tokenizer.json of the byte-level BPE kind (GPT-2 style, as
// MiniMind ships), giving id for id what the Hugging Face tokenizers library gives.
//
// The pipeline, as tokenizers runs it:
//   1. added tokens (tokenizer.json "added_tokens") are split out of the raw text
//      (tokenizer/added_tokens.hpp);
//   2. each remaining piece goes through the ByteLevel pre-tokenizer: add_prefix_space, the GPT-2
//      split pattern when use_regex, the byte -> character map (tokenizer/byte_level.hpp);
//   3. each word goes through the BPE model (tokenizer/bpe.hpp);
//   4. decoding maps each token back to bytes (the ByteLevel decoder) and renders ill-formed
//      UTF-8 as U+FFFD, as Rust's from_utf8_lossy does.
//
// What is not implemented is refused at load time with a minimind::Error naming the file and the
// field (a normalizer, another pre-tokenizer, decoder or model type, byte_fallback, dropout,
// truncation, ...), so a tokenizer is never loaded to encode silently wrong.
//
// Errors: encode() throws minimind::Error on ill-formed UTF-8, naming the byte offset of the first
// bad sequence. Every function taking an id throws minimind::Error for an id outside
// [0, vocab_size()), naming the id and the vocabulary size.
//
// Thread safety: a const Tokenizer may be shared by any number of threads; the only mutable state,
// the BPE per-word cache, is guarded by sharded mutexes (see tokenizer/bpe.hpp), and encode's
// scratch buffers are thread_local. A copy gets an empty cache of its own. A StreamingDecoder
// holds one stream's pending bytes: one per stream, over a tokenizer that may be shared.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "minimind/error.hpp"
#include "minimind/detail/tokenizer/added_tokens.hpp"
#include "minimind/detail/tokenizer/bpe.hpp"
#include "minimind/detail/tokenizer/byte_level.hpp"
#include "minimind/detail/tokenizer/json_fields.hpp"
#include "minimind/detail/tokenizer/unicode.hpp"

namespace minimind {

class Tokenizer {
 public:
  // Loads a tokenizer.json; no BOS/EOS are added and there is no chat template.
  static Tokenizer from_file(const std::filesystem::path& tokenizer_json) {
    const json_fields::Location where{tokenizer_json.string(), ""};
    return Tokenizer(read_json(tokenizer_json), where);
  }

  // Builds from an already-parsed tokenizer.json object (e.g. one made from GGUF metadata) and,
  // when given, a tokenizer_config.json object; `source` names them in errors.
  static Tokenizer from_json(const nlohmann::json& tokenizer_json, const std::string& source,
                             const nlohmann::json* tokenizer_config = nullptr) {
    Tokenizer tokenizer(tokenizer_json, json_fields::Location{source, ""});
    if (tokenizer_config) {
      tokenizer.apply_config(*tokenizer_config, json_fields::Location{source + " (tokenizer config)", ""});
    }
    return tokenizer;
  }

  // Parses tokenizer.json text already in memory (an embedded file, a fuzzer's input); `source`
  // names it in errors as a path would.
  static Tokenizer from_json_text(std::string_view text, const std::string& source) {
    return Tokenizer(parse_json_text(text, source), json_fields::Location{source, ""});
  }

  // Loads dir/tokenizer.json and, when present, dir/tokenizer_config.json (bos/eos/pad/unk
  // tokens, add_bos_token / add_eos_token, chat_template; a chat_template.jinja file beside them
  // stands in for a config without chat_template).
  static Tokenizer from_pretrained(const std::filesystem::path& dir) {
    Tokenizer tokenizer = from_file(dir / "tokenizer.json");
    const std::filesystem::path config = dir / "tokenizer_config.json";
    if (std::filesystem::exists(config)) {
      tokenizer.apply_config(read_json(config), json_fields::Location{config.string(), ""});
    }
    const std::filesystem::path template_file = dir / "chat_template.jinja";
    if (tokenizer.chat_template_.empty() && std::filesystem::exists(template_file)) {
      tokenizer.chat_template_ = read_bytes(template_file);
    }
    return tokenizer;
  }

  // Ids of `text` (UTF-8), with BOS / EOS only when tokenizer_config.json asks for them.
  std::vector<std::int32_t> encode(std::string_view text) const {
    unicode::validate_utf8(text, "Tokenizer::encode: text");
    std::vector<std::int32_t> ids;
    ids.reserve(text.size() / 3 + 2);
    if (add_bos_) ids.push_back(*bos_id_);
    splitter_.split(
        text, [&](std::string_view piece) { encode_piece(piece, ids); },
        [&](const added_tokens::AddedToken& token) { ids.push_back(token.id); });
    if (add_eos_) ids.push_back(*eos_id_);
    return ids;
  }

  // The text of `ids`; with skip_special_tokens, added tokens marked special are left out.
  // Bytes that do not form UTF-8 come out as U+FFFD. No clean-up of spaces is done.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens = false) const {
    std::string bytes;
    for (const std::int32_t id : ids) {
      check_id(id);
      if (skip_special_tokens && special_[static_cast<std::size_t>(id)]) continue;
      bytes += pieces_[static_cast<std::size_t>(id)];
    }
    return unicode::to_valid_utf8(bytes);
  }

  // The bytes one token decodes to; possibly only part of a UTF-8 character.
  std::string token_to_piece(std::int32_t id) const {
    check_id(id);
    return pieces_[static_cast<std::size_t>(id)];
  }

  // The token as the vocabulary spells it (byte-level form, e.g. "Ġthe").
  const std::string& id_to_token(std::int32_t id) const {
    check_id(id);
    return tokens_[static_cast<std::size_t>(id)];
  }

  std::optional<std::int32_t> token_to_id(std::string_view token) const {
    const auto found = token_ids_.find(token);
    if (found == token_ids_.end()) return std::nullopt;
    return found->second;
  }

  std::int32_t vocab_size() const { return static_cast<std::int32_t>(tokens_.size()); }

  // True for added tokens marked "special" (the ones skip_special_tokens leaves out).
  bool is_special(std::int32_t id) const {
    check_id(id);
    return special_[static_cast<std::size_t>(id)];
  }

  // True for every added token, special or not (e.g. minimind-3's <think>): text the model writes
  // with them is not text the BPE model would give, so constrained decoding leaves them out.
  bool is_added(std::int32_t id) const { return added_contents_.count(id_to_token(id)) != 0; }

  // From tokenizer_config.json (from_pretrained) when it names them.
  std::optional<std::int32_t> bos_id() const { return bos_id_; }
  std::optional<std::int32_t> eos_id() const { return eos_id_; }
  std::optional<std::int32_t> pad_id() const { return pad_id_; }
  std::optional<std::int32_t> unk_id() const { return unk_id_; }
  bool adds_bos() const { return add_bos_; }
  bool adds_eos() const { return add_eos_; }

  // The Jinja chat template text, empty when there is none.
  const std::string& chat_template() const { return chat_template_; }

 private:
  using Json = json_fields::Json;
  using Location = json_fields::Location;

  Tokenizer(const Json& root, const Location& where)
      : model_(bpe::BpeModel::from_json(json_fields::require_member(
                                            json_fields::require_object(root, where), "model", where),
                                        where / "model")) {
    check_supported_components(root, where);
    build_vocabulary(root, where);
  }

  static std::string read_bytes(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path.string() + ": cannot open file");
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  static Json parse_json_text(std::string_view text, const std::string& source) {
    try {
      return Json::parse(text);
    } catch (const Json::exception& error) {  // parse_error, and out_of_range for a number like 1e999
      throw Error(source + ": not valid JSON (" + error.what() + ")");
    }
  }

  static Json read_json(const std::filesystem::path& path) { return parse_json_text(read_bytes(path), path.string()); }

  // Everything but the model: only what this class implements is accepted.
  void check_supported_components(const Json& root, const Location& where) {
    using namespace json_fields;
    if (const Json* version = member(root, "version");
        version && as_string(*version, where / "version") != "1.0") {
      (where / "version").fail(in_quotes(version->get<std::string>()) + " is not supported (only 1.0)");
    }
    for (const char* option : {"truncation", "padding"}) {
      if (member(root, option)) (where / option).fail("must be null: it would change encode's ids");
    }
    if (const auto normalizer = component_type(root, "normalizer", where)) {
      (where / "normalizer" / "type").fail(in_quotes(*normalizer) + " is not supported (only null)");
    }
    const auto pre_tokenizer = component_type(root, "pre_tokenizer", where);
    if (pre_tokenizer != "ByteLevel") {
      (where / "pre_tokenizer" / "type")
          .fail(in_quotes(pre_tokenizer.value_or("null")) + " is not supported (only ByteLevel)");
    }
    const Json& byte_level = root["pre_tokenizer"];
    const Location byte_level_at = where / "pre_tokenizer";
    add_prefix_space_ = as_bool(require_member(byte_level, "add_prefix_space", byte_level_at),
                                byte_level_at / "add_prefix_space");
    use_regex_ = bool_or(byte_level, "use_regex", true, byte_level_at);
    const auto decoder = component_type(root, "decoder", where);
    if (decoder != "ByteLevel") {
      (where / "decoder" / "type")
          .fail(in_quotes(decoder.value_or("null")) + " is not supported (only ByteLevel)");
    }
    // A ByteLevel post-processor only trims offsets; anything else would add ids.
    if (const auto post = component_type(root, "post_processor", where); post && post != "ByteLevel") {
      (where / "post_processor" / "type")
          .fail(in_quotes(*post) + " is not supported (only null or ByteLevel)");
    }
  }

  // Model vocabulary plus added tokens, with ids checked the way Hugging Face assigns them.
  void build_vocabulary(const Json& root, const Location& where) {
    using namespace json_fields;
    const bpe::Vocab& vocab = model_.vocab();
    tokens_.assign(vocab.size(), std::string());
    std::vector<bool> id_seen(vocab.size(), false);
    for (const auto& [token, id] : vocab) {
      const auto index = static_cast<std::size_t>(id);
      const Location at = where / "model" / "vocab" / token;
      if (index >= vocab.size()) {
        at.fail("id " + std::to_string(id) + " is not below the vocabulary size " +
                std::to_string(vocab.size()) + " (ids must run from 0 without gaps)");
      }
      if (id_seen[index]) at.fail("id " + std::to_string(id) + " is given to two tokens");
      id_seen[index] = true;
      tokens_[index] = token;
    }
    token_ids_ = vocab;
    special_.assign(vocab.size(), false);

    std::vector<added_tokens::AddedToken> added;
    if (const Json* list = member(root, "added_tokens")) {
      const Location list_at = where / "added_tokens";
      require_array(*list, list_at);
      for (std::size_t i = 0; i < list->size(); ++i) {
        added.push_back(parse_added_token((*list)[i], list_at[i]));
        register_added_token(added.back(), list_at[i]);
      }
    }
    splitter_ = added_tokens::AddedTokenSplitter(added);
    pieces_.reserve(tokens_.size());
    for (const std::string& token : tokens_) pieces_.push_back(byte_level::token_bytes(token));
  }

  static added_tokens::AddedToken parse_added_token(const Json& entry, const Location& at) {
    using namespace json_fields;
    require_object(entry, at);
    added_tokens::AddedToken token;
    token.id = as_token_id(require_member(entry, "id", at), at / "id");
    token.content = as_string(require_member(entry, "content", at), at / "content");
    if (token.content.empty()) (at / "content").fail("is empty");
    token.single_word = bool_or(entry, "single_word", false, at);
    token.lstrip = bool_or(entry, "lstrip", false, at);
    token.rstrip = bool_or(entry, "rstrip", false, at);
    token.special = bool_or(entry, "special", false, at);
    token.normalized = bool_or(entry, "normalized", !token.special, at);  // Hugging Face's default
    return token;
  }

  // Hugging Face gives an added token its model.vocab id when it has one, else the next id after
  // the vocabulary and the added tokens so far; a file whose ids disagree is refused.
  void register_added_token(const added_tokens::AddedToken& token, const Location& at) {
    if (added_contents_.count(token.content)) {
      (at / "content").fail(json_fields::in_quotes(token.content) + " is listed twice");
    }
    const auto in_model = model_.vocab().find(token.content);
    const bool is_in_model = in_model != model_.vocab().end();
    const std::int32_t expected = is_in_model ? in_model->second : vocab_size();
    if (token.id != expected) {
      (at / "id").fail(std::to_string(token.id) + " disagrees with the id Hugging Face gives " +
                       json_fields::in_quotes(token.content) + ": " + std::to_string(expected) +
                       (is_in_model ? " (its model.vocab id)" : " (the next free id)"));
    }
    if (!is_in_model) {
      tokens_.push_back(token.content);
      special_.push_back(false);
      token_ids_.emplace(token.content, token.id);
    }
    special_[static_cast<std::size_t>(token.id)] = token.special;
    added_contents_.insert(token.content);
  }

  // tokenizer_config.json, the transformers side of a checkpoint.
  void apply_config(const Json& config, const Location& where) {
    using namespace json_fields;
    require_object(config, where);
    bos_id_ = config_token_id(config, "bos_token", where);
    eos_id_ = config_token_id(config, "eos_token", where);
    pad_id_ = config_token_id(config, "pad_token", where);
    unk_id_ = config_token_id(config, "unk_token", where);
    add_bos_ = bool_or(config, "add_bos_token", false, where);
    add_eos_ = bool_or(config, "add_eos_token", false, where);
    if (add_bos_ && !bos_id_) (where / "add_bos_token").fail("is true but bos_token is not set");
    if (add_eos_ && !eos_id_) (where / "add_eos_token").fail("is true but eos_token is not set");
    if (bool_or(config, "clean_up_tokenization_spaces", false, where)) {
      (where / "clean_up_tokenization_spaces").fail("true is not supported (decode keeps spaces)");
    }
    if (const Json* prefix = member(config, "add_prefix_space");
        prefix && as_bool(*prefix, where / "add_prefix_space") != add_prefix_space_) {
      (where / "add_prefix_space").fail("disagrees with tokenizer.json's pre_tokenizer");
    }
    check_config_added_tokens(config, where);
    if (const Json* chat = member(config, "chat_template")) {
      chat_template_ = read_chat_template(*chat, where / "chat_template");
    }
  }

  // A special token field: "<s>", {"content": "<s>", ...} or null.
  std::optional<std::int32_t> config_token_id(const Json& config, std::string_view key,
                                              const Location& where) const {
    using namespace json_fields;
    const Json* value = member(config, key);
    if (!value) return std::nullopt;
    const Location at = where / key;
    const std::string& content = value->is_object()
                                     ? as_string(require_member(*value, "content", at), at / "content")
                                     : as_string(*value, at);
    const std::optional<std::int32_t> id = token_to_id(content);
    if (!id) at.fail(in_quotes(content) + " is not in the tokenizer's vocabulary");
    return id;
  }

  // transformers would register added_tokens_decoder / additional_special_tokens entries that
  // tokenizer.json lacks, changing ids or skip_special_tokens; such configs are refused.
  void check_config_added_tokens(const Json& config, const Location& where) const {
    using namespace json_fields;
    if (const Json* decoder = member(config, "added_tokens_decoder")) {
      const Location decoder_at = where / "added_tokens_decoder";
      require_object(*decoder, decoder_at);
      for (const auto& [id_text, entry] : decoder->items()) {
        const Location at = decoder_at / id_text;
        require_object(entry, at);
        const std::string& content = as_string(require_member(entry, "content", at), at / "content");
        const std::optional<std::int32_t> id = token_to_id(content);
        if (!id || std::to_string(*id) != id_text || !added_contents_.count(content)) {
          at.fail(in_quotes(content) + " is not an added token with id " + id_text + " in tokenizer.json");
        }
        if (bool_or(entry, "special", false, at) != special_[static_cast<std::size_t>(*id)]) {
          (at / "special").fail("disagrees with tokenizer.json's added_tokens");
        }
      }
    }
    if (const Json* extra = member(config, "additional_special_tokens")) {
      const Location extra_at = where / "additional_special_tokens";
      require_array(*extra, extra_at);
      for (std::size_t i = 0; i < extra->size(); ++i) {
        const Json& entry = (*extra)[i];
        const std::string& content = entry.is_object()
            ? as_string(require_member(entry, "content", extra_at[i]), extra_at[i] / "content")
            : as_string(entry, extra_at[i]);
        const std::optional<std::int32_t> id = token_to_id(content);
        if (!id || !special_[static_cast<std::size_t>(*id)]) {
          extra_at[i].fail(in_quotes(content) + " is not a special added token of tokenizer.json");
        }
      }
    }
  }

  // A string, or transformers' list of named templates, of which "default" is the chat template.
  static std::string read_chat_template(const Json& value, const Location& at) {
    using namespace json_fields;
    if (value.is_string()) return value.get<std::string>();
    require_array(value, at);
    for (std::size_t i = 0; i < value.size(); ++i) {
      require_object(value[i], at[i]);
      if (as_string(require_member(value[i], "name", at[i]), at[i] / "name") == "default") {
        return as_string(require_member(value[i], "template", at[i]), at[i] / "template");
      }
    }
    at.fail("has no template named \"default\"");
  }

  void encode_piece(std::string_view piece, std::vector<std::int32_t>& ids) const {
    // Scratch reused across calls on this thread.
    thread_local std::string prefixed;
    thread_local std::string word_spelling;
    if (add_prefix_space_ && piece.front() != ' ') {
      prefixed.assign(1, ' ');
      prefixed.append(piece);
      piece = prefixed;
    }
    const auto encode_word = [&](std::string_view word) {
      word_spelling.clear();
      byte_level::append_byte_level(word_spelling, word);
      model_.encode_word(word_spelling, ids);
    };
    if (use_regex_) {
      byte_level::split_words(piece, encode_word);
    } else {
      encode_word(piece);
    }
  }

  void check_id(std::int32_t id) const {
    if (id < 0 || id >= vocab_size()) {
      throw Error("token id " + std::to_string(id) + " is out of range (vocab size " +
                  std::to_string(vocab_size()) + ")");
    }
  }

  bpe::BpeModel model_;
  added_tokens::AddedTokenSplitter splitter_;
  bool add_prefix_space_ = false;
  bool use_regex_ = true;
  std::vector<std::string> tokens_;  // id -> spelling in the vocabulary
  std::vector<std::string> pieces_;  // id -> decoded bytes
  std::vector<bool> special_;
  bpe::Vocab token_ids_;  // model vocabulary and added tokens
  std::unordered_set<std::string> added_contents_;
  std::optional<std::int32_t> bos_id_, eos_id_, pad_id_, unk_id_;
  bool add_bos_ = false;
  bool add_eos_ = false;
  std::string chat_template_;
};

}  // namespace minimind

// StreamingDecoder belongs with the Tokenizer API; it lives in its own header.
#include "minimind/detail/tokenizer/streaming_decoder.hpp"
