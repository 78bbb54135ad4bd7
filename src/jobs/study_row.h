// study_row.h — one study run's whole outcome as a typed struct, and the only code that reads or writes
// its JSON (OUT/runs/<id>/row.json). A row is what findings, mitigations and reports are computed from;
// nothing else in jobs/ touches row JSON. Numbers that were not measured are NaN (null in JSON).
// Phase convention: folded[p] pools residues r with r % S == p (r = target_pos % R); the boundary phase
// of a W = S design is S - 1.
// Gap interval: gap_ci is the simultaneous interval (eval/stats.h gap_simultaneous_interval), marked
// "gap_ci_method": "simultaneous". A protocol without that mark holds the bootstrap's percentile interval
// in gap_ci (the first writer's); the reader keeps it as gap_ci_percentile and computes the simultaneous
// one from the row's per-residue accuracies and n / R prompts per residue (a study row is paired).
// Not here: how a row is computed (study.cpp) or judged (study_findings.cpp).
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "eval/stats.h"

namespace phasescope {

struct EvalResults;
struct ExplainResults;

// One padding protocol's figures (fractions in [0, 1]).
struct StudyProtocol {
  int64_t n = 0;  // prompts scored
  double mean = 0, worst = 0, best = 0, gap = 0;
  Interval mean_ci, worst_ci;
  Interval gap_ci;             // simultaneous 95% interval of the gap
  Interval gap_ci_percentile;  // the gap's bootstrap replicates' [q2.5, q97.5]
  double gap_bc = 0;           // the bias-corrected gap (gap_bias_corrected)
  double gap_null_q95 = 0;     // the gap noise alone reaches (95th percentile)
  int period = 0;              // detected period (0 = no phase dependence detected, R = none below R)
  double p_value = 1;
  int R = 0, S = 0;
  std::vector<double> folded;       // (S) accuracy per phase
  std::vector<int64_t> folded_n;    // (S) prompts per phase
  std::vector<double> per_residue;  // (R)
  int weakest_phase = -1;           // argmin of folded over phases with n > 0
};

struct StudyKnockout {
  std::string label;             // "L1", "L1 kv0", ...
  int layer = -1, kv_head = -1;  // kv_head -1: the whole layer
  std::vector<double> rel;       // (S) 100 x (knocked - clean) / clean per phase; NaN where clean is 0
  std::vector<double> acc;       // (S) accuracy per phase with the knockout
};

struct StudyGate {
  int layer = 0, kv_head = 0, peak = 0, W = 0;
  std::string branch;                       // "k" | "v" | ...
  double static_conc = 0, window_conc = 0;  // exp(H(E[a])), E[exp(H(a))]
  std::vector<double> profile;              // (W) gate mass per offset / uniform share
};

struct StudyCycling {
  int layer = -1, delta = 0;  // layer -1: every chunked layer cycled together
  double r2 = 0, r2_no_boundary = 0;
  std::vector<double> acc;  // (S)
};

struct StudyExplain {
  int S = 0;
  std::vector<double> clean;  // (S)
  std::vector<StudyKnockout> knockouts;
  std::vector<StudyGate> gates;
  std::vector<StudyCycling> cycling;
  std::string cycling_note;
};

// A language model's copy loss by phase (eval/copy_loss.h), nats.
struct StudyCopyLoss {
  std::vector<double> per_residue;  // (R) by the first occurrence's residue
  std::vector<double> folded;       // (S)
  std::vector<double> first_copy;   // (S) the first copy's own loss by phase (no copy cue)
  double mean = 0, worst = 0, gap = 0;
  int worst_phase = -1;
  Interval gap_ci_percentile;
  int64_t tokens_per_residue = 0;
};

// A language model's padding flip on code (probe/flip.h, jobs/study_lm.h): the winner judged by the audit's
// flip rule (audit/flip_check.h), and the candidates' margin by phase (flip_margin_by_phase).
struct StudyFlip {
  std::string template_name;            // "fp8" (the paper's kernel) | "fp8-short" (a short context)
  std::string commit;                   // the build that scored it (it may be added after the row's training)
  std::vector<std::string> candidates;  // (2) "8", "32"
  int L_min = 0, L_max = 0;
  std::vector<int> L;          // (points) the length of each point
  std::vector<double> margin;  // (points) log p(c0) - log p(c1), nats; NaN where unknown
  int comparisons = 0, flips = 0;
  int period = 0, follows = 0, baseline_follows = 0;  // the best period and how many points follow it
  std::string verdict, reason;                        // the audit's flip rule
  double p_value = 1;
  int S = 0;                          // the fold of the margin (the row's display stride)
  std::vector<double> margin_folded;  // (S) residual margin per L mod S, nats
  std::vector<int> margin_folded_n;   // (S)
  double margin_range = 0, margin_share = 0, margin_share_null_q95 = 0, margin_p = 1;
};

struct StudyRow {
  std::string id, preset, family, paper, tag;
  uint64_t seed = 0;
  int64_t steps = 0;
  double train_seconds = 0, wall_seconds = 0;  // wall NaN until the run's row is finished
  nlohmann::json overrides = nullptr;          // the grid's merge patch (null: none)
  std::string commit;                          // the binary that computed the row
  nlohmann::json threads = nullptr;            // intra-op threads of that binary (null: not recorded)
  std::string kind;                            // layer 0's attention kind
  int S = 0, W = 0;                            // layer 0's stride and window (0 for full / window)
  std::vector<int> strides;  // every layer's stride (0 = exact attention); empty when not recorded
  int n_kv_heads = 1;
  double kv_bytes_per_token = 0;
  int64_t kv_context = 0;
  double val_loss = 0;
  // "prefix", "in-sequence"; language models also kStudyNeedle (the needle in natural-text filler)
  std::map<std::string, StudyProtocol> protocols;
  std::optional<StudyExplain> explain;
  std::optional<StudyCopyLoss> copy_loss;  // language models only
  std::optional<StudyFlip> flip;           // language models only
  std::string deviation;  // what departs from pure pretraining (e.g. lookup rows mixed in); "" = none
  // a row evaluated again on more prompts keeps its training's provenance
  std::string train_commit;
  nlohmann::json train_threads = nullptr;
  int64_t upgraded_from_samples = 0;  // 0: not upgraded

