// align.cpp — align_prompt: copy the prompt left to right, inserting neutral tokens before each span (align)
// and copies of the span after it (repeat), then check every anchor's phase.
#include "align/align.h"

#include <algorithm>

#include "core/check.h"

namespace phasescope {

std::string align_mode_name(AlignMode m) {
  switch (m) {
    case AlignMode::Align:
      return "align";
    case AlignMode::Repeat:
      return "repeat";
    case AlignMode::Both:
      return "both";
  }
  return "align";
}

AlignMode align_mode_parse(const std::string& name, const std::string& where) {
  if (name == "align") return AlignMode::Align;
  if (name == "repeat") return AlignMode::Repeat;
  if (name == "both") return AlignMode::Both;
  fail(where, "unknown mode '" + name + "'", "use align, repeat or both");
}

int64_t align_max_added(const CardGrid& grid, const AlignOptions& opt, int64_t span_len) {
  const int64_t pad = grid.period - 1;
  const int64_t repeat = int64_t(opt.copies - 1) * (span_len + pad);
  switch (opt.mode) {
    case AlignMode::Align:
      return pad;
    case AlignMode::Repeat:
      return repeat;
    case AlignMode::Both:
      return pad + repeat;
  }
  return pad;
}

namespace {

struct Builder {
  const CardGrid& grid;
  const AlignOptions& opt;
  std::vector<int> out;
  size_t next_neutral = 0;

  int phase_at(int64_t index) const { return card_phase(grid, grid.prompt_offset + index); }
  // the fewest neutral tokens k >= 0 that put a token placed at out.size() + k + anchor on `phase`
  int64_t pad_for(int64_t anchor, int phase) const {
    const int now = phase_at(int64_t(out.size()) + anchor);
    return (phase - now + grid.period) % grid.period;
  }
  void pad(int64_t k) {
    for (int64_t i = 0; i < k; ++i) out.push_back(opt.neutral[next_neutral++ % opt.neutral.size()]);
  }
};

void check_inputs(const std::vector<int>& tokens, const std::vector<AlignSpan>& spans, const CardGrid& grid,
                  const AlignOptions& opt, const std::vector<int>& order) {
  if (grid.period < 1) fail("card grid.period", "must be >= 1", "use the card's period (the model's stride)");
  if (opt.neutral.empty())
    fail("align neutral tokens", "none given",
         "pass --neutral ID (a whitespace or newline token of the tokenizer) or a card with neutral_tokens");
  if (order.empty()) fail("align target phases", "none given", "use a card with folded phases");
  for (int p : order)
    if (p < 0 || p >= grid.period)
      fail("align target phases", "phase " + std::to_string(p) + " is outside [0, period)",
           "use phases of the card's grid");
  if (opt.mode != AlignMode::Align && (opt.copies < 2 || opt.copies > grid.period))
    fail(
        "align --copies",
        "is " + std::to_string(opt.copies) + "; must be in [2, period = " + std::to_string(grid.period) + "]",
        "K positions cover K distinct phases, the original included");
  int64_t prev_end = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    const AlignSpan& s = spans[i];
    const std::string where =
        "span " + std::to_string(i) + " [" + std::to_string(s.begin) + ", " + std::to_string(s.end) + ")";
    if (s.begin < 0 || s.end > int64_t(tokens.size()) || s.begin >= s.end)
      fail(where, "is empty or outside the prompt's " + std::to_string(tokens.size()) + " tokens",
           "mark spans as [begin, end) token indices with begin < end <= prompt length");
    if (s.begin < prev_end)
      fail(where, "overlaps or precedes the span before it", "list spans in order, without overlaps");
    if (s.anchor < 0 || s.anchor >= s.end - s.begin)
      fail(where, "has anchor " + std::to_string(s.anchor) + " outside the span",
           "the anchor is an offset in [0, end - begin)");
    prev_end = s.end;
  }
}

}  // namespace

