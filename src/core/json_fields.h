// json_fields.h — strict JSON <-> plain-struct mapping through one table of fields per struct,
// used by every config (attention, model, task, train) so both directions share one list.
// Strict: an unknown key or a wrong type is an Error naming `where`, the field and the fix.
// Not a general serializer: scalar members (bool, integers, floating point, std::string) only.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "core/check.h"

namespace phasescope {

// The deepest nesting phasescope reads from outside (HTTP requests and replies, presets, checkpoint
// headers, journals, JSONL input). A deeper document is refused while it is parsed: every recursive
// reader after the parser (dump() in an error message, the destructor) would otherwise run out of
// stack on a request of a few hundred kilobytes ({"model": [[[[...]]]]}).
constexpr int kJsonMaxDepth = 64;

// What json_parse_bounded throws for any input it refuses (not JSON, too deep, a number out of range).
struct JsonInputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// nlohmann::json::parse with the nesting bounded by kJsonMaxDepth; throws JsonInputError and nothing
// else (a number beyond double's range, e.g. 1e400, is refused too, not an internal error).
inline nlohmann::json json_parse_bounded(const std::string& text) {
  auto bound = [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > kJsonMaxDepth)
      throw JsonInputError("nested deeper than " + std::to_string(kJsonMaxDepth) + " levels");
    return true;
  };
  try {
    return nlohmann::json::parse(text, bound);
  } catch (const nlohmann::json::exception& e) {
    throw JsonInputError(e.what());
  }
}

// Parse `text` or throw an Error naming `where`, the parser's complaint and `fix`.
inline nlohmann::json json_parse_or_fail(const std::string& text, const std::string& where,
                                         const std::string& fix) {
  try {
    return json_parse_bounded(text);
  } catch (const JsonInputError& e) {
    fail(where, std::string("not valid JSON (") + e.what() + ")", fix);
  }
}

// The closest of `names` to `key` by edit distance, or "" when none is close (for "did you mean").
inline std::string json_closest_name(const std::string& key, const std::vector<std::string>& names) {
  std::string best;
  size_t best_d = std::max<size_t>(2, key.size() / 3) + 1;  // at most a third of the word wrong
  for (const std::string& n : names) {
    std::vector<size_t> prev(n.size() + 1), cur(n.size() + 1);
    for (size_t j = 0; j <= n.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= key.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= n.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (key[i - 1] == n[j - 1] ? 0 : 1)});
      std::swap(prev, cur);
    }
    if (prev[n.size()] < best_d) best_d = prev[n.size()], best = n;
  }
  return best;
}

template <class S>
struct JsonField {
  std::function<nlohmann::json(const S&)> get;
  std::function<void(S&, const nlohmann::json&, const std::string&)> set;
};

template <class S>
using JsonTable = std::map<std::string, JsonField<S>>;

template <class S, class T>
JsonField<S> json_field(T S::*member) {
  JsonField<S> f;
  f.get = [member](const S& s) { return nlohmann::json(s.*member); };
  f.set = [member](S& s, const nlohmann::json& v, const std::string& where) {
    const char* type = "number";
    bool ok = false;
    if constexpr (std::is_same_v<T, bool>) {
      type = "boolean";
      ok = v.is_boolean();
    } else if constexpr (std::is_same_v<T, std::string>) {
      type = "string";
      ok = v.is_string();
    } else if constexpr (std::is_integral_v<T>) {
      type = "integer";
      // in T's range: a value that would wrap (2147483648 into an int) is refused, never stored
      const double lo = double(std::numeric_limits<T>::min()), hi = double(std::numeric_limits<T>::max());
      ok = v.is_number_integer() &&
           (v.is_number_unsigned() ? double(v.get<uint64_t>()) <= hi
                                   : double(v.get<int64_t>()) >= lo && double(v.get<int64_t>()) <= hi);
      if (v.is_number_integer() && !ok)
        fail(where,
             "integer " + v.dump() + " is outside [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
                 std::to_string(std::numeric_limits<T>::max()) + "]",
             "write a value in that range");
    } else {
      ok = v.is_number() && std::isfinite(v.get<double>());
    }
    if (!ok) {
      const std::string got = v.is_structured() ? std::string(v.type_name()) : v.dump();
      fail(where, std::string("expected ") + (type[0] == 'i' ? "an " : "a ") + type + ", got " + got,
           std::string(type[0] == 'i' ? "write an " : "write a ") + type);
    }
    s.*member = v.get<T>();
  };
  return f;
}

// Apply the keys of `obj` to `s`; keys in `skip` are left to the caller.
template <class S>
void json_apply(S& s, const nlohmann::json& obj, const JsonTable<S>& table, const std::string& where,
                const std::set<std::string>& skip = {}) {
  if (!obj.is_object())
    fail(where, "expected a JSON object, got " + obj.dump(), "write {\"field\": value, ...}");
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (skip.count(it.key())) continue;
    auto f = table.find(it.key());
    if (f == table.end()) {
      std::vector<std::string> names;
      for (const auto& [name, field] : table) names.push_back(name);
      const std::string near = json_closest_name(it.key(), names);
      fail(where + " field '" + it.key() + "'", "unknown field",
           near.empty() ? "remove it or check its spelling" : "did you mean '" + near + "'?");
    }
    f->second.set(s, it.value(), where + " field '" + it.key() + "'");
  }
}

template <class S>
nlohmann::json json_dump(const S& s, const JsonTable<S>& table) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, f] : table) j[name] = f.get(s);
  return j;
}

}  // namespace phasescope