  const StudyProtocol* protocol(const std::string& name) const;
  // Some layer compresses: the strides when recorded, else layer 0's kind is not "full" (the grids hold
  // no window-only models, so a mix whose layer 0 is a window layer is a compressed design).
  bool compressed() const;
  // The period the design imposes: the least common multiple of its layers' strides (layer 0's S when
  // the strides are not recorded); 0 for exact attention.
  int design_period() const;
};

// The protocol name of a language model's needle (jobs/study_lm.h).
inline const char* const kStudyNeedle = "needle";

// The row is the untagged run of preset `base` or of its language-model twin "lm-<base>" (the findings
// name the paper's designs once for both grids).
bool study_is_design(const StudyRow& row, const std::string& base);

// row.json <-> StudyRow. The reader needs id, preset, seed and protocols and names the file and field
// it refuses; every other field may be absent (older writers) and takes its default.
StudyRow study_row_from_json(const nlohmann::json& j, const std::string& where);
nlohmann::json study_row_to_json(const StudyRow& row);
// The protocol's figures as study.json's "runs" entries carry them (no per-phase lists).
nlohmann::json study_protocol_summary_json(const StudyProtocol& p);
// A row's flip as row.json holds it; study.json's "flip" entries are the same less the per-length lists.
nlohmann::json study_flip_json(const StudyFlip& f);

// JSON of measured numbers as every study file writes them: NaN (not measured) as null.
nlohmann::json study_json_number(double x);
nlohmann::json study_json_numbers(const std::vector<double>& v);
nlohmann::json study_json_interval(const Interval& i);

// OUT/runs/<id>/row.json; null when the run has not finished.
std::string study_row_path(const std::string& out, const std::string& id);
std::optional<StudyRow> study_row_read(const std::string& path);
void study_row_write(const std::string& path, const StudyRow& row);

// The figures of one evaluation and of one explain run, as a row holds them.
StudyProtocol study_protocol_of(const EvalResults& r);
StudyExplain study_explain_of(const ExplainResults& x);

// The fewest prompts any protocol of the row was scored on (0 without protocols).
int64_t study_row_min_samples(const StudyRow& row);

}  // namespace phasescope
