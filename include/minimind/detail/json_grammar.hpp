#pragma once
// A JSON Schema subset compiled to a byte-level pushdown automaton: which bytes may come next so
// that the text stays a prefix of a document the schema accepts, and the shortest text that ends
// the document from any point. json_constraint.hpp lifts it from bytes to tokens.
//
// A parse is a stack of frames (one per open value: object, array, string, number, literal), with
// the document itself at the bottom. anyOf makes the parse nondeterministic, so a State holds up
// to kMaxThreads stacks side by side; a stack dies when a byte does not fit it. Dropping stacks
// past the limit only narrows what may be written, each survivor still being a valid prefix.
//
// Whitespace: none, except one optional space after ':' and after ',' (what json.dumps writes, so
// a model trained on Python's JSON meets its usual tokens). Never more than one, so a small model
// cannot spend its tokens on layout.
#include "minimind/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace minimind::json_grammar {

using Json = nlohmann::json;

inline constexpr int kMaxDepth = 32;    // open values in one stack, the document included
inline constexpr int kMaxThreads = 8;   // stacks alive at once (anyOf alternatives)
inline constexpr int kMaxProperties = 64;  // declared properties of one object (a bit mask)
inline constexpr int kMaxDigits = 15;   // integer and fraction digits: a double holds them exactly
inline constexpr int kMaxExponentDigits = 2;  // 1e999 overflows a double, which parsers refuse

enum class Kind : uint8_t { Document, Object, Array, String, Number, Integer, Literal, Union };

// A byte trie over literal texts (enum values, property names); node 0 is the root.
struct Trie {
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;
    int32_t value = -1;        // the text that ends here
    int32_t shortest = -1;     // the shortest text below (or at) this node
    int32_t depth = 0;         // bytes from the root
    uint64_t values_below = 0; // for property names: bit i = property i ends at or below
  };
  std::vector<Node> nodes{Node{}};
  std::vector<std::string> texts;

  int32_t child(int32_t node, uint8_t byte) const {
    for (const auto& [b, n] : nodes[static_cast<size_t>(node)].next)
      if (b == byte) return n;
    return -1;
  }
  // Adds `text` as value texts.size(); returns false if it is already there.
  bool add(const std::string& text) {
    int32_t node = 0;
    for (const char ch : text) {
      const auto byte = static_cast<uint8_t>(ch);
      int32_t next = child(node, byte);
      if (next < 0) {
        next = static_cast<int32_t>(nodes.size());
        Node fresh;
        fresh.depth = nodes[static_cast<size_t>(node)].depth + 1;
        nodes.push_back(fresh);
        nodes[static_cast<size_t>(node)].next.emplace_back(byte, next);
      }
      node = next;
    }
    if (nodes[static_cast<size_t>(node)].value >= 0) return false;
    const auto value = static_cast<int32_t>(texts.size());
    texts.push_back(text);
    node = 0;
    for (size_t i = 0;; ++i) {
      Node& n = nodes[static_cast<size_t>(node)];
      if (n.shortest < 0 || texts[static_cast<size_t>(n.shortest)].size() > text.size()) n.shortest = value;
      if (value < kMaxProperties) n.values_below |= uint64_t{1} << value;
      if (i == text.size()) break;
      node = child(node, static_cast<uint8_t>(text[i]));
    }
    nodes[static_cast<size_t>(node)].value = value;
    return true;
  }
  // The rest of the shortest text below `node`.
  std::string_view rest(int32_t node) const {
    const Node& n = nodes[static_cast<size_t>(node)];
    return std::string_view(texts[static_cast<size_t>(n.shortest)]).substr(static_cast<size_t>(n.depth));
  }
};

struct Property {
  std::string key;  // JSON-escaped, without quotes
  int32_t value = -1;
  bool required = false;
};

struct Node {
  Kind kind = Kind::Union;
  // Object
  std::vector<Property> properties;
  Trie keys;                 // property keys, value = property index
  int32_t additional = -1;   // schema of other keys, -1: none
  int32_t required_count = 0;
  size_t required_bytes = 0;  // the required members, "key":<shortest value> each
  // Array
  int32_t items = -1;
  int64_t min_items = 0, max_items = std::numeric_limits<int64_t>::max();
  // Literal
  Trie literals;
  // Union: alternatives, none of them a union
  std::vector<int32_t> alternatives;
  // Every kind: the shortest document of this schema
  std::string shortest;
};

// One open value. Fields by kind (a, b, c, d): Object: key trie node (-1 off the trie), current
// property (-1: an additional one), required properties left, their bytes; Array: items so far;
// String: \u hex digits so far, whether the escape starts a surrogate; Number: digits in this
// part; Literal: trie node.
struct Frame {
  int32_t node = 0;
  uint8_t phase = 0;
  uint8_t free_key_dead = 0;  // Object: the key being read can no longer be an additional one
  uint8_t utf8_pending = 0;   // String, Object key: continuation bytes still expected
  uint8_t utf8_range = 0;     // which bytes the next continuation may be (Utf8 below)
  int32_t a = 0, b = 0, c = 0, d = 0;
  uint64_t seen = 0;          // Object: declared properties written
};

// Object and array phases.
enum Phase : uint8_t {
  kOpen = 0,        // after '{' or '['
  kInKey,           // inside a key (objects)
  kAfterKey,        // after the key's closing quote
  kAfterColon,
  kAfterColonSpace,
  kInValue,         // a member's value is open above this frame
  kAfterValue,
  kAfterComma,
  kAfterCommaSpace,
};
enum StringPhase : uint8_t { kChars = 0, kEscape, kHex };
enum DocumentPhase : uint8_t { kDocStart = 0, kDocInValue = kInValue, kDocDone = 20 };
enum NumberPhase : uint8_t { kMinus = 0, kZero, kIntDigits, kDot, kFracDigits, kExp, kExpSign, kExpDigits };

