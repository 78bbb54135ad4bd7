// explain.cpp — see explain.h. Shapes: prompts [B, T] (one length per layout), head outputs
// o [B, T, H, D], gate weights alpha [B, N, W, Hkv, C] (C = 1 scalar gates, D vector gates / channels).
#include "explain/explain.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <unordered_map>
#include <ostream>

#include "attention/attention.h"
#include "core/check.h"
#include "core/io.h"
#include "eval/journal.h"
#include "eval/model_backend.h"
#include "eval/runner.h"
#include "eval/stats.h"
#include "model/load.h"
#include "model/model.h"
#include "report/document.h"
#include "report/gnuplot.h"
#include "report/html.h"

namespace phasescope {

using json = nlohmann::json;
using torch::indexing::Slice;

// ---------------------------------------------------------------------------------------------
// Pure measures

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

double r_squared(const std::vector<double>& observed, const std::vector<double>& predicted, const std::vector<int>& skip) {
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

// ---------------------------------------------------------------------------------------------
// Model-side pieces

std::vector<int> gate_cycle(DecoderImpl& model, int delta, int layer) {
  torch::NoGradGuard no_grad;
  std::vector<int> rolled;
  const ModelConfig& mc = model.config();
  for (int l = 0; l < mc.n_layers; ++l) {
    if (layer >= 0 && l != layer) continue;
    AttentionImpl& a = *model.attention(l);
    const AttnConfig& c = a.config();
    if (c.kind != AttnKind::Chunked || c.W != c.S || c.gate == GateKind::Uniform) continue;
    for (const std::string br : {"ck", "cv"}) {
      if (br == "cv" && c.tied_kv) continue;
      for (const std::string part : {"_gate_w", "_gate_b"}) {
        if (part == "_gate_b" && !c.gate_bias) continue;
        torch::Tensor& p = a.param(br + part);  // [Hkv, W, ...]: offset axis 1
        p.copy_(torch::roll(p, {delta}, {1}));
      }
    }
    rolled.push_back(l);
  }
  return rolled;
}

static torch::Tensor batch_tokens(const LayoutDesign& d, size_t from, size_t to) {
  const int64_t T = d.samples[from].prompt_len;
  auto t = torch::empty({int64_t(to - from), T}, torch::kInt64);
  auto a = t.accessor<int64_t, 2>();
  for (size_t i = from; i < to; ++i) {
    PS_ASSERT(d.samples[i].prompt_len == T, "explain: every prompt of a layout must have one length");
    for (int64_t k = 0; k < T; ++k) a[int64_t(i - from)][k] = d.samples[i].tokens[size_t(k)];
  }
  return t;
}

PhaseAccuracy phase_accuracy(const std::vector<JournalRecord>& records, int S) {
  PhaseAccuracy out;
  out.acc.assign(size_t(S), std::nan(""));
  out.lo.assign(size_t(S), std::nan(""));
  out.hi.assign(size_t(S), std::nan(""));
  out.n.assign(size_t(S), 0);
  std::vector<int64_t> k(size_t(S), 0);
  int64_t total = 0, total_ok = 0;
  for (const JournalRecord& r : records) {
    if (!r.scored()) continue;
    const size_t p = size_t(r.target_pos % S);
    out.n[p] += 1;
    k[p] += r.correct();
    total += 1;
    total_ok += r.correct();
  }
  for (size_t p = 0; p < size_t(S); ++p) {
    if (out.n[p] == 0) continue;
    out.acc[p] = double(k[p]) / double(out.n[p]);
    const Interval w = wilson_interval(k[p], out.n[p]);
    out.lo[p] = w.lo;
    out.hi[p] = w.hi;
  }
  out.mean = total ? double(total_ok) / double(total) : std::nan("");
  return out;
}

PhaseAccuracy explain_accuracy(Backend& backend, const LayoutDesign& design, int S, const std::string& model,
                               const std::string& condition, const std::string& journal_path, bool fresh,
                               std::vector<int>* correct) {
  const ScoringSummary sum = eval_score_layout(backend, design, model,
                                              "protocol " + pad_protocol_name(design.spec.protocol) + "; explain " + condition,
                                              journal_path, fresh, nullptr);
  const std::vector<JournalRecord> records = journal_load(journal_path).records;
  if (sum.failed > 0)
    fail("explain " + model + " (" + condition + ")", fmt::format("{} samples failed: {}", sum.failed, sum.last_error),
         "rerun the same command: the scored samples are kept in " + journal_path);
  if (correct) {
    std::unordered_map<int64_t, int> ok;
    for (const JournalRecord& r : records) ok[r.id] = r.correct();
    correct->clear();
    for (const LayoutSample& s : design.samples) correct->push_back(ok.count(s.id) ? ok[s.id] : 0);
  }
  return phase_accuracy(records, S);
}

namespace {

int layer_kv_heads(const AttnConfig& c) { return attn_is_ds(c) ? 1 : c.n_kv_heads; }

// Mean of every layer's head outputs at the final position over the calibration prompts: (layers) x [H, D].
std::vector<torch::Tensor> head_means(DecoderImpl& model, const LayoutDesign& calib, int batch) {
  torch::NoGradGuard no_grad;
  const int L = model.config().n_layers;
  std::vector<torch::Tensor> sum(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l)
    model.attention(l)->set_head_hook([&sum, l](const torch::Tensor& o) {
      auto last = o.select(1, o.size(1) - 1).sum(0);                                   // [H, D]
      sum[size_t(l)] = sum[size_t(l)].defined() ? sum[size_t(l)] + last : last;
      return o;
    });
  for (size_t i = 0; i < calib.samples.size(); i += size_t(batch))
    model.hidden(batch_tokens(calib, i, std::min(calib.samples.size(), i + size_t(batch))));
  for (int l = 0; l < L; ++l) {
    model.attention(l)->set_head_hook(nullptr);
    sum[size_t(l)] = sum[size_t(l)] / double(calib.samples.size());
  }
  return sum;
}

// Gate statistics over the calibration prompts' windows.
std::vector<GateStats> gate_stats(DecoderImpl& model, const LayoutDesign& calib, int S, int batch) {
  torch::NoGradGuard no_grad;
  const int L = model.config().n_layers;
  // per layer and branch: alpha batches [B, N, W, Hkv, C] concatenated over windows
  std::vector<std::vector<torch::Tensor>> k(static_cast<size_t>(L)), v(static_cast<size_t>(L));
  for (size_t i = 0; i < calib.samples.size(); i += size_t(batch)) {
    std::vector<AttnTrace> traces;
    model.hidden(batch_tokens(calib, i, std::min(calib.samples.size(), i + size_t(batch))), 0, &traces);
    for (int l = 0; l < L; ++l) {
      if (traces[size_t(l)].gate_alpha.defined()) k[size_t(l)].push_back(traces[size_t(l)].gate_alpha.to(torch::kFloat64));
      if (traces[size_t(l)].gate_alpha_v.defined()) v[size_t(l)].push_back(traces[size_t(l)].gate_alpha_v.to(torch::kFloat64));
    }
  }
  std::vector<GateStats> out;
  for (int l = 0; l < L; ++l) {
    const AttnConfig& c = model.attention(l)->config();
    const int stride = attn_is_ds(c) ? c.ratio : c.S;
    for (int b = 0; b < 2; ++b) {
      auto& parts = b == 0 ? k[size_t(l)] : v[size_t(l)];
      if (parts.empty()) continue;
      auto a = torch::cat(parts, 0);                                                   // [B, N, W, Hkv, C]
      const int64_t W = a.size(2), Hkv = a.size(3), C = a.size(4);
      a = a.permute({3, 4, 0, 1, 2}).reshape({Hkv, C, -1, W}).contiguous();              // [Hkv, C, windows, W]
      auto acc = a.accessor<double, 4>();
      for (int64_t h = 0; h < Hkv; ++h) {
        GateStats g;
        g.layer = l;
        g.branch = attn_is_ds(c) ? "kv" : (b == 0 ? "k" : "v");
        g.kv_head = int(h);
        g.W = int(W);
        g.S = stride;
        g.profile.assign(size_t(stride), 0.0);
        for (int64_t ch = 0; ch < C; ++ch) {
          std::vector<std::vector<double>> windows(size_t(a.size(2)), std::vector<double>(size_t(W)));
          for (int64_t n = 0; n < a.size(2); ++n)
            for (int64_t i = 0; i < W; ++i) windows[size_t(n)][size_t(i)] = acc[h][ch][n][i];
          g.static_conc += gate_static_concentration(windows) / double(C);
          g.window_conc += gate_window_concentration(windows) / double(C);
          auto p = gate_profile(windows, stride);
          for (int r = 0; r < stride; ++r) g.profile[size_t(r)] += p[size_t(r)] / double(C);
        }
        g.peak = int(std::max_element(g.profile.begin(), g.profile.end()) - g.profile.begin());
        out.push_back(g);
      }
    }
  }
  (void)S;
  return out;
}

std::string num(double v, const char* f = "{:.1f}") { return std::isfinite(v) ? fmt::format(fmt::runtime(f), v) : "—"; }

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


void write_outputs(const ExplainResults& r, const std::string& out_dir) {
  json j;
  j["model"] = r.model;
  j["S"] = r.S;
  j["samples"] = r.samples;
  j["calib_samples"] = r.calib_samples;
  j["clean"] = phase_json(r.clean);
  for (const auto& k : r.knockouts)
    j["knockouts"].push_back({{"label", k.label}, {"layer", k.layer}, {"kv_head", k.kv_head}, {"heads", k.heads},
                              {"acc", phase_json(k.acc)}, {"rel_change_pct", nan_array(k.rel)}});
  for (const auto& g : r.gates)
    j["gates"].push_back({{"layer", g.layer}, {"branch", g.branch}, {"kv_head", g.kv_head}, {"W", g.W}, {"S", g.S},
                          {"static_concentration", g.static_conc}, {"window_concentration", g.window_conc},
                          {"profile", g.profile}, {"peak", g.peak}});
  for (const auto& c : r.cycling)
    j["cycling"].push_back({{"layer", c.layer}, {"delta", c.delta}, {"acc", phase_json(c.acc)},
                            {"predicted", nan_array(c.predicted)}, {"r2", std::isfinite(c.r2) ? json(c.r2) : json(nullptr)},
                            {"r2_no_boundary", std::isfinite(c.r2_no_boundary) ? json(c.r2_no_boundary) : json(nullptr)}});
  j["cycling_note"] = r.cycling_note;
  io_write_atomic(out_dir + "/explain.json", j.dump(1) + "\n");

  std::string csv = "row,layer,kv_head,phase,n,clean_acc,clean_lo,clean_hi,knockout_acc,knockout_lo,knockout_hi,rel_change_pct\n";
  for (const auto& k : r.knockouts)
    for (size_t p = 0; p < size_t(r.S); ++p)
      csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{}\n", k.label, k.layer, k.kv_head, p, k.acc.n[p], r.clean.acc[p],
                         r.clean.lo[p], r.clean.hi[p], k.acc.acc[p], k.acc.lo[p], k.acc.hi[p],
                         std::isfinite(k.rel[p]) ? fmt::format("{}", k.rel[p]) : "");
  io_write_atomic(out_dir + "/knockout.csv", csv);
  csv = "layer,branch,kv_head,W,S,static_concentration,window_concentration,peak";
  const int maxS = r.gates.empty() ? 0 : std::max_element(r.gates.begin(), r.gates.end(), [](auto& a, auto& b) { return a.S < b.S; })->S;
  for (int p = 0; p < maxS; ++p) csv += fmt::format(",g{}", p);
  csv += "\n";
  for (const auto& g : r.gates) {
    csv += fmt::format("{},{},{},{},{},{},{},{}", g.layer, g.branch, g.kv_head, g.W, g.S, g.static_conc, g.window_conc, g.peak);
    for (int p = 0; p < maxS; ++p) csv += p < g.S ? fmt::format(",{}", g.profile[size_t(p)]) : ",";
    csv += "\n";
  }
  io_write_atomic(out_dir + "/gates.csv", csv);
  csv = "delta,phase,acc,predicted\n";
  for (const auto& c : r.cycling)
    for (int p = 0; p < r.S; ++p) csv += fmt::format("{},{},{},{}\n", c.delta, p, c.acc.acc[size_t(p)], c.predicted[size_t(p)]);
  io_write_atomic(out_dir + "/cycling.csv", csv);
}

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
    plot_render(p, out_dir + "/knockout.png", 800, 120 + 60 * int(std::max<size_t>(1, r.knockouts.size())));
  }
  // gate profiles: one panel per layer, a series per branch and KV head
  {
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
        s.title = fmt::format("{} kv{} (static {:.2f}, window {:.2f})", g.branch, g.kv_head, g.static_conc, g.window_conc);
        for (int q = 0; q < g.S; ++q) {
          s.x.push_back(q);
          s.y.push_back(g.profile[size_t(q)]);
        }
        p.series.push_back(s);
        p.xtics = phase_tics(g.S);
      }
      fig.panels.push_back(p);
    }
    if (fig.panels.empty()) {
      PlotPanel p;
      p.title = "no compressed branch";
      fig.panels.push_back(p);
    }
    fig.cols = 1;
    fig.height = 320 * int(fig.panels.size());
    plot_render(fig, out_dir + "/gate_profiles.png");
  }
  // cycling: observed vs predicted per delta
  {
    PlotFigure fig;
    fig.title = r.model + ": gate cycling, A_delta(r) (solid) vs A_0((r - delta) mod S) (dashed)";
    for (const auto& c : r.cycling) {
      PlotPanel p;
      p.title = fmt::format("delta {:+d}: R^2 {} (without boundary {})", c.delta, num(c.r2, "{:.2f}"), num(c.r2_no_boundary, "{:.2f}"));
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
    if (fig.panels.empty()) {
      PlotPanel p;
      p.title = "gate cycling skipped: " + r.cycling_note;
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
  std::string s = fmt::format("{}: {} evaluation prompts, {} calibration prompts, S = {}\n", r.model, r.samples, r.calib_samples, r.S);
  s += "accuracy per phase (clean)      ";
  for (double v : r.clean.acc) s += fmt::format("{:>7}", num(100 * v));
  s += fmt::format("   mean {:.1f}%\n", 100 * r.clean.mean);
  s += "knockout: % change per phase\n";
  for (const auto& k : r.knockouts) {
    s += fmt::format("  {:<30}", k.label + " (heads " + std::to_string(k.heads.front()) + "-" + std::to_string(k.heads.back()) + ")");
    for (double v : k.rel) s += fmt::format("{:>7}", num(v, "{:+.0f}"));
    s += fmt::format("   acc {:.1f}%\n", 100 * k.acc.mean);
  }
  s += "gates: static / per-window concentration (1 = one-hot .. W = uniform), profile g(r)\n";
  for (const auto& g : r.gates) {
    s += fmt::format("  L{} {:<2} kv{}  W={} {:>5.2f} {:>5.2f}  g:", g.layer, g.branch, g.kv_head, g.W, g.static_conc, g.window_conc);
    for (double v : g.profile) s += fmt::format(" {:.2f}", v);
    s += fmt::format("  peak {}\n", g.peak);
  }
  if (r.cycling.empty()) s += "gate cycling skipped: " + r.cycling_note + "\n";
  for (const auto& c : r.cycling) {
    s += fmt::format("cycling delta {:+d}: acc", c.delta);
    for (double v : c.acc.acc) s += fmt::format("{:>6}", num(100 * v, "{:.0f}"));
    s += fmt::format("  R^2 {} (without boundary phase {})\n", num(c.r2, "{:.2f}"), num(c.r2_no_boundary, "{:.2f}"));
  }
  return s;
}

ReportSection explain_report_section(const ExplainResults& r, const std::string& out_dir, const std::string& id) {
  ReportSection sec;
  sec.id = id;
  sec.title = "Why: knockouts, gate profiles, gate cycling (" + r.model + ")";
  std::string h;
  h += "<p>" + html_escape(fmt::format("{} evaluation prompts (lookup layout, phases balanced), {} calibration prompts "
                                       "from another seed. Phase r = target position mod {}.",
                                       r.samples, r.calib_samples, r.S)) + "</p>";
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
                     fmt::format("{:.2f}", g.static_conc), fmt::format("{:.2f}", g.window_conc), prof, std::to_string(g.peak)});
  }
  h += html_table({"layer", "branch", "kv head", "W", "static conc.", "per-window conc.", "profile g(r)", "peak"}, grows);
  h += html_png(out_dir + "/gate_profiles.png", "gate profiles");
  h += "<h3>Gate cycling</h3>";
  if (r.cycling.empty()) {
    h += "<p>" + html_escape("skipped: " + r.cycling_note) + "</p>";
  } else {
    std::vector<std::vector<std::string>> crows;
    for (const auto& c : r.cycling)
      crows.push_back({fmt::format("{:+d}", c.delta), num(100 * c.acc.mean), num(c.r2, "{:.2f}"), num(c.r2_no_boundary, "{:.2f}")});
    h += html_table({"delta", "mean accuracy %", "R^2", "R^2 without boundary phase"}, crows);
    h += html_png(out_dir + "/cycling.png", "gate cycling");
  }
  sec.html = h;
  return sec;
}

