// json_fields.h — strict JSON <-> plain-struct mapping through one table of fields per struct,
// used by every config (attention, model, task, train) so both directions share one list.
// Strict: an unknown key or a wrong type is an Error naming `where`, the field and the fix.
// Not a general serializer: scalar members (bool, integers, floating point, std::string) only.
#pragma once
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <type_traits>

#include "core/check.h"

namespace phasescope {

// Parse `text` or throw an Error naming `where`, the parser's complaint and `fix`.
inline nlohmann::json json_parse_or_fail(const std::string& text, const std::string& where,
                                         const std::string& fix) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail(where, std::string("not valid JSON (") + e.what() + ")", fix);
  }
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
      ok = v.is_number_integer() && (!std::is_unsigned_v<T> || v.get<int64_t>() >= 0);
    } else {
      ok = v.is_number();
    }
    if (!ok)
      fail(where, std::string("expected ") + type + ", got " + v.dump(), std::string("write a ") + type);
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
    if (f == table.end())
      fail(where + " field '" + it.key() + "'", "unknown field", "remove it or check its spelling");
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
