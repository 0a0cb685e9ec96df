#pragma once
// Reading tokenizer.json / tokenizer_config.json fields so that every complaint names the file
// and the field (e.g. "…/tokenizer.json: model.merges[12]: …"): the user cannot see which part of
// a 400 kB JSON file we disliked otherwise.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "minimind/error.hpp"

namespace minimind::json_fields {

using Json = nlohmann::json;

// Where a field lives: the file and the dotted path inside it.
struct Location {
  std::string file;
  std::string field;

  Location operator/(std::string_view key) const {
    return {file, field.empty() ? std::string(key) : field + "." + std::string(key)};
  }
  Location operator[](std::size_t index) const {
    return {file, field + "[" + std::to_string(index) + "]"};
  }
  [[noreturn]] void fail(std::string_view problem) const {
    throw Error(file + ": " + (field.empty() ? std::string() : field + ": ") + std::string(problem));
  }
};

inline std::string in_quotes(std::string_view text) { return "'" + std::string(text) + "'"; }

// The member `key` of `object`, or nullptr when absent or JSON null.
inline const Json* member(const Json& object, std::string_view key) {
  const auto found = object.find(key);
  if (found == object.end() || found->is_null()) return nullptr;
  return &*found;
}

inline const Json& require_object(const Json& value, const Location& where) {
  if (!value.is_object()) where.fail("expected a JSON object, found " + std::string(value.type_name()));
  return value;
}

inline const Json& require_array(const Json& value, const Location& where) {
  if (!value.is_array()) where.fail("expected a JSON array, found " + std::string(value.type_name()));
  return value;
}

inline const Json& require_member(const Json& object, std::string_view key, const Location& where) {
  const Json* value = member(object, key);
  if (!value) (where / key).fail("missing");
  return *value;
}

inline const std::string& as_string(const Json& value, const Location& where) {
  if (!value.is_string()) where.fail("expected a string, found " + std::string(value.type_name()));
  return value.get_ref<const std::string&>();
}

inline bool as_bool(const Json& value, const Location& where) {
  if (!value.is_boolean()) where.fail("expected true or false, found " + std::string(value.type_name()));
  return value.get<bool>();
}

inline std::int32_t as_token_id(const Json& value, const Location& where) {
  if (!value.is_number_integer() || value.get<std::int64_t>() < 0 ||
      value.get<std::int64_t>() > INT32_MAX) {
    where.fail("expected a token id (an integer from 0 to 2^31-1), found " + value.dump());
  }
  return static_cast<std::int32_t>(value.get<std::int64_t>());
}

inline bool bool_or(const Json& object, std::string_view key, bool fallback, const Location& where) {
  const Json* value = member(object, key);
  return value ? as_bool(*value, where / key) : fallback;
}

inline std::optional<std::string> optional_string(const Json& object, std::string_view key,
                                                  const Location& where) {
  const Json* value = member(object, key);
  if (!value) return std::nullopt;
  return as_string(*value, where / key);
}

// The "type" of a component such as pre_tokenizer, or nullopt when the component is null.
inline std::optional<std::string> component_type(const Json& root, std::string_view key,
                                                 const Location& where) {
  const Json* component = member(root, key);
  if (!component) return std::nullopt;
  require_object(*component, where / key);
  return as_string(require_member(*component, "type", where / key), where / key / "type");
}

}  // namespace minimind::json_fields
