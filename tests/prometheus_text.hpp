#pragma once
// A checker of Prometheus's text exposition format (version 0.0.4), line by line against the
// format's grammar and rules, as Prometheus's own parser reads it: HELP and TYPE lines, samples
// with escaped label values and Go float values, a metric's lines in one group with its TYPE
// first, no sample twice, histograms' buckets ascending by `le`, cumulative, ending at +Inf and
// equal to _count. Throws std::runtime_error naming the line; returns the samples for the tests.
#include <cctype>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace minimind::testing::prometheus {

using Labels = std::map<std::string, std::string>;

struct Sample {
  std::string name;
  Labels labels;
  double value;
};

struct Exposition {
  std::map<std::string, std::string> types;  // family name -> counter, gauge, histogram, summary, untyped
  std::vector<Sample> samples;

  // The value of the one sample with this name and labels; nullopt when there is none.
  std::optional<double> value(const std::string& name, const Labels& labels = {}) const {
    for (const auto& s : samples)
      if (s.name == name && s.labels == labels) return s.value;
    return std::nullopt;
  }
  // A histogram's cumulative buckets (le, count) in order, its sum and count.
  struct Histogram {
    std::vector<std::pair<double, double>> buckets;
    double sum = 0, count = 0;
  };
  Histogram histogram(const std::string& name) const {
    Histogram h;
    for (const auto& s : samples) {
      if (s.name == name + "_bucket") h.buckets.push_back({parse_float(s.labels.at("le")), s.value});
      else if (s.name == name + "_sum") h.sum = s.value;
      else if (s.name == name + "_count") h.count = s.value;
    }
    return h;
  }

  // Go's strconv.ParseFloat syntax as Prometheus takes it (decimal, exponent, Inf, NaN); throws
  // on anything else.
  static double parse_float(const std::string& text) {
    static const std::regex decimal(R"([+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?)");
    static const std::regex special(R"([+-]?([iI][nN][fF]([iI][nN][iI][tT][yY])?)|[nN][aA][nN])");
    if (std::regex_match(text, special)) {
      if (std::tolower(static_cast<unsigned char>(text[0])) == 'n') return NAN;
      return text[0] == '-' ? -INFINITY : INFINITY;
    }
    if (!std::regex_match(text, decimal)) throw std::runtime_error("not a float: \"" + text + "\"");
    return std::stod(text);
  }
};

namespace detail {

inline bool is_blank(char c) { return c == ' ' || c == '\t'; }

inline bool metric_name(std::string_view s) {
  static const std::regex name("[a-zA-Z_:][a-zA-Z0-9_:]*");
  return std::regex_match(s.begin(), s.end(), name);
}

// The family a sample belongs to: a histogram's x_bucket, x_sum and x_count are x's (a summary's
// x_sum and x_count too); any other sample is its own name's.
inline std::string family_of(const std::string& sample, const std::map<std::string, std::string>& types) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string_view s = suffix;
    if (sample.size() > s.size() && sample.compare(sample.size() - s.size(), s.size(), s) == 0) {
      const std::string base = sample.substr(0, sample.size() - s.size());
      const auto it = types.find(base);
      if (it != types.end() && (it->second == "histogram" || (it->second == "summary" && s != "_bucket"))) return base;
    }
  }
  return sample;
}

}  // namespace detail

