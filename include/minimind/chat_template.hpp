#pragma once
// Chat formatting: turns a conversation into the prompt text a MiniMind checkpoint expects,
// byte-identical to what its tokenizer_config.json "chat_template" (Jinja) renders under
// transformers' apply_chat_template.
//
// This is not a Jinja interpreter. The library knows the two templates MiniMind ships and
// reproduces each one's logic in C++:
//   minimind2  (MiniMind2, MiniMind2-Small, MiniMind2-MoE): ChatML; when the first message is not
//              a system message, a default "You are a helpful assistant" system turn; the
//              generation prompt is "<|im_start|>assistant\n", followed by a closed empty think
//              block only when enable_thinking is explicitly false.
//   minimind-3 (minimind-3, minimind-3-moe): ChatML, no default system turn; every assistant turn
//              is rendered as "<think>\n{reasoning}\n</think>\n\n{answer}" (reasoning taken from
//              reasoning_content, or split out of <think>...</think> in content); the generation
//              prompt ends in a closed empty think block, or in an open "<think>\n" when
//              open_thinking is true. It ignores enable_thinking.
// Both render tools (a "# Tools" system block), assistant tool calls (<tool_call> JSON) and tool
// results (<tool_response> inside a user turn).
//
// A template is recognised by its exact text (byte length and FNV-1a 64 hash; a single trailing
// newline is also accepted because Jinja drops it), not by a distinguishing phrase: upstream's own
// 2025-04 MiniMind2 template has the same default system prompt yet renders differently (it
// appends the assistant header after every user turn), so anything but the verified text throws
// minimind::Error rather than risk a prompt the model was not trained on. There is no plain-ChatML
// fallback for the same reason.
//
// Where this deliberately differs from the template: a message whose role is not system, user,
// assistant or tool throws (the template would silently drop it, hiding a typo such as "User"),
// and an empty conversation throws (jinja2 fails on it too, with an UndefinedError).
//
// Semantics follow Python's jinja2, which MiniMind is trained and evaluated with:
// str.strip('\n') strips newlines only, and tojson is json.dumps (", " and ": " separators, keys
// in insertion order, non-ASCII unescaped, floats as Python's repr). @huggingface/jinja differs on
// both points; tools/render_chat_templates.mjs records where.
//
// A ChatTemplate is immutable once made: any number of threads may render with one at once.
#include "minimind/error.hpp"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace minimind {

// One function call requested by an assistant turn.
struct ToolCall {
  std::string name;
  // A JSON string is inserted verbatim (arguments the caller already serialised, as the OpenAI API
  // delivers them); any other JSON value is serialised the way the template's tojson does.
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
};

struct ChatMessage {
  // A constructor rather than aggregate initialisation, so {"user", "hi"} does not trip
  // -Wmissing-field-initializers in callers built with -Wextra.
  ChatMessage() = default;
  ChatMessage(std::string role_, std::string content_) : role(std::move(role_)), content(std::move(content_)) {}

  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  // Assistant turns, minimind-3 only: when set, used as the think block verbatim and content is
  // not searched for <think> tags. MiniMind2's template ignores it.
  std::optional<std::string> reasoning_content;
  std::vector<ToolCall> tool_calls;  // assistant turns only; other roles' calls are ignored
};

// The template variables besides messages. Unset optionals are "not defined" in Jinja terms,
// which the templates distinguish from false. A program's --think switch maps to
// open_thinking = true (what upstream's eval script passes); MiniMind2 has no open-think prompt.
struct ChatOptions {
  bool add_generation_prompt = false;
  std::optional<bool> enable_thinking;  // read by minimind2 only
  std::optional<bool> open_thinking;    // read by minimind-3 only
  std::vector<nlohmann::ordered_json> tools;  // function schemas; empty = no tools block
};

enum class ChatTemplateFamily { minimind2, minimind3 };

