// align.h — phase alignment: place the tokens that matter on a model's strong phases by inserting the
// fewest neutral tokens, or repeat them at positions whose phases cover the strongest ones. The one
// implementation behind `phasescope align`, the evaluator's --align option and `serve --align-spans`.
// Positions: a prompt token i sits at absolute position grid.prompt_offset + i and has phase
// card_phase(grid, prompt_offset + i) (eval/card.h). A span is [begin, end) in prompt token indices; its
// anchor is the token (begin + anchor) whose phase is steered.
//   align   before each span (left to right) insert the fewest neutral tokens that put its anchor on a
//           target phase (the card's strongest). Greedy is minimal: each span's anchor needs a shift
//           d_i >= d_{i-1} in a periodic set, and the smallest such d_i leaves every later choice open,
//           so the total (= d of the last span) is the least possible.
//   repeat  leave each span where it is and insert K - 1 copies right after it, each copy's anchor on
//           the next strongest phase not yet covered by an earlier copy of that span (the original's
//           phase counts as covered): K positions whose phases cover the strongest ones.
//   both    align the original to the strongest phase, then repeat as above.
// Every output anchor is checked to sit on its phase; nothing is ever returned unaligned (Error instead).
// Not here: tokenizers or reading prompts (the align command), the card (eval/card.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "eval/card.h"

namespace phasescope {

enum class AlignMode { Align, Repeat, Both };
std::string align_mode_name(AlignMode m);                                       // "align" | "repeat" | "both"
AlignMode align_mode_parse(const std::string& name, const std::string& where);  // throws Error

struct AlignSpan {
  int64_t begin = 0, end = 0;  // [begin, end) prompt token indices
  int64_t anchor = 0;          // offset in the span of the token whose phase is steered (0 = the first)
};

struct AlignOptions {
  AlignMode mode = AlignMode::Align;
  int copies = 2;                // repeat / both: positions per span, the original included (>= 2)
  std::vector<int> phase_order;  // target phases, strongest first (a card's phase_order; not empty)

  std::vector<int> neutral;  // tokens inserted as padding, used in turn (not empty)
  int64_t max_added = -1;    // most tokens the whole prompt may gain (-1 = no limit)
  int64_t context = 0;       // the model's context: the aligned prompt plus offset must fit (0 = none)
};

struct AlignedPrompt {
  std::vector<int> tokens;       // the aligned prompt
  std::vector<AlignSpan> spans;  // each input span's original copy, at its new place
  std::vector<std::vector<int64_t>>
      anchors;                           // per span: every copy's anchor index in tokens (original first)
  std::vector<std::vector<int>> phases;  // per span: the phase of each of those anchors
  int64_t added = 0;                     // tokens.size() - input size
};

// Align one prompt. Throws Error (naming the span, the budget or the context, and the fix) when spans are
// out of range, overlap or are unsorted, when the budget or the context would be exceeded, or when the
// options are invalid.
AlignedPrompt align_prompt(const std::vector<int>& tokens, const std::vector<AlignSpan>& spans,
                           const CardGrid& grid, const AlignOptions& opt);

// The most tokens align_prompt can add per span for these options (period - 1 for align; for repeat,
// (K - 1) x (span length + period - 1), plus period - 1 for both): what an equal-length evaluation must
// take out of the filler.
int64_t align_max_added(const CardGrid& grid, const AlignOptions& opt, int64_t span_len);

}  // namespace phasescope
