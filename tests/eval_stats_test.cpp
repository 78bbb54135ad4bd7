// eval_stats_test.cpp — the phase statistics against known values and planted truths:
// Wilson intervals (textbook values), the chi-square tail (closed forms for integer df, tabulated
// critical values), Cochran's Q (a hand-computed table; equals McNemar for two treatments), a
// synthetic paired journal with a planted period-8 / period-4 / period-3 profile (recovered within
// its intervals, the period detected) and flat journals (no period, large p-values), failed samples
// left out rather than counted wrong, and a seeded, deterministic bootstrap.
#include <gtest/gtest.h>

#include <cmath>

#include "core/check.h"
#include "eval/stats.h"
#include "eval_testing.h"

namespace phasescope {
namespace {

using testing_eval::synthetic_journal;

// ---- numerical pieces

TEST(Wilson, MatchesKnownValues) {
  // 8/10: [0.4902, 0.9433] (Newcombe 1998, method 3); 0/20: [0, 0.1611]; 50/100: [0.4038, 0.5962]
  Interval a = wilson_interval(8, 10), b = wilson_interval(0, 20), c = wilson_interval(50, 100);
  EXPECT_NEAR(a.lo, 0.49016247153664183, 1e-12);
  EXPECT_NEAR(a.hi, 0.9433178485456247, 1e-12);
  EXPECT_NEAR(b.lo, 0.0, 1e-12);
  EXPECT_NEAR(b.hi, 0.16112515805281938, 1e-12);
  EXPECT_NEAR(c.lo, 0.4038315303659956, 1e-12);
  EXPECT_NEAR(c.hi, 0.5961684696340044, 1e-12);
  Interval e = wilson_interval(0, 0);
  EXPECT_EQ(e.lo, 0.0);
  EXPECT_EQ(e.hi, 1.0);
}

// Closed forms: even df = 2k: e^{-x/2} sum_{i<k} (x/2)^i / i!; odd df = 2k+1:
// erfc(sqrt(x/2)) + e^{-x/2} sum_{i=1..k} (x/2)^{i-1/2} / Gamma(i+1/2).
double chi2_sf_closed(double x, int df) {
  double s = 0;
  if (df % 2 == 0) {
    double term = 1;
    for (int i = 0; i < df / 2; ++i) {
      s += term;
      term *= (x / 2) / (i + 1);
    }
    return std::exp(-x / 2) * s;
  }
  for (int i = 1; i <= (df - 1) / 2; ++i) s += std::pow(x / 2, i - 0.5) / std::tgamma(i + 0.5);
  return std::erfc(std::sqrt(x / 2)) + std::exp(-x / 2) * s;
}

TEST(ChiSquare, TailMatchesClosedFormsAndTables) {
  double worst = 0;
  for (int df : {1, 2, 3, 4, 5, 7, 10, 23, 47})
    for (double x : {0.01, 0.5, 1.0, 3.0, 7.5, 15.0, 30.0, 60.0, 120.0}) {
      const double want = chi2_sf_closed(x, df), got = chi2_sf(x, df);
      worst = std::max(worst, std::abs(got - want) / std::max(want, 1e-300));
      EXPECT_NEAR(got, want, 1e-12 + 1e-10 * want) << "x=" << x << " df=" << df;
    }
  std::printf("  chi2_sf vs closed forms: max relative error %.2e\n", worst);
  // tabulated 5% critical values
  EXPECT_NEAR(chi2_sf(3.841458820694124, 1), 0.05, 1e-12);
  EXPECT_NEAR(chi2_sf(18.307038053275146, 10), 0.05, 1e-12);
  EXPECT_NEAR(chi2_sf(35.17246162690806, 23), 0.05, 1e-12);
  EXPECT_EQ(chi2_sf(0, 3), 1.0);
  EXPECT_NEAR(gamma_p(2.5, 1.7) + gamma_q(2.5, 1.7), 1.0, 1e-14);
}

TEST(ChiSquare, HomogeneityOfTwoProportions) {
  // 10/20 vs 15/20: pooled 0.625, X^2 = 0.625 / 0.234375 = 8/3, df 1
  const TestResult t = chi2_homogeneity({10, 15}, {20, 20});
  EXPECT_NEAR(t.statistic, 8.0 / 3.0, 1e-12);
  EXPECT_EQ(t.df, 1);
  EXPECT_NEAR(t.p_value, 0.10247043485974947, 1e-12);
  // all equal answers: nothing can differ
  EXPECT_EQ(chi2_homogeneity({0, 0, 0}, {5, 5, 5}).p_value, 1.0);
}

TEST(CochranQ, HandComputedTable) {
  // 5 blocks x 3 treatments; columns 4, 2, 1; rows 2, 1, 3, 0, 1:
  // Q = 2 (3 * 21 - 49) / (21 - 15) = 14/3, df 2, p = exp(-7/3)
  const TestResult t = cochran_q({{1, 1, 0}, {1, 0, 0}, {1, 1, 1}, {0, 0, 0}, {1, 0, 0}});
  EXPECT_NEAR(t.statistic, 14.0 / 3.0, 1e-12);
  EXPECT_EQ(t.df, 2);
  EXPECT_NEAR(t.p_value, std::exp(-7.0 / 3.0), 1e-12);
}

TEST(CochranQ, EqualsMcNemarForTwoTreatments) {
  // b = 9 blocks (1,0), c = 3 blocks (0,1), plus concordant ones: Q = (b - c)^2 / (b + c) = 3
  std::vector<std::vector<int>> blocks;
  for (int i = 0; i < 9; ++i) blocks.push_back({1, 0});
  for (int i = 0; i < 3; ++i) blocks.push_back({0, 1});
  for (int i = 0; i < 7; ++i) blocks.push_back({1, 1});
  for (int i = 0; i < 4; ++i) blocks.push_back({0, 0});
  const TestResult t = cochran_q(blocks);
  EXPECT_NEAR(t.statistic, 3.0, 1e-12);
  EXPECT_NEAR(t.p_value, chi2_sf(3.0, 1), 1e-15);
  EXPECT_EQ(cochran_q({{1, 1}, {0, 0}}).p_value, 1.0);  // no discordant block: degenerate
}

// ---- planted profiles

// The paper's folded W8/S8 profile (prefix padding), as fractions, repeated over R = 24.
std::vector<double> planted_period8() {
  const double fold[8] = {0.667, 0.716, 0.787, 0.450, 0.473, 0.243, 0.647, 0.062};
  std::vector<double> p(24);
  for (int r = 0; r < 24; ++r) p[r] = fold[r % 8];
  return p;
}

TEST(Stats, PlantedPeriodEightIsRecovered) {
  const std::vector<double> planted = planted_period8();
  double planted_mean = 0;
  for (double a : planted) planted_mean += a / 24;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    StatsOptions opt;
    opt.S = 8;
    opt.bootstrap = 500;
    const Stats s = stats_compute(synthetic_journal(planted, 300, seed), opt);
    EXPECT_EQ(s.design, "paired");
    EXPECT_EQ(s.independence.name, "cochran_q");
    EXPECT_EQ(s.cochran.n_used, 300);
    int outside = 0;
    for (int r = 0; r < 24; ++r) {
      const ResidueStat& p = s.per_residue[r];
      EXPECT_EQ(p.n, 300);
      outside += (planted[r] < p.ci_low || planted[r] > p.ci_high) ? 1 : 0;
    }
    EXPECT_LE(outside, 3) << "seed " << seed << ": a 95% interval misses ~1.2 of 24 residues on average";
    EXPECT_EQ(s.period.P, 8) << "seed " << seed << ": " << s.period.note;
    EXPECT_GT(s.period.explained, 0.9);
    EXPECT_LT(s.p_value, 1e-30);
    EXPECT_EQ(s.worst_residue % 8, 7);
    EXPECT_LE(s.mean_ci.lo, planted_mean);
    EXPECT_GE(s.mean_ci.hi, planted_mean);
    EXPECT_LT(s.mean_abs_diff_S, 0.06) << "residues one stride apart agree";
    EXPECT_GT(s.gap, 0.6);
    EXPECT_GT(s.gap, s.gap_null_q95) << "a planted gap is beyond what noise gives";
    for (int q = 0; q < 8; ++q) EXPECT_EQ(s.folded[q].n, 900);
    if (seed == 1)
      std::printf(
          "  planted period 8: P=%d explains %.1f%%, p=%.2g, gap %.3f [%.3f, %.3f], |A(r)-A(r+8)| %.3f\n",
          s.period.P, 100 * s.period.explained, s.p_value, s.gap, s.gap_ci.lo, s.gap_ci.hi,
          s.mean_abs_diff_S);
  }
}

TEST(Stats, PlantedShorterPeriodsAreDetected) {
  for (int P : {3, 4, 6}) {
    std::vector<double> planted(24);
    for (int r = 0; r < 24; ++r) planted[r] = (r % P == P - 1) ? 0.2 : 0.5 + 0.3 * (r % P) / P;
    StatsOptions opt;
    opt.bootstrap = 0;
    const Stats s = stats_compute(synthetic_journal(planted, 300, 11), opt);
    EXPECT_EQ(s.period.P, P) << s.period.note;
  }
}

TEST(Stats, FlatJournalsShowNoPeriodAndLargePValues) {
  const std::vector<double> flat(24, 0.6);
  int large = 0, noise_sized = 0;
  double sum_p = 0, sum_gap = 0, sum_null = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    StatsOptions opt;
    opt.bootstrap = 300;
    opt.seed = seed;
    const Stats s = stats_compute(synthetic_journal(flat, 100, seed), opt);
    large += s.p_value > 0.05 ? 1 : 0;
    noise_sized += s.gap <= s.gap_null_q95 ? 1 : 0;
    sum_gap += s.gap;
    sum_null += s.gap_null_mean;
    sum_p += s.p_value;
    if (s.p_value >= 0.05) {
      EXPECT_EQ(s.period.P, 0) << s.period.note;
    }
  }
  std::printf(
      "  flat journals (n=100 per residue): %d of 20 with p > 0.05, mean p %.2f; mean gap %.3f vs noise "
      "gap %.3f; %d of 20 gaps within the noise 95th percentile\n",
      large, sum_p / 20, sum_gap / 20, sum_null / 20, noise_sized);
  EXPECT_GE(large, 17);
  EXPECT_GE(noise_sized, 17);
  EXPECT_NEAR(sum_gap / 20, sum_null / 20, 0.03) << "the noise gap predicts a flat model's gap";
  EXPECT_GT(sum_p / 20, 0.3);
}

