// copy_loss.h — the copy loss by phase: a dense, model-agnostic phase signal for language models. A span
// of natural text appears twice; the loss of each token of the second copy (the model can copy it from
// the first) is attributed to the residue of the token's FIRST occurrence, the position the compressed
// cache had to keep it at. Every span is placed at all R shifts (prefix protocol: k tokens of natural
// text before it, k = 0..R-1), so every residue gets the same tokens and the same distances.
// Layout of one prompt (positions 0-based): [BOS] [k prefix tokens] [span, L] [gap tokens, G] [span, L]
//   the first copy's token i sits at t = 1 + k + i, residue (1 + k + i) % R, phase (1 + k + i) % S.
// Not here: the model's forward (model/forward.h) or top-1 scoring of retrieval (eval/scoring.h).
#pragma once
#include <cstdint>
#include <vector>

#include "data/corpus.h"
#include "eval/stats.h"
#include "model/model.h"

namespace phasescope {

struct CopyLossOptions {
  int R = 24;      // residues (a multiple of S)
  int S = 8;       // fold for the phase table
  int span = 32;   // L: tokens in the repeated span
  int gap = 64;    // G: natural-text tokens between the two copies
  int spans = 32;  // spans drawn (each placed at all R shifts)
  uint64_t seed = 1;
};

struct CopyLossResult {
  std::vector<double> per_residue;  // (R) mean loss (nats) of second-copy tokens by first-occurrence residue
  std::vector<double> folded;       // (S) the same folded to phase
  std::vector<double> first_copy;   // (S) mean loss of the first copy's tokens by phase (no copying possible)
  int64_t tokens_per_residue = 0;
  double mean = 0;   // over residues
  double worst = 0;  // the highest per-phase loss (folded)
  int worst_phase = -1;
  double gap = 0;              // worst - best folded loss (nats)
  Interval gap_ci_percentile;  // the folded gap's 95% bootstrap over spans (percentile; biased upward like
                               // any max - min: read it as the noise's scale, not as a test)
};

// `text`: a corpus split (validation); `bos`: its boundary token. Throws Error when the split is shorter
// than one prompt.
CopyLossResult copy_loss_by_phase(DecoderImpl& model, const CorpusTokens& text, int bos,
                                  const CopyLossOptions& opt);

}  // namespace phasescope
