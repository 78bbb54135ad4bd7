// report.cpp — see report.h. Text, JSON, CSV, gnuplot figures and the HTML page of theory runs.
#include "theory/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "core/csv.h"
#include "core/io.h"
#include "report/gnuplot.h"
#include "report/html.h"

namespace phasescope {

using nlohmann::json;

// ----------------------------------------------------------------------------------------------
// small helpers

static std::string set_string(const std::vector<int>& v) {
  if (v.empty()) return "none";
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "}";
}

static std::string collisions_string(const std::vector<std::vector<int>>& groups,
                                     const std::vector<TheoryHead>& heads) {
  if (groups.empty()) return "none";
  std::string s;
  for (const auto& g : groups) {
    if (!s.empty()) s += "; ";
    s += "heads";
    for (int h : g) s += " " + std::to_string(h);
    s += " on offset " + std::to_string(heads[g[0]].key_offset);
  }
  return s;
}

static std::string selections_string(const std::vector<TheoryHead>& heads) {
  std::string s;
  for (size_t h = 0; h < heads.size(); ++h)
    s += fmt::format("{}h{}->{}{}", h ? " " : "", h, heads[h].key_offset, heads[h].retrieval ? "" : "?");
  return s;
}

static std::string head_verdict(const TheoryHead& hd, const TheoryConfig& cfg) {
  if (hd.retrieval) return fmt::format("retrieval head on phase {}", hd.key_offset);
  if (hd.key_mass >= cfg.onehot && hd.value_mass >= cfg.onehot) return "one-hot, but value not at key+1";
  return fmt::format("not one-hot (threshold {})", cfg.onehot);
}

static std::string config_line(const TheoryConfig& c) {
  return fmt::format(
      "{} gates, N={} S={} L={} heads={} kappa={} epsilon={} gamma={} beta={} rho={} lr={} steps<={} "
      "batch={}{}",
      theory_gate_name(c.gate), c.N, c.S, c.L, c.heads, c.kappa, c.epsilon, c.gamma, c.beta, c.rho, c.lr,
      c.steps, c.batch,
      c.coverage > 0 ? fmt::format(" coverage={} (loss = cross-entropy + coverage term)", c.coverage) : "");
}

static double binomial_se(double p, int n) { return n > 0 ? std::sqrt(p * (1.0 - p) / n) : 0.0; }

std::string theory_loss_note(const TheoryConfig& cfg) {
  if (theory_loss_is_exact(cfg))
    return "loss: exact population loss (static gates at epsilon = 0: every context with the same query "
           "offset has "
           "the same loss, so the mean over the S-1 offsets of one canonical context is exact); gradient "
           "steps use "
           "the exact gradient.";
  return fmt::format(
      "loss: sampled estimate, mean cross-entropy over {} fixed seeded contexts (± its standard error); each "
      "gradient step uses a fresh seeded batch of {} contexts (exact population loss needs static gates at "
      "epsilon = 0).",
      cfg.eval_contexts, cfg.batch);
}

// ----------------------------------------------------------------------------------------------
// terminal

std::string theory_format_run(const TheoryRun& run) {
  const TheoryConfig& c = run.cfg;
  const int n = static_cast<int>(run.seeds.size());
  std::ostringstream os;
  os << "theory: " << config_line(c) << "\n";
  os << theory_loss_note(c) << "\n";
  os << fmt::format(
      "phases: queries sit at offsets 0..{} (within-window phases); offset {} is the boundary phase, "
      "never a query\n\n",
      c.S - 2, c.S - 1);
  for (const auto& s : run.seeds) {
    os << fmt::format("seed {}: {} steps, loss {:.4f}{}, {:.3f} s\n", s.seed, s.steps_run, s.loss,
                      s.loss_exact ? " (exact)" : fmt::format(" ± {:.4f}", s.loss_stderr), s.seconds);
    for (size_t h = 0; h < s.heads.size(); ++h) {
      const TheoryHead& hd = s.heads[h];
      os << fmt::format(
          "  head {}: key r={} mass {:.3f} (min {:.3f}), value r={} mass {:.3f} (min {:.3f}) -> {}\n", h,
          hd.key_offset, hd.key_mass, hd.key_min, hd.value_offset, hd.value_mass, hd.value_min,
          head_verdict(hd, c));
    }
    os << fmt::format("  covered {}, uncovered {}, collisions {}\n", set_string(s.covered),
                      set_string(s.uncovered), collisions_string(s.collisions, s.heads));
  }
  const auto count = [&](double frac) { return static_cast<int>(std::lround(frac * n)); };
  os << fmt::format("\nsummary over {} seeds:\n", n);
  os << fmt::format("  converged (every head a retrieval head)  {}/{}\n", count(run.frac_converged), n);
  os << fmt::format("  fully covered (m distinct phases)        {}/{} = {:.2f}\n", count(run.frac_distinct),
                    n, run.frac_distinct);
  os << fmt::format("  all {} within-window phases covered       {}/{}{}\n", c.S - 1,
                    count(run.frac_all_covered), n,
                    c.heads < c.S - 1 ? " (impossible with m < S-1 heads)" : "");
  os << fmt::format(
      "  collision rate (seeds with a collision)  {:.2f} (independent uniform choices: {:.2f})\n",
      run.collision_rate, 1.0 - run.baseline_distinct);
  os << fmt::format("  mean loss                                {:.4f}\n", run.mean_loss);
  os << fmt::format("  runtime                                  {:.3f} s per simulation\n",
                    run.seconds_per_sim);
  return os.str();
}

// Columns of the sweep table (text, CSV and HTML share them).
static std::vector<std::string> sweep_header() {
  return {"N",          "S",         "L",
          "m",          "rho",       "epsilon",
          "seeds",      "converged", "fully_covered",
          "all_phases", "collision", "indep_distinct",
          "loss",       "s_per_sim"};
}

static std::vector<std::string> sweep_row(const TheoryRun& r) {
  const TheoryConfig& c = r.cfg;
  return {std::to_string(c.N),
          std::to_string(c.S),
          std::to_string(c.L),
          std::to_string(c.heads),
          fmt::format("{}", c.rho),
          fmt::format("{}", c.epsilon),
          std::to_string(r.seeds.size()),
          fmt::format("{:.2f}", r.frac_converged),
          fmt::format("{:.2f}", r.frac_distinct),
          fmt::format("{:.2f}", r.frac_all_covered),
          fmt::format("{:.2f}", r.collision_rate),
          fmt::format("{:.2f}", r.baseline_distinct),
          fmt::format("{:.4f}", r.mean_loss),
          fmt::format("{:.3f}", r.seconds_per_sim)};
}

static const char* kSweepLegend =
    "fully_covered: fraction of seeds whose m heads all end as retrieval heads on m distinct phases; "
    "all_phases: "
    "fraction covering every within-window phase 0..S-2 (needs m = S-1); collision: fraction with two "
    "retrieval "
    "heads on one offset; indep_distinct: the chance that m independent uniform choices among S-1 phases are "
    "distinct.";

std::string theory_format_sweep(const TheorySweep& sw) {
  std::ostringstream os;
  const std::vector<std::string> head = sweep_header();
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : sw.runs) rows.push_back(sweep_row(r));
  std::vector<size_t> width(head.size());
  for (size_t j = 0; j < head.size(); ++j) {
    width[j] = head[j].size();
    for (const auto& row : rows) width[j] = std::max(width[j], row[j].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t j = 0; j < cells.size(); ++j)
      os << (j ? "  " : "") << fmt::format("{:>{}}", cells[j], width[j]);
    os << "\n";
  };
  if (!sw.runs.empty()) {
    os << "theory sweep: " << config_line(sw.runs.front().cfg) << " (swept values in the table)\n";
    os << theory_loss_note(sw.runs.front().cfg) << "\n\n";
  }
  line(head);
  for (const auto& row : rows) line(row);
  os << "\n" << kSweepLegend << "\n";
  for (const auto& s : sw.skipped) os << "skipped: " << s << "\n";
  os << fmt::format("sweep: {} configs in {:.1f} s\n", sw.runs.size(), sw.seconds);
  return os.str();
}

