// align_layout.cpp — layout_align: align each lookup prompt's target record and give the added tokens back
// from the filler before the demonstrations.
#include "align/align_layout.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"

namespace phasescope {

int layout_align_pad(int R, int period, int copies) {
  CardGrid g;
  g.period = period;
  AlignOptions o;
  o.mode = AlignMode::Both;
  o.copies = copies;
  return int(2 * R - 1 + align_max_added(g, o, 2));
}

double layout_added_mean(const LayoutDesign& d) {
  if (d.samples.empty()) return 0;
  double sum = 0;
  for (const LayoutSample& s : d.samples) sum += double(s.added);
  return sum / double(d.samples.size());
}

void layout_align(LayoutDesign* d, const LayoutAlign& a) {
  const Vocab& v = d->spec.task.vocab;
  if (a.card.grid.prompt_offset != 0)
    fail("card grid.prompt_offset",
         "is " + std::to_string(a.card.grid.prompt_offset) + "; the evaluator's prompts start at the BOS",
         "use a card measured by `phasescope eval` on this model (prompt_offset 0)");
  AlignOptions o = a.opt;
  o.phase_order = a.card.phase_order;
  if (a.weakest) std::reverse(o.phase_order.begin(), o.phase_order.end());
  o.neutral.clear();
  for (int i = 0; i < v.n_fillers; ++i) o.neutral.push_back(v.filler(i));
  const int n_demos = d->spec.task.n_demos;
  for (LayoutSample& s : d->samples) {
    const AlignSpan target{s.target_pos, s.target_pos + 2, 0};  // the target record: key, name
    AlignedPrompt ap = align_prompt(s.tokens, {target}, a.card.grid, o);
    // give the added tokens back: fillers after the last copy, nearest the demonstrations first
    const int64_t last_end = ap.anchors[0].back() + 2;
    int64_t demo_start = s.query_pos + ap.added - 2 * n_demos;  // first demonstration key, after insertion
    int64_t left = ap.added;
    for (int64_t i = demo_start - 1; i >= last_end && left > 0; --i)
      if (v.filler_index(ap.tokens[size_t(i)]) >= 0) {
        ap.tokens.erase(ap.tokens.begin() + i);
        --left;
      }
    if (left > 0)
      fail("layout (" + pad_protocol_name(d->spec.protocol) + ", align)",
           fmt::format("sample {} has {} fillers too few after its target to give back the {} tokens "
                       "alignment added",
                       s.id, left, ap.added),
           fmt::format("raise the evaluation's pad to {} (layout_align_pad)",
                       layout_align_pad(d->spec.R, a.card.grid.period, std::max(2, o.copies))));
    PS_ASSERT(int64_t(ap.tokens.size()) == s.prompt_len && ap.tokens.back() == s.tokens.back(),
              "layout_align: the prompt length or the query changed");
    s.tokens = std::move(ap.tokens);
    s.aligned_pos = ap.anchors[0].front();
    s.added = ap.added;
  }
  d->spec.align =
      fmt::format("align={}{} copies={} period={} origin={} order={} card_seed={}", align_mode_name(o.mode),
                  a.weakest ? "-weakest" : "", o.mode == AlignMode::Align ? 1 : o.copies, a.card.grid.period,
                  a.card.grid.origin, fmt::join(o.phase_order, ","), a.card.seed);
}

}  // namespace phasescope
