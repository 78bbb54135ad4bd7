// phase_plot.cpp — see phase_plot.h.
#include "report/phase_plot.h"

#include <algorithm>

#include "core/check.h"
#include "report/gnuplot.h"

namespace phasescope {

void plot_phase_profiles(const std::string& title, const std::string& xlabel,
                         const std::vector<PhaseProfile>& profiles, const std::string& png_path, int width,
                         int height) {
  PS_ASSERT(!profiles.empty(), "plot_phase_profiles: no profiles");
  size_t K = 0;
  for (const PhaseProfile& p : profiles) K = std::max(K, p.acc.size());
  PlotPanel panel;
  panel.title = title;
  panel.xlabel = xlabel;
  panel.ylabel = "top-1 accuracy (%)";
  panel.style = PlotStyle::Bars;
  panel.ymin = 0;
  panel.ymax = 105;
  panel.key = profiles.size() > 1 || !profiles[0].name.empty();
  const size_t step = K > 32 ? 2 : 1;  // label every tic up to 32 categories
  for (size_t x = 0; x < K; x += step) panel.xtics.emplace_back(double(x), std::to_string(x));
  for (const PhaseProfile& p : profiles) {
    PS_ASSERT(p.lo.size() == p.hi.size() && (p.lo.empty() || p.lo.size() == p.acc.size()),
              "plot_phase_profiles: '" + p.name + "' interval length differs from acc");
    PlotSeries s;
    s.title = p.name;
    for (size_t x = 0; x < p.acc.size(); ++x) {
      s.x.push_back(double(x));
      s.y.push_back(100 * p.acc[x]);
      if (!p.lo.empty()) {
        s.ylow.push_back(100 * p.lo[x]);
        s.yhigh.push_back(100 * p.hi[x]);
      }
    }
    panel.series.push_back(s);
  }
  plot_render(panel, png_path, width, height);
}

}  // namespace phasescope