// ----------------------------------------------------------------------------------------------
// JSON

json theory_config_json(const TheoryConfig& c) {
  return json{{"N", c.N},
              {"S", c.S},
              {"L", c.L},
              {"heads", c.heads},
              {"kappa", c.kappa},
              {"epsilon", c.epsilon},
              {"coverage", c.coverage},
              {"gamma", c.gamma},
              {"beta", c.beta},
              {"rho", c.rho},
              {"lr", c.lr},
              {"steps", c.steps},
              {"batch", c.batch},
              {"eval_contexts", c.eval_contexts},
              {"onehot", c.onehot},
              {"stop_mass", c.stop_mass},
              {"gates", theory_gate_name(c.gate)}};
}

static json summary_json(const TheoryRun& r) {
  return json{{"seeds", r.seeds.size()},
              {"frac_converged", r.frac_converged},
              {"frac_fully_covered", r.frac_distinct},
              {"frac_all_phases_covered", r.frac_all_covered},
              {"collision_rate", r.collision_rate},
              {"independent_distinct", r.baseline_distinct},
              {"mean_loss", r.mean_loss},
              {"seconds_per_sim", r.seconds_per_sim}};
}

json theory_run_json(const TheoryRun& run) {
  json seeds = json::array();
  for (const auto& s : run.seeds) {
    json heads = json::array();
    for (const auto& h : s.heads)
      heads.push_back({{"key_offset", h.key_offset},
                       {"key_mass", h.key_mass},
                       {"key_min", h.key_min},
                       {"value_offset", h.value_offset},
                       {"value_mass", h.value_mass},
                       {"value_min", h.value_min},
                       {"retrieval", h.retrieval}});
    seeds.push_back({{"seed", s.seed},
                     {"steps", s.steps_run},
                     {"loss", s.loss},
                     {"loss_stderr", s.loss_stderr},
                     {"heads", heads},
                     {"covered", s.covered},
                     {"uncovered", s.uncovered},
                     {"collisions", s.collisions},
                     {"converged", s.converged},
                     {"fully_covered", s.distinct},
                     {"all_phases_covered", s.all_covered},
                     {"seconds", s.seconds}});
  }
  return json{{"config", theory_config_json(run.cfg)},
              {"loss_kind", theory_loss_is_exact(run.cfg) ? "exact" : "sampled"},
              {"loss_note", theory_loss_note(run.cfg)},
              {"summary", summary_json(run)},
              {"seeds", seeds}};
}

