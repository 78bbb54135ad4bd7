// layout.h — the phase layout: where each lookup prompt's target key lands, so accuracy can be read per
// residue r = target_pos % R (R = 24: a common multiple of the strides 4, 6, 8, 12) with no other
// difference between residue groups. Paired shifts: each base example yields one sample per residue
// (its content shifted by fillers from 0..2R-1; layout.cpp says why not 0..R-1). All samples share one
// length and query position; mean and variance of target_pos are equal across groups (means exactly
// when n_base is a multiple of R, variances up to an integer lattice), and layout_build refuses a
// design whose measured groups differ by more than the tolerances. Positions are measured, not planned.
// Not here: scoring (backend.h), journals or statistics.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "data/lookup.h"

namespace phasescope {

enum class PadProtocol {
  Prefix,      // the shift is prefix filler: all records move together, gaps between records are 0
  InSequence,  // the shift is spread at random over the prefix and the gaps before the target, the rest
               // of the budget over the gaps after it: distractor phases decouple from the target's
};
std::string pad_protocol_name(PadProtocol p);                                       // "prefix", "in-sequence"
PadProtocol pad_protocol_parse(const std::string& name, const std::string& where);  // throws Error

struct LayoutSpec {
  LookupSpec task;  // records, demonstrations, vocabulary
  PadProtocol protocol = PadProtocol::Prefix;
  int R = 24;           // residues: r = target_pos % R
  int n_base = 48;      // base examples; samples = n_base * R
  int pad = 48;         // filler tokens per prompt (prefix + gaps + post), >= 2R - 1
  int base_gaps = -1;   // filler tokens spread at random between the records of each base
                        // example, the same in all of its samples (-1 = n_records / 2,
                        // so records are not back to back, as in training; 0 = they are)
  int offset = 0;       // the "shift all inputs by k" control: every prompt of the
                        // offset-0 design with `offset` more fillers right after BOS
                        // (residue r becomes (r + offset) % R; content unchanged)
  uint64_t seed = 1;    // base examples, shift choices and filler tokens
  bool balance = true;  // false: naive shifts 0..R-1 (unequal variances; for tests)
  std::string align;    // "" = prompts as laid out; else what align/align_layout.h did to them (set by
                        // layout_align, part of the fingerprint so journals of aligned runs stay apart)
  // Tolerances, in tokens, on the spread (max - min) across residue groups of the mean and of the SD
  // of target_pos. The balanced design reaches 0 for the means (n_base a multiple of R) and about
  // R^2 / (n_base * SD) for the SDs (~0.5 at n_base = 24, ~0.2 at 48, ~0.1 at 96 for the default task);
  // naive shifts 0..R-1 give ~4-6 tokens for both at these sizes.
  double tol_mean = 0.5;
  double tol_sd = 0.75;
};

// One prompt. Positions are 0-based indices into tokens (BOS at 0).
struct LayoutSample {
  int64_t id = 0;            // base * R + (residue at offset 0): stable across reruns of the same spec
  int base = 0;              // base example index, 0..n_base-1 (the paired block)
  uint64_t mapping_id = 0;   // key -> name mapping of the base example (bootstrap cluster)
  int residue = 0;           // target_pos % R, measured
  int shift = 0;             // filler tokens placed before the target (design value, 0..2R-1)
  int64_t target_pos = 0;    // position of the target record's key, measured
  int64_t query_pos = 0;     // position of the final (query) key = prompt_len - 1
  int64_t prompt_len = 0;    // tokens.size()
  int answer = 0;            // expected next token (the target's name)
  std::vector<int> tokens;   // (prompt_len)
  int64_t aligned_pos = -1;  // layout_align: where the target key now sits (-1 = not aligned)
  int64_t added = 0;         // layout_align: tokens it inserted (the same number of fillers was taken out)
};

struct GroupMoments {
  int residue = 0;
  int64_t n = 0;
  double mean = 0, var = 0;  // of target_pos over the group (population variance, divide by n)
};

struct LayoutDesign {
  LayoutSpec spec;
  std::vector<LayoutSample> samples;    // (n_base * R) ordered by base, then residue
  std::vector<GroupMoments> groups;     // (R) measured on the rendered samples
  double mean = 0, var = 0;             // over all samples
  double mean_range = 0, sd_range = 0;  // max - min across groups of the mean and of the SD (tokens)
  int64_t prompt_len = 0, query_pos = 0;
};

// Moments of target_pos per residue group and their ranges, from (target_pos, residue) pairs.
void layout_moments(const std::vector<int64_t>& target_pos, const std::vector<int>& residue, int R,
                    std::vector<GroupMoments>* groups, double* mean, double* var, double* mean_range,
                    double* sd_range);

// The balanced paired shifts (layout.cpp explains them): a[b] is base example b's target position with
// no shift; returns shift[b][r] in [0, 2R) with (a[b] + shift[b][r]) % R == r, chosen so that the
// groups' means are equal (exactly when R divides the number of bases) and their variances nearly so.
// Shared with the HTTP probes (probe/needle.h), whose records are placed the same way.
std::vector<std::vector<int>> layout_balanced_shifts(const std::vector<int64_t>& a, int R, uint64_t seed);

// Build, render and check the design. Throws Error when the spec is invalid or the measured group
// moments differ by more than tol_mean / tol_sd (the message says by how much and what to change).
LayoutDesign layout_build(const LayoutSpec& spec);

// The per-group table (residue, n, mean, variance, SD) and the achieved ranges against the tolerances.
std::string layout_format_moments(const LayoutDesign& d);

// One line that identifies the spec (journals refuse to mix samples of different specs).
std::string layout_fingerprint(const LayoutSpec& spec);

// The layout's seeded randomness, also used by the needle probe (probe/needle.cpp) so both place
// samples the same way: a SplitMix64 mix of a seed and two labels (independent per-sample streams),
// and a uniform integer in [0, n) without modulo bias (library-independent, unlike std:: distributions).
uint64_t layout_mix64(uint64_t seed, uint64_t a, uint64_t b);
int layout_below(std::mt19937_64& rng, int n);

// Base examples for about `samples` prompts: ceil(samples / R) rounded up to a multiple of R (the
// smallest counts for which the group means can be exactly equal). At least R.
int layout_base_count(int64_t samples, int R);

}  // namespace phasescope
