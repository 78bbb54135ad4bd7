// stats.cpp — see stats.h. Every function here is plain arithmetic over counts; no I/O.
#include "eval/stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "core/check.h"
#include "eval/layout.h"

namespace phasescope {

// ---------------------------------------------------------------------------------------------
// numerical pieces

Interval wilson_interval(int64_t k, int64_t n, double z) {
  if (n <= 0) return {0.0, 1.0};
  const double nn = double(n), p = double(k) / nn, z2 = z * z;
  const double denom = 1 + z2 / nn;
  const double centre = (p + z2 / (2 * nn)) / denom;
  const double half = z * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / denom;
  return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

namespace {

constexpr double kEps = 1e-15;
constexpr double kTiny = 1e-300;

// P(a, x) by its power series, for x < a + 1.
double gamma_p_series(double a, double x) {
  double ap = a, del = 1.0 / a, sum = del;
  for (int i = 0; i < 100000; ++i) {
    ap += 1;
    del *= x / ap;
    sum += del;
    if (std::abs(del) < std::abs(sum) * kEps) break;
  }
  return sum * std::exp(-x + a * std::log(x) - std::lgamma(a));
}

// Q(a, x) by its continued fraction (modified Lentz), for x >= a + 1.
double gamma_q_fraction(double a, double x) {
  double b = x + 1 - a, c = 1 / kTiny, d = 1 / b, h = d;
  for (int i = 1; i < 100000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::abs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::abs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::abs(del - 1) < kEps) break;
  }
  return std::exp(-x + a * std::log(x) - std::lgamma(a)) * h;
}

}  // namespace

double gamma_p(double a, double x) {
  PS_ASSERT(a > 0, "gamma_p: a must be positive");
  if (!(x > 0)) return 0.0;
  if (std::isinf(x)) return 1.0;
  return x < a + 1 ? gamma_p_series(a, x) : 1.0 - gamma_q_fraction(a, x);
}

double gamma_q(double a, double x) {
  PS_ASSERT(a > 0, "gamma_q: a must be positive");
  if (!(x > 0)) return 1.0;
  if (std::isinf(x)) return 0.0;
  return x < a + 1 ? 1.0 - gamma_p_series(a, x) : gamma_q_fraction(a, x);
}

double normal_quantile(double p) {
  double lo = -40, hi = 40;
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2;
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

Interval gap_simultaneous_interval(const std::vector<int64_t>& correct, const std::vector<int64_t>& n,
                                   double alpha) {
  int used = 0;
  for (int64_t x : n) used += x > 0;
  if (used == 0) return {std::nan(""), std::nan("")};
  const double z = normal_quantile(1 - alpha / (2.0 * used));
  double max_lo = 0, max_hi = 0, min_lo = 1, min_hi = 1;
  for (size_t r = 0; r < n.size(); ++r) {
    if (n[r] <= 0) continue;
    const Interval w = wilson_interval(correct[r], n[r], z);
    max_lo = std::max(max_lo, w.lo);
    max_hi = std::max(max_hi, w.hi);
    min_lo = std::min(min_lo, w.lo);
    min_hi = std::min(min_hi, w.hi);
  }
  return {std::max(0.0, max_lo - min_hi), max_hi - min_lo};
}

double gap_bias_corrected(double gap, const Interval& q) {
  const double bc = 2 * gap - (q.lo + q.hi) / 2;
  return std::isfinite(bc) ? std::min(1.0, std::max(0.0, bc)) : bc;
}

double chi2_sf(double x, double df) {
  PS_ASSERT(df > 0, "chi2_sf: df must be positive");
  return gamma_q(df / 2, x / 2);
}

TestResult chi2_homogeneity(const std::vector<int64_t>& correct, const std::vector<int64_t>& n) {
  PS_ASSERT(correct.size() == n.size(), "chi2_homogeneity: sizes differ");
  TestResult t;
  t.name = "chi_square";
  int64_t C = 0, N = 0;
  int k = 0;
  for (size_t j = 0; j < n.size(); ++j)
    if (n[j] > 0) {
      C += correct[j];
      N += n[j];
      ++k;
    }
  t.n_used = N;
  t.df = std::max(0, k - 1);
  const double pbar = N > 0 ? double(C) / double(N) : 0.0;
  if (k < 2 || pbar <= 0 || pbar >= 1) return t;  // degenerate: nothing can differ
  double x2 = 0;
  for (size_t j = 0; j < n.size(); ++j)
    if (n[j] > 0) {
      const double d = double(correct[j]) / double(n[j]) - pbar;
      x2 += double(n[j]) * d * d;
    }
  t.statistic = x2 / (pbar * (1 - pbar));
  t.p_value = chi2_sf(t.statistic, t.df);
  return t;
}

TestResult cochran_q(const std::vector<std::vector<int>>& blocks) {
  TestResult t;
  t.name = "cochran_q";
  t.n_used = static_cast<int64_t>(blocks.size());
  if (blocks.empty()) return t;
  const size_t k = blocks[0].size();
  t.df = std::max(0, int(k) - 1);
  if (k < 2) return t;
  std::vector<double> col(k, 0);
  double N = 0, row_sq = 0;
  for (const auto& b : blocks) {
    PS_ASSERT(b.size() == k, "cochran_q: blocks must all have the same number of treatments");
    double row = 0;
    for (size_t j = 0; j < k; ++j) {
      PS_ASSERT(b[j] == 0 || b[j] == 1, "cochran_q: outcomes must be 0 or 1");
      col[j] += b[j];
      row += b[j];
    }
    N += row;
    row_sq += row * row;
  }
  const double kk = double(k);
  const double denom = kk * N - row_sq;
  if (denom <= 0) return t;  // every block all-0 or all-1: no information about treatments
  double col_sq = 0;
  for (double c : col) col_sq += c * c;
  t.statistic = (kk - 1) * (kk * col_sq - N * N) / denom;
  t.p_value = chi2_sf(std::max(0.0, t.statistic), t.df);
  return t;
}

// ---------------------------------------------------------------------------------------------
// the period detector

PeriodResult stats_period(const std::vector<int64_t>& correct, const std::vector<int64_t>& n,
                          double p_independence, double alpha) {
  const int R = static_cast<int>(n.size());
  PeriodResult out;
  int64_t C = 0, N = 0;
  for (int r = 0; r < R; ++r) {
    C += correct[r];
    N += n[r];
  }
  const double pbar = N > 0 ? double(C) / double(N) : 0.0;
  double ss_total = 0;
  for (int r = 0; r < R; ++r)
    if (n[r] > 0) ss_total += double(n[r]) * std::pow(double(correct[r]) / double(n[r]) - pbar, 2);

  for (int P = 2; P < R; ++P) {
    if (R % P != 0) continue;
    PeriodCandidate c;
    c.P = P;
    // fold: class counts
    std::vector<int64_t> cc(P, 0), cn(P, 0);
    for (int r = 0; r < R; ++r) {
      cc[r % P] += correct[r];
      cn[r % P] += n[r];
    }
    double ss_between = 0;
    for (int q = 0; q < P; ++q)
      if (cn[q] > 0) ss_between += double(cn[q]) * std::pow(double(cc[q]) / double(cn[q]) - pbar, 2);
    c.explained = ss_total > 0 ? std::min(1.0, ss_between / ss_total) : 0.0;
    c.p_between = chi2_homogeneity(cc, cn).p_value;
    // residual: do residues within one folded class differ? (sum of per-class chi-squares)
    double x2 = 0;
    int df = 0;
    for (int q = 0; q < P; ++q) {
      std::vector<int64_t> rc, rn;
      for (int r = q; r < R; r += P) {
        rc.push_back(correct[r]);
        rn.push_back(n[r]);
      }
      const TestResult t = chi2_homogeneity(rc, rn);
      x2 += t.statistic;
      df += t.df;
    }
    c.p_residual = df > 0 ? chi2_sf(x2, df) : 1.0;
    out.candidates.push_back(c);
  }

  if (!(p_independence < alpha)) {
    out.note =
        fmt::format("no phase dependence detected (independence p = {:.3g} >= {})", p_independence, alpha);
    return out;
  }
  for (const PeriodCandidate& c : out.candidates)
    if (c.p_between < alpha && c.p_residual >= alpha) {
      out.P = c.P;
      out.explained = c.explained;
      out.note = fmt::format(
          "smallest divisor P of R whose folded classes differ (p = {:.3g}) while residues within a class do "
          "not (p = {:.3g}); it explains {:.1f}% of the between-residue variance",
          c.p_between, c.p_residual, 100 * c.explained);
      return out;
    }
  out.P = R;
  out.explained = 1.0;
  out.note = fmt::format("phase dependent (p = {:.3g}) but no divisor of R = {} explains the profile",
                         p_independence, R);
  return out;
}

// ---------------------------------------------------------------------------------------------
// the statistics of one journal

double quantile(std::vector<double> v, double q) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const size_t i = static_cast<size_t>(std::floor(pos));
  const double f = pos - double(i);
  return i + 1 < v.size() ? v[i] * (1 - f) + v[i + 1] * f : v[i];
}

namespace {

// mean / worst / best / gap over residues with n > 0 (NaN when none)
struct Summary {
  double mean = std::nan(""), worst = std::nan(""), best = std::nan(""), gap = std::nan("");
  int worst_r = -1, best_r = -1;
};

Summary summarize(const std::vector<int64_t>& c, const std::vector<int64_t>& n) {
  Summary s;
  double sum = 0;
  int k = 0;
  for (size_t r = 0; r < n.size(); ++r) {
    if (n[r] <= 0) continue;
    const double a = double(c[r]) / double(n[r]);
    sum += a;
    ++k;
    if (s.worst_r < 0 || a < s.worst) {
      s.worst = a;
      s.worst_r = int(r);
    }
    if (s.best_r < 0 || a > s.best) {
      s.best = a;
      s.best_r = int(r);
    }
  }
  if (k > 0) {
    s.mean = sum / k;
    s.gap = s.best - s.worst;
  }
  return s;
}

ResidueStat residue_stat(int r, int64_t c, int64_t n) {
  ResidueStat s;
  s.residue = r;
  s.n = n;
  s.correct = c;
  s.acc = n > 0 ? double(c) / double(n) : std::nan("");
  const Interval w = wilson_interval(c, n);
  s.ci_low = w.lo;
  s.ci_high = w.hi;
  return s;
}

}  // namespace

Stats stats_compute(const std::vector<JournalRecord>& records, const StatsOptions& opt) {
  if (records.empty()) fail("journal", "no samples to compute statistics from", "run the evaluation first");
  Stats st;
  st.R = records[0].R;
  st.S = opt.S;
  const int R = st.R;
  for (const JournalRecord& r : records)
    if (r.R != R)
      fail("journal",
           fmt::format("sample {} has R = {} but sample {} has R = {}", r.id, r.R, records[0].id, R),
           "one journal holds one design; use a fresh --out folder per design");
  if (opt.S < 1) fail("stats", "S must be positive", "pass the model's stride, e.g. 8");
  st.n_samples = static_cast<int64_t>(records.size());

  // counts per residue, per cluster, per block
  std::vector<int64_t> c(R, 0), n(R, 0);
  std::map<std::string, size_t> cluster_index;
  std::vector<std::vector<int64_t>> cl_c, cl_n;   // [cluster][residue]
  std::map<int, std::vector<int>> block_all;      // base -> journaled samples per residue (scored or not)
  std::map<int, std::vector<int>> block_outcome;  // base -> outcome per residue, -1 = not scored
  std::vector<int64_t> pos;
  std::vector<int> res;
  for (const JournalRecord& r : records) {
    pos.push_back(r.target_pos);
    res.push_back(r.residue);
    auto& all = block_all[r.base];
    auto& out = block_outcome[r.base];
    if (all.empty()) {
      all.assign(R, 0);
      out.assign(R, -1);
    }
    all[r.residue]++;
    if (!r.scored()) {
      ++st.n_errors;
      continue;
    }
    ++st.n_scored;
    n[r.residue]++;
    c[r.residue] += r.correct() ? 1 : 0;
    out[r.residue] = r.correct() ? 1 : 0;
    auto it = cluster_index.find(r.cluster);
    if (it == cluster_index.end()) {
      it = cluster_index.emplace(r.cluster, cl_c.size()).first;
      cl_c.emplace_back(R, 0);
      cl_n.emplace_back(R, 0);
    }
    cl_n[it->second][r.residue]++;
    cl_c[it->second][r.residue] += r.correct() ? 1 : 0;
  }
  st.n_clusters = static_cast<int64_t>(cl_c.size());
  bool paired = true;
  for (const auto& [b, all] : block_all)
    for (int k : all) paired = paired && k == 1;
  st.design = paired ? "paired" : "independent";

  // per residue and the summary
  for (int r = 0; r < R; ++r) st.per_residue.push_back(residue_stat(r, c[r], n[r]));
  const Summary s = summarize(c, n);
  st.mean = s.mean;
  st.worst = s.worst;
  st.best = s.best;
  st.gap = s.gap;
  st.worst_residue = s.worst_r;
  st.best_residue = s.best_r;

  // cluster bootstrap of mean / worst / best / gap
  st.bootstrap = opt.bootstrap;
  st.bootstrap_seed = opt.seed;
  const double nan = std::nan("");
  st.mean_ci = st.worst_ci = st.best_ci = st.gap_ci = st.gap_ci_percentile = {nan, nan};
  st.gap_bc = nan;
  if (opt.bootstrap > 0 && !cl_c.empty()) {
    std::mt19937_64 rng(opt.seed);
    const uint64_t C = cl_c.size(), limit = UINT64_MAX - UINT64_MAX % C;
    std::vector<double> bm, bw, bb, bg;
    std::vector<int64_t> rc(R), rn(R);
    for (int b = 0; b < opt.bootstrap; ++b) {
      std::fill(rc.begin(), rc.end(), 0);
      std::fill(rn.begin(), rn.end(), 0);
      for (uint64_t i = 0; i < C; ++i) {
        uint64_t x;
        do x = rng();
        while (x >= limit);
        const size_t k = static_cast<size_t>(x % C);
        for (int r = 0; r < R; ++r) {
          rc[r] += cl_c[k][r];
          rn[r] += cl_n[k][r];
        }
      }
      const Summary bs = summarize(rc, rn);
      bm.push_back(bs.mean);
      bw.push_back(bs.worst);
      bb.push_back(bs.best);
      bg.push_back(bs.gap);
    }
    st.mean_ci = {quantile(bm, 0.025), quantile(bm, 0.975)};
    st.worst_ci = {quantile(bw, 0.025), quantile(bw, 0.975)};
    st.best_ci = {quantile(bb, 0.025), quantile(bb, 0.975)};
    st.gap_ci_percentile = {quantile(bg, 0.025), quantile(bg, 0.975)};
    st.gap_bc = gap_bias_corrected(st.gap, st.gap_ci_percentile);
  }
  st.gap_ci = gap_simultaneous_interval(c, n);

  // the gap from noise alone: every residue at the pooled accuracy
  st.gap_null_mean = st.gap_null_q95 = nan;
  if (opt.bootstrap > 0 && st.n_scored > 0) {
    int64_t C = 0;
    for (int r = 0; r < R; ++r) C += c[r];
    const double pooled = double(C) / double(st.n_scored);
    std::mt19937_64 rng(opt.seed ^ 0x6a09e667f3bcc909ull);
    std::vector<double> gaps;
    std::vector<int64_t> sc(R);
    for (int b = 0; b < opt.bootstrap; ++b) {
      for (int r = 0; r < R; ++r)
        sc[r] = n[r] > 0 ? std::binomial_distribution<int64_t>(n[r], pooled)(rng) : 0;
      gaps.push_back(summarize(sc, n).gap);
    }
    double sum = 0;
    for (double g : gaps) sum += g;
    st.gap_null_mean = sum / double(gaps.size());
    st.gap_null_q95 = quantile(gaps, 0.95);
  }

  // folded accuracy and the periodicity check
  std::vector<int64_t> fc(opt.S, 0), fn(opt.S, 0);
  for (int r = 0; r < R; ++r) {
    fc[r % opt.S] += c[r];
    fn[r % opt.S] += n[r];
  }
  for (int q = 0; q < opt.S; ++q) st.folded.push_back(residue_stat(q, fc[q], fn[q]));
  double diff = 0;
  int pairs = 0;
  for (int r = 0; r + opt.S < R; ++r)
    if (n[r] > 0 && n[r + opt.S] > 0) {
      diff += std::abs(double(c[r]) / double(n[r]) - double(c[r + opt.S]) / double(n[r + opt.S]));
      ++pairs;
    }
  st.mean_abs_diff_S = pairs > 0 ? diff / pairs : nan;

  // independence tests: Cochran's Q over the blocks complete in scored samples, chi-square always
  st.chi_square = chi2_homogeneity(c, n);
  std::vector<std::vector<int>> blocks;
  for (const auto& [b, out] : block_outcome)
    if (std::all_of(out.begin(), out.end(), [](int v) { return v >= 0; })) blocks.push_back(out);
  st.cochran = cochran_q(paired ? blocks : std::vector<std::vector<int>>{});
  st.independence = paired && st.cochran.n_used >= 2 ? st.cochran : st.chi_square;
  st.p_value = st.independence.p_value;
  st.period = stats_period(c, n, st.p_value, opt.alpha);

  // achieved position moments of the journaled samples
  std::vector<GroupMoments> g;
  double m = 0, v = 0;
  layout_moments(pos, res, R, &g, &m, &v, &st.pos_mean_range, &st.pos_sd_range);
  for (const GroupMoments& gm : g) {
    st.pos_mean.push_back(gm.mean);
    st.pos_var.push_back(gm.var);
  }
  return st;
}

double stats_pearson(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n = a.size();
  if (n < 2 || b.size() != n) return std::nan("");
  double ma = 0, mb = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return std::nan("");
    ma += a[i] / double(n);
    mb += b[i] / double(n);
  }
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < n; ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : std::nan("");
}

}  // namespace phasescope
