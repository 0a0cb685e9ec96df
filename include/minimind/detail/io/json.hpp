#pragma once
// Thin use of nlohmann/json: parse errors and wrong field types become minimind::Error naming the
// file and the field, so a bad config.json says which key is wrong.
#include "minimind/error.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

namespace minimind::io {

using Json = nlohmann::json;

// JsonT: Json, or nlohmann::ordered_json where the key order must survive (tools put in a prompt).
template <class JsonT = Json>
JsonT parse_json(std::string_view text, const std::string& source) {
  try {
    return JsonT::parse(text.begin(), text.end());
  } catch (const typename JsonT::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    throw Error(source + ": malformed JSON: " + e.what());
  }
}

template <class JsonT = Json>
JsonT read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse_json<JsonT>(buffer.str(), path.string());
}

// The value of `key` in object `object` as T, or nullopt when absent or null. Object: Json, or
// nlohmann::ordered_json where key order matters (the server renders request JSON as given).
template <class T, class Object = Json>
std::optional<T> optional_field(const Object& object, const std::string& key, const std::string& source) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  bool type_ok = true;
  if constexpr (std::is_same_v<T, bool>) {
    type_ok = it->is_boolean();
  } else if constexpr (std::is_integral_v<T>) {
    type_ok = it->is_number_integer() || (it->is_number_float() && std::trunc(it->template get<double>()) == it->template get<double>());
    // Converting a number T cannot hold is undefined (from a float) or wraps (from an integer).
    const bool fits = it->is_number_unsigned()  ? std::in_range<T>(it->template get<uint64_t>())
                      : it->is_number_integer() ? std::in_range<T>(it->template get<int64_t>())
                      : !type_ok || (it->template get<double>() >= static_cast<double>(std::numeric_limits<T>::min()) &&
                                     it->template get<double>() < std::ldexp(1.0, std::numeric_limits<T>::digits));
    if (!fits) throw Error(source + ": field \"" + key + "\" is out of range (" + it->dump() + ")");
  } else if constexpr (std::is_floating_point_v<T>) {
    type_ok = it->is_number();
  } else if constexpr (std::is_same_v<T, std::string>) {
    type_ok = it->is_string();
  }
  if (!type_ok) throw Error(source + ": field \"" + key + "\" has the wrong type (" + it->type_name() + ")");
  try {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (it->is_number_float()) return static_cast<T>(it->template get<double>());
    }
    return it->template get<T>();
  } catch (const Json::exception& e) {
    throw Error(source + ": field \"" + key + "\": " + e.what());
  }
}

}  // namespace minimind::io