namespace detail {

// Appends each part in turn. Used instead of chains of operator+, which build temporaries and
// trip GCC 12's false -Wrestrict warning on "literal" + std::string.
template <typename... Parts>
void append(std::string& out, const Parts&... parts) {
  (out.append(std::string_view(parts)), ...);
}

inline std::uint64_t fnv1a64(std::string_view text) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char byte : text) {
    hash ^= byte;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

// The text of std::to_chars(value, chars_format::scientific) for a finite value: the shortest
// digits that read back as `value` (the nearest such when several have that length), e.g.
// "-1.25e+17", "5e-324". For standard libraries without float to_chars (emscripten 3.1.6's
// libc++): the correctly rounded p-digit decimal for p = 1, 2, ... until one reads back; when it
// does not, at a power of two (whose lower neighbour is half as far as the upper), the next
// p-digit decimal on the other side of `value` may still. printf and strtod are exact in glibc
// and musl; musl's (emscripten's) ignore the locale, and the tests run in the "C" locale.
inline std::string shortest_scientific_printf(double value) {
  char buffer[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof buffer, "%.*e", precision - 1, value);
    const double nearest = std::strtod(buffer, nullptr);
    if (nearest == value) return buffer;
    // The other side: the p digits as an integer, one unit up or down, carried into the exponent.
    std::string_view text(buffer);
    const bool negative = text.front() == '-';
    const std::size_t e = text.find('e');
    std::uint64_t digits = 0;
    for (char c : text.substr(0, e)) {
      if (c >= '0' && c <= '9') digits = digits * 10 + static_cast<std::uint64_t>(c - '0');
    }
    int exponent = std::atoi(buffer + e + 1);
    std::uint64_t low = 1;
    for (int i = 1; i < precision; ++i) low *= 10;  // 10^(p-1), the smallest p-digit integer
    const bool up = (nearest < value) != negative;
    if (up && ++digits == low * 10) {
      digits = low;
      ++exponent;
    } else if (!up && digits-- == low) {
      digits = low * 10 - 1;
      --exponent;
    }
    const std::string all = std::to_string(digits);
    std::string other = negative ? "-" : "";
    append(other, std::string_view(all).substr(0, 1), all.size() > 1 ? "." : "", std::string_view(all).substr(1));
    const std::string magnitude = std::to_string(std::abs(exponent));
    append(other, exponent < 0 ? "e-" : "e+", magnitude.size() < 2 ? "0" : "", magnitude);
    if (std::strtod(other.c_str(), nullptr) == value) return other;
  }
  return buffer;  // 17 significant digits always read back
}

// Python's float repr: the shortest round-trip digits, in exponent form when the decimal exponent
// is below -4 or at least 16, otherwise positional with at least one fractional digit.
inline std::string python_float_repr(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
#if defined(__cpp_lib_to_chars)
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  std::string_view text(buffer, static_cast<std::size_t>(result.ptr - buffer));  // "-1.25e+17"
#else
  const std::string scientific = shortest_scientific_printf(value);
  std::string_view text(scientific);
#endif
  std::string out;
  if (text.front() == '-') {
    out += '-';
    text.remove_prefix(1);
  }
  const std::size_t e = text.find('e');
  std::string digits(text.substr(0, e));
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  const int exponent = std::atoi(std::string(text.substr(e + 1)).c_str());
  if (exponent < -4 || exponent >= 16) {
    out += digits[0];
    if (digits.size() > 1) append(out, ".", std::string_view(digits).substr(1));
    const std::string magnitude = std::to_string(std::abs(exponent));
    append(out, exponent < 0 ? "e-" : "e+", magnitude.size() < 2 ? "0" : "", magnitude);
  } else if (exponent < 0) {
    append(out, "0.", std::string(static_cast<std::size_t>(-exponent - 1), '0'), digits);
  } else {
    const auto integer_digits = static_cast<std::size_t>(exponent) + 1;
    if (digits.size() <= integer_digits) {
      append(out, digits, std::string(integer_digits - digits.size(), '0'), ".0");
    } else {
      const std::string_view all(digits);
      append(out, all.substr(0, integer_digits), ".", all.substr(integer_digits));
    }
  }
  return out;
}

// Python json.dumps string quoting with ensure_ascii=False: only '"', '\\' and control
// characters are escaped; UTF-8 passes through.
inline void append_json_string(std::string& out, std::string_view text) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out += hex[(c >> 4) & 0xf];
          out += hex[c & 0xf];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