json theory_sweep_json(const TheorySweep& sw) {
  json rows = json::array();
  for (const auto& r : sw.runs) {
    json per_seed = json::array();  // compact: what each head selected and how the seed ended
    for (const auto& s : r.seeds) {
      std::vector<int> keys;
      std::vector<bool> retrieval;
      for (const auto& h : s.heads) {
        keys.push_back(h.key_offset);
        retrieval.push_back(h.retrieval);
      }
      per_seed.push_back({{"seed", s.seed},
                          {"key_offsets", keys},
                          {"retrieval", retrieval},
                          {"fully_covered", s.distinct},
                          {"collision", !s.collisions.empty()},
                          {"loss", s.loss},
                          {"steps", s.steps_run},
                          {"seconds", s.seconds}});
    }
    rows.push_back({{"config", theory_config_json(r.cfg)},
                    {"loss_kind", theory_loss_is_exact(r.cfg) ? "exact" : "sampled"},
                    {"summary", summary_json(r)},
                    {"seeds", per_seed}});
  }
  return json{{"axes",
               {{"N", sw.axes.N},
                {"S", sw.axes.S},
                {"heads", sw.axes.heads},
                {"rho", sw.axes.rho},
                {"epsilon", sw.axes.epsilon}}},
              {"swept", sw.swept},
              {"skipped", sw.skipped},
              {"legend", kSweepLegend},
              {"seconds", sw.seconds},
              {"rows", rows}};
}

// ----------------------------------------------------------------------------------------------
// plots

// p^K and p^V of every head over the steps of one seed: M rows, 2 columns.
static PlotFigure trajectory_figure(const TheoryConfig& c, const TheorySeedRun& s) {
  PlotFigure fig;
  fig.title = fmt::format("seed {}: mean p^K_h(r) and p^V_h(r) during gradient flow", s.seed);
  fig.cols = 2;
  fig.width = 1000;
  fig.height = 60 + 260 * c.heads;
  for (int h = 0; h < c.heads; ++h)
    for (int branch = 0; branch < 2; ++branch) {
      PlotPanel p;
      p.title = fmt::format("head {}: {}", h, branch == 0 ? "key p^K(r)" : "value p^V(r)");
      p.xlabel = "step";
      p.ylabel = "probability";
      p.style = PlotStyle::Lines;
      p.ymin = 0.0;
      p.ymax = 1.0;
      for (int r = 0; r < c.S; ++r) {
        PlotSeries ser;
        ser.title = fmt::format("r={}", r);
        for (const auto& pt : s.trajectory) {
          ser.x.push_back(pt.step);
          ser.y.push_back((branch == 0 ? pt.key : pt.value)[static_cast<size_t>(h) * c.S + r]);
        }
        p.series.push_back(ser);
      }
      fig.panels.push_back(p);
    }
  return fig;
}

