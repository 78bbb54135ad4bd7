// pretokenizer.h — the pre-tokenizer of a byte-level BPE tokenizer.json: a list of Split steps
// (PCRE2 regex with Unicode classes, or a literal string) followed by ByteLevel, cutting one
// normalized text into the pieces ("words") that BPE encodes separately.
// Pieces are byte ranges [begin, end) into the text; ByteLevel's byte->character mapping is not done
// here (BPE works on raw bytes, see bpe.h). Not supported: Whitespace, Metaspace, Digits,
// Punctuation, BertPreTokenizer — refused at load with the field named.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace phasescope {

// HF SplitDelimiterBehavior: what happens to the matched delimiters.
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct Regex;  // a compiled PCRE2 pattern (pretokenizer.cpp)

struct SplitStep {
  std::shared_ptr<const Regex> regex;  // compiled pattern (a String pattern is compiled escaped)
  std::string source;                  // the pattern as written, for describe()
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;  // the pattern finds the pieces to keep; the gaps are the delimiters
};

struct PreTokenizer {
  std::vector<SplitStep> splits;  // applied in order, each to every piece of the previous one
  bool byte_level = false;        // the final ByteLevel step (required: byte-level BPE)
  bool add_prefix_space = false;  // ByteLevel: a space before each piece that lacks one
  bool byte_level_regex = false;  // ByteLevel use_regex: one more Split with the GPT-2 pattern
};

struct Piece {
  size_t begin, end;  // byte range into the pre-tokenized text
};

// Parse `"pre_tokenizer"` of tokenizer.json; `where` names file and field for errors.
PreTokenizer pretokenizer_from_json(const nlohmann::json& j, const std::string& where);

// Cut `text` (valid UTF-8) into pieces of `buffer`, which receives the text as pre-tokenized (the
// same bytes, or with ByteLevel add_prefix_space a space inserted before pieces that lack one).
// `out` is cleared first; pieces are in text order and never empty.
void pretokenize(const PreTokenizer& p, std::string_view text, std::string& buffer, std::vector<Piece>& out);

std::string pretokenizer_describe(const PreTokenizer& p);

// The pattern as PCRE2 gets it: `\s` / `\S` spelled out as Oniguruma's (HF's) White_Space set.
std::string onig_spaces(const std::string& pattern);

}  // namespace phasescope
