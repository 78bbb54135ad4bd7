// json_fields.h — the one way phasescope reads a JSON field: json_get / json_get_or for a single typed
// field, and strict JSON <-> plain-struct mapping through one table of fields per struct (every config:
// attention, model, task, train), so both directions share one list. One type test (json_is) decides
// what counts as a bool, an integer, a number, a string or a list of integers everywhere.
// Strict: a missing required field, an unknown key or a wrong type is an Error naming `where`, the
// field and the fix. Not a general serializer: scalar members and lists of integers only.
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

// ---------------------------------------------------------------------------------------- single fields
// T is bool, an integer type, double, std::string or std::vector<int>.

// The one type test: does v hold a T? Integers are any JSON integer (json_as checks T's range); numbers
// are finite (the parser already refuses 1e400).
template <class T>
bool json_is(const nlohmann::json& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v.is_boolean();
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v.is_string();
  } else if constexpr (std::is_integral_v<T>) {
    return v.is_number_integer();
  } else if constexpr (std::is_floating_point_v<T>) {
    return v.is_number() && std::isfinite(v.get<double>());
  } else {
    static_assert(std::is_same_v<T, std::vector<int>>, "json_is: unsupported type");
    if (!v.is_array()) return false;
    for (const nlohmann::json& e : v)
      if (!e.is_number_integer()) return false;
    return true;
  }
}

// What a T is called in messages: "a boolean", "an integer", "a number", "a string", "a list of integers".
template <class T>
const char* json_kind() {
  if constexpr (std::is_same_v<T, bool>) return "a boolean";
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  if constexpr (std::is_integral_v<T>) return "an integer";
  if constexpr (std::is_floating_point_v<T>) return "a number";
  return "a list of integers";
}

// An integer value that fits in T (an int field refuses 2147483648 instead of wrapping it).
template <class T>
bool json_fits(const nlohmann::json& v) {
  const double lo = double(std::numeric_limits<T>::min()), hi = double(std::numeric_limits<T>::max());
  return v.is_number_unsigned() ? double(v.get<uint64_t>()) <= hi
                                : double(v.get<int64_t>()) >= lo && double(v.get<int64_t>()) <= hi;
}

// v holds a T that fits: the test json_as passes without building any message (readers of long files
// call it once per field).
template <class T>
bool json_ok(const nlohmann::json& v) {
  if (!json_is<T>(v)) return false;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return json_fits<T>(v);
  if constexpr (std::is_same_v<T, std::vector<int>>)
    for (const nlohmann::json& e : v)
      if (!json_fits<int>(e)) return false;
  return true;
}

// v as a T, or an Error "<where>: expected an integer, got "ten". Fix: <fix>" (`where` names the file
// and the field). Integers out of T's range are refused with the range.
template <class T>
T json_as(const nlohmann::json& v, const std::string& where, const std::string& fix) {
  if (json_ok<T>(v)) return v.get<T>();
  if (!json_is<T>(v)) {
    const std::string got = v.is_structured() ? std::string(v.type_name()) : v.dump();
    fail(where, std::string("expected ") + json_kind<T>() + ", got " + got, fix);
  }
  // a T, but an integer in it does not fit
  using I = std::conditional_t<std::is_same_v<T, std::vector<int>>, int, T>;
  std::string what = "integer " + v.dump();
  if constexpr (std::is_same_v<T, std::vector<int>>) what = "an integer in " + v.dump();
  if constexpr (std::is_integral_v<I> && !std::is_same_v<I, bool>)
    what += " is outside [" + std::to_string(std::numeric_limits<I>::min()) + ", " +
            std::to_string(std::numeric_limits<I>::max()) + "]";
  fail(where, what, "write a value in that range");
}

// A number that may be written null: how results.json and journals store a value that was not finite
// (an empty residue's accuracy, the logprob of a failed sample). null -> NaN.
inline double json_number_or_nan(const nlohmann::json& v, const std::string& where, const std::string& fix) {
  return v.is_null() ? std::nan("") : json_as<double>(v, where, fix);
}

// The writer's side of json_number_or_nan: a value that is not finite is written null.
inline nlohmann::json json_number_or_null(double x) {
  return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr);
}

// obj has `key` with a value other than null.
// The first place two documents differ, as "path: A <a>, B <b>" with `a_name` and `b_name` for A and B;
// "" when they are equal (a resumed checkpoint against its run, one rank's run against rank 0's).
inline std::string json_first_difference(const nlohmann::json& a, const nlohmann::json& b,
                                         const std::string& a_name, const std::string& b_name) {
  const nlohmann::json patch = nlohmann::json::diff(a, b);
  if (patch.empty()) return "";
  const std::string path = patch[0].value("path", std::string("?"));
  const nlohmann::json::json_pointer ptr(path);
  const std::string was = a.contains(ptr) ? a.at(ptr).dump() : "(absent)";
  const std::string is = b.contains(ptr) ? b.at(ptr).dump() : "(absent)";
  return path + ": " + a_name + " " + was + ", " + b_name + " " + is;
}

inline bool json_present(const nlohmann::json& obj, const std::string& key) {
  return obj.is_object() && obj.contains(key) && !obj.at(key).is_null();
}

// "<where> field '<key>'": how every reader names a field in its errors.
inline std::string json_where(const std::string& where, const std::string& key) {
  return where + " field '" + key + "'";
}

// The value of a required field (null included); missing -> an Error naming `where`, the field and `fix`.
inline const nlohmann::json& json_at(const nlohmann::json& obj, const std::string& key,
                                     const std::string& where, const std::string& fix) {
  if (!obj.is_object() || !obj.contains(key)) fail(json_where(where, key), "is missing", fix);
  return obj.at(key);
}

// A required field as a T: missing or of the wrong type -> an Error naming `where`, the field and `fix`.
template <class T>
T json_get(const nlohmann::json& obj, const std::string& key, const std::string& where,
           const std::string& fix) {
  const nlohmann::json& v = json_at(obj, key, where, fix);
  return json_ok<T>(v) ? v.get<T>() : json_as<T>(v, json_where(where, key), fix);
}

// An optional field as a T: absent or null -> `dflt`; of the wrong type -> an Error as json_get's.
template <class T>
T json_get_or(const nlohmann::json& obj, const std::string& key, const T& dflt, const std::string& where,
              const std::string& fix) {
  if (!json_present(obj, key)) return dflt;
  const nlohmann::json& v = obj.at(key);
  return json_ok<T>(v) ? v.get<T>() : json_as<T>(v, json_where(where, key), fix);
}

// ---------------------------------------------------------------------------------------- struct tables

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
    s.*member = json_as<T>(v, where, std::string("write ") + json_kind<T>());
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
