// gnuplot.cpp — see gnuplot.h. Data files + one script per figure, run as `gnuplot script`.
#include "report/gnuplot.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "core/io.h"

namespace phasescope {

namespace fs = std::filesystem;

std::string plot_find_gnuplot() {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/gnuplot";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// A gnuplot single-quoted string: backslashes are literal, a quote is doubled, no newlines.
static std::string gp_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "''";
    else if (c == '\n' || c == '\r')
      out += ' ';
    else
      out += c;
  }
  return out + "'";
}

// A POSIX shell single-quoted word.
static std::string sh_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

static std::string gp_number(double v) {
  if (std::isnan(v)) return "NaN";
  std::ostringstream os;
  os.precision(10);
  os << v;
  return os.str();
}

static std::string read_file_tail(const fs::path& p, size_t max_chars) {
  const std::string s = io_exists(p.string()) ? io_read_text(p.string()) : "";
  return s.size() > max_chars ? "..." + s.substr(s.size() - max_chars) : s;
}

// Write one series as "x y [err]" lines; returns false when it has no points.
static bool write_series(const PlotSeries& s, const fs::path& file) {
  PS_ASSERT(s.x.size() == s.y.size(), "plot series '" + s.title + "': x and y differ in length");
  PS_ASSERT(s.err.empty() || s.err.size() == s.y.size(), "plot series '" + s.title + "': err length");
  PS_ASSERT(s.ylow.size() == s.yhigh.size() && (s.ylow.empty() || s.ylow.size() == s.y.size()),
            "plot series '" + s.title + "': ylow / yhigh length");
  std::ofstream out(file);
  if (!out)
    fail(file.string(), "cannot write a plot data file", "check that the temporary folder is writable");
  for (size_t i = 0; i < s.x.size(); ++i) {
    out << gp_number(s.x[i]) << ' ' << gp_number(s.y[i]);
    if (!s.ylow.empty())
      out << ' ' << gp_number(s.ylow[i]) << ' ' << gp_number(s.yhigh[i]);
    else if (!s.err.empty())
      out << ' ' << gp_number(s.err[i]);
    out << '\n';
  }
  return !s.x.empty();
}

// The commands for one panel; data files are written next to the script as p<i>_s<j>.dat.
// A heatmap: one data row "x y value" per cell, drawn with image, the values printed on top.
static std::string heatmap_script(const PlotPanel& p, int index, const fs::path& dir) {
  const size_t R = p.heat.size(), C = R ? p.heat[0].size() : 0;
  PS_ASSERT(p.heat_rows.size() == R && p.heat_cols.size() == C, "heatmap labels must match the matrix");
  std::ostringstream gp;
  gp << "set title " << gp_quote(p.title) << "\n";
  gp << "set xlabel " << gp_quote(p.xlabel) << "\nset ylabel " << gp_quote(p.ylabel) << "\n";
  gp << "unset grid\nunset logscale x\nunset key\nset offsets 0, 0, 0, 0\n";
  if (R == 0 || C == 0)
    return gp.str() +
           "set xrange [0:1]\nset yrange [0:1]\nset label 1 'no data' at graph 0.5,0.5 center\nplot -1 "
           "notitle\nunset label 1\n";
  const fs::path file = dir / ("p" + std::to_string(index) + "_heat.dat");
  const fs::path labels = dir / ("p" + std::to_string(index) + "_heat_labels.dat");  // finite cells only
  double amax = 0;
  {
    std::ofstream f(file), g(labels);
    for (size_t i = 0; i < R; ++i) {
      PS_ASSERT(p.heat[i].size() == C, "heatmap rows must have equal lengths");
      for (size_t j = 0; j < C; ++j) {
        const double v = p.heat[i][j];
        f << j << " " << (R - 1 - i) << " " << (std::isfinite(v) ? gp_number(v) : std::string("NaN")) << "\n";
        if (!std::isfinite(v)) continue;
        amax = std::max(amax, std::fabs(v));
        g << j << " " << (R - 1 - i) << " " << gp_number(v) << "\n";
      }
      f << "\n";
    }
    g << "-9 -9 0\n";  // never empty (outside the ranges)
  }
  if (amax == 0) amax = 1;
  gp << "set xrange [-0.5:" << C - 0.5 << "]\nset yrange [-0.5:" << R - 0.5 << "]\n";
  gp << "set xtics (";
  for (size_t j = 0; j < C; ++j) gp << (j ? ", " : "") << gp_quote(p.heat_cols[j]) << " " << j;
  gp << ")\nset ytics (";
  for (size_t i = 0; i < R; ++i) gp << (i ? ", " : "") << gp_quote(p.heat_rows[i]) << " " << (R - 1 - i);
  gp << ")\n";
  if (p.heat_diverging)
    gp << "set palette defined (-1 '#2166ac', 0 '#f7f7f7', 1 '#b2182b')\nset cbrange [" << gp_number(-amax)
       << ":" << gp_number(amax) << "]\n";
  else
    gp << "set palette defined (0 '#f7f7f7', 1 '#b2182b')\nset cbrange [0:" << gp_number(amax) << "]\n";
  const std::string q = gp_quote(file.string());
  gp << "plot " << q << " using 1:2:3 with image";
  if (!p.heat_label_format.empty())
    gp << ", \\\n     " << gp_quote(labels.string()) << " using 1:2:(sprintf("
       << gp_quote(p.heat_label_format) << ", $3)) with labels font ',8'";
  gp << "\n";
  return gp.str();
}

