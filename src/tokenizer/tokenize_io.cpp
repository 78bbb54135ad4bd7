// tokenize_io.cpp — ids as JSON, and the JSON-lines loop of `phasescope tokenize --jsonl`.
#include "tokenizer/tokenize_io.h"

#include <fmt/format.h>

#include <istream>
#include <nlohmann/json.hpp>
#include <ostream>

#include "core/check.h"
#include "core/json_fields.h"
#include "tokenizer/text.h"

namespace phasescope {

std::string ids_json(const std::vector<int>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

std::vector<int> tokenize_text(const Tokenizer& tok, const std::string& text, const TokenizeOptions& o,
                               const std::string& where) {
  const size_t bad = utf8_invalid_at(text);
  if (bad != std::string::npos)
    fail(where, fmt::format("the text is not valid UTF-8 (byte {} of {})", bad, text.size()),
         "convert it to UTF-8 first");
  std::vector<int> ids;
  if (o.add_bos) {
    if (tok.bos_id() < 0)
      fail(where + " (--add-bos)", "this tokenizer has no BOS token (" + tok.describe() + ")",
           "leave out --add-bos");
    ids.push_back(tok.bos_id());
  }
  const std::vector<int> body = tok.encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

size_t tokenize_jsonl(const Tokenizer& tok, std::istream& in, const std::string& name, std::ostream& out,
                      const TokenizeOptions& o) {
  const std::string fix = "write one JSON object per line with a \"text\" string, e.g. {\"text\": \"Hello\"}";
  std::string line;
  size_t lineno = 0, written = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF files
    if (line.find_first_not_of(" \t") == std::string::npos) {   // blank in, blank out: lines stay aligned
      out << "\n";
      continue;
    }
    const std::string where = fmt::format("{}:{}", name, lineno);

    // the record
    nlohmann::json j;
    try {
      j = json_parse_bounded(line);
    } catch (const JsonInputError& e) {
      fail(where, std::string("not valid JSON (") + e.what() + ")", fix);
    }
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      fail(where + " field 'text'", "missing or not a string", fix);

    // its ids
    out << "{\"ids\":" << ids_json(tokenize_text(tok, j["text"].get<std::string>(), o, where)) << "}\n";
    ++written;
  }
  return written;
}

}  // namespace phasescope