inline void append_tojson(std::string& out, const nlohmann::ordered_json& value) {
  using Type = nlohmann::ordered_json::value_t;
  switch (value.type()) {
    case Type::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out += ", ";
        first = false;
        append_json_string(out, key);
        out += ": ";
        append_tojson(out, item);
      }
      out += '}';
      break;
    }
    case Type::array: {
      out += '[';
      for (std::size_t i = 0; i < value.size(); ++i) {
        if (i > 0) out += ", ";
        append_tojson(out, value[i]);
      }
      out += ']';
      break;
    }
    case Type::string: append_json_string(out, value.get_ref<const std::string&>()); break;
    case Type::boolean: out += value.get<bool>() ? "true" : "false"; break;
    case Type::number_integer: out += std::to_string(value.get<std::int64_t>()); break;
    case Type::number_unsigned: out += std::to_string(value.get<std::uint64_t>()); break;
    case Type::number_float: out += python_float_repr(value.get<double>()); break;
    case Type::null: out += "null"; break;
    case Type::binary:
    case Type::discarded: throw Error("chat template: tojson cannot serialise a binary or discarded JSON value");
  }
}

// The templates' `x | tojson`.
inline std::string tojson(const nlohmann::ordered_json& value) {
  std::string out;
  append_tojson(out, value);
  return out;
}

// Python's str.lstrip('\n') / rstrip('\n') / strip('\n').
inline std::string_view lstrip_newlines(std::string_view s) {
  const std::size_t start = s.find_first_not_of('\n');
  return start == std::string_view::npos ? std::string_view{} : s.substr(start);
}
inline std::string_view rstrip_newlines(std::string_view s) {
  const std::size_t end = s.find_last_not_of('\n');
  return end == std::string_view::npos ? std::string_view{} : s.substr(0, end + 1);
}
inline std::string_view strip_newlines(std::string_view s) { return rstrip_newlines(lstrip_newlines(s)); }

// The fingerprint as the golden files spell it: 16 lowercase hex digits.
inline std::string fnv1a64_hex(std::string_view text) {
  char hex[16];
  const auto end = std::to_chars(hex, hex + sizeof hex, fnv1a64(text), 16).ptr;
  std::string out(static_cast<std::size_t>(hex + sizeof hex - end), '0');
  out.append(hex, end);
  return out;
}

struct KnownTemplate {
  ChatTemplateFamily family;
  std::string_view name;
  std::size_t bytes;
  std::uint64_t fnv1a64;
};

// The chat_template strings of jingyaogong/minimind's model/tokenizer_config.json as released
// with MiniMind2 (restored 2025-10) and minimind-3 (2026-03); tests/data/chat_template/*.json
// record the same fingerprints.
inline constexpr KnownTemplate known_templates[] = {
    {ChatTemplateFamily::minimind2, "minimind2", 3342, 0xd2c221ad78b4395dULL},
    {ChatTemplateFamily::minimind3, "minimind-3", 3895, 0xa42856d092c2689bULL},
};

inline const KnownTemplate* find_known_template(std::string_view text) {
  for (const auto& known : known_templates) {
    if (text.size() == known.bytes && fnv1a64(text) == known.fnv1a64) return &known;
  }
  return nullptr;
}

inline constexpr std::string_view tools_preamble =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
inline constexpr std::string_view tools_postamble =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

}  // namespace detail

class ChatTemplate {
 public:
  // template_text: the "chat_template" string of a tokenizer_config.json. Throws minimind::Error
  // unless it is one of the two MiniMind templates (see the header comment).
  explicit ChatTemplate(std::string_view template_text) : known_(recognise(template_text)) {}

  // The renderers without the template text, for callers (and tests) that know the family.
  static ChatTemplate minimind2() { return ChatTemplate(&detail::known_templates[0]); }
  static ChatTemplate minimind3() { return ChatTemplate(&detail::known_templates[1]); }

  ChatTemplateFamily family() const { return known_->family; }
  std::string_view name() const { return known_->name; }  // "minimind2" or "minimind-3"

  std::string render(const std::vector<ChatMessage>& messages, const ChatOptions& options = {}) const {
    if (messages.empty()) throw Error("chat template: no messages to render");
    for (std::size_t i = 0; i < messages.size(); ++i) {
      const std::string& role = messages[i].role;
      if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
        throw Error("chat message " + std::to_string(i) + ": unknown role \"" + role +
                    "\" (expected system, user, assistant or tool)");
      }
    }
    const bool minimind3 = family() == ChatTemplateFamily::minimind3;
    const bool leading_system = messages.front().role == "system";
    std::string out;

