// minimind/detail/tokenizer/bpe.hpp: the BPE model of tokenizer.json, on small hand-made vocabularies.
#include "minimind/detail/tokenizer/bpe.hpp"

#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

using minimind::Error;
using minimind::bpe::BpeModel;
using Json = nlohmann::json;
using Ids = std::vector<std::int32_t>;

namespace {

const minimind::json_fields::Location kModelAt{"test.json", "model"};

// Vocabulary a..e plus the tokens the merges below build.
Json vocab() {
  return {{"a", 0}, {"b", 1}, {"c", 2}, {"d", 3}, {"e", 4}, {"ab", 5}, {"bc", 6},
          {"abc", 7}, {"cd", 8}, {"aa", 9}, {"<unk>", 10}, {"bcd", 11}};
}

Json model_with(Json merges) {
  return {{"type", "BPE"}, {"vocab", vocab()}, {"merges", std::move(merges)}};
}

// The ["left", "right"] form (a braced list of pairs would read as a JSON object).
Json pairs_of(const std::vector<std::pair<std::string, std::string>>& merges) {
  Json list = Json::array();
  for (const auto& [left, right] : merges) list.push_back(Json::array({left, right}));
  return list;
}

Ids encode(const BpeModel& model, std::string_view word) {
  Ids ids;
  model.encode_word(word, ids);
  return ids;
}

std::string load_error(const Json& model) {
  try {
    BpeModel::from_json(model, kModelAt);
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("merges stored as \"a b\" strings and as [a, b] pairs mean the same model") {
  const BpeModel strings = BpeModel::from_json(model_with({"a b", "b c", "ab c"}), kModelAt);
  const BpeModel pairs =
      BpeModel::from_json(model_with(pairs_of({{"a", "b"}, {"b", "c"}, {"ab", "c"}})), kModelAt);
  CHECK(strings.merge_count() == 3);
  for (const std::string_view word : {"abc", "abcabc", "cab", "bca", "e"}) {
    CHECK(encode(strings, word) == encode(pairs, word));
  }
  CHECK(encode(strings, "abc") == Ids{7});
}

TEST_CASE("the lowest merge rank wins, wherever it is in the word") {
  // "b c" outranks "a b": abc -> a + bc, and there is no "a bc" merge.
  const BpeModel bc_first = BpeModel::from_json(model_with({"b c", "a b", "ab c"}), kModelAt);
  CHECK(encode(bc_first, "abc") == Ids{0, 6});
  const BpeModel ab_first = BpeModel::from_json(model_with({"a b", "b c", "ab c"}), kModelAt);
  CHECK(encode(ab_first, "abc") == Ids{7});
  // Merged tokens merge again: b c -> bc, then bc d -> bcd.
  const BpeModel chained = BpeModel::from_json(model_with({"b c", "bc d", "c d"}), kModelAt);
  CHECK(encode(chained, "bcd") == Ids{11});
}

TEST_CASE("among equal ranks the leftmost pair merges first") {
  const BpeModel model = BpeModel::from_json(model_with({"a a"}), kModelAt);
  CHECK(encode(model, "aaa") == Ids{9, 0});
  CHECK(encode(model, "aaaa") == Ids{9, 9});
}

TEST_CASE("a later duplicate of a merge pair takes its rank, as Hugging Face's map does") {
  // "c d" first outranks "b c"; its duplicate at the end moves it behind "b c".
  const BpeModel model = BpeModel::from_json(model_with({"c d", "b c", "c d"}), kModelAt);
  CHECK(encode(model, "bcd") == Ids{6, 3});
  const BpeModel single = BpeModel::from_json(model_with({"c d", "b c"}), kModelAt);
  CHECK(encode(single, "bcd") == Ids{1, 8});
}

TEST_CASE("ignore_merges takes a word found whole in the vocabulary before merging") {
  Json model = model_with({"a b"});  // "abc" cannot be reached with this merge alone
  CHECK(encode(BpeModel::from_json(model, kModelAt), "abc") == Ids{5, 2});
  model["ignore_merges"] = true;
  const BpeModel whole = BpeModel::from_json(model, kModelAt);
  CHECK(encode(whole, "abc") == Ids{7});
  CHECK(encode(whole, "abd") == Ids{5, 3});  // not in the vocabulary: merged as usual
}

TEST_CASE("unknown characters: unk_token, fuse_unk, or dropped without an unk_token") {
  Json model = model_with({"a b"});
  // x and y vanish, so a and b meet and merge.
  CHECK(encode(BpeModel::from_json(model, kModelAt), "axyb") == Ids{5});
  model["unk_token"] = "<unk>";
  const BpeModel unk = BpeModel::from_json(model, kModelAt);
  CHECK(unk.unk_id() == 10);
  CHECK(encode(unk, "axyb") == Ids{0, 10, 10, 1});
  CHECK(encode(unk, "中ab") == Ids{10, 5});
  model["fuse_unk"] = true;
  CHECK(encode(BpeModel::from_json(model, kModelAt), "axyb") == Ids{0, 10, 1});
}

TEST_CASE("the word cache gives the same ids as merging, from many threads at once") {
  const BpeModel model = BpeModel::from_json(model_with({"a b", "b c", "ab c", "c d"}), kModelAt);
  const std::vector<std::string> words = {"abcd", "cdab", "abcabc", "dddd", "abab", "bcbc"};
  std::vector<Ids> expected;
  for (const std::string& word : words) expected.push_back(encode(model, word));  // fills cache
  CHECK(expected[0] == Ids{7, 3});
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 2000; ++round) {
        for (std::size_t i = 0; i < words.size(); ++i) {
          // Unique words too, so threads also store into the cache concurrently.
          const std::string fresh = words[i] + std::string(static_cast<std::size_t>(round % 7), 'e');
          if (encode(model, words[i]) != expected[i]) ++mismatches[static_cast<std::size_t>(t)];
          if (encode(model, fresh).size() < expected[i].size()) ++mismatches[static_cast<std::size_t>(t)];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(mismatches == std::vector<int>(4, 0));
  const BpeModel copy = model;  // a copy starts with its own empty cache
  CHECK(encode(copy, "abcd") == Ids{7, 3});
}

TEST_CASE("a full word cache stops storing but keeps giving the same ids") {
  const BpeModel model = BpeModel::from_json(model_with({"a b", "b c", "ab c", "c d"}), kModelAt);
  const auto word = [](std::size_t n) {  // distinct words over a..d
    std::string spelled = "ab";
    for (; n; n /= 4) spelled += static_cast<char>('a' + n % 4);
    return spelled;
  };
  const std::size_t words = BpeModel::kCacheCapacity + 5000;
  std::vector<Ids> first;
  for (std::size_t n = 0; n < words; ++n) first.push_back(encode(model, word(n)));
  std::size_t same = 0;
  for (std::size_t n = 0; n < words; ++n) same += encode(model, word(n)) == first[n];
  CHECK(same == words);
  CHECK(first[0] == Ids{5});
}

TEST_CASE("model settings that would change ids are refused, naming the field") {
  Json model = model_with({"a b"});
  model["type"] = "Unigram";
  CHECK(load_error(model) == "test.json: model.type: 'Unigram' is not supported (only BPE)");
  model = model_with({"a b"});
  model["dropout"] = 0.1;
  CHECK(load_error(model) ==
        "test.json: model.dropout: 0.1 is not supported: dropout makes encoding random");
  model["dropout"] = 0.0;  // Hugging Face treats 0 as no dropout
  CHECK(load_error(model) == "no error");
  model["byte_fallback"] = true;
  CHECK(load_error(model) ==
        "test.json: model.byte_fallback: true is not supported (byte-level BPE needs no byte "
        "fallback)");
  model = model_with({"a b"});
  model["continuing_subword_prefix"] = "##";
  CHECK(load_error(model) == "test.json: model.continuing_subword_prefix: '##' is not supported");
  model = model_with({"a b"});
  model["end_of_word_suffix"] = "</w>";
  CHECK(load_error(model) == "test.json: model.end_of_word_suffix: '</w>' is not supported");
}

TEST_CASE("malformed models are refused, naming the field") {
  CHECK(load_error(model_with({"a z"})) == "test.json: model.merges[0]: 'z' is not in model.vocab");
  CHECK(load_error(model_with({"a b", "c e"})) ==
        "test.json: model.merges[1]: 'ce' is not in model.vocab");
  CHECK(load_error(model_with({"ab"})) ==
        "test.json: model.merges[0]: 'ab' is not two tokens separated by one space");
  CHECK(load_error(model_with({"a b c"})) ==
        "test.json: model.merges[0]: 'a b c' is not two tokens separated by one space");
  CHECK(load_error(model_with({"a b", Json::array({"b", "c"})})) ==
        "test.json: model.merges[1]: mixes \"left right\" strings with [\"left\", \"right\"] pairs");
  CHECK(load_error(model_with(Json::array({Json::array({"a", "b", "c"})}))) ==
        "test.json: model.merges[0]: expected \"left right\" or [\"left\", \"right\"], found "
        "[\"a\",\"b\",\"c\"]");
  CHECK(load_error(model_with("a b")) ==
        "test.json: model.merges: expected a JSON array, found string");
  Json model = model_with({"a b"});
  model["unk_token"] = "<missing>";
  CHECK(load_error(model) == "test.json: model.unk_token: '<missing>' is not in model.vocab");
  model = model_with({"a b"});
  model["vocab"]["f"] = -1;
  CHECK(load_error(model) ==
        "test.json: model.vocab.f: expected a token id (an integer from 0 to 2^31-1), found -1");
  model.erase("vocab");
  CHECK(load_error(model) == "test.json: model.vocab: missing");
  CHECK(load_error(Json::array()) == "test.json: model: expected a JSON object, found array");
}

TEST_CASE("an empty vocabulary is refused rather than encoding every text to nothing") {
  Json model = model_with(Json::array());
  model["vocab"] = Json::object();
  CHECK(load_error(model) == "test.json: model.vocab: is empty: there is no token to encode text into");
  model["merges"] = {"a b"};  // merges over nothing name unknown tokens first
  CHECK(load_error(model) == "test.json: model.vocab: is empty: there is no token to encode text into");
}

TEST_CASE("merges.txt's #version line is skipped in the string form") {
  const BpeModel model = BpeModel::from_json(model_with({"#version: 0.2", "b c", "a b"}), kModelAt);
  CHECK(model.merge_count() == 2);
  CHECK(encode(model, "abc") == Ids{0, 6});
}