static PlotPanel loss_panel(const TheoryRun& run) {
  PlotPanel p;
  p.title =
      theory_loss_is_exact(run.cfg) ? "exact population loss" : "loss (batch estimate at each recorded step)";
  p.xlabel = "step";
  p.ylabel = "cross-entropy";
  p.style = PlotStyle::Lines;
  for (size_t k = 0; k < run.seeds.size() && k < 10; ++k) {
    PlotSeries ser;
    ser.title = fmt::format("seed {}", run.seeds[k].seed);
    for (const auto& pt : run.seeds[k].trajectory) {
      ser.x.push_back(pt.step);
      ser.y.push_back(pt.loss);
    }
    p.series.push_back(ser);
  }
  return p;
}

// Fraction of seeds in which each phase ends covered, with binomial standard errors.
static PlotPanel coverage_panel(const TheoryRun& run) {
  const TheoryConfig& c = run.cfg;
  const int n = static_cast<int>(run.seeds.size());
  PlotPanel p;
  p.title = fmt::format("per-phase coverage over {} seeds (phase {} = boundary, never a query)", n, c.S - 1);
  p.xlabel = "phase r (key offset)";
  p.ylabel = "fraction of seeds covered";
  p.style = PlotStyle::Bars;
  p.ymin = 0.0;
  p.ymax = 1.05;
  p.key = false;
  PlotSeries ser;
  for (int r = 0; r < c.S; ++r) {
    int covered = 0;
    for (const auto& s : run.seeds) covered += std::count(s.covered.begin(), s.covered.end(), r) > 0;
    const double frac = static_cast<double>(covered) / n;
    ser.x.push_back(r);
    ser.y.push_back(frac);
    ser.err.push_back(binomial_se(frac, n));
    p.xtics.push_back(
        {static_cast<double>(r), r == c.S - 1 ? std::to_string(r) + " (boundary)" : std::to_string(r)});
  }
  p.series.push_back(ser);
  return p;
}

static double axis_value(const TheoryConfig& c, const std::string& axis) {
  if (axis == "N") return c.N;
  if (axis == "S") return c.S;
  if (axis == "heads") return c.heads;
  if (axis == "rho") return c.rho;
  return c.epsilon;
}

// Runs grouped by the values of `keep` (other swept axes), in numeric order, with labels like "S=4 heads=2".
struct RunGroup {
  std::string label;
  std::vector<const TheoryRun*> runs;
};
static std::vector<RunGroup> group_runs(const TheorySweep& sw, const std::vector<std::string>& keep) {
  std::map<std::vector<double>, RunGroup> groups;
  for (const auto& r : sw.runs) {
    std::vector<double> key;
    std::string label;
    for (const auto& k : keep) {
      key.push_back(axis_value(r.cfg, k));
      label += fmt::format("{}{}={}", label.empty() ? "" : " ", k, axis_value(r.cfg, k));
    }
    groups[key].label = label;
    groups[key].runs.push_back(&r);
  }
  std::vector<RunGroup> out;
  for (auto& g : groups) out.push_back(g.second);
  return out;
}

