// align_study.h — the measurement behind docs/align.md: for each checkpoint, a phase card from one set of
// prompts (card_seed), then the lookup evaluated on other prompts (eval_seed) with no alignment, align,
// repeat x2, repeat x3 and two controls (the same padding aimed at the card's weakest phases: align, repeat
// x2; they separate what phase does from what the inserted tokens do), under both padding protocols, every
// row at the same prompt length (pad = layout_align_pad for 3 copies). In process, and for the models marked
// http also over HTTP against `phasescope serve` (the evaluator's aligned prompts sent as token ids;
// `serve --align-spans` aligning them itself gives the same answers, tests/align_serve_test.cpp).
// Goal, judged by code per (model, protocol, mode): worst-residue accuracy >= 0.9 x the unaligned best
// residue, and mean >= the unaligned mean's lower 95% bound (cluster bootstrap).
// Output: out/results.json (schema "phasescope.align.results"), out/results.csv, out/table.md; each
// evaluation's own folder under out/runs/<model>/ (journals: a rerun resumes).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "eval/layout.h"

namespace phasescope {

struct AlignStudyModel {
  std::string checkpoint;
  bool http = false;  // also measure through `serve --align-spans` over HTTP
};

struct AlignStudyOptions {
  std::vector<AlignStudyModel> models;
  std::string out;
  int per_residue = 192;  // prompts per residue (R x per_residue per evaluation, whole paired blocks)
  int R = 24;
  uint64_t card_seed = 101;  // the card's prompts
  uint64_t eval_seed = 1;    // the judged prompts
  std::ostream* log = nullptr;
};

struct AlignStudyRow {
  std::string model;  // preset name
  uint64_t seed = 0;  // training seed
  std::string protocol, mode, backend;
  double worst = 0, mean = 0, best = 0, gap = 0, mean_lo = 0, mean_hi = 0;
  int worst_residue = -1;
  double added_tokens_mean = 0;
  int64_t n = 0;  // prompts scored
  int64_t prompt_len = 0;
  int strongest_phase = 0, period = 0;  // from the card
  // goal (unaligned rows: not judged)
  bool judged = false, worst_ok = false, mean_ok = false;
  // align rows (and their control): accuracy by the number k of neutral tokens inserted before the target
  // record, k = (target phase - original phase) mod period: what padding does, apart from phase
  std::vector<double> acc_by_added;  // (period) NaN where no residue needed k; empty for other modes
};

// Run (or resume) everything and write the outputs. Returns the rows.
std::vector<AlignStudyRow> align_study_run(const AlignStudyOptions& opt);

// The rule's text, as the code applies it (written into results.json).
std::string align_study_rule();

}  // namespace phasescope
