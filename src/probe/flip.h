// flip.h — the padding-flip probe: the paper's FP8 "8 vs 32" test (design doc §1.3) generalized.
// A template with one {filler} slot, filler families (a unit repeated n times: "= = = ..."), and two
// or more candidate continuations. L = the prompt's tokens that start before the end of the filler,
// BOS included (so L is the position where the text after the filler starts; a token that straddles
// the filler's end, like DeepSeek's "=\n", counts). This is the page's convention: with DeepSeek-V3's
// tokenizer, BOS + the docstring sentence are 15 tokens and 15 signs give L = 30. Measured with the
// tokenizer (byte lengths of decoded tokens); the sweep visits every L in [L_min, L_max] that some
// n reaches (one token at a time when the unit is one token). Per (family, L) each candidate's log-
// probability is summed over its tokens (teacher forcing), the winner is the arg-max, and the period is
// the P in [P_min, P_max] whose pattern winner(L mod P) (a majority per class, pooled over families)
// is followed by the most comparisons (ties: the smallest P); P = 1 is the no-flip baseline.
// Journaled and resumable through the scoring engine (eval/scoring.h). Not here: HTTP or tokenizers.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "eval/backend.h"
#include "eval/journal.h"
#include "eval/scoring.h"
#include "http/token_source.h"

namespace phasescope {

struct FlipFamily {
  std::string name;
  std::string unit;  // filler(n) = n units joined, the first without its leading spaces ("=", "= =", ...)
};

struct FlipSpec {
  std::string template_text;            // contains "{filler}" exactly once
  std::vector<FlipFamily> families;     // >= 1
  std::vector<std::string> candidates;  // >= 2 continuations, e.g. "8" and "32"
  int L_min = 24, L_max = 39;           // the sweep (tokens, measured)
  int P_min = 2, P_max = 0;             // periods tried; 0 = half the number of lengths
};

// The built-in example: the paper's FP8 kernel-completion probe from the facts of the design doc
// (docstring sentence, a line of "=" signs, the FP8/FP4/FP32 constants, the block-wise quantization
// docstring, compute_dtype = FP32, the fp8_max_inv line, ending in "T.Cast(compute_dtype, T.Cast(FP"),
// candidates "8" and "32", L = 24..39. The connecting code is ours: the real kernel is not public.
FlipSpec flip_fp8_example();
// Its short form for a context too small for the whole example (a toy language model's 128 tokens with a
// near-byte vocabulary): a comment line, the filler as a decorative comment, the FP8 and FP32 constants and
// the cast "y = Cast(FP"; the same candidates and L range.
FlipSpec flip_fp8_short_example();

// The flip in a phasescope server's own token names (its /v1/models token space): four key-name
// records "k0 n0 ... k3 n3", a run of filler f0, then the query k1; candidates " n1" (the record's
// name) and " n2" (another record's); L = 24..39. Needs 1 filler, 4 keys and 4 names (Error otherwise).
FlipSpec flip_token_space_example(int fillers, int keys, int names);

std::string flip_filler(const FlipFamily& f, int n);  // the filler text of n units

struct FlipPoint {
  int family = 0;
  int L = 0;                // measured: tokens (BOS included) that start before the end of the filler
  int units = 0;            // n
  std::vector<int> prompt;  // (T) BOS first when the model has one
  std::vector<std::vector<int>> candidates;  // (C) each candidate's tokens in context
};

struct FlipDesign {
  FlipSpec spec;
  int bos = -1;
  std::vector<FlipPoint> points;            // by family, then L
  std::vector<std::vector<int>> missing_L;  // per family: L in range that no n reaches
  std::string fingerprint;
  int64_t samples() const { return int64_t(points.size() * spec.candidates.size()); }
};

// Measure L for n = 0, 1, ... per family and build one prompt per reachable L. Throws Error on a bad
// template or when no L in range is reachable.
FlipDesign flip_build(const FlipSpec& spec, const TokenSource& ts, std::ostream* log);

// Sample id = point * C + candidate.
ScoringSample flip_render(const FlipDesign& d, int64_t id, const std::string& model);

struct FlipPointResult {
  int family = 0, L = 0, units = 0;
  std::vector<double> logprob;  // (C) summed over the candidate's tokens; NaN when unknown (outside top-k)
  int winner = -1;              // arg-max candidate, -1 when no candidate's log-probability is known
  bool follows = false;         // winner == the best period's pattern at L mod P
};

struct FlipPeriod {
  int P = 0;
  int follows = 0;           // comparisons whose winner matches the pattern
  std::vector<int> pattern;  // (P) the winning candidate per class L mod P
};

struct FlipResult {
  std::string model;
  std::vector<std::string> families, candidates;
  std::vector<FlipPointResult> points;
  int comparisons = 0;              // points with a winner
  int flips = 0;                    // consecutive lengths (same family) whose winners differ
  FlipPeriod best;                  // the detected period
  FlipPeriod baseline;              // P = 1: one candidate always
  std::vector<FlipPeriod> periods;  // every P tried
  int unscored = 0;                 // samples missing or failed in the journal
};

// The pattern of period P over scored points (the majority winner per class L mod P, pooled over families;
// ties to the lower candidate) and how many points follow it. C = the number of candidates.
FlipPeriod flip_period_fit(const std::vector<FlipPointResult>& points, int P, size_t C);

// The analysis of a journal's records (pure: tests feed it directly).
FlipResult flip_analyze(const FlipDesign& d, const std::vector<JournalRecord>& records,
                        const std::string& model);
std::string flip_format(const FlipResult& r);  // table of winners per L and the period summary

// The candidates' margin by phase, a dense signal where the winner never flips (C = 2). margin = log p(c0) -
// log p(c1) per point with both known, less its family's least-squares line in L (a longer filler moves the
// answer smoothly; that trend is no phase), folded by L mod S. share = the part of the residuals' sum of
// squares that the S class means explain; its null (Freedman-Lane): the same share over `permutations`
// seeded shuffles of the residuals among each family's points, each family's line fitted again to the
// shuffled values; p = (1 + #{null >= share}) / (1 + permutations). Shuffling treats the lengths as
// exchangeable; a residual that varies smoothly in L is not, so read a compressed run against its
// full-attention twin as well.
struct FlipPhase {
  int S = 0;
  int points = 0;              // points with both log-probabilities known
  std::vector<double> margin;  // (r.points) the raw margin, nats; NaN where either is unknown
  std::vector<double> folded;  // (S) mean residual margin per L mod S; NaN where no point
  std::vector<int> folded_n;   // (S)
  double range = 0;            // max - min of folded (nats)
  double share = 0, share_null_q95 = 0, p_value = 1;
};
FlipPhase flip_margin_by_phase(const FlipResult& r, int S, uint64_t seed, int permutations = 2000);

struct FlipRunOptions {
  std::string model;
  bool fresh = false;  // start the journal over (eval/scoring.h)
  std::ostream* log = nullptr;
  int max_failed_batches = 3;
  bool require_comparison = true;  // an Error when no point has a winner (false: the caller judges that)
};

// Score (or resume) into out_dir/journal.jsonl, analyze, write flip.json, flip.csv, flip.txt.
FlipResult flip_run(Backend& backend, const FlipDesign& d, const FlipRunOptions& opt,
                    const std::string& out_dir);

}  // namespace phasescope