static std::string panel_script(const PlotPanel& p, int index, const fs::path& dir) {
  if (p.style == PlotStyle::Heatmap) return heatmap_script(p, index, dir);
  std::ostringstream gp;
  gp << "set title " << gp_quote(p.title) << "\n";
  gp << "set xlabel " << gp_quote(p.xlabel) << "\nset ylabel " << gp_quote(p.ylabel) << "\n";
  gp << "set grid\n" << (p.logx ? "set logscale x\n" : "unset logscale x\n") << "set ytics autofreq\n";
  // x range: bars autoscale around their boxes; lines fit the data with a small margin
  if (p.style == PlotStyle::Bars)
    gp << "set xrange [*:*]\nset autoscale x\nset offsets 0, 0, 0, 0\n";
  else
    gp << "set xrange [*:*]\nset autoscale xfix\nset offsets graph 0.04, graph 0.04, 0, 0\n";
  gp << "set yrange [" << (std::isnan(p.ymin) ? "*" : gp_number(p.ymin)) << ":"
     << (std::isnan(p.ymax) ? "*" : gp_number(p.ymax)) << "]\n";
  if (p.xtics.empty()) {
    gp << "set xtics autofreq\n";
  } else {
    gp << "set xtics (";
    for (size_t i = 0; i < p.xtics.size(); ++i)
      gp << (i ? ", " : "") << gp_quote(p.xtics[i].second) << " " << gp_number(p.xtics[i].first);
    gp << ")\n";
  }
  if (!p.key)
    gp << "unset key\n";
  else
    gp << (p.key_outside ? "set key outside right top font ',9'\n" : "set key inside top right font ',9'\n");

  // which series have points
  std::vector<int> live;
  for (size_t j = 0; j < p.series.size(); ++j) {
    const fs::path file = dir / ("p" + std::to_string(index) + "_s" + std::to_string(j) + ".dat");
    if (write_series(p.series[j], file)) live.push_back(static_cast<int>(j));
  }
  if (live.empty()) {  // an empty frame with a note instead of a gnuplot error
    gp << "set xrange [0:1]\nset yrange [0:1]\nset label 1 'no data' at graph 0.5,0.5 center\n"
       << "plot -1 notitle\nunset label 1\n";
    return gp.str();
  }

  const int n = static_cast<int>(live.size());
  const double bw = 0.8 / n;  // bar width when series sit side by side
  if (p.style == PlotStyle::Bars)
    gp << "set style fill solid 0.6 border -1\nset boxwidth " << gp_number(bw) << "\n";
  gp << "plot ";
  for (int k = 0; k < n; ++k) {
    const PlotSeries& s = p.series[live[k]];
    const std::string file =
        gp_quote((dir / ("p" + std::to_string(index) + "_s" + std::to_string(live[k]) + ".dat")).string());
    const std::string title = s.title.empty() ? "notitle" : "title " + gp_quote(s.title);
    const std::string color =
        " lc " + std::to_string(s.color > 0 ? s.color : k + 1) + (s.dashed ? " dt 2" : "");
    const bool asym = !s.ylow.empty();  // columns: x y ylow yhigh
    const bool err = asym || !s.err.empty();
    const std::string ecols = asym ? ":3:4" : ":3";
    if (k) gp << ", \\\n     ";
    switch (p.style) {
      case PlotStyle::Lines:
        gp << file
           << (err ? " using 1:2" + ecols + " with yerrorlines" : std::string(" using 1:2 with lines"))
           << " lw 2" << color << " " << title;
        break;
      case PlotStyle::LinesPoints:
        gp << file
           << (err ? " using 1:2" + ecols + " with yerrorlines" : std::string(" using 1:2 with linespoints"))
           << " lw 2 pt 7 ps 0.7" << color << " " << title;
        break;
      case PlotStyle::Points:
        gp << file
           << (err ? " using 1:2" + ecols + " with yerrorbars" : std::string(" using 1:2 with points"))
           << " pt 7 ps 0.9" << color << " " << title;
        break;
      case PlotStyle::Heatmap:
        break;  // handled by heatmap_script
      case PlotStyle::Bars: {
        const std::string shift = gp_number((k - (n - 1) / 2.0) * bw);
        gp << file << " using ($1+" << shift << "):2 with boxes" << color << " " << title;
        if (err)
          gp << ", \\\n     " << file << " using ($1+" << shift << "):2" << ecols
             << " with yerrorbars lc rgb 'black' pt 0 notitle";
        break;
      }
    }
  }
  gp << "\n";
  return gp.str();
}

