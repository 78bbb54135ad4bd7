// gnuplot.h — render line and bar plots to PNG through the gnuplot program (Debian gnuplot-nox,
// terminal pngcairo). Each call writes the data files and a script to a fresh temporary folder, runs
// gnuplot, checks its exit status and that a PNG came out, and removes the folder (kept on failure, and
// named in the error, so the script can be rerun by hand). Thread-safe: calls share nothing.
// Not a plotting library: no pixels are drawn here, and no styling beyond what reports need.
// Torch-free; usable by any module.
#pragma once
#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace phasescope {

enum class PlotStyle {
  Lines,        // a line through the points (with error bars: yerrorlines)
  LinesPoints,  // line and markers
  Points,       // markers only (with error bars: yerrorbars)
  Bars,         // boxes, series side by side at each x; x values are categories one unit apart
  Heatmap,      // the panel's `heat` matrix as coloured cells with their values printed; no series
};

// One series: n points, optionally with symmetric y error bars.
struct PlotSeries {
  std::string title;                // legend entry ("" = none)
  std::vector<double> x, y;         // (n); NaN y values are skipped by gnuplot
  std::vector<double> err;          // (n) half-widths of the y error bars, or empty for none
  bool dashed = false;              // dashed line (reference curves, baselines)
  std::vector<double> ylow, yhigh;  // (n) asymmetric error bars: absolute lower / upper ends (e.g. Wilson
                                    // intervals); when set they are drawn instead of err
  int color = 0;                    // gnuplot colour index (lc N) to pair series, e.g. data and its baseline;
                                    // 0 = by position in the panel
};

struct PlotPanel {
  std::string title, xlabel, ylabel;
  PlotStyle style = PlotStyle::LinesPoints;
  std::vector<PlotSeries> series;
  bool logx = false;
  double ymin = NAN, ymax = NAN;                      // NaN: automatic
  std::vector<std::pair<double, std::string>> xtics;  // labelled tics (e.g. bar categories); empty: auto
  bool key = true;                                    // show the legend
  bool key_outside = true;                            // legend right of the plot (never over the data)
  // Heatmap only: heat[i][j] is row i (drawn top to bottom), column j; NaN cells stay blank.
  std::vector<std::vector<double>> heat;
  std::vector<std::string> heat_rows, heat_cols;  // labels (sizes = rows, columns)
  bool heat_diverging = true;                     // blue-white-red around 0 (else white to red)
  std::string heat_label_format = "%.0f";  // printf format of the value printed in each cell; "" = none
};

// Several panels in a grid, row-major, in one PNG.
struct PlotFigure {
  std::string title;  // above all panels ("" = none)
  std::vector<PlotPanel> panels;
  int cols = 1;
  int width = 900, height = 500;  // pixels of the whole figure
};

// Render to png_path (its folder must exist). Throws phasescope::Error when gnuplot is not on PATH
// ("install gnuplot-nox (scripts/setup.sh)") or fails (message: the kept script and gnuplot's output).
void plot_render(const PlotFigure& fig, const std::string& png_path);
void plot_render(const PlotPanel& panel, const std::string& png_path, int width = 900, int height = 500);

// Full path of the gnuplot executable found on PATH, or "" when there is none.
std::string plot_find_gnuplot();

}  // namespace phasescope
