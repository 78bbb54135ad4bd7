// align_io.h — `phasescope align`'s prompts file: JSONL in, JSONL out, one prompt per line.
// Input, either form (any other field is refused; "id" is passed through):
//   {"id": ..., "ids": [token ids], "spans": [[begin, end], [begin, end, anchor], ...]}
//       spans are [begin, end) token indices, anchor an offset in the span (default 0)
//   {"id": ..., "segments": [{"text": "...", "mark": true, "anchor": 0}, {"text": "..."}, ...]}
//       needs a tokenizer: each segment is encoded on its own and the ids concatenated; a marked
//       segment is a span, its anchor a token offset in it
// Output: {"id", "ids", "text" (with a tokenizer), "added", "spans", "anchors", "phases", "neutral",
// "roundtrip"}: spans are the originals' new [begin, end), anchors and phases every copy's (original
// first), neutral the token used for padding, roundtrip whether encode(decode(ids)) gives ids back
// (always true when it is reported: a prompt whose padding does not survive the round trip with any
// neutral candidate is an Error, never an unaligned or silently different prompt).
// Not here: the alignment (align.h).
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "align/align.h"
#include "tokenizer/tokenizer.h"

namespace phasescope {

struct AlignInput {
  nlohmann::json id;  // passed through (null when absent)
  std::vector<int> ids;
  std::vector<AlignSpan> spans;
};

// One input line (`where` names the file and line). Throws Error.
AlignInput align_input_parse(const nlohmann::json& j, const Tokenizer* tok, const std::string& where);

struct AlignJobOptions {
  AlignOptions align;              // mode, copies, max_added, context; phase_order from the card
  std::vector<int> neutral;        // candidates, tried in order (--neutral, else the card's, else the
                                   // tokenizer's single tokens of "\n", " ", "\t", ".", ",", ";", "|",
                                   // " |", " .": runs of one whitespace token often merge under BPE)
  const Tokenizer* tok = nullptr;  // for text input, the text output and the round trip
};

struct AlignLineResult {
  AlignedPrompt prompt;
  int neutral = -1;        // the candidate used
  bool roundtrip = false;  // checked with the tokenizer (false: no tokenizer to check with)
};

// The neutral candidates: explicit ones, else the card's, else the tokenizer's (AlignJobOptions::neutral).
// Throws Error when none is known.
std::vector<int> align_neutral_candidates(const std::vector<int>& given, const PhaseCard& card,
                                          const Tokenizer* tok);

// Align one prompt with the first neutral candidate whose padding survives the tokenizer round trip (any
// candidate when there is no tokenizer). Throws Error naming `where`.
AlignLineResult align_line(const AlignInput& in, const PhaseCard& card, const AlignJobOptions& opt,
                           const std::string& where);

nlohmann::json align_output_json(const AlignInput& in, const AlignLineResult& r, const Tokenizer* tok);

struct AlignFileSummary {
  int64_t prompts = 0, spans = 0, added = 0;
};

// Read in_path (JSONL), align every line, write out_path atomically. Throws Error at the first bad line.
AlignFileSummary align_file(const std::string& in_path, const std::string& out_path, const PhaseCard& card,
                            const AlignJobOptions& opt);

}  // namespace phasescope