AlignedPrompt align_prompt(const std::vector<int>& tokens, const std::vector<AlignSpan>& spans,
                           const CardGrid& grid, const AlignOptions& opt) {
  const std::vector<int>& order = opt.phase_order;
  check_inputs(tokens, spans, grid, opt, order);
  Builder b{grid, opt, {}, 0};
  AlignedPrompt res;
  int64_t cursor = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    const AlignSpan& s = spans[i];
    b.out.insert(b.out.end(), tokens.begin() + cursor, tokens.begin() + s.begin);
    if (opt.mode != AlignMode::Repeat) b.pad(b.pad_for(s.anchor, order.front()));
    const int64_t len = s.end - s.begin;
    std::vector<int64_t> anchors;
    std::vector<int> covered;
    AlignSpan placed{int64_t(b.out.size()), int64_t(b.out.size()) + len, s.anchor};
    b.out.insert(b.out.end(), tokens.begin() + s.begin, tokens.begin() + s.end);
    anchors.push_back(placed.begin + s.anchor);
    covered.push_back(b.phase_at(anchors.back()));
    if (opt.mode != AlignMode::Align) {
      for (int copy = 1; copy < opt.copies; ++copy) {
        auto next = std::find_if(order.begin(), order.end(), [&](int p) {
          return std::find(covered.begin(), covered.end(), p) == covered.end();
        });
        PS_ASSERT(next != order.end(), "align: copies <= period leaves a phase to cover");
        b.pad(b.pad_for(s.anchor, *next));
        anchors.push_back(int64_t(b.out.size()) + s.anchor);
        b.out.insert(b.out.end(), tokens.begin() + s.begin, tokens.begin() + s.end);
        covered.push_back(b.phase_at(anchors.back()));
      }
    }
    const int64_t added = int64_t(b.out.size()) - s.end;
    if (opt.max_added >= 0 && added > opt.max_added)
      fail("span " + std::to_string(i) + " [" + std::to_string(s.begin) + ", " + std::to_string(s.end) + ")",
           "needs " + std::to_string(added) + " added tokens in all, over the budget of " +
               std::to_string(opt.max_added),
           "raise --max-added (align needs at most period - 1 = " + std::to_string(grid.period - 1) +
               " per span), mark fewer spans, or use fewer --copies");
    res.spans.push_back(placed);
    res.anchors.push_back(anchors);
    res.phases.push_back(covered);
    cursor = s.end;
  }
  b.out.insert(b.out.end(), tokens.begin() + cursor, tokens.end());
  res.tokens = std::move(b.out);
  res.added = int64_t(res.tokens.size()) - int64_t(tokens.size());
  if (opt.context > 0 && grid.prompt_offset + int64_t(res.tokens.size()) > opt.context)
    fail("aligned prompt",
         "has " + std::to_string(res.tokens.size()) + " tokens (+" + std::to_string(grid.prompt_offset) +
             " before it), over the context of " + std::to_string(opt.context) + " after adding " +
             std::to_string(res.added),
         "shorten the prompt, mark fewer spans or use a model with a longer context");
  // never silently unaligned: every anchor is where the mode says
  for (size_t i = 0; i < res.anchors.size(); ++i) {
    if (opt.mode != AlignMode::Repeat)
      PS_ASSERT(res.phases[i].front() == order.front(), "align: an aligned anchor missed its phase");
    for (size_t c = 0; c < res.anchors[i].size(); ++c) {
      PS_ASSERT(b.phase_at(res.anchors[i][c]) == res.phases[i][c], "align: anchor phase bookkeeping");
      PS_ASSERT(std::equal(tokens.begin() + spans[i].begin, tokens.begin() + spans[i].end,
                           res.tokens.begin() + (res.anchors[i][c] - spans[i].anchor)),
                "align: a copy differs from its span");
    }
  }
  return res;
}

}  // namespace phasescope
