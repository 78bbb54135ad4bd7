// explain_report.cpp — see explain_report.h.
#include "explain/explain_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/csv.h"
#include "core/io.h"
#include "report/document.h"
#include "report/gnuplot.h"
#include "report/html.h"

namespace phasescope {

using json = nlohmann::json;

namespace {

std::string num(double v, const char* f = "{:.1f}") {
  return std::isfinite(v) ? fmt::format(fmt::runtime(f), v) : "—";
}

json nan_array(const std::vector<double>& v) {
  json j = json::array();
  for (double x : v) j.push_back(std::isfinite(x) ? json(x) : json(nullptr));
  return j;
}

json phase_json(const PhaseAccuracy& a) {
  json j;
  j["acc"] = json::array();
  for (double v : a.acc) j["acc"].push_back(std::isfinite(v) ? json(v) : json(nullptr));
  j["lo"] = nan_array(a.lo);  // 95% Wilson interval per phase
  j["hi"] = nan_array(a.hi);
  j["n"] = a.n;
  j["mean"] = a.mean;
  return j;
}

}  // namespace

void explain_write_outputs(const ExplainResults& r, const std::string& out_dir) {
  json j;
  j["model"] = r.model;
  j["S"] = r.S;
  j["samples"] = r.samples;
  j["calib_samples"] = r.calib_samples;
  j["clean"] = phase_json(r.clean);
  for (const auto& k : r.knockouts)
    j["knockouts"].push_back({{"label", k.label},
                              {"layer", k.layer},
                              {"kv_head", k.kv_head},
                              {"heads", k.heads},
                              {"acc", phase_json(k.acc)},
                              {"rel_change_pct", nan_array(k.rel)}});
  for (const auto& g : r.gates)
    j["gates"].push_back({{"layer", g.layer},
                          {"branch", g.branch},
                          {"kv_head", g.kv_head},
                          {"W", g.W},
                          {"S", g.S},
                          {"static_concentration", g.static_conc},
                          {"window_concentration", g.window_conc},
                          {"profile", g.profile},
                          {"peak", g.peak}});
  for (const auto& c : r.cycling)
    j["cycling"].push_back(
        {{"layer", c.layer},
         {"delta", c.delta},
         {"acc", phase_json(c.acc)},
         {"predicted", nan_array(c.predicted)},
         {"r2", std::isfinite(c.r2) ? json(c.r2) : json(nullptr)},
         {"r2_no_boundary", std::isfinite(c.r2_no_boundary) ? json(c.r2_no_boundary) : json(nullptr)}});
  j["cycling_note"] = r.cycling_note;
  io_write_atomic(out_dir + "/explain.json", j.dump(1) + "\n");

  auto str = [](auto x) { return fmt::format("{}", x); };
  CsvTable ko{{"row", "layer", "kv_head", "phase", "n", "clean_acc", "clean_lo", "clean_hi", "knockout_acc",
               "knockout_lo", "knockout_hi", "rel_change_pct"},
              {}};
  for (const auto& k : r.knockouts)
    for (size_t p = 0; p < size_t(r.S); ++p)
      ko.rows.push_back({k.label, str(k.layer), str(k.kv_head), str(p), str(k.acc.n[p]), str(r.clean.acc[p]),
                         str(r.clean.lo[p]), str(r.clean.hi[p]), str(k.acc.acc[p]), str(k.acc.lo[p]),
                         str(k.acc.hi[p]), csv_num(k.rel[p])});
  io_write_atomic(out_dir + "/knockout.csv", csv_text(ko));
  const int maxS =
      r.gates.empty()
          ? 0
          : std::max_element(r.gates.begin(), r.gates.end(), [](auto& a, auto& b) { return a.S < b.S; })->S;
  CsvTable gates{
      {"layer", "branch", "kv_head", "W", "S", "static_concentration", "window_concentration", "peak"}, {}};
  for (int p = 0; p < maxS; ++p) gates.header.push_back(fmt::format("g{}", p));
  for (const auto& g : r.gates) {
    std::vector<std::string> line = {str(g.layer), g.branch,           str(g.kv_head),     str(g.W),
                                     str(g.S),     str(g.static_conc), str(g.window_conc), str(g.peak)};
    for (int p = 0; p < maxS; ++p) line.push_back(p < g.S ? str(g.profile[size_t(p)]) : "");
    gates.rows.push_back(line);
  }
  io_write_atomic(out_dir + "/gates.csv", csv_text(gates));
  CsvTable cyc{{"delta", "phase", "acc", "predicted"}, {}};
  for (const auto& c : r.cycling)
    for (int p = 0; p < r.S; ++p)
      cyc.rows.push_back({str(c.delta), str(p), str(c.acc.acc[size_t(p)]), str(c.predicted[size_t(p)])});
  io_write_atomic(out_dir + "/cycling.csv", csv_text(cyc));
}

namespace {

std::vector<std::pair<double, std::string>> phase_tics(int S) {
  std::vector<std::pair<double, std::string>> t;
  for (int p = 0; p < S; ++p) t.push_back({double(p), std::to_string(p)});
  return t;
}

void draw(const ExplainResults& r, const std::string& out_dir) {
  // knockout heatmap: rows = layer / KV head, columns = phase
  {
    PlotPanel p;
    p.style = PlotStyle::Heatmap;
    p.title = fmt::format("{}: knockout by mean replacement, % change in accuracy per phase", r.model);
    p.xlabel = fmt::format("phase of the target (t mod {})", r.S);
    p.ylabel = "knocked out";
    for (const auto& k : r.knockouts) {
      p.heat.push_back(k.rel);
      p.heat_rows.push_back(k.label);
    }
    for (int s = 0; s < r.S; ++s) p.heat_cols.push_back(std::to_string(s));
    if (!(r.clean.mean > 0))  // every cell NaN: say why the map is blank
      p.title += " (blank: clean accuracy is 0 at every phase, so no relative change is defined)";
    plot_render(p, out_dir + "/knockout.png", 800, 120 + 60 * int(std::max<size_t>(1, r.knockouts.size())));
  }
  // gate profiles: one panel per layer, a series per branch and KV head (none: no compressed branch)
  if (!r.gates.empty()) {
    PlotFigure fig;
    fig.title = r.model + ": gate profiles g(r) = gate mass at phase r / uniform share";
    std::vector<int> layers;
    for (const auto& g : r.gates)
      if (std::find(layers.begin(), layers.end(), g.layer) == layers.end()) layers.push_back(g.layer);
    for (int l : layers) {
      PlotPanel p;
      p.title = fmt::format("layer {}", l);
      p.xlabel = "phase r";
      p.ylabel = "g(r)";
      for (const auto& g : r.gates) {
        if (g.layer != l) continue;
        PlotSeries s;
        s.title = fmt::format("{} kv{} (static {:.2f}, window {:.2f})", g.branch, g.kv_head, g.static_conc,
                              g.window_conc);
        for (int q = 0; q < g.S; ++q) {
          s.x.push_back(q);
          s.y.push_back(g.profile[size_t(q)]);
        }
        p.series.push_back(s);
        p.xtics = phase_tics(g.S);
      }
      fig.panels.push_back(p);
    }
    fig.cols = 1;
    fig.height = 320 * int(fig.panels.size());
    plot_render(fig, out_dir + "/gate_profiles.png");
  }
  // cycling: observed vs predicted per delta (none: skipped, the report says why)
  if (!r.cycling.empty()) {
    PlotFigure fig;
    fig.title = r.model + ": gate cycling, A_delta(r) (solid) vs A_0((r - delta) mod S) (dashed)";
    for (const auto& c : r.cycling) {
      PlotPanel p;
      p.title = fmt::format("delta {:+d}: R^2 {} (without boundary {})", c.delta, num(c.r2, "{:.2f}"),
                            num(c.r2_no_boundary, "{:.2f}"));
      p.xlabel = "phase r";
      p.ylabel = "accuracy";
      p.ymin = 0;
      p.ymax = 1;
      p.key = false;
      PlotSeries o, q;
      for (int s = 0; s < r.S; ++s) {
        o.x.push_back(s);
        o.y.push_back(c.acc.acc[size_t(s)]);
        q.x.push_back(s);
        q.y.push_back(c.predicted[size_t(s)]);
      }
      o.color = 1;
      q.color = 2;
      q.dashed = true;
      p.series = {o, q};
      p.xtics = phase_tics(r.S);
      fig.panels.push_back(p);
    }
    fig.cols = std::min<int>(3, int(fig.panels.size()));
    fig.width = 1100;
    fig.height = 300 * int((fig.panels.size() + size_t(fig.cols) - 1) / size_t(fig.cols));
    plot_render(fig, out_dir + "/cycling.png");
  }
}

}  // namespace

std::string explain_summary(const ExplainResults& r) {
  std::string s = fmt::format("{}: {} evaluation prompts, {} calibration prompts, S = {}\n", r.model,
                              r.samples, r.calib_samples, r.S);
  s += "accuracy per phase (clean)      ";
  for (double v : r.clean.acc) s += fmt::format("{:>7}", num(100 * v));
  s += fmt::format("   mean {:.1f}%\n", 100 * r.clean.mean);
  s += "knockout: % change per phase\n";
  for (const auto& k : r.knockouts) {
    s += fmt::format("  {:<30}", k.label + " (heads " + std::to_string(k.heads.front()) + "-" +
                                     std::to_string(k.heads.back()) + ")");
    for (double v : k.rel) s += fmt::format("{:>7}", num(v, "{:+.0f}"));
    s += fmt::format("   acc {:.1f}%\n", 100 * k.acc.mean);
  }
  s += "gates: static / per-window concentration (1 = one-hot .. W = uniform), profile g(r)\n";
  for (const auto& g : r.gates) {
    s += fmt::format("  L{} {:<2} kv{}  W={} {:>5.2f} {:>5.2f}  g:", g.layer, g.branch, g.kv_head, g.W,
                     g.static_conc, g.window_conc);
    for (double v : g.profile) s += fmt::format(" {:.2f}", v);
    s += fmt::format("  peak {}\n", g.peak);
  }
  if (r.cycling.empty()) s += "gate cycling skipped: " + r.cycling_note + "\n";
  for (const auto& c : r.cycling) {
    s += fmt::format("cycling delta {:+d}: acc", c.delta);
    for (double v : c.acc.acc) s += fmt::format("{:>6}", num(100 * v, "{:.0f}"));
    s += fmt::format("  R^2 {} (without boundary phase {})\n", num(c.r2, "{:.2f}"),
                     num(c.r2_no_boundary, "{:.2f}"));
  }
  return s;
}

ReportSection explain_report_section(const ExplainResults& r, const std::string& out_dir,
                                     const std::string& id) {
  ReportSection sec;
  sec.id = id;
  sec.title = "Why: knockouts, gate profiles, gate cycling (" + r.model + ")";
  std::string h;
  h += "<p>" +
       html_escape(
           fmt::format("{} evaluation prompts (lookup layout, phases balanced), {} calibration prompts "
                       "from another seed. Phase r = target position mod {}.",
                       r.samples, r.calib_samples, r.S)) +
       "</p>";
  std::vector<std::string> head = {"row"};
  for (int p = 0; p < r.S; ++p) head.push_back("r=" + std::to_string(p));
  head.push_back("mean");
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> clean = {"clean accuracy %"};
  for (double v : r.clean.acc) clean.push_back(num(100 * v));
  clean.push_back(num(100 * r.clean.mean));
  rows.push_back(clean);
  for (const auto& k : r.knockouts) {
    std::vector<std::string> row = {k.label + " knockout: % change"};
    for (double v : k.rel) row.push_back(num(v, "{:+.0f}"));
    row.push_back(num(100 * (k.acc.mean - r.clean.mean) / r.clean.mean, "{:+.0f}"));
    rows.push_back(row);
  }
  h += "<h3>Knockout by mean replacement</h3>" + html_table(head, rows);
  h += html_png(out_dir + "/knockout.png", "knockout heatmap");
  h += "<h3>Gate concentration and profiles</h3>";
  std::vector<std::vector<std::string>> grows;
  for (const auto& g : r.gates) {
    std::string prof;
    for (double v : g.profile) prof += fmt::format("{}{:.2f}", prof.empty() ? "" : " ", v);
    grows.push_back({fmt::format("L{}", g.layer), g.branch, std::to_string(g.kv_head), std::to_string(g.W),
                     fmt::format("{:.2f}", g.static_conc), fmt::format("{:.2f}", g.window_conc), prof,
                     std::to_string(g.peak)});
  }
  h += html_table(
      {"layer", "branch", "kv head", "W", "static conc.", "per-window conc.", "profile g(r)", "peak"}, grows);
  if (r.gates.empty())
    h += "<p>No compressed branch: this model has no gates to profile.</p>";
  else
    h += html_png(out_dir + "/gate_profiles.png", "gate profiles");
  h += "<h3>Gate cycling</h3>";
  if (r.cycling.empty()) {
    h += "<p>" + html_escape("skipped: " + r.cycling_note) + "</p>";
  } else {
    std::vector<std::vector<std::string>> crows;
    for (const auto& c : r.cycling)
      crows.push_back({fmt::format("{:+d}", c.delta), num(100 * c.acc.mean), num(c.r2, "{:.2f}"),
                       num(c.r2_no_boundary, "{:.2f}")});
    h += html_table({"delta", "mean accuracy %", "R^2", "R^2 without boundary phase"}, crows);
    h += html_png(out_dir + "/cycling.png", "gate cycling");
  }
  sec.html = h;
  return sec;
}

void explain_write_report(const ExplainResults& r, const std::string& out_dir) {
  draw(r, out_dir);
  ReportDoc doc;
  doc.title = "phasescope explain: " + r.model;
  report_add_section(doc, explain_report_section(r, out_dir));
  report_write(doc, out_dir + "/report.html");
}

}  // namespace phasescope
