// stats.h — the phase statistics, a pure function of the journal: per residue r = target_pos % R n,
// correct, accuracy and 95% Wilson interval; mean / worst / best / gap with 95% cluster-bootstrap
// intervals (clusters = key -> name mappings); accuracy folded to r % S; mean |A(r) - A(r+S)|; a
// period detector over the divisors of R; a phase-independence test (Cochran's Q for the paired
// design, else chi-square). Plus the numerical pieces (Wilson, incomplete gamma, chi-square tail,
// Cochran's Q) as plain functions with known-value tests. Accuracies are fractions in [0, 1].
// Not here: I/O, layouts or backends.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "eval/journal.h"

namespace phasescope {

// ---- numerical pieces

struct Interval {
  double lo = 0, hi = 0;
};

constexpr double kZ95 = 1.959963984540054;  // two-sided 95% normal quantile

// Wilson score interval for k successes out of n (n = 0: [0, 1]).
Interval wilson_interval(int64_t k, int64_t n, double z = kZ95);

// Regularized incomplete gamma P(a, x) and Q(a, x) = 1 - P(a, x) (series for x < a + 1, else a
// continued fraction), relative accuracy ~1e-14.
double gamma_p(double a, double x);
double gamma_q(double a, double x);

// The q-quantile of v (q in [0, 1]) with linear interpolation between order statistics, NaNs dropped;
// NaN when nothing is left. quantile(v, 0.5) is the median.
double quantile(std::vector<double> v, double q);

// The standard normal quantile: z with P(Z <= z) = p, p in (0, 1) (bisection on erfc, |error| < 1e-12).
double normal_quantile(double p);

// The interval reported for the gap (best - worst residue accuracy). The plug-in gap is the maximum minus
// the minimum of noisy residue accuracies, so it is biased upward, and a bootstrap of it more so (with
// ties among the best residues the bootstrap cannot see the bias): its percentile interval can lie wholly
// above the estimate and the truth. This interval is built from Wilson intervals [L_r, U_r] of every
// residue at the simultaneous level 1 - alpha / R (Bonferroni over the R residues; the samples of one
// residue are independent clusters): with probability >= 1 - alpha every true accuracy lies in its
// interval, so the true gap lies in [max(0, max_r L_r - min_r U_r), max_r U_r - min_r L_r]. Conservative
// (coverage >= 95% whatever the profile); residues with n = 0 are left out.
Interval gap_simultaneous_interval(const std::vector<int64_t>& correct, const std::vector<int64_t>& n,
                                   double alpha = 0.05);

// The gap less the bootstrap's estimate of its bias, 2 gap - (q2.5 + q97.5) / 2 (the bias taken as the
// midpoint of the replicates' 95% range minus the gap), clipped to [0, 1]: computable from the two stored
// quantiles alone. Reported beside the plug-in gap.
double gap_bias_corrected(double gap, const Interval& percentile);

// Upper tail of the chi-square distribution: P(X >= x) for df degrees of freedom = Q(df/2, x/2).
double chi2_sf(double x, double df);

struct TestResult {
  std::string name;  // "cochran_q" | "chi_square"
  double statistic = 0;
  int df = 0;
  double p_value = 1;  // 1 when the test is degenerate (all answers equal, fewer than 2 groups)
  int64_t n_used = 0;  // samples (chi-square) or complete blocks (Cochran's Q) used
};

// Chi-square test of homogeneity of k proportions (a 2 x k table); groups with n = 0 are left out.
// Pearson correlation of two equally long series; NaN when shorter than 2, either is constant, or a value
// is not finite.
double stats_pearson(const std::vector<double>& a, const std::vector<double>& b);

TestResult chi2_homogeneity(const std::vector<int64_t>& correct, const std::vector<int64_t>& n);

// Cochran's Q for a complete block design: blocks[b][j] in {0, 1} (b = block, j = treatment).
TestResult cochran_q(const std::vector<std::vector<int>>& blocks);

// ---- the statistics of one journal

struct StatsOptions {
  int S = 8;             // fold for display (the model's stride; S should divide R)
  int bootstrap = 2000;  // cluster-bootstrap replicates (0 = none: intervals are NaN)
  uint64_t seed = 1;     // bootstrap seed
  double alpha = 0.05;   // significance level of the independence test and the period detector
};

struct ResidueStat {
  int residue = 0;  // r (or the folded phase r % S)
  int64_t n = 0, correct = 0;
  double acc = 0;                  // correct / n, NaN when n = 0
  double ci_low = 0, ci_high = 1;  // 95% Wilson interval
};

struct PeriodCandidate {
  int P = 0;              // a divisor of R, 1 < P < R
  double explained = 0;   // share of the between-residue sum of squares (n-weighted) that the
                          // P-periodic profile (the mean over r = c mod P) explains, in [0, 1]
  double p_between = 1;   // chi-square test that the P folded classes differ
  double p_residual = 1;  // chi-square test that residues within a folded class differ
};

struct PeriodResult {
  int P = 0;             // detected period: 0 = no phase dependence detected; R = none shorter than R
  double explained = 0;  // explained share for P (1 when P = R, 0 when P = 0)
  std::vector<PeriodCandidate> candidates;  // every divisor, ascending
  std::string note;                         // one sentence: how P was chosen
};

struct Stats {
  int R = 0, S = 0;
  std::string design;                    // "paired" (every cluster has all R residues) | "independent"
  int64_t n_samples = 0;                 // unique samples in the journal (scored or failed)
  int64_t n_scored = 0, n_errors = 0;    // failed samples are left out of every statistic
  int64_t n_clusters = 0;                // clusters with at least one scored sample
  std::vector<ResidueStat> per_residue;  // (R)
  std::vector<ResidueStat> folded;       // (S) pooled over r with r % S = phase
  double mean = 0, worst = 0, best = 0, gap = 0;  // over residues with n > 0
  int worst_residue = -1, best_residue = -1;
  Interval mean_ci, worst_ci, best_ci;  // cluster bootstrap, 95% percentile
  Interval gap_ci;                      // 95% simultaneous interval (gap_simultaneous_interval)
  Interval gap_ci_percentile;           // the gap's cluster-bootstrap replicates' [q2.5, q97.5]
  double gap_bc = 0;                    // gap_bias_corrected(gap, gap_ci_percentile)
  // The gap that sampling noise alone gives when every residue has the pooled accuracy and its own n
  // (parametric bootstrap, independent binomials, same replicates and seed): a gap near these values
  // is no evidence of phase dependence (the tests below say whether there is any).
  double gap_null_mean = 0, gap_null_q95 = 0;
  int bootstrap = 0;
  uint64_t bootstrap_seed = 0;
  double mean_abs_diff_S = 0;  // mean over r < R - S of |A(r) - A(r+S)|, NaN if none
  PeriodResult period;
  TestResult chi_square, cochran;  // cochran.n_used = 0 when the design is not paired
  TestResult independence;         // the one behind p_value: Cochran's Q if paired, else chi-square
  double p_value = 1;
  // measured target positions of every journaled sample, per residue (the layout's achieved moments)
  std::vector<double> pos_mean, pos_var;  // (R)
  double pos_mean_range = 0, pos_sd_range = 0;
};

// Throws Error when the records are empty of residues or disagree on R.
Stats stats_compute(const std::vector<JournalRecord>& records, const StatsOptions& opt);

// The period detector on its own (used by stats_compute): counts per residue, the independence p-value.
PeriodResult stats_period(const std::vector<int64_t>& correct, const std::vector<int64_t>& n,
                          double p_independence, double alpha);

}  // namespace phasescope