    // Header: the tools block absorbs a leading system message; otherwise the leading system
    // message stands alone, and MiniMind2 supplies its default one.
    if (!options.tools.empty()) {
      out += "<|im_start|>system\n";
      if (leading_system) detail::append(out, messages.front().content, "\n\n");
      out += detail::tools_preamble;
      for (const auto& tool : options.tools) {
        out += '\n';
        detail::append_tojson(out, tool);
      }
      out += detail::tools_postamble;
    } else if (leading_system) {
      detail::append(out, "<|im_start|>system\n", messages.front().content, "<|im_end|>\n");
    } else if (!minimind3) {
      out += "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n";
    }

    for (std::size_t i = 0; i < messages.size(); ++i) {
      const ChatMessage& message = messages[i];
      if (message.role == "user" || (message.role == "system" && i > 0)) {
        detail::append(out, "<|im_start|>", message.role, "\n", message.content, "<|im_end|>\n");
      } else if (message.role == "assistant") {
        append_assistant(out, message, minimind3);
      } else if (message.role == "tool") {
        // Consecutive tool results share one user turn.
        if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
        detail::append(out, "\n<tool_response>\n", message.content, "\n</tool_response>");
        if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
      }
    }

    if (options.add_generation_prompt) {
      out += "<|im_start|>assistant\n";
      if (minimind3) {
        out += options.open_thinking == true ? "<think>\n" : "<think>\n\n</think>\n\n";
      } else if (options.enable_thinking == false) {
        out += "<think>\n\n</think>\n\n";
      }
    }
    return out;
  }

 private:
  explicit ChatTemplate(const detail::KnownTemplate* known) : known_(known) {}

  static const detail::KnownTemplate* recognise(std::string_view text) {
    if (const auto* known = detail::find_known_template(text)) return known;
    // Jinja (keep_trailing_newline=False) drops one final newline, so that copy renders the same.
    if (!text.empty() && text.back() == '\n') {
      if (const auto* known = detail::find_known_template(text.substr(0, text.size() - 1))) return known;
    }
    std::string message;
    detail::append(message,
                   "chat template is not one this library renders: minimind reproduces only the exact "
                   "MiniMind2 and minimind-3 templates of jingyaogong/minimind (this one has ",
                   std::to_string(text.size()), " bytes, FNV-1a 64 ", detail::fnv1a64_hex(text), ")");
    if (text.find("<|im_start|>") != std::string_view::npos) {
      message += "; it is a ChatML template, but different text can render a different prompt";
    }
    throw Error(message);
  }

  // The template's assistant branch. `content` is the variable the template tests before the
  // first tool call: for minimind-3 it is the text after </think> when the reasoning was split
  // out, else the raw content (so newline-only content still adds a separator).
  static void append_assistant(std::string& out, const ChatMessage& message, bool minimind3) {
    std::string_view content = message.content;
    out += "<|im_start|>assistant\n";
    if (minimind3) {
      std::string_view reasoning;
      if (message.reasoning_content) {
        reasoning = *message.reasoning_content;
      } else if (const std::size_t close = content.find("</think>"); close != std::string_view::npos) {
        // Python: content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n'),
        // then content = content.split('</think>')[-1].lstrip('\n').
        std::string_view before = detail::rstrip_newlines(content.substr(0, close));
        if (const std::size_t open = before.rfind("<think>"); open != std::string_view::npos) {
          before.remove_prefix(open + std::string_view("<think>").size());
        }
        reasoning = detail::lstrip_newlines(before);
        content = detail::lstrip_newlines(content.substr(content.rfind("</think>") + std::string_view("</think>").size()));
      }
      detail::append(out, "<think>\n", detail::strip_newlines(reasoning), "\n</think>\n\n",
                     detail::lstrip_newlines(content));
    } else {
      out += content;
    }
    for (std::size_t j = 0; j < message.tool_calls.size(); ++j) {
      const ToolCall& call = message.tool_calls[j];
      if (j > 0 || !content.empty()) out += '\n';
      detail::append(out, "<tool_call>\n{\"name\": \"", call.name, "\", \"arguments\": ");
      if (call.arguments.is_string()) {
        out += call.arguments.get_ref<const std::string&>();
      } else {
        detail::append_tojson(out, call.arguments);
      }
      out += "}\n</tool_call>";
    }
    out += "<|im_end|>\n";
  }

  const detail::KnownTemplate* known_;
};

}  // namespace minimind