// Fully-covered fraction vs one swept axis, one series per combination of the other swept axes. When
// that gives more than 6 lines, the series follow one other axis (S first, whose value with m sets the
// independent-choice chance, then heads, N, rho, epsilon) averaged over the rest; failing that, one
// series averaged over everything. Dashed: the independent-choice chance, averaged the same way
// (shown when there are at most 3 series).
static PlotPanel coverage_vs_axis(const TheorySweep& sw, const std::string& axis) {
  std::vector<std::string> others;
  for (const auto& a : sw.swept)
    if (a != axis) others.push_back(a);
  std::vector<RunGroup> groups = group_runs(sw, others);
  std::string averaged;
  if (groups.size() > 6) {
    groups = group_runs(sw, {});
    averaged = "all other axes";
    for (const char* pick : {"S", "heads", "N", "rho", "epsilon"}) {
      if (pick == axis || std::find(others.begin(), others.end(), pick) == others.end()) continue;
      std::vector<RunGroup> g = group_runs(sw, {pick});
      if (g.size() > 6) continue;
      groups = g;
      averaged.clear();
      for (const auto& rest : others)
        if (rest != pick) averaged += (averaged.empty() ? "" : ", ") + rest;
      break;
    }
  }
  PlotPanel p;
  p.title = "fraction of seeds fully covered (m distinct phases) vs " + axis +
            (averaged.empty() ? "" : " (mean over " + averaged + ")");
  p.xlabel = axis;
  p.ylabel = "fraction of seeds";
  p.style = PlotStyle::LinesPoints;
  p.logx = (axis == "N" || axis == "rho");
  p.ymin = 0.0;
  p.ymax = 1.05;
  std::map<double, int> values;  // a labelled tic at every swept value
  for (const auto& r : sw.runs) values[axis_value(r.cfg, axis)] = 1;
  for (const auto& v : values) p.xtics.push_back({v.first, fmt::format("{}", v.first)});
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const RunGroup& g = groups[gi];
    struct Acc {
      double covered = 0, baseline = 0;
      int seeds = 0;
    };
    std::map<double, Acc> at;  // axis value -> sums over the group's runs
    for (const TheoryRun* r : g.runs) {
      Acc& a = at[axis_value(r->cfg, axis)];
      const int n = static_cast<int>(r->seeds.size());
      a.covered += r->frac_distinct * n;
      a.baseline += r->baseline_distinct * n;
      a.seeds += n;
    }
    PlotSeries ser, ref;
    ser.title = g.label.empty() ? "gradient flow" : g.label;
    ref.title = "independent choice" + (g.label.empty() ? "" : " " + g.label);
    ref.dashed = true;
    ser.color = ref.color = static_cast<int>(gi) + 1;  // a group's data and its baseline share a colour
    for (const auto& kv : at) {
      const double frac = kv.second.covered / kv.second.seeds;
      ser.x.push_back(kv.first);
      ser.y.push_back(frac);
      ser.err.push_back(binomial_se(frac, kv.second.seeds));
      ref.x.push_back(kv.first);
      ref.y.push_back(kv.second.baseline / kv.second.seeds);
    }
    p.series.push_back(ser);
    if (groups.size() <= 3) p.series.push_back(ref);
  }
  return p;
}

// ----------------------------------------------------------------------------------------------
// files

static std::string config_table_html(const TheoryConfig& c) {
  const json j = theory_config_json(c);
  std::vector<std::vector<std::string>> rows;
  for (auto it = j.begin(); it != j.end(); ++it) rows.push_back({it.key(), it.value().dump()});
  return html_table({"parameter", "value"}, rows);
}

static std::string trajectories_csv(const TheoryRun& run) {
  CsvTable t{{"seed", "step", "loss", "head", "branch", "offset", "p"}, {}};
  const int M = run.cfg.heads, S = run.cfg.S;
  for (const auto& s : run.seeds)
    for (const auto& pt : s.trajectory)
      for (int h = 0; h < M; ++h)
        for (int branch = 0; branch < 2; ++branch)
          for (int r = 0; r < S; ++r)
            t.rows.push_back(
                {std::to_string(s.seed), std::to_string(pt.step), fmt::format("{:.6g}", pt.loss),
                 std::to_string(h), branch == 0 ? "K" : "V", std::to_string(r),
                 fmt::format("{:.6g}", (branch == 0 ? pt.key : pt.value)[static_cast<size_t>(h) * S + r])});
  return csv_text(t);
}