// Well-formed UTF-8 as RFC 3629 defines it: the first continuation byte of some lead bytes is
// narrowed, so no overlong form, surrogate or code point past U+10FFFF can be written.
struct Utf8 {
  static constexpr uint8_t kLow[5] = {0x80, 0xA0, 0x80, 0x90, 0x80};
  static constexpr uint8_t kHigh[5] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};
  // Feeds a byte >= 0x20 of string content; false if it cannot be there.
  static bool feed(uint8_t& pending, uint8_t& range, uint8_t byte) {
    if (pending > 0) {
      if (byte < kLow[range] || byte > kHigh[range]) return false;
      --pending;
      range = 0;
      return true;
    }
    if (byte < 0x80) return true;
    if (byte >= 0xC2 && byte <= 0xDF) return pending = 1, range = 0, true;
    if (byte == 0xE0) return pending = 2, range = 1, true;
    if (byte == 0xED) return pending = 2, range = 2, true;
    if (byte >= 0xE1 && byte <= 0xEF) return pending = 2, range = 0, true;
    if (byte == 0xF0) return pending = 3, range = 3, true;
    if (byte >= 0xF1 && byte <= 0xF3) return pending = 3, range = 0, true;
    if (byte == 0xF4) return pending = 3, range = 4, true;
    return false;
  }
  // The lowest bytes that finish the pending character.
  template <class Sink>
  static void finish(uint8_t pending, uint8_t range, Sink& out) {
    for (uint8_t i = 0; i < pending; ++i) out.ch(static_cast<char>(i == 0 ? kLow[range] : 0x80));
  }
};

// Up to kMaxThreads stacks, thread i in frames[i * kMaxDepth, + depth[i]).
struct State {
  int threads = 0;
  std::array<uint8_t, kMaxThreads> depth{};
  std::array<Frame, kMaxThreads * kMaxDepth> frames;
  Frame* stack(int i) { return &frames[static_cast<size_t>(i * kMaxDepth)]; }
  const Frame* stack(int i) const { return &frames[static_cast<size_t>(i * kMaxDepth)]; }
  void copy_from(const State& other) {
    threads = other.threads;
    depth = other.depth;
    for (int i = 0; i < threads; ++i) std::copy_n(other.stack(i), other.depth[static_cast<size_t>(i)], stack(i));
  }
};

// Appends text; CountSink only counts it.
struct TextSink {
  std::string* text;
  void ch(char c) { text->push_back(c); }
  void str(std::string_view s) { text->append(s); }
};
struct CountSink {
  size_t bytes = 0;
  void ch(char) { ++bytes; }
  void str(std::string_view s) { bytes += s.size(); }
};

class Grammar {
 public:
  // Compiles a JSON Schema (the subset the header of json_constraint.hpp lists); an unsupported
  // keyword or an unsatisfiable schema throws Error naming it and its JSON pointer.
  static Grammar from_schema(const Json& schema) {
    Grammar g;
    g.any_ = g.add_any();
    g.root_ = g.compile(schema, "");
    g.finish();
    return g;
  }
  // Any JSON object.
  static Grammar any_object() {
    Grammar g;
    g.any_ = g.add_any();
    g.root_ = g.any_object_;
    g.finish();
    return g;
  }

  // The parse before any byte.
  void start(State& state) const {
    state.threads = 1;
    state.depth[0] = 1;
    Frame doc;
    doc.node = document_;
    doc.phase = kDocStart;
    state.stack(0)[0] = doc;
  }

  // `out` = `in` after `byte`; out.threads == 0 if no stack takes it.
  void step(const State& in, uint8_t byte, State& out) const {
    out.threads = 0;
    for (int i = 0; i < in.threads; ++i) feed(in.stack(i), in.depth[static_cast<size_t>(i)], byte, out);
  }

  // Whether the text so far is a whole document.
  bool complete(const State& state) const {
    for (int i = 0; i < state.threads; ++i) {
      const Frame* f = state.stack(i);
      const int depth = state.depth[static_cast<size_t>(i)];
      if (depth == 1 && f[0].phase == kDocDone) return true;
      if (depth == 2 && ends_here(f[1])) return true;
    }
    return false;
  }

  // Bytes of the shortest ending of the stack with the shortest one (0 when complete).
  size_t min_bytes(const State& state) const {
    size_t best = std::numeric_limits<size_t>::max();
    for (int i = 0; i < state.threads; ++i) {
      CountSink count;
      ending(state.stack(i), state.depth[static_cast<size_t>(i)], count);
      best = std::min(best, count.bytes);
    }
    return best;
  }
  // That shortest ending, appended to `text`.
  void shortest_ending(const State& state, std::string& text) const {
    int best = 0;
    size_t best_bytes = std::numeric_limits<size_t>::max();
    for (int i = 0; i < state.threads; ++i) {
      CountSink count;
      ending(state.stack(i), state.depth[static_cast<size_t>(i)], count);
      if (count.bytes < best_bytes) best_bytes = count.bytes, best = i;
    }
    TextSink sink{&text};
    ending(state.stack(best), state.depth[static_cast<size_t>(best)], sink);
  }