void plot_render(const PlotFigure& fig, const std::string& png_path) {
  // find gnuplot first: the most likely failure on a fresh machine
  const std::string gnuplot = plot_find_gnuplot();
  if (gnuplot.empty())
    fail(png_path, "cannot draw the plot: the gnuplot program is not on PATH",
         "install gnuplot-nox (scripts/setup.sh)");
  PS_ASSERT(!fig.panels.empty() && fig.cols >= 1, "a figure needs at least one panel and one column");

  // a private temporary folder for the data and the script
  std::string tmpl = (fs::temp_directory_path() / "phasescope-plot-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr)
    fail(tmpl, "cannot create a temporary folder for gnuplot", "check TMPDIR and free disk space");
  const fs::path dir(tmpl);
  const fs::path out_png = fs::absolute(png_path);

  // the script: terminal, output, then each panel (in a multiplot grid when there are several)
  std::ostringstream gp;
  gp << "set terminal pngcairo size " << fig.width << "," << fig.height << " noenhanced font 'sans,10'\n";
  gp << "set output " << gp_quote(out_png.string()) << "\n";
  const int n = static_cast<int>(fig.panels.size());
  const bool multi = n > 1 || !fig.title.empty();
  if (multi) {
    const int rows = (n + fig.cols - 1) / fig.cols;
    gp << "set multiplot layout " << rows << "," << std::min(fig.cols, n);
    if (!fig.title.empty()) gp << " title " << gp_quote(fig.title);
    gp << "\n";
  }
  for (int i = 0; i < n; ++i) gp << panel_script(fig.panels[i], i, dir);
  if (multi) gp << "unset multiplot\n";
  gp << "set output\n";
  const fs::path script = dir / "plot.gp";
  {
    std::ofstream s(script);
    s << gp.str();
    if (!s)
      fail(script.string(), "cannot write the gnuplot script", "check that the temporary folder is writable");
  }

  // run it and check both the exit status and the file
  const fs::path log = dir / "gnuplot.log";
  const std::string cmd =
      sh_quote(gnuplot) + " " + sh_quote(script.string()) + " > " + sh_quote(log.string()) + " 2>&1";
  const int status = std::system(cmd.c_str());
  const bool exited_ok = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::error_code ec;
  const bool png_ok = fs::exists(out_png, ec) && fs::file_size(out_png, ec) > 8;
  if (!exited_ok || !png_ok)
    fail(png_path,
         "gnuplot failed (" +
             (exited_ok ? std::string("no PNG written") : "exit status " + std::to_string(status)) +
             "); script kept at " + script.string() + "; gnuplot said: " + read_file_tail(log, 1500),
         "check that the output folder exists and that gnuplot has the pngcairo terminal (gnuplot-nox)");
  fs::remove_all(dir, ec);
}

void plot_render(const PlotPanel& panel, const std::string& png_path, int width, int height) {
  PlotFigure fig;
  fig.panels.push_back(panel);
  fig.width = width;
  fig.height = height;
  plot_render(fig, png_path);
}

}  // namespace phasescope