inline Exposition parse(const std::string& text) {
  Exposition out;
  if (!text.empty() && text.back() != '\n') throw std::runtime_error("the last line does not end with a line feed");
  std::set<std::string> helped, finished_families;
  std::set<std::pair<std::string, Labels>> seen;
  std::string current;  // the family whose group is open
  size_t line_number = 0;
  size_t start = 0;
  auto fail = [&](const std::string& why) { throw std::runtime_error("line " + std::to_string(line_number) + ": " + why); };
  // A family's group starts: every earlier group is closed for good.
  auto enter = [&](const std::string& family) {
    if (family == current) return;
    if (finished_families.contains(family)) fail("the lines of " + family + " are not in one group");
    if (!current.empty()) finished_families.insert(current);
    current = family;
  };
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    size_t i = 0;
    while (i < line.size() && detail::is_blank(line[i])) ++i;
    while (!line.empty() && detail::is_blank(line.back())) line.pop_back();
    if (i >= line.size()) continue;  // empty lines are ignored
    auto token = [&]() {
      while (i < line.size() && detail::is_blank(line[i])) ++i;
      const size_t from = i;
      while (i < line.size() && !detail::is_blank(line[i])) ++i;
      return line.substr(from, i - from);
    };
    if (line[i] == '#') {
      ++i;
      const std::string keyword = token();
      if (keyword != "HELP" && keyword != "TYPE") continue;  // a comment
      const std::string name = token();
      if (!detail::metric_name(name)) fail("bad metric name \"" + name + "\" in # " + keyword);
      if (keyword == "HELP") {
        if (!helped.insert(name).second) fail("a second HELP for " + name);
        while (i < line.size() && detail::is_blank(line[i])) ++i;
        for (size_t k = i; k < line.size(); ++k) {  // the docstring's escapes: \\ and \n only
          if (line[k] != '\\') continue;
          if (k + 1 >= line.size() || (line[k + 1] != '\\' && line[k + 1] != 'n')) fail("bad escape in HELP");
          ++k;
        }
      } else {
        const std::string type = token();
        if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" && type != "untyped") fail("bad type \"" + type + "\"");
        if (!token().empty()) fail("text after the TYPE");
        if (out.types.contains(name)) fail("a second TYPE for " + name);
        for (const auto& s : out.samples)
          if (detail::family_of(s.name, {{name, type}}) == name) fail("TYPE of " + name + " after its samples");
        out.types[name] = type;
      }
      enter(name);
      continue;
    }
    // metric_name [ "{" label_name "=" '"' label_value '"' { "," ... } [ "," ] "}" ] value [ timestamp ]
    Sample sample;
    const size_t name_from = i;
    while (i < line.size() && !detail::is_blank(line[i]) && line[i] != '{') ++i;
    sample.name = line.substr(name_from, i - name_from);
    if (!detail::metric_name(sample.name)) fail("bad metric name \"" + sample.name + "\"");
    while (i < line.size() && detail::is_blank(line[i])) ++i;
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (true) {
        while (i < line.size() && detail::is_blank(line[i])) ++i;
        if (i < line.size() && line[i] == '}') break;
        const size_t label_from = i;
        while (i < line.size() && (std::isalnum(static_cast<unsigned char>(line[i])) || line[i] == '_')) ++i;
        const std::string label = line.substr(label_from, i - label_from);
        if (label.empty() || std::isdigit(static_cast<unsigned char>(label[0]))) fail("bad label name");
        if (label.starts_with("__")) fail("label name " + label + " is reserved");
        while (i < line.size() && detail::is_blank(line[i])) ++i;
        if (i >= line.size() || line[i] != '=') fail("no = after label " + label);
        ++i;
        while (i < line.size() && detail::is_blank(line[i])) ++i;
        if (i >= line.size() || line[i] != '"') fail("label value of " + label + " not quoted");
        ++i;
        std::string value;
        while (true) {
          if (i >= line.size()) fail("unterminated label value of " + label);
          const char c = line[i++];
          if (c == '"') break;
          if (c != '\\') {
            value += c;
            continue;
          }
          if (i >= line.size()) fail("unterminated escape in label " + label);
          const char e = line[i++];
          if (e == '\\') value += '\\';
          else if (e == '"') value += '"';
          else if (e == 'n') value += '\n';
          else fail("bad escape \\" + std::string(1, e) + " in label " + label);
        }
        if (!sample.labels.emplace(label, value).second) fail("label " + label + " twice");
        while (i < line.size() && detail::is_blank(line[i])) ++i;
        if (i < line.size() && line[i] == ',') {
          ++i;
          continue;
        }
        if (i >= line.size() || line[i] != '}') fail("expected , or } after label " + label);
        break;
      }
      ++i;  // the }
    }
    const std::string value = token();
    if (value.empty()) fail("no value");
    try {
      sample.value = Exposition::parse_float(value);
    } catch (const std::runtime_error& e) {
      fail(e.what());
    }
    const std::string timestamp = token();
    if (!timestamp.empty() && !std::regex_match(timestamp, std::regex("-?[0-9]+"))) fail("bad timestamp \"" + timestamp + "\"");
    if (!token().empty()) fail("text after the value");
    const std::string family = detail::family_of(sample.name, out.types);
    enter(family);
    if (!seen.insert({sample.name, sample.labels}).second) fail("a second sample " + sample.name + " with the same labels");
    const auto type = out.types.find(family);
    if (type != out.types.end() && type->second == "histogram" && sample.name == family) fail("a histogram's sample named as its family");
    if (type != out.types.end() && type->second == "counter" && !(sample.value >= 0)) fail("a counter below 0");
    if (sample.name.ends_with("_bucket") && family != sample.name && !sample.labels.contains("le")) fail("a bucket without le");
    out.samples.push_back(std::move(sample));
  }
  // Each histogram: per label set besides le, buckets ascending by le and cumulative, the last
  // +Inf, equal to _count; _sum and _count present.
  for (const auto& [family, type] : out.types) {
    if (type != "histogram") continue;
    std::map<Labels, std::vector<std::pair<double, double>>> buckets;
    for (const auto& s : out.samples) {
      if (s.name != family + "_bucket") continue;
      Labels rest = s.labels;
      const double le = Exposition::parse_float(rest.at("le"));
      rest.erase("le");
      buckets[rest].push_back({le, s.value});
    }
    if (buckets.empty()) throw std::runtime_error(family + ": a histogram without buckets");
    for (const auto& [labels, list] : buckets) {
      for (size_t k = 1; k < list.size(); ++k) {
        if (!(list[k].first > list[k - 1].first)) throw std::runtime_error(family + ": buckets not in increasing order of le");
        if (list[k].second < list[k - 1].second) throw std::runtime_error(family + ": buckets not cumulative");
      }
      if (!std::isinf(list.back().first)) throw std::runtime_error(family + ": no +Inf bucket");
      const auto count = out.value(family + "_count", labels);
      if (!count || !out.value(family + "_sum", labels)) throw std::runtime_error(family + ": _sum or _count missing");
      if (*count != list.back().second) throw std::runtime_error(family + ": _count differs from the +Inf bucket");
    }
  }
  return out;
}

}  // namespace minimind::testing::prometheus