ExplainResults explain_run(const Decoder& model_holder, const Preset& preset, const ExplainOptions& opt,
                           const std::string& out_dir) {
  torch::NoGradGuard no_grad;
  DecoderImpl& model = *model_holder.ptr();
  model.eval();
  ExplainResults r;
  r.model = preset.name;
  r.S = display_stride(preset);
  if (opt.R <= 0 || opt.R % r.S != 0)
    fail(fmt::format("explain --R {}", opt.R), fmt::format("R must be a positive multiple of the model's stride {}", r.S),
         fmt::format("pass --R {} (or another multiple of {})", r.S * ((24 + r.S - 1) / r.S), r.S));
  io_make_dirs(out_dir + "/journals");

  // one backend over the shared model: every condition below is scored through the engine, each into
  // its own journal bound to the clean weights' hash and the condition
  LoadedModel shared;
  shared.preset = preset;
  shared.model = model_holder;
  shared.hash = model_content_hash(model, preset);
  ModelBackend backend(shared, preset.name, 5, opt.batch);

  auto say = [&](const std::string& s) {
    if (opt.log) *opt.log << s << std::flush;
  };

  // the evaluation layout and a disjoint calibration layout (another seed)
  EvalOptions eo = eval_options_for(preset, opt.protocol, opt.samples, opt.R, opt.seed);
  const LayoutDesign design = layout_build(eo.layout);
  EvalOptions co = eval_options_for(preset, opt.protocol, opt.calib_samples, opt.R, opt.seed + 7919);
  co.layout.tol_mean = co.layout.tol_sd = INFINITY;  // calibration averages over all phases: no balance needed
  const LayoutDesign calib = layout_build(co.layout);
  r.samples = int64_t(design.samples.size());
  r.calib_samples = int64_t(calib.samples.size());

  auto accuracy = [&](const std::string& condition, const std::string& file) {
    return explain_accuracy(backend, design, r.S, r.model, condition, out_dir + "/journals/" + file + ".jsonl",
                            opt.fresh);
  };

  // clean accuracy per phase
  r.clean = accuracy("clean", "clean");
  say(fmt::format("explain {}: clean accuracy {:.1f}% over {} prompts\n", r.model, 100 * r.clean.mean, r.samples));

  // knockouts: each layer, and each KV head's query-head group where a layer has several
  const auto means = head_means(model, calib, opt.batch);
  const int H = model.config().n_heads;
  for (int l = 0; l < model.config().n_layers; ++l) {
    const int kvh = layer_kv_heads(model.attention(l)->config());
    for (int g = -1; g < kvh; ++g) {
      if (g >= 0 && kvh == 1) break;
      KnockoutRow k;
      k.layer = l;
      k.kv_head = g;
      k.label = g < 0 ? fmt::format("L{}", l) : fmt::format("L{}.kv{}", l, g);
      const int G = H / kvh, h0 = g < 0 ? 0 : g * G, h1 = g < 0 ? H : (g + 1) * G;
      for (int h = h0; h < h1; ++h) k.heads.push_back(h);
      const torch::Tensor mean = means[size_t(l)].slice(0, h0, h1);                     // [h1 - h0, D]
      model.attention(l)->set_head_hook([mean, h0, h1](const torch::Tensor& o) {
        auto p = o.clone();
        p.index_put_({Slice(), p.size(1) - 1, Slice(h0, h1)}, mean.to(o.dtype()));
        return p;
      });
      k.acc = accuracy(fmt::format("knockout {} (heads {}-{} mean-replaced at the final position; calibration seed {}, "
                                   "{} prompts)", k.label, h0, h1 - 1, opt.seed + 7919, calib.samples.size()),
                       "knockout-" + k.label);
      model.attention(l)->set_head_hook(nullptr);
      for (int s = 0; s < r.S; ++s) {
        const double c = r.clean.acc[size_t(s)];
        k.rel.push_back(c > 0 ? 100.0 * (k.acc.acc[size_t(s)] - c) / c : std::nan(""));
      }
      say(fmt::format("  knockout {}: accuracy {:.1f}%\n", k.label, 100 * k.acc.mean));
      r.knockouts.push_back(k);
    }
  }

  // gate statistics
  r.gates = gate_stats(model, calib, r.S, opt.batch);

  // gate cycling (W = S chunked layers, all rolled together); weights restored exactly
  std::vector<torch::Tensor> before;
  for (const auto& p : model.parameters()) before.push_back(p.clone());
  for (int delta : opt.deltas) {
    if (delta % r.S == 0) continue;
    const auto rolled = gate_cycle(model, delta);
    if (rolled.empty()) {
      r.cycling_note = "no chunked layer with W = S and learned gates";
      break;
    }
    CyclingRow c;
    c.delta = delta;
    c.acc = accuracy(fmt::format("cycling delta {:+d} (gates of layers rolled together)", delta),
                     fmt::format("cycling-delta{:+d}", delta));
    gate_cycle(model, -delta);
    for (int s = 0; s < r.S; ++s) c.predicted.push_back(r.clean.acc[size_t(((s - delta) % r.S + r.S) % r.S)]);
    c.r2 = r_squared(c.acc.acc, c.predicted);
    c.r2_no_boundary = r_squared(c.acc.acc, c.predicted, {r.S - 1});
    say(fmt::format("  cycling delta {:+d}: accuracy {:.1f}%, R^2 {}\n", delta, 100 * c.acc.mean, num(c.r2, "{:.2f}")));
    r.cycling.push_back(c);
  }
  {
    size_t i = 0;
    for (const auto& p : model.parameters())
      PS_ASSERT(torch::equal(p, before[i++]), "explain: gate cycling did not restore the weights exactly");
  }

  write_outputs(r, out_dir);
  if (opt.report) {
    draw(r, out_dir);
    ReportDoc doc;
    doc.title = "phasescope explain: " + r.model;
    report_add_section(doc, explain_report_section(r, out_dir));
    report_write(doc, out_dir + "/report.html");
  }
  return r;
}

}  // namespace phasescope