TEST(Stats, FailedSamplesAreLeftOutNotCountedWrong) {
  std::vector<JournalRecord> j = synthetic_journal(std::vector<double>(24, 1.0), 10, 3);
  for (size_t i = 0; i < j.size(); i += 7) {
    j[i].error = "timeout";
    j[i].answer = -1;
  }
  StatsOptions opt;
  opt.bootstrap = 100;
  const Stats s = stats_compute(j, opt);
  EXPECT_EQ(s.n_samples, 240);
  EXPECT_EQ(s.n_errors, 35);
  EXPECT_EQ(s.n_scored, 205);
  for (const ResidueStat& p : s.per_residue) EXPECT_EQ(p.acc, 1.0) << "residue " << p.residue;
  EXPECT_EQ(s.mean, 1.0);
}

TEST(Stats, IndependentDesignUsesChiSquare) {
  std::vector<JournalRecord> j = synthetic_journal(std::vector<double>(24, 0.5), 40, 5);
  for (JournalRecord& r : j) {  // every sample its own cluster and block: not paired
    r.base = static_cast<int>(r.id);
    r.cluster = "c" + std::to_string(r.id);
  }
  j.resize(j.size() - 5);  // and incomplete
  StatsOptions opt;
  opt.bootstrap = 50;
  const Stats s = stats_compute(j, opt);
  EXPECT_EQ(s.design, "independent");
  EXPECT_EQ(s.independence.name, "chi_square");
  EXPECT_EQ(s.n_clusters, int64_t(j.size()));
}

TEST(Stats, BootstrapIsSeededAndIntervalsHoldTheEstimate) {
  const auto j = synthetic_journal(planted_period8(), 60, 9);
  StatsOptions opt;
  opt.bootstrap = 400;
  const Stats a = stats_compute(j, opt), b = stats_compute(j, opt);
  EXPECT_EQ(a.gap_ci.lo, b.gap_ci.lo);
  EXPECT_EQ(a.mean_ci.hi, b.mean_ci.hi);
  opt.seed = 2;
  const Stats c = stats_compute(j, opt);
  EXPECT_NE(a.mean_ci.lo, c.mean_ci.lo);
  EXPECT_LE(a.mean_ci.lo, a.mean);
  EXPECT_GE(a.mean_ci.hi, a.mean);
  EXPECT_GT(a.gap_ci.hi, a.gap_ci.lo);
}

TEST(Stats, MixedROrEmptyJournalsAreRefused) {
  auto j = synthetic_journal(std::vector<double>(8, 0.5), 2, 1);
  j[3].R = 24;
  EXPECT_THROW(stats_compute(j, StatsOptions{}), Error);
  EXPECT_THROW(stats_compute({}, StatsOptions{}), Error);
}

}  // namespace
}  // namespace phasescope
