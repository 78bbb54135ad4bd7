// measures.cpp — see measures.h.
#include "explain/measures.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "eval/stats.h"

namespace phasescope {

static double entropy(const std::vector<double>& p) {
  double h = 0;
  for (double v : p)
    if (v > 0) h -= v * std::log(v);
  return h;
}

double gate_static_concentration(const std::vector<std::vector<double>>& windows) {
  PS_ASSERT(!windows.empty(), "gate concentration needs at least one window");
  std::vector<double> mean(windows[0].size(), 0.0);
  for (const auto& w : windows)
    for (size_t i = 0; i < w.size(); ++i) mean[i] += w[i] / double(windows.size());
  return std::exp(entropy(mean));
}

double gate_window_concentration(const std::vector<std::vector<double>>& windows) {
  PS_ASSERT(!windows.empty(), "gate concentration needs at least one window");
  double s = 0;
  for (const auto& w : windows) s += std::exp(entropy(w));
  return s / double(windows.size());
}

std::vector<double> gate_profile(const std::vector<std::vector<double>>& windows, int S) {
  PS_ASSERT(!windows.empty() && S > 0, "gate profile needs windows and a stride");
  std::vector<double> g(size_t(S), 0.0);
  for (const auto& w : windows)
    for (size_t i = 0; i < w.size(); ++i) g[i % size_t(S)] += w[i] / double(windows.size());
  for (double& v : g) v *= double(S);  // over the uniform share 1/S
  return g;
}

double r_squared(const std::vector<double>& observed, const std::vector<double>& predicted,
                 const std::vector<int>& skip) {
  PS_ASSERT(observed.size() == predicted.size(), "r_squared: sizes differ");
  std::vector<size_t> keep;
  for (size_t i = 0; i < observed.size(); ++i)
    if (std::find(skip.begin(), skip.end(), int(i)) == skip.end()) keep.push_back(i);
  if (keep.empty()) return std::nan("");
  double mean = 0;
  for (size_t i : keep) mean += observed[i] / double(keep.size());
  double ss_res = 0, ss_tot = 0;
  for (size_t i : keep) {
    ss_res += (observed[i] - predicted[i]) * (observed[i] - predicted[i]);
    ss_tot += (observed[i] - mean) * (observed[i] - mean);
  }
  return ss_tot > 0 ? 1.0 - ss_res / ss_tot : std::nan("");
}

PhaseAccuracy phase_accuracy(const Stats& stats) {
  PhaseAccuracy out;
  int64_t total = 0, total_ok = 0;
  for (const ResidueStat& f : stats.folded) {  // (S) pooled over r with r % S = phase
    out.acc.push_back(f.n > 0 ? f.acc : std::nan(""));
    out.lo.push_back(f.n > 0 ? f.ci_low : std::nan(""));
    out.hi.push_back(f.n > 0 ? f.ci_high : std::nan(""));
    out.n.push_back(f.n);
    total += f.n;
    total_ok += f.correct;
  }
  out.mean = total ? double(total_ok) / double(total) : std::nan("");
  return out;
}

}  // namespace phasescope