  // Whether the parse is one stack whose top is free text: a string, or a key that can only be
  // an additional one, between characters or inside one (then `pending`, `range` say which
  // continuation bytes may come, as in Utf8).
  bool in_free_string(const State& state, uint8_t& pending, uint8_t& range) const {
    if (state.threads != 1) return false;
    const Frame& top = state.stack(0)[state.depth[0] - 1];
    const Kind kind = node(top.node).kind;
    const bool free_key = kind == Kind::Object && top.phase == kInKey && top.a < 0 && !top.free_key_dead;
    if (!free_key && !(kind == Kind::String && top.phase == kChars)) return false;
    pending = top.utf8_pending;
    range = top.utf8_range;
    return true;
  }

  const std::string& shortest_document() const { return nodes_[static_cast<size_t>(root_)].shortest; }

 private:
  enum class Take { Consumed, Closed, Rejected, PassUp, Open };

  const Node& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  Node& node(int32_t i) { return nodes_[static_cast<size_t>(i)]; }
  static Node of_kind(Kind kind) {
    Node n;
    n.kind = kind;
    return n;
  }
  int32_t add(Node n) {
    nodes_.push_back(std::move(n));
    return static_cast<int32_t>(nodes_.size() - 1);
  }

  // ---- compiling ----

  // "Any JSON value": a union of one node per first byte, so it never forks.
  int32_t add_any() {
    const int32_t any = add(Node{});
    Node object;
    object.kind = Kind::Object;
    object.additional = any;
    any_object_ = add(std::move(object));
    Node array;
    array.kind = Kind::Array;
    array.items = any;
    const int32_t any_array = add(std::move(array));
    string_ = add(of_kind(Kind::String));
    number_ = add(of_kind(Kind::Number));
    Node words;
    words.kind = Kind::Literal;
    for (const char* w : {"true", "false", "null"}) words.literals.add(w);
    const int32_t literal = add(std::move(words));
    node(any).alternatives = {any_object_, any_array, string_, number_, literal};
    return any;
  }

  [[noreturn]] static void fail(const std::string& pointer, const std::string& what) {
    throw Error("json schema: " + what + " at " + (pointer.empty() ? std::string("/ (the root)") : pointer));
  }
  static std::string escape_pointer(const std::string& key) {
    std::string out;
    for (const char c : key) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
    return out;
  }
  static std::string quoted(const std::string& s) { return "\"" + s + "\""; }

