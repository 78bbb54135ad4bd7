// measures.h — the pure measures of explain: functions of numbers, no model, no torch. Gate
// concentration and profiles over windows of gate weights, R^2 of an observed against a predicted
// phase profile, and accuracy per phase (with Wilson intervals) from a journal's statistics.
// Phase convention: r = target_pos % S. Not here: running a model (explain.h), files (explain_report.h).
#pragma once
#include <cstdint>
#include <vector>

namespace phasescope {

struct Stats;

struct PhaseAccuracy {
  std::vector<double> acc;     // (S) fraction correct per phase
  std::vector<double> lo, hi;  // (S) its 95% Wilson interval
  std::vector<int64_t> n;      // (S) prompts per phase
  double mean = 0;             // over all prompts
};

// windows: (n) gate weight vectors over the W offsets of one entry, each summing to 1.
double gate_static_concentration(const std::vector<std::vector<double>>& windows);  // exp(H(mean))
double gate_window_concentration(const std::vector<std::vector<double>>& windows);  // mean exp(H)
std::vector<double> gate_profile(const std::vector<std::vector<double>>& windows,
                                 int S);  // (S), offset i -> i % S

// 1 - SS_res / SS_tot of observed vs predicted, over the indices not in `skip`.
double r_squared(const std::vector<double>& observed, const std::vector<double>& predicted,
                 const std::vector<int>& skip = {});

// Accuracy per phase (the statistics' residues folded to r % S, with their 95% Wilson intervals) and
// the mean over all scored prompts.
PhaseAccuracy phase_accuracy(const Stats& stats);

}  // namespace phasescope
