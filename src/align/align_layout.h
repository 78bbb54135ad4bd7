// align_layout.h — the evaluator's align option: apply align_prompt (align.h) to every prompt of a lookup
// layout, marking the target record (its key and name; the key is the anchor), at equal prompt length:
// the tokens it adds are taken out of the filler between the target's last copy and the demonstrations,
// so the query position, the prompt length and every token before the target are unchanged. Samples keep
// their original residue, so accuracy is read by the phase of the *original* position, with and without
// alignment, on the same prompts. The card must come from other prompts (another --seed) than the ones
// judged, or the strongest phase is chosen on the test data.
// Not here: the alignment itself (align.h), scoring (eval/runner.h).
#pragma once
#include <string>

#include "align/align.h"
#include "eval/layout.h"

namespace phasescope {

struct LayoutAlign {
  PhaseCard card;        // the card whose grid and phase order steer the alignment
  AlignOptions opt;      // mode, copies (phase_order and neutral are filled from the card and the vocabulary)
  bool weakest = false;  // the control: the card's phase order reversed, so the same kind and amount of
                         // padding puts the record on the weakest phases (what alignment does besides phase)
};

// Align every sample of d in place and tag d->spec.align (so the fingerprint changes). Throws Error when a
// prompt has too few fillers after the target to give the added tokens back (raise the layout's pad: each
// prompt needs align_max_added(...) of them), or when the card's grid does not start at this layout's BOS.
void layout_align(LayoutDesign* d, const LayoutAlign& a);

// The filler the evaluation needs per prompt so that every alignment mode of `copies` fits at equal length
// (the layout's own 2R - 1 plus align_max_added for a two-token record under mode both).
int layout_align_pad(int R, int period, int copies);

// The mean of the samples' added tokens (0 when not aligned).
double layout_added_mean(const LayoutDesign& d);

}  // namespace phasescope