  int32_t compile(const Json& schema, const std::string& at) {
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) fail(at, "the schema false admits no value");
      return any_;
    }
    if (!schema.is_object()) fail(at, "a schema must be an object or a boolean");
    static const char* const kIgnored[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                           "deprecated", "readOnly", "writeOnly"};
    static const char* const kSupported[] = {"type", "properties", "required", "additionalProperties", "enum",
                                             "const", "items", "minItems", "maxItems", "anyOf"};
    for (const auto& item : schema.items()) {
      const std::string& key = item.key();  // not a structured binding: clang 14 cannot capture one
      const bool known = std::find_if(std::begin(kIgnored), std::end(kIgnored), [&](const char* k) { return key == k; }) !=
                             std::end(kIgnored) ||
                         std::find_if(std::begin(kSupported), std::end(kSupported), [&](const char* k) { return key == k; }) !=
                             std::end(kSupported);
      if (!known) fail(at + "/" + escape_pointer(key), "keyword \"" + key + "\" is not supported");
    }
    const bool has_enum = schema.contains("enum") || schema.contains("const");
    if (schema.contains("anyOf") || has_enum) {
      for (const char* other : {"properties", "required", "additionalProperties", "items", "minItems", "maxItems"}) {
        if (schema.contains(other)) {
          fail(at + "/" + other, std::string("keyword \"") + other + "\" beside " + (has_enum ? "enum/const" : "anyOf") +
                                     " is not supported");
        }
      }
    }
    if (schema.contains("enum") && schema.contains("const")) fail(at + "/const", "enum and const together are not supported");
    if (schema.contains("anyOf") && has_enum) fail(at + "/anyOf", "anyOf beside enum/const is not supported");

    std::vector<std::string> types;
    if (const auto t = schema.find("type"); t != schema.end()) {
      auto add_type = [&](const Json& name, const std::string& where) {
        static const char* const kTypes[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
        if (!name.is_string() ||
            std::find_if(std::begin(kTypes), std::end(kTypes), [&](const char* k) { return name == k; }) == std::end(kTypes)) {
          fail(where, "type must be one of object, array, string, number, integer, boolean, null");
        }
        if (std::find(types.begin(), types.end(), name.get<std::string>()) == types.end()) types.push_back(name);
      };
      if (t->is_array()) {
        if (t->empty()) fail(at + "/type", "an empty type list admits no value");
        for (size_t i = 0; i < t->size(); ++i) add_type((*t)[i], at + "/type/" + std::to_string(i));
      } else {
        add_type(*t, at + "/type");
      }
    }

    if (has_enum) return compile_enum(schema, types, at);
    if (const auto any_of = schema.find("anyOf"); any_of != schema.end()) {
      if (schema.contains("type")) fail(at + "/type", "type beside anyOf is not supported");
      if (!any_of->is_array() || any_of->empty()) fail(at + "/anyOf", "anyOf must be a non-empty array");
      std::vector<int32_t> alternatives;
      for (size_t i = 0; i < any_of->size(); ++i) alternatives.push_back(compile((*any_of)[i], at + "/anyOf/" + std::to_string(i)));
      return union_of(alternatives);
    }
    if (types.empty()) {  // no type: what the structural keywords describe, else any value
      if (schema.contains("properties") || schema.contains("required") || schema.contains("additionalProperties")) {
        types = {"object"};
      } else if (schema.contains("items") || schema.contains("minItems") || schema.contains("maxItems")) {
        types = {"array"};
      } else {
        return any_;
      }
    }
    std::vector<int32_t> alternatives;
    for (const std::string& type : types) alternatives.push_back(compile_type(schema, type, at));
    return union_of(alternatives);
  }

  int32_t union_of(const std::vector<int32_t>& alternatives) {
    if (alternatives.size() == 1) return alternatives[0];
    Node u;
    for (const int32_t a : alternatives) {
      if (node(a).kind == Kind::Union) {
        for (const int32_t inner : node(a).alternatives) u.alternatives.push_back(inner);
      } else {
        u.alternatives.push_back(a);
      }
    }
    return add(std::move(u));
  }

  static bool has_type(const Json& value, const std::string& type) {
    if (type == "object") return value.is_object();
    if (type == "array") return value.is_array();
    if (type == "string") return value.is_string();
    if (type == "number") return value.is_number();
    if (type == "integer") return value.is_number_integer() || (value.is_number_float() && std::trunc(value.get<double>()) == value.get<double>());
    if (type == "boolean") return value.is_boolean();
    return value.is_null();
  }

  int32_t compile_enum(const Json& schema, const std::vector<std::string>& types, const std::string& at) {
    const bool is_const = schema.contains("const");
    const std::string where = at + (is_const ? "/const" : "/enum");
    std::vector<Json> values;
    if (is_const) {
      values.push_back(schema["const"]);
    } else {
      if (!schema["enum"].is_array() || schema["enum"].empty()) fail(where, "enum must be a non-empty array");
      for (const Json& v : schema["enum"]) values.push_back(v);
    }
    Node literal;
    literal.kind = Kind::Literal;
    for (const Json& v : values) {
      if (!types.empty() && std::none_of(types.begin(), types.end(), [&](const std::string& t) { return has_type(v, t); })) continue;
      literal.literals.add(v.dump());
    }
    if (literal.literals.texts.empty()) fail(where, "no value of the enum has the schema's type");
    return add(std::move(literal));
  }

  static int64_t count_keyword(const Json& schema, const char* key, const std::string& at, int64_t fallback) {
    const auto it = schema.find(key);
    if (it == schema.end()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) fail(at + "/" + key, std::string(key) + " must be a non-negative integer");
    return it->get<int64_t>();
  }

  int32_t compile_type(const Json& schema, const std::string& type, const std::string& at) {
    if (type == "string") return string_;
    if (type == "number") return number_;
    if (type == "integer") return add(of_kind(Kind::Integer));
    if (type == "boolean" || type == "null") {
      Node literal;
      literal.kind = Kind::Literal;
      if (type == "boolean") {
        literal.literals.add("true");
        literal.literals.add("false");
      } else {
        literal.literals.add("null");
      }
      return add(std::move(literal));
    }
    if (type == "array") {
      Node array;
      array.kind = Kind::Array;
      array.min_items = count_keyword(schema, "minItems", at, 0);
      array.max_items = count_keyword(schema, "maxItems", at, std::numeric_limits<int64_t>::max());
      if (array.min_items > array.max_items) fail(at + "/minItems", "minItems is larger than maxItems");
      if (array.min_items > 4096) fail(at + "/minItems", "minItems above 4096 is not supported");
      const auto items = schema.find("items");
      if (items == schema.end()) {
        array.items = any_;
      } else if (items->is_boolean() && !items->get<bool>()) {
        if (array.min_items > 0) fail(at + "/items", "items false with minItems > 0 admits no value");
        array.max_items = 0;
        array.items = any_;
      } else if (items->is_array()) {
        fail(at + "/items", "items as an array (tuple) is not supported");
      } else {
        array.items = compile(*items, at + "/items");
      }
      return add(std::move(array));
    }
    // object
    Node object;
    object.kind = Kind::Object;
    if (const auto props = schema.find("properties"); props != schema.end()) {
      if (!props->is_object()) fail(at + "/properties", "properties must be an object");
      for (const auto& [key, sub] : props->items()) {
        Property p;
        p.key = Json(key).dump();
        p.key = p.key.substr(1, p.key.size() - 2);
        p.value = compile(sub, at + "/properties/" + escape_pointer(key));
        object.properties.push_back(std::move(p));
      }
    }
    if (const auto extra = schema.find("additionalProperties"); extra != schema.end()) {
      if (!(extra->is_boolean() && !extra->get<bool>())) object.additional = compile(*extra, at + "/additionalProperties");
    } else if (!schema.contains("properties")) {
      object.additional = any_;  // {"type": "object"}: any object
    }
    // Absent beside properties, no other key is written (still valid, as every key may be left
    // out): a small model asked for those properties would otherwise invent keys.
    if (const auto required = schema.find("required"); required != schema.end()) {
      if (!required->is_array()) fail(at + "/required", "required must be an array of strings");
      for (size_t i = 0; i < required->size(); ++i) {
        const Json& name = (*required)[i];
        const std::string where = at + "/required/" + std::to_string(i);
        if (!name.is_string()) fail(where, "required must be an array of strings");
        std::string key = Json(name).dump();
        key = key.substr(1, key.size() - 2);
        auto p = std::find_if(object.properties.begin(), object.properties.end(), [&](const Property& q) { return q.key == key; });
        if (p == object.properties.end()) {
          if (schema.contains("additionalProperties") && object.additional < 0) {
            fail(where, "\"" + name.get<std::string>() + "\" is required but not a property, and additionalProperties is false");
          }
          Property extra;
          extra.key = key;
          extra.value = object.additional >= 0 ? object.additional : any_;
          object.properties.push_back(std::move(extra));
          p = object.properties.end() - 1;
        }
        p->required = true;
      }
    }
    if (object.properties.size() > kMaxProperties) fail(at + "/properties", "more than 64 properties are not supported");
    for (const Property& p : object.properties) object.keys.add(p.key);
    return add(std::move(object));
  }

  // Shortest documents of every node (a fixed point: "any value" refers to itself), the document
  // frame, and each object's required bytes.
  void finish() {
    for (Node& n : nodes_) n.shortest.clear();
    auto known = [&](const Node& n) { return !n.shortest.empty(); };
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < nodes_.size(); ++i) {
        Node& n = nodes_[i];
        std::string text;
        bool ok = true;
        switch (n.kind) {
          case Kind::String: text = "\"\""; break;
          case Kind::Number:
          case Kind::Integer: text = "0"; break;
          case Kind::Literal: text = n.literals.rest(0); break;
          case Kind::Union: {
            for (const int32_t a : n.alternatives) {
              const Node& alt = node(a);
              if (known(alt) && (text.empty() || alt.shortest.size() < text.size())) text = alt.shortest;
            }
            ok = !text.empty();
            break;
          }
          case Kind::Array: {
            if (n.min_items > 0 && !known(node(n.items))) {
              ok = false;
              break;
            }
            text = "[";
            for (int64_t k = 0; k < n.min_items; ++k) text += (k ? "," : "") + node(n.items).shortest;
            text += "]";
            break;
          }
          case Kind::Object: {
            text = "{";
            bool first = true;
            for (const Property& p : n.properties) {
              if (!p.required) continue;
              if (!known(node(p.value))) ok = false;
              text += (first ? "" : ",") + quoted(p.key) + ":" + node(p.value).shortest;
              first = false;
            }
            text += "}";
            break;
          }
          case Kind::Document: break;
        }
        if (ok && n.kind != Kind::Document && (!known(n) || text.size() < n.shortest.size())) {
          n.shortest = text;
          changed = true;
        }
      }
    }
    for (Node& n : nodes_) {
      if (n.kind == Kind::Object) {
        n.required_count = 0;
        n.required_bytes = 0;
        for (const Property& p : n.properties) {
          if (p.required) ++n.required_count, n.required_bytes += member_bytes(p);
        }
      }
    }
    if (!known(node(root_))) fail("", "the schema admits no finite document");
    Node doc;
    doc.kind = Kind::Document;
    doc.shortest = node(root_).shortest;
    document_ = add(std::move(doc));
    check_depth(root_, 1, "");
  }

  // The shortest document must fit kMaxDepth open values.
  void check_depth(int32_t n, int depth, const std::string& at) const {
    if (n == any_) return;
    if (depth >= kMaxDepth) fail(at, "the schema nests deeper than " + std::to_string(kMaxDepth - 1) + " values");
    const Node& x = node(n);
    if (x.kind == Kind::Object)
      for (const Property& p : x.properties) check_depth(p.value, depth + 1, at + "/properties/" + p.key);
    if (x.kind == Kind::Array) check_depth(x.items, depth + 1, at + "/items");
    if (x.kind == Kind::Union)
      for (const int32_t a : x.alternatives) check_depth(a, depth, at + "/anyOf");
  }

  size_t member_bytes(const Property& p) const { return p.key.size() + 3 + node(p.value).shortest.size(); }

  // ---- stepping ----

  static bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
  static bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

  // Whether the value of this frame may end here without its own closing byte.
  bool ends_here(const Frame& f) const {
    const Node& n = node(f.node);
    if (n.kind == Kind::Number || n.kind == Kind::Integer) {
      return f.phase == kZero || f.phase == kIntDigits || f.phase == kFracDigits || f.phase == kExpDigits;
    }
    if (n.kind == Kind::Literal) return n.literals.nodes[static_cast<size_t>(f.a)].value >= 0;
    return false;
  }

  bool more_members_possible(const Node& n, const Frame& f) const {
    if (n.additional >= 0) return true;
    const uint64_t all = n.properties.size() == 64 ? ~uint64_t{0} : (uint64_t{1} << n.properties.size()) - 1;
    return (f.seen & all) != all;
  }

  // Opens the value of node `n` (not a union) with its first byte.
  Take start(int32_t n, uint8_t c, Frame& f) const {
    const Node& x = node(n);
    f = Frame{};
    f.node = n;
    switch (x.kind) {
      case Kind::Object:
        if (c != '{') return Take::Rejected;
        f.phase = kOpen;
        f.c = x.required_count;
        f.d = static_cast<int32_t>(x.required_bytes);
        return Take::Consumed;
      case Kind::Array:
        if (c != '[') return Take::Rejected;
        f.phase = kOpen;
        return Take::Consumed;
      case Kind::String:
        if (c != '"') return Take::Rejected;
        f.phase = kChars;
        return Take::Consumed;
      case Kind::Number:
      case Kind::Integer:
        if (c == '-') f.phase = kMinus;
        else if (c == '0') f.phase = kZero;
        else if (is_digit(c)) f.phase = kIntDigits, f.a = 1;
        else return Take::Rejected;
        return Take::Consumed;
      case Kind::Literal: {
        const int32_t next = x.literals.child(0, c);
        if (next < 0) return Take::Rejected;
        f.a = next;
        const auto& t = x.literals.nodes[static_cast<size_t>(next)];
        return t.value >= 0 && t.next.empty() ? Take::Closed : Take::Consumed;
      }
      default: return Take::Rejected;
    }
  }

  // Offers `c` to the top frame. On Open, `value` is the node of the value `c` starts.
  Take take(Frame& f, uint8_t c, int32_t& value) const {
    const Node& n = node(f.node);
    switch (n.kind) {
      case Kind::Document:
        if (f.phase != kDocStart) return Take::Rejected;
        f.phase = kDocInValue;
        value = root_;
        return Take::Open;
      case Kind::Object: return take_object(n, f, c, value);
      case Kind::Array:
        switch (f.phase) {
          case kOpen:
            if (c == ']') return n.min_items == 0 ? Take::Closed : Take::Rejected;
            if (n.max_items == 0) return Take::Rejected;
            f.phase = kInValue;
            value = n.items;
            return Take::Open;
          case kAfterValue:
            if (c == ',' && f.a < n.max_items) return f.phase = kAfterComma, Take::Consumed;
            if (c == ']' && f.a >= n.min_items) return Take::Closed;
            return Take::Rejected;
          case kAfterComma:
            if (c == ' ') return f.phase = kAfterCommaSpace, Take::Consumed;
            [[fallthrough]];
          case kAfterCommaSpace:
            f.phase = kInValue;
            value = n.items;
            return Take::Open;
          default: return Take::Rejected;
        }
      case Kind::String:
        switch (f.phase) {
          case kChars:
            if (f.utf8_pending == 0) {
              if (c == '"') return Take::Closed;
              if (c == '\\') return f.phase = kEscape, Take::Consumed;
              if (c < 0x20) return Take::Rejected;
            }
            return Utf8::feed(f.utf8_pending, f.utf8_range, c) ? Take::Consumed : Take::Rejected;
          case kEscape:
            if (c == 'u') return f.phase = kHex, f.a = 0, f.b = 0, Take::Consumed;
            if (std::string_view("\"\\/bfnrt").find(static_cast<char>(c)) != std::string_view::npos) return f.phase = kChars, Take::Consumed;
            return Take::Rejected;
          default:  // kHex: no surrogate halves (\uD800-\uDFFF), which some parsers refuse alone
            if (!is_hex(c)) return Take::Rejected;
            if (f.a == 0 && (c == 'd' || c == 'D')) f.b = 1;
            if (f.a == 1 && f.b == 1 && !(c >= '0' && c <= '7')) return Take::Rejected;
            if (++f.a == 4) f.phase = kChars;
            return Take::Consumed;
        }
      case Kind::Number:
      case Kind::Integer: return take_number(n.kind == Kind::Integer, f, c);
      case Kind::Literal: {
        const int32_t next = n.literals.child(f.a, c);
        if (next < 0) return n.literals.nodes[static_cast<size_t>(f.a)].value >= 0 ? Take::PassUp : Take::Rejected;
        f.a = next;
        const auto& t = n.literals.nodes[static_cast<size_t>(next)];
        return t.value >= 0 && t.next.empty() ? Take::Closed : Take::Consumed;
      }
      default: return Take::Rejected;
    }
  }

  static Take take_number(bool integer, Frame& f, uint8_t c) {
    const bool digit = is_digit(c);
    switch (f.phase) {
      case kMinus:
        if (c == '0') return f.phase = kZero, Take::Consumed;
        if (digit) return f.phase = kIntDigits, f.a = 1, Take::Consumed;
        return Take::Rejected;
      case kZero:
      case kIntDigits:
        if (digit) {
          if (f.phase == kZero || f.a >= kMaxDigits) return Take::Rejected;
          return ++f.a, Take::Consumed;
        }
        if (!integer && c == '.') return f.phase = kDot, f.a = 0, Take::Consumed;
        if (!integer && (c == 'e' || c == 'E')) return f.phase = kExp, f.a = 0, Take::Consumed;
        return Take::PassUp;
      case kDot:
        if (digit) return f.phase = kFracDigits, f.a = 1, Take::Consumed;
        return Take::Rejected;
      case kFracDigits:
        if (digit) return f.a >= kMaxDigits ? Take::Rejected : (++f.a, Take::Consumed);
        if (c == 'e' || c == 'E') return f.phase = kExp, f.a = 0, Take::Consumed;
        return Take::PassUp;
      case kExp:
        if (c == '+' || c == '-') return f.phase = kExpSign, Take::Consumed;
        [[fallthrough]];
      case kExpSign:
        if (digit) return f.phase = kExpDigits, f.a = 1, Take::Consumed;
        return Take::Rejected;
      default:  // kExpDigits
        if (digit) return f.a >= kMaxExponentDigits ? Take::Rejected : (++f.a, Take::Consumed);
        return Take::PassUp;
    }
  }

  Take take_object(const Node& n, Frame& f, uint8_t c, int32_t& value) const {
    switch (f.phase) {
      case kOpen:
        if (c == '}') return f.c == 0 ? Take::Closed : Take::Rejected;
        if (!more_members_possible(n, f)) return Take::Rejected;
        [[fallthrough]];
      case kAfterComma:
      case kAfterCommaSpace:
        if (c == ' ' && f.phase == kAfterComma) return f.phase = kAfterCommaSpace, Take::Consumed;
        if (c != '"') return Take::Rejected;
        f.phase = kInKey;
        f.a = 0;
        f.free_key_dead = n.additional < 0;
        f.utf8_pending = 0;
        return Take::Consumed;
      case kInKey: {
        // A '"' continues a declared key only as the escape \" (a free key has no escapes).
        if (c == '"' && !(f.a >= 0 && n.keys.child(f.a, c) >= 0)) {
          const int32_t declared = f.a >= 0 ? n.keys.nodes[static_cast<size_t>(f.a)].value : -1;
          if (declared >= 0) {
            if (f.seen >> declared & 1) return Take::Rejected;  // each key once
            const Property& p = n.properties[static_cast<size_t>(declared)];
            f.seen |= uint64_t{1} << declared;
            if (p.required) --f.c, f.d -= static_cast<int32_t>(member_bytes(p));
            f.b = declared;
          } else {
            if (f.free_key_dead || f.utf8_pending) return Take::Rejected;
            f.b = -1;
          }
          f.phase = kAfterKey;
          return Take::Consumed;
        }
        if (f.a >= 0) f.a = n.keys.child(f.a, c);
        // A free key has no escapes, so it cannot spell a declared key another way.
        if (!f.free_key_dead && (c == '\\' || c < 0x20 || !Utf8::feed(f.utf8_pending, f.utf8_range, c))) f.free_key_dead = 1;
        if (f.a < 0 && f.free_key_dead) return Take::Rejected;
        if (f.a >= 0 && !(n.keys.nodes[static_cast<size_t>(f.a)].values_below & ~f.seen) && f.free_key_dead) return Take::Rejected;
        return Take::Consumed;
      }
      case kAfterKey:
        if (c != ':') return Take::Rejected;
        return f.phase = kAfterColon, Take::Consumed;
      case kAfterColon:
        if (c == ' ') return f.phase = kAfterColonSpace, Take::Consumed;
        [[fallthrough]];
      case kAfterColonSpace:
        f.phase = kInValue;
        value = f.b >= 0 ? n.properties[static_cast<size_t>(f.b)].value : n.additional;
        return Take::Open;
      case kAfterValue:
        if (c == ',') return more_members_possible(n, f) ? (f.phase = kAfterComma, Take::Consumed) : Take::Rejected;
        if (c == '}') return f.c == 0 ? Take::Closed : Take::Rejected;
        return Take::Rejected;
      default: return Take::Rejected;
    }
  }

  // The frame below a value that just ended.
  void child_done(Frame* f, int depth) const {
    Frame& parent = f[depth - 1];
    if (node(parent.node).kind == Kind::Document) {
      parent.phase = kDocDone;
      return;
    }
    parent.phase = kAfterValue;
    if (node(parent.node).kind == Kind::Array) ++parent.a;
  }

  void feed(const Frame* src, int depth, uint8_t c, State& out) const {
    if (out.threads == kMaxThreads) return;
    Frame* f = out.stack(out.threads);
    std::copy_n(src, depth, f);
    while (depth > 0) {
      int32_t value = -1;
      switch (take(f[depth - 1], c, value)) {
        case Take::Consumed: out.depth[static_cast<size_t>(out.threads++)] = static_cast<uint8_t>(depth); return;
        case Take::Closed:
          child_done(f, --depth);
          out.depth[static_cast<size_t>(out.threads++)] = static_cast<uint8_t>(depth);
          return;
        case Take::Rejected: return;
        case Take::PassUp: child_done(f, --depth); continue;
        case Take::Open: open(f, depth, value, c, out); return;
      }
    }
  }

  // Starts the value `value` with byte `c` above f[0, depth), where f is the next free stack of
  // `out`; a union forks one stack per alternative that takes `c`, each a copy of f's prefix.
  void open(Frame* f, int depth, int32_t value, uint8_t c, State& out) const {
    const Node& x = node(value);
    const int32_t single[1] = {value};
    const int32_t* alternatives = x.kind == Kind::Union ? x.alternatives.data() : single;
    const size_t count = x.kind == Kind::Union ? x.alternatives.size() : 1;
    const Frame parent = f[depth - 1];  // child_done changes it in a stack already kept
    for (size_t i = 0; i < count && out.threads < kMaxThreads; ++i) {
      const Kind kind = node(alternatives[i]).kind;
      if (depth >= kMaxDepth && (kind == Kind::Object || kind == Kind::Array)) continue;
      Frame child;
      const Take t = start(alternatives[i], c, child);
      if (t == Take::Rejected) continue;
      Frame* g = out.stack(out.threads);
      if (g != f) std::copy_n(f, depth - 1, g);
      g[depth - 1] = parent;
      int d = depth;
      if (t == Take::Consumed) g[d++] = child;
      else child_done(g, d);
      out.depth[static_cast<size_t>(out.threads++)] = static_cast<uint8_t>(d);
    }
  }

  // ---- endings ----

  // After a member's value: the required members left, then '}'.
  template <class Sink>
  void object_rest(const Node& n, const Frame& f, bool comma_first, Sink& out) const {
    bool first = !comma_first;
    for (size_t i = 0; i < n.properties.size(); ++i) {
      const Property& p = n.properties[i];
      if (!p.required || (f.seen >> i & 1)) continue;
      if (!first) out.ch(',');
      member(p, out);
      first = false;
    }
    out.ch('}');
  }
  template <class Sink>
  void member(const Property& p, Sink& out) const {
    out.ch('"');
    out.str(p.key);
    out.str("\":");
    out.str(node(p.value).shortest);
  }

  // The shortest way to finish the key being read, its value and the object.
  template <class Sink>
  void key_rest(const Node& n, const Frame& f, Sink& out) const {
    size_t best_cost = std::numeric_limits<size_t>::max();
    int32_t best = -2;  // property index, -1: an additional key
    const size_t after_value = static_cast<size_t>(f.d) + static_cast<size_t>(f.c) + 1;
    if (f.a >= 0) {
      const auto& t = n.keys.nodes[static_cast<size_t>(f.a)];
      const uint64_t open = t.values_below & ~f.seen;
      for (size_t i = 0; i < n.properties.size(); ++i) {
        if (!(open >> i & 1)) continue;
        const Property& p = n.properties[i];
        const size_t left_after = p.required ? after_value - member_bytes(p) - 1 : after_value;
        const size_t cost = p.key.size() - static_cast<size_t>(t.depth) + 2 + node(p.value).shortest.size() + left_after;
        if (cost < best_cost) best_cost = cost, best = static_cast<int32_t>(i);
      }
    }
    // An additional key closes here unless it spells a declared key already written: then one
    // more byte, off the trie, makes it another key.
    bool needs_byte = false;
    if (!f.free_key_dead) {
      const int32_t declared = f.a >= 0 ? n.keys.nodes[static_cast<size_t>(f.a)].value : -1;
      needs_byte = declared >= 0;
      const size_t cost = f.utf8_pending + (needs_byte ? 1 : 0) + 2 + node(n.additional).shortest.size() + after_value;
      if (cost < best_cost) best_cost = cost, best = -1;
    }
    if (best >= 0) {
      const Property& p = n.properties[static_cast<size_t>(best)];
      out.str(std::string_view(p.key).substr(static_cast<size_t>(n.keys.nodes[static_cast<size_t>(f.a)].depth)));
      out.str("\":");
      out.str(node(p.value).shortest);
      Frame after = f;
      after.seen |= uint64_t{1} << best;
      object_rest(n, after, true, out);
      return;
    }
    Utf8::finish(f.utf8_pending, f.utf8_range, out);
    if (needs_byte) out.ch(off_trie_byte(n.keys, f.a));
    out.str("\":");
    out.str(node(n.additional).shortest);
    object_rest(n, f, true, out);
  }
  static char off_trie_byte(const Trie& keys, int32_t at) {
    for (char c = 'a';; ++c)
      if (keys.child(at, static_cast<uint8_t>(c)) < 0) return c;
  }

  // The shortest text that ends a stack.
  template <class Sink>
  void ending(const Frame* f, int depth, Sink& out) const {
    for (int i = depth - 1; i >= 0; --i) {
      const Frame& fr = f[i];
      const Node& n = node(fr.node);
      switch (n.kind) {
        case Kind::Document:
          if (fr.phase == kDocStart) out.str(n.shortest);
          break;
        case Kind::Object:
          switch (fr.phase) {
            case kOpen: object_rest(n, fr, false, out); break;
            case kInKey: key_rest(n, fr, out); break;
            case kAfterKey:
            case kAfterColon:
            case kAfterColonSpace:
              if (fr.phase == kAfterKey) out.ch(':');
              out.str(node(fr.b >= 0 ? n.properties[static_cast<size_t>(fr.b)].value : n.additional).shortest);
              object_rest(n, fr, true, out);
              break;
            case kInValue:
            case kAfterValue: object_rest(n, fr, true, out); break;
            default: {  // after a comma: a member must follow
              if (fr.c > 0) {
                object_rest(n, fr, false, out);
                break;
              }
              int32_t best = -1;
              size_t best_bytes = n.additional >= 0 ? 3 + node(n.additional).shortest.size() : std::numeric_limits<size_t>::max();
              for (size_t k = 0; k < n.properties.size(); ++k) {
                if (fr.seen >> k & 1) continue;
                if (member_bytes(n.properties[k]) < best_bytes) best_bytes = member_bytes(n.properties[k]), best = static_cast<int32_t>(k);
              }
              if (best >= 0) {
                member(n.properties[static_cast<size_t>(best)], out);
              } else {
                out.str("\"\":");
                out.str(node(n.additional).shortest);
              }
              out.ch('}');
            }
          }
          break;
        case Kind::Array: {
          const int64_t done = fr.a + (fr.phase == kInValue ? 1 : 0);
          int64_t left = std::max<int64_t>(0, n.min_items - done);
          bool comma = fr.phase == kInValue || fr.phase == kAfterValue;
          if (fr.phase == kOpen) comma = false;
          if (fr.phase == kAfterComma || fr.phase == kAfterCommaSpace) left = std::max<int64_t>(left, 1);
          for (int64_t k = 0; k < left; ++k) {
            if (comma) out.ch(',');
            out.str(node(n.items).shortest);
            comma = true;
          }
          out.ch(']');
          break;
        }
        case Kind::String:
          if (fr.phase == kEscape) out.ch('n');
          if (fr.phase == kHex) out.str(std::string_view("0000").substr(static_cast<size_t>(fr.a)));
          Utf8::finish(fr.utf8_pending, fr.utf8_range, out);
          out.ch('"');
          break;
        case Kind::Number:
        case Kind::Integer:
          if (fr.phase == kMinus || fr.phase == kDot || fr.phase == kExp || fr.phase == kExpSign) out.ch('0');
          break;
        case Kind::Literal: out.str(n.literals.rest(fr.a)); break;
        case Kind::Union: break;
      }
    }
  }

  std::vector<Node> nodes_;
  int32_t root_ = -1, document_ = -1, any_ = -1, any_object_ = -1, string_ = -1, number_ = -1;
};

}  // namespace minimind::json_grammar
