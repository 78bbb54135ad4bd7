// csv.h — the one CSV writer: a header and rows of fields, written as RFC 4180 text (a field holding a
// comma, a double quote, a carriage return or a newline is quoted, its quotes doubled; every row ends in
// "\n"). Rows must have as many fields as the header; a row that does not is a programming error and
// throws. Numbers are formatted by the caller (csv_num for the common case), so each table keeps its
// own precision.
// Not here: reading CSV (phasescope writes CSV for people and plots; its own inputs are JSON).
#pragma once
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace phasescope {

struct CsvTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

// One field as CSV writes it: quoted only when it must be.
inline std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// A number with a fmt format spec (e.g. "{:.4f}"); "" for NaN or infinity (an empty cell).
inline std::string csv_num(double x, const char* spec = "{}") {
  return std::isfinite(x) ? fmt::format(fmt::runtime(spec), x) : std::string();
}

inline std::string csv_text(const CsvTable& t) {
  auto line = [](const std::vector<std::string>& fields) {
    std::string s;
    for (size_t i = 0; i < fields.size(); ++i) s += (i ? "," : "") + csv_field(fields[i]);
    return s + "\n";
  };
  std::string out = line(t.header);
  for (const auto& r : t.rows) {
    if (r.size() != t.header.size())
      throw std::logic_error("csv row of " + std::to_string(r.size()) + " fields under a header of " +
                             std::to_string(t.header.size()) + " (" + line(r) + ")");
    out += line(r);
  }
  return out;
}

}  // namespace phasescope
