// tokenize_io.h — what `phasescope tokenize` does, as library calls: one text -> a JSON array of
// ids, and JSON lines {"text": ...} -> JSON lines {"ids": [...]}, streamed in order.
// A bad line is an Error naming "<file>:<line>" and the fix; blank lines are skipped (no output).
// Not: reading tokenizer files (tokenizer.h), or any other JSON shape.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace phasescope {

struct TokenizeOptions {
  bool add_bos = false;  // prepend the tokenizer's BOS (an Error when it has none)
};

// "[1,2,3]"
std::string ids_json(const std::vector<int>& ids);

// Encode one whole text, BOS first when asked; `where` (a file name) names the text in errors.
std::vector<int> tokenize_text(const Tokenizer& tok, const std::string& text, const TokenizeOptions& o,
                               const std::string& where = "tokenize");

// Read JSON lines from `in` (named `name` in errors), write {"ids": [...]} per line to `out`; a blank
// line gives a blank line, so output line k always answers input line k.
// Returns the number of lines written.
size_t tokenize_jsonl(const Tokenizer& tok, std::istream& in, const std::string& name, std::ostream& out,
                      const TokenizeOptions& o);

}  // namespace phasescope
