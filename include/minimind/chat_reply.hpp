#pragma once
// A chat reply split the way MiniMind's chat templates write one: reasoning inside
// <think>...</think>, the answer (content), and function calls as
// <tool_call>{"name": ..., "arguments": {...}}</tool_call> blocks. The split is incremental, so a
// server can stream the reasoning before the content and each call as soon as its block closes;
// parsing a whole text is the same parser fed once, so a stream and a whole reply always agree.
//
// The rules (the inverse of how ChatTemplate renders an assistant turn, so a parsed reply put
// back into the history renders as the text the model wrote):
// - Reasoning: when the prompt ended in an open "<think>\n" (minimind-3 with open_thinking), the
//   reply starts inside the think block; otherwise a "<think>" the reply opens with (after
//   whitespace only) starts one. The reasoning is the text up to "</think>", newlines stripped at
//   both ends; the content after "</think>" loses its leading newlines. A "<think>" later in the
//   content is content. A think block never closed (cut off by max_tokens) is all reasoning.
// - Tool calls (only when enabled): in the content, a <tool_call> block whose text is a JSON
//   object with a non-empty string "name" (one of the offered tools, when a list is given) and an
//   object "arguments" (absent counts as {}), and no other key, becomes a call; its arguments are
//   re-serialised as the template's tojson writes them (Python json.dumps, non-ASCII kept). The
//   newlines between the content and a call, and between calls, are the template's separators and
//   are dropped. Anything else is content, verbatim, tags included: a block whose JSON is
//   malformed or has the wrong shape, and a block never closed (a call cut off by max_tokens).
//   Nothing the model wrote is dropped except those separators and the tags of calls and of
//   reasoning.
// - Tags inside the reasoning are reasoning.
#include "minimind/chat_template.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace minimind {

struct ChatReplyOptions {
  bool starts_in_thinking = false;      // the prompt ended inside an open think block
  bool tool_calls = false;              // parse <tool_call> blocks in the content
  std::vector<std::string> tool_names;  // when not empty, a call must name one of these
};

// Whether a reply to a prompt rendered with `options` starts inside a think block: minimind-3's
// generation prompt with open_thinking ends in "<think>\n"; MiniMind2's never opens one.
inline bool reply_starts_in_thinking(const ChatTemplate& chat_template, const ChatOptions& options) {
  return chat_template.family() == ChatTemplateFamily::minimind3 && options.add_generation_prompt && options.open_thinking == true;
}

// One piece of a reply as it is parsed: reasoning or content text, or a whole tool call.
struct ChatReplyDelta {
  enum class Kind { reasoning, content, tool_call };
  Kind kind = Kind::content;
  std::string text;    // reasoning and content
  ToolCall call;       // tool_call: arguments is a JSON string holding the serialised arguments
  size_t index = 0;    // tool_call: its place among the reply's calls
};

// The whole reply; the deltas concatenated.
struct ChatReply {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;  // arguments as a JSON string (see ChatReplyDelta)
  bool thinking_closed = false;      // a think block was opened and closed
};

class ChatReplyParser {
 public:
  explicit ChatReplyParser(ChatReplyOptions options = {}) : options_(std::move(options)) {
    state_ = options_.starts_in_thinking ? State::reasoning : State::start;
  }

  // Feeds the next piece of the reply's text; returns what it completes (text that might still
  // turn out to be part of a tag, or a separator, is held until the next piece or finish()).
  std::vector<ChatReplyDelta> push(std::string_view text) {
    std::vector<ChatReplyDelta> out;
    pending_ += text;
    advance(false, out);
    return out;
  }

  // The end of the reply: releases what was held back.
  std::vector<ChatReplyDelta> finish() {
    std::vector<ChatReplyDelta> out;
    advance(true, out);
    return out;
  }

  const ChatReply& reply() const { return reply_; }
  size_t tool_call_count() const { return reply_.tool_calls.size(); }

 private:
  enum class State { start, reasoning, content, call };
  static constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
  static constexpr std::string_view kCallOpen = "<tool_call>", kCallClose = "</tool_call>";

  // The length of the longest proper prefix of `tag` that `text` ends with.
  static size_t partial_tag(std::string_view text, std::string_view tag) {
    for (size_t k = std::min(tag.size() - 1, text.size()); k > 0; --k) {
      if (text.substr(text.size() - k) == tag.substr(0, k)) return k;
    }
    return 0;
  }
  // Where the run of newlines that ends text[0, end) starts.
  static size_t before_newlines(std::string_view text, size_t end) {
    while (end > 0 && text[end - 1] == '\n') --end;
    return end;
  }

  void emit(std::vector<ChatReplyDelta>& out, ChatReplyDelta::Kind kind, std::string_view text) {
    if (text.empty()) return;
    (kind == ChatReplyDelta::Kind::reasoning ? reply_.reasoning : reply_.content) += text;
    if (!out.empty() && out.back().kind == kind) {
      out.back().text += text;
    } else {
      ChatReplyDelta delta;
      delta.kind = kind;
      delta.text = std::string(text);
      out.push_back(std::move(delta));
    }
  }