void theory_write_run(const std::string& dir, const TheoryRun& run) {
  io_make_dirs(dir);
  const TheoryConfig& c = run.cfg;

  // numbers
  io_write_atomic(dir + "/results.json", theory_run_json(run).dump(2) + "\n");
  io_write_atomic(dir + "/trajectories.csv", trajectories_csv(run));

  // plots: the first few seeds' trajectories, the loss, per-phase coverage
  std::vector<std::pair<std::string, std::string>> pngs;  // file, caption
  for (size_t k = 0; k < run.seeds.size() && k < 4; ++k) {
    if (run.seeds[k].trajectory.empty()) continue;
    const std::string name = fmt::format("trajectories_seed{}.png", run.seeds[k].seed);
    plot_render(trajectory_figure(c, run.seeds[k]), dir + "/" + name);
    pngs.push_back({name, fmt::format("seed {}: p^K and p^V of each head (mean over contexts and chunks)",
                                      run.seeds[k].seed)});
  }
  plot_render(loss_panel(run), dir + "/loss.png");
  pngs.push_back({"loss.png", "loss during gradient flow"});
  plot_render(coverage_panel(run), dir + "/coverage.png", 800, 420);
  pngs.push_back({"coverage.png", "fraction of seeds in which each phase ends covered (± binomial s.e.)"});

  // the page
  std::vector<std::vector<std::string>> summary = {
      {"seeds", std::to_string(run.seeds.size())},
      {"converged (every head a retrieval head)", fmt::format("{:.2f}", run.frac_converged)},
      {"fully covered (m distinct phases)", fmt::format("{:.2f}", run.frac_distinct)},
      {"all within-window phases covered", fmt::format("{:.2f}", run.frac_all_covered)},
      {"collision rate", fmt::format("{:.2f}", run.collision_rate)},
      {"collision rate under independent uniform choices",
       fmt::format("{:.2f}", 1.0 - run.baseline_distinct)},
      {"mean loss", fmt::format("{:.4f}", run.mean_loss)},
      {"seconds per simulation", fmt::format("{:.3f}", run.seconds_per_sim)}};
  std::vector<std::vector<std::string>> per_seed;
  for (const auto& s : run.seeds)
    per_seed.push_back({std::to_string(s.seed), std::to_string(s.steps_run), fmt::format("{:.4f}", s.loss),
                        s.loss_exact ? "exact" : fmt::format("{:.4f}", s.loss_stderr),
                        selections_string(s.heads), set_string(s.covered), set_string(s.uncovered),
                        collisions_string(s.collisions, s.heads), fmt::format("{:.3f}", s.seconds)});
  std::string body;
  body +=
      "<p>Idealized retrieval model of the phase-sensitivity paper (§1.7), trained by small-step gradient "
      "descent from a random initialization in a ball of radius rho. " +
      html_escape(theory_loss_note(c)) + "</p>\n";
  body += "<h2>Configuration</h2>\n" + config_table_html(c);
  body += "<h2>Summary</h2>\n" + html_table({"quantity", "value"}, summary);
  body +=
      "<h2>Per seed</h2>\n<p>h&lt;i&gt;-&gt;r: the key offset head i selects (? = not a retrieval "
      "head).</p>\n";
  body += html_table(
      {"seed", "steps", "loss", "± s.e.", "selections", "covered", "uncovered", "collisions", "s"}, per_seed);
  body += "<h2>Plots</h2>\n";
  for (const auto& png : pngs)
    body += "<h3>" + html_escape(png.second) + "</h3>\n" + html_png(dir + "/" + png.first, png.second);
  io_write_atomic(dir + "/report.html",
                  html_page("phasescope theory: gradient flow on the idealized model", body));
}

void theory_write_sweep(const std::string& dir, const TheorySweep& sw) {
  io_make_dirs(dir);

  // numbers
  io_write_atomic(dir + "/results.json", theory_sweep_json(sw).dump(2) + "\n");
  CsvTable csv{sweep_header(), {}};
  for (const auto& r : sw.runs) csv.rows.push_back(sweep_row(r));
  const std::vector<std::vector<std::string>>& rows = csv.rows;
  io_write_atomic(dir + "/sweep.csv", csv_text(csv));

  // plots: coverage vs every swept axis
  std::vector<std::string> pngs;
  for (const auto& axis : sw.swept) {
    const std::string name = "coverage_vs_" + axis + ".png";
    plot_render(coverage_vs_axis(sw, axis), dir + "/" + name, 900, 480);
    pngs.push_back(name);
  }

  // the page
  std::string body;
  if (!sw.runs.empty())
    body += "<p>Base configuration (swept values in the table): " +
            html_escape(config_line(sw.runs.front().cfg)) + ". " +
            html_escape(theory_loss_note(sw.runs.front().cfg)) + "</p>\n";
  body += "<h2>Coverage table</h2>\n" + html_table(csv.header, rows) + "<p>" + html_escape(kSweepLegend) +
          "</p>\n";
  body += fmt::format("<p>{} configs in {:.1f} s.</p>\n", sw.runs.size(), sw.seconds);
  if (!sw.skipped.empty()) {
    body += "<h2>Skipped combinations</h2>\n<ul>\n";
    for (const auto& s : sw.skipped) body += "<li>" + html_escape(s) + "</li>\n";
    body += "</ul>\n";
  }
  if (!pngs.empty()) body += "<h2>Plots</h2>\n";
  for (const auto& png : pngs) body += html_png(dir + "/" + png, png);
  io_write_atomic(dir + "/report.html", html_page("phasescope theory: coverage sweep", body));
}

}  // namespace phasescope
