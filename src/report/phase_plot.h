// phase_plot.h — the figure of a phase evaluation: accuracy per residue (or folded phase) as bars
// with interval error bars (asymmetric, e.g. Wilson), one bar series per model/run, drawn by gnuplot
// (pngcairo) through gnuplot.h. Inputs are fractions in [0, 1]; the axis shows percent.
// Not here: where the numbers come from (eval/stats.h) or how the PNG is embedded (html.h).
#pragma once
#include <string>
#include <vector>

namespace phasescope {

struct PhaseProfile {
  std::string name;            // legend entry (model, protocol)
  std::vector<double> acc;     // (K) accuracy per residue/phase index 0..K-1; NaN = no data
  std::vector<double> lo, hi;  // (K) interval ends, or empty for no error bars
};

// Bars at x = 0..K-1 (K = the longest profile), series side by side; y from 0 to 100 %.
void plot_phase_profiles(const std::string& title, const std::string& xlabel,
                         const std::vector<PhaseProfile>& profiles, const std::string& png_path,
                         int width = 1000, int height = 420);

}  // namespace phasescope
