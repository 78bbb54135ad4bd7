// study_findings.h — the paper's findings judged from study rows by stated rules, each rule's text saying
// exactly what its code computes: (a)-(g) of the paper's controlled study (design doc 1.5-1.6), (d-div)
// the runs whose period is a proper divisor of their stride, (mean-hides) the paper's headline, and
// (dense) the phase in a language model's signals that need no retrieval (copy loss, flip margin).
// Plus descriptive tables with no verdict (static gates against the weak phases, tagged ablations).
// Pure functions of rows: tests feed synthetic rows.
// Not here: computing rows (study.cpp), the mitigation goal (study_mitigations.h).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "jobs/study_row.h"

namespace phasescope {

// A run that has not learned the task says nothing about phases: every finding but (a) leaves out
// compressed runs whose prefix mean is below this, and lists them.
constexpr double kStudyLearned = 0.10;
bool study_learned(const StudyRow& row);

// Each finding is {"id", "claim", "rule", "verdict", "figures"} (+ "left_out_not_learned");
// verdict "holds" | "does not hold" | "inconclusive".
nlohmann::json study_findings(const std::vector<StudyRow>& rows);

// The paper's headline on one pair: a compressed model close to an exact-attention one in mean accuracy
// (and, where both are given, validation loss) whose worst residue is far lower.
struct MeanHides {
  double max_mean_diff = 0.05;   // |mean_c - mean_f| <= this (fractions)
  double max_loss_diff = 0.05;   // |val_loss_c - val_loss_f| <= this (nats); NaN losses skip the check
  double min_worst_drop = 0.25;  // worst_f - worst_c >= this
  std::string rule() const;      // the text of the rule, from the numbers above
  // "holds" (matched and the worst is that much lower), "does not hold" (matched, it is not) or
  // "not matched" (means or losses too far apart to compare)
  std::string judge(double mean_f, double worst_f, double loss_f, double mean_c, double worst_c,
                    double loss_c) const;
};

// (dense) on one compressed language model and its full-attention twin (same seed, KV heads and tag: the
// same tokens in the same order): does the phase show in the signals that need no retrieval?
struct DenseShows {
  double max_flip_p = 0.01;   // the flip margin's phase share: permutation p at most this
  double min_flip_ratio = 5;  // and its range at least this many times the twin's
  std::string rule() const;   // the text of the rule, from the numbers above
  // Per signal "shows" | "does not show" | "not measured" (either row lacks it): the copy loss shows
  // when the compressed run's gap's 95% lower bound is above the twin's upper bound; the flip when
  // the margin's p and range pass the bars above.
  std::string copy(const StudyRow& compressed, const StudyRow& full) const;
  std::string flip(const StudyRow& compressed, const StudyRow& full) const;
};

// Where the weak phases sit relative to the static gates: for each chunked W = S row with explain gates,
// per layer, branch and KV head, Pearson r between the prefix accuracy folded to phase p and the gate's
// static profile at offset p ("r_same_offset") and p + 1 mod S ("r_next_offset": the record's name
// follows its key). Descriptive; no verdict.
nlohmann::json study_gate_accuracy(const std::vector<StudyRow>& rows);

// Each tagged row (an ablation of a preset) beside the untagged row of the same preset and seed, per
// protocol: mean, gap, weakest phase, whether the boundary phase S - 1 is the weakest, and the
// reference's mean, gap and weakest phase.
nlohmann::json study_ablations(const std::vector<StudyRow>& rows);

// The findings as a plain-text table (id, verdict, claim).
std::string study_format_findings(const nlohmann::json& findings);

}  // namespace phasescope