  // Drops the newlines pending_ starts with while `flag` asks; true when text remains.
  bool strip_leading_newlines(bool& flag) {
    if (!flag) return true;
    pending_.erase(0, std::min(pending_.find_first_not_of('\n'), pending_.size()));
    if (pending_.empty()) return false;
    flag = false;
    return true;
  }

  void advance(bool final, std::vector<ChatReplyDelta>& out) {
    using Kind = ChatReplyDelta::Kind;
    while (true) {
      switch (state_) {
        case State::start: {
          const size_t text = pending_.find_first_not_of(" \t\r\n");
          const std::string_view rest = text == std::string::npos ? std::string_view{} : std::string_view(pending_).substr(text);
          if (rest.starts_with(kThinkOpen)) {
            pending_.erase(0, text + kThinkOpen.size());
            state_ = State::reasoning;
            continue;
          }
          // Whitespace alone, or the start of "<think>", may still become a think block.
          if (!final && (text == std::string::npos || kThinkOpen.starts_with(rest))) return;
          state_ = State::content;
          continue;
        }
        case State::reasoning: {
          if (!strip_leading_newlines(reasoning_start_) && !final) return;
          const size_t close = pending_.find(kThinkClose);
          if (close != std::string::npos) {
            emit(out, Kind::reasoning, std::string_view(pending_).substr(0, before_newlines(pending_, close)));
            pending_.erase(0, close + kThinkClose.size());
            reply_.thinking_closed = true;
            content_start_ = true;
            state_ = State::content;
            continue;
          }
          const size_t end = final ? pending_.size() : pending_.size() - partial_tag(pending_, kThinkClose);
          const size_t text_end = before_newlines(pending_, end);
          emit(out, Kind::reasoning, std::string_view(pending_).substr(0, text_end));
          pending_.erase(0, final ? pending_.size() : text_end);
          return;
        }
        case State::content: {
          if (!strip_leading_newlines(content_start_) && !final) return;
          if (!options_.tool_calls) {
            emit(out, Kind::content, pending_);
            pending_.clear();
            return;
          }
          const size_t open = pending_.find(kCallOpen);
          if (open != std::string::npos) {
            const size_t text_end = before_newlines(pending_, open);
            emit(out, Kind::content, std::string_view(pending_).substr(0, text_end));
            separator_ = pending_.substr(text_end, open - text_end);
            pending_.erase(0, open + kCallOpen.size());
            state_ = State::call;
            continue;
          }
          // Held: a tail that may grow into "<tool_call>", and the newlines before it, which
          // are a separator if it does.
          const size_t text_end = final ? pending_.size() : before_newlines(pending_, pending_.size() - partial_tag(pending_, kCallOpen));
          emit(out, Kind::content, std::string_view(pending_).substr(0, text_end));
          pending_.erase(0, text_end);
          return;
        }
        case State::call: {
          const size_t close = pending_.find(kCallClose);
          if (close == std::string::npos) {
            if (!final) return;
            // Cut off inside the block: what was written stays content.
            emit(out, Kind::content, separator_ + std::string(kCallOpen) + pending_);
            pending_.clear();
            return;
          }
          const std::string body = pending_.substr(0, close);
          pending_.erase(0, close + kCallClose.size());
          state_ = State::content;
          if (auto call = parse_call(body)) {
            ChatReplyDelta delta;
            delta.kind = Kind::tool_call;
            delta.index = reply_.tool_calls.size();
            delta.call = *call;
            reply_.tool_calls.push_back(std::move(*call));
            out.push_back(std::move(delta));
            content_start_ = true;  // the newlines after a call separate it from what follows
          } else {
            emit(out, Kind::content, separator_ + std::string(kCallOpen) + body + std::string(kCallClose));
          }
          continue;
        }
      }
    }
  }

  std::optional<ToolCall> parse_call(std::string_view body) const {
    const auto json = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (!json.is_object()) return std::nullopt;
    const auto name = json.find("name");
    if (name == json.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
    const auto arguments = json.find("arguments");
    if (arguments != json.end() && !arguments->is_object()) return std::nullopt;
    if (json.size() != (arguments == json.end() ? 1u : 2u)) return std::nullopt;
    const std::string& called = name->get_ref<const std::string&>();
    const auto& names = options_.tool_names;
    if (!names.empty() && std::find(names.begin(), names.end(), called) == names.end()) return std::nullopt;
    return ToolCall{called, detail::tojson(arguments == json.end() ? nlohmann::ordered_json::object() : *arguments)};
  }

  ChatReplyOptions options_;
  State state_;
  std::string pending_;    // text not yet released
  std::string separator_;  // the newlines before the open call block
  bool reasoning_start_ = true, content_start_ = false;
  ChatReply reply_;
};

// A whole reply's text, split.
inline ChatReply parse_chat_reply(std::string_view text, const ChatReplyOptions& options = {}) {
  ChatReplyParser parser(options);
  parser.push(text);
  parser.finish();
  return parser.reply();
}

}  // namespace minimind
