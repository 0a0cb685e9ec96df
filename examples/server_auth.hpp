#pragma once
// minimind-server's API keys (--api-key, --api-key-file): with any key configured, every request
// but the web page, /health and CORS preflights must carry `Authorization: Bearer <a key>`, or it
// gets 401 in OpenAI's shape before its body is read.
#include "cli.hpp"
#include "openai_protocol.hpp"

#include <httplib.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstddef>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace server_auth {

// Keys are compared padded to this length, so a comparison takes the same time whatever the key
// and the presented token hold (see ApiKeys::matches).
inline constexpr size_t kMaxKeyLength = 256;

// Printable ASCII without spaces: what a Bearer token can carry in a header, unquoted.
inline void check_key(std::string_view key, const std::string& where) {
  if (key.empty()) throw cli::UsageError(where + ": an API key must not be empty");
  if (key.size() > kMaxKeyLength) throw cli::UsageError(where + ": an API key is at most " + std::to_string(kMaxKeyLength) + " bytes");
  for (size_t i = 0; i < key.size(); ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (c < 0x21 || c > 0x7e) {
      throw cli::UsageError(where + ": an API key is printable ASCII without spaces; byte " + std::to_string(i) + " is " + std::to_string(c));
    }
  }
}

// One key per line; blank lines and lines starting with # are skipped, and spaces around a key
// (a trailing \r too) are not part of it.
inline std::vector<std::string> read_key_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw cli::UsageError("--api-key-file " + path + ": cannot read it");
  std::vector<std::string> keys;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const size_t last = line.find_last_not_of(" \t\r");
    keys.push_back(line.substr(first, last - first + 1));
    check_key(keys.back(), "--api-key-file " + path + " line " + std::to_string(number));
  }
  if (in.bad()) throw cli::UsageError("--api-key-file " + path + ": cannot read it");
  if (keys.empty()) throw cli::UsageError("--api-key-file " + path + ": holds no keys (one per line; # starts a comment)");
  return keys;
}

class ApiKeys {
 public:
  // From the (flag, value) pairs of --api-key and --api-key-file, in command-line order.
  explicit ApiKeys(const std::vector<std::pair<std::string, std::string>>& flags) {
    for (const auto& flag : flags) {
      if (flag.first == "--api-key-file") {
        for (const auto& key : read_key_file(flag.second)) add(key);
      } else {
        check_key(flag.second, "--api-key");
        add(flag.second);
      }
    }
  }

  bool empty() const { return keys_.empty(); }
  size_t size() const { return keys_.size(); }

  // Whether `token` is one of the keys, in a time that depends only on the number of keys: every
  // key is compared, each over all kMaxKeyLength bytes (both sides zero-padded, the lengths
  // compared too) with no early exit. A token longer than any key can be is refused at once,
  // which tells only the documented limit.
  bool matches(std::string_view token) const {
    if (token.size() > kMaxKeyLength) return false;
    std::array<unsigned char, kMaxKeyLength> padded{};
    for (size_t i = 0; i < token.size(); ++i) padded[i] = static_cast<unsigned char>(token[i]);
    unsigned found = 0;
    for (const auto& key : keys_) {
      unsigned difference = static_cast<unsigned>(key.length ^ token.size());
      for (size_t i = 0; i < kMaxKeyLength; ++i) difference |= key.bytes[i] ^ padded[i];
      found |= static_cast<unsigned>(difference == 0);
    }
    return found != 0;
  }

  // The 401 for a request that needs a key and lacks a valid one; none when it may pass.
  std::optional<openai::ApiError> refusal(std::string_view method, std::string_view path, std::string_view authorization) const {
    if (keys_.empty() || method == "OPTIONS") return std::nullopt;  // browsers send preflights without credentials
    if ((method == "GET" || method == "HEAD") && (path == "/" || path == "/health")) return std::nullopt;
    const std::string_view scheme = "Bearer ";
    const bool bearer = authorization.size() >= scheme.size() &&
                        std::equal(scheme.begin(), scheme.end(), authorization.begin(), [](char a, char b) { return std::tolower(a) == std::tolower(b); });
    if (!bearer) {
      return openai::ApiError(401,
                              "You didn't provide an API key. This server needs one in an Authorization header using Bearer auth "
                              "(Authorization: Bearer YOUR_KEY).",
                              "invalid_request_error", std::nullopt, "invalid_api_key");
    }
    std::string_view token = authorization.substr(scheme.size());
    while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
    while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
    if (!matches(token)) return openai::ApiError(401, "Incorrect API key provided.", "invalid_request_error", std::nullopt, "invalid_api_key");
    return std::nullopt;
  }

  // The pre-routing check: a refused request is answered here and its connection closed, since
  // its body is left unread.
  httplib::Server::HandlerResponse check(const httplib::Request& req, httplib::Response& res) const {
    const auto refused = refusal(req.method, req.path, req.get_header_value("Authorization"));
    if (!refused) return httplib::Server::HandlerResponse::Unhandled;
    res.status = refused->status;
    res.set_header("WWW-Authenticate", "Bearer");
    res.set_header("Connection", "close");
    res.set_content(openai::dump(openai::error_json(*refused)), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }

 private:
  struct Key {
    std::array<unsigned char, kMaxKeyLength> bytes{};
    size_t length = 0;
  };
  void add(const std::string& key) {
    Key padded;
    padded.length = key.size();
    for (size_t i = 0; i < key.size(); ++i) padded.bytes[i] = static_cast<unsigned char>(key[i]);
    keys_.push_back(padded);
  }

  std::vector<Key> keys_;
};

}  // namespace server_auth
