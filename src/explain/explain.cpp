// explain.cpp — the run of explain.h's three instruments (the measures: measures.h; files, plots and
// the report: explain_report.h). Shapes: prompts [B, T] (one length per layout), head outputs
// o [B, T, H, D], gate weights alpha [B, N, W, Hkv, C] (C = 1 scalar gates, D vector gates / channels).
#include "explain/explain.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <ostream>
#include <unordered_map>

#include "attention/attention.h"
#include "core/check.h"
#include "core/io.h"
#include "eval/journal.h"
#include "eval/model_backend.h"
#include "eval/results.h"
#include "eval/runner.h"
#include "eval/stats.h"
#include "explain/explain_report.h"
#include "model/load.h"
#include "model/model.h"
#include "report/document.h"
#include "report/gnuplot.h"
#include "report/html.h"

namespace phasescope {

using json = nlohmann::json;
using torch::indexing::Slice;

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

PhaseAccuracy explain_accuracy(Backend& backend, const LayoutDesign& design, int S, const std::string& model,
                               const std::string& condition, const std::string& journal_path, bool fresh,
                               std::vector<int>* correct) {
  const ScoringSummary sum =
      eval_score_layout(backend, design, model,
                        "protocol " + pad_protocol_name(design.spec.protocol) + "; explain " + condition,
                        journal_path, fresh, nullptr);
  // the statistics every command uses (intervals: Wilson per phase; no bootstrap needed here)
  EvalMeta meta;
  meta.model = model;
  meta.protocol = pad_protocol_name(design.spec.protocol);
  meta.backend = backend.describe();
  meta.layout = layout_fingerprint(design.spec);
  const EvalResults res = results_from_journal(journal_path, StatsOptions{S, 0, 1}, meta);
  const std::vector<JournalRecord> records = journal_load(journal_path).records;
  if (sum.failed > 0)
    fail("explain " + model + " (" + condition + ")",
         fmt::format("{} samples failed: {}", sum.failed, sum.last_error),
         "rerun the same command: the scored samples are kept in " + journal_path);
  if (correct) {
    std::unordered_map<int64_t, int> ok;
    for (const JournalRecord& r : records) ok[r.id] = r.correct();
    correct->clear();
    for (const LayoutSample& s : design.samples) correct->push_back(ok.count(s.id) ? ok[s.id] : 0);
  }
  return phase_accuracy(res.stats);
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
      auto last = o.select(1, o.size(1) - 1).sum(0);  // [H, D]
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
      if (traces[size_t(l)].gate_alpha.defined())
        k[size_t(l)].push_back(traces[size_t(l)].gate_alpha.to(torch::kFloat64));
      if (traces[size_t(l)].gate_alpha_v.defined())
        v[size_t(l)].push_back(traces[size_t(l)].gate_alpha_v.to(torch::kFloat64));
    }
  }
  std::vector<GateStats> out;
  for (int l = 0; l < L; ++l) {
    const AttnConfig& c = model.attention(l)->config();
    const int stride = attn_is_ds(c) ? c.ratio : c.S;
    for (int b = 0; b < 2; ++b) {
      auto& parts = b == 0 ? k[size_t(l)] : v[size_t(l)];
      if (parts.empty()) continue;
      auto a = torch::cat(parts, 0);  // [B, N, W, Hkv, C]
      const int64_t W = a.size(2), Hkv = a.size(3), C = a.size(4);
      a = a.permute({3, 4, 0, 1, 2}).reshape({Hkv, C, -1, W}).contiguous();  // [Hkv, C, windows, W]
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
          // offset i has phase (o + i) % S on a staggered grid (o = grid_offset, 0 otherwise)
          for (int r = 0; r < stride; ++r)
            g.profile[size_t((r + c.grid_offset) % stride)] += p[size_t(r)] / double(C);
        }
        g.peak = int(std::max_element(g.profile.begin(), g.profile.end()) - g.profile.begin());
        out.push_back(g);
      }
    }
  }
  (void)S;
  return out;
}

}  // namespace

ExplainResults explain_run(const Decoder& model_holder, const Preset& preset, const ExplainOptions& opt,
                           const std::string& out_dir) {
  torch::NoGradGuard no_grad;
  DecoderImpl& model = *model_holder.ptr();
  model.eval();
  ExplainResults r;
  r.model = preset.name;
  r.S = display_stride(preset);
  if (opt.R <= 0 || opt.R % r.S != 0)
    fail(fmt::format("explain --R {}", opt.R),
         fmt::format("R must be a positive multiple of the model's stride {}", r.S),
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
  co.layout.tol_mean = co.layout.tol_sd =
      INFINITY;  // calibration averages over all phases: no balance needed
  const LayoutDesign calib = layout_build(co.layout);
  r.samples = int64_t(design.samples.size());
  r.calib_samples = int64_t(calib.samples.size());

  auto accuracy = [&](const std::string& condition, const std::string& file) {
    return explain_accuracy(backend, design, r.S, r.model, condition,
                            out_dir + "/journals/" + file + ".jsonl", opt.fresh);
  };

  // clean accuracy per phase
  r.clean = accuracy("clean", "clean");
  say(fmt::format("explain {}: clean accuracy {:.1f}% over {} prompts\n", r.model, 100 * r.clean.mean,
                  r.samples));

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
      const torch::Tensor mean = means[size_t(l)].slice(0, h0, h1);  // [h1 - h0, D]
      model.attention(l)->set_head_hook([mean, h0, h1](const torch::Tensor& o) {
        auto p = o.clone();
        p.index_put_({Slice(), p.size(1) - 1, Slice(h0, h1)}, mean.to(o.dtype()));
        return p;
      });
      k.acc = accuracy(
          fmt::format("knockout {} (heads {}-{} mean-replaced at the final position; calibration seed {}, "
                      "{} prompts)",
                      k.label, h0, h1 - 1, opt.seed + 7919, calib.samples.size()),
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
    say(fmt::format("  cycling delta {:+d}: accuracy {:.1f}%, R^2 {:.2f}\n", delta, 100 * c.acc.mean, c.r2));
    r.cycling.push_back(c);
  }
  {
    size_t i = 0;
    for (const auto& p : model.parameters())
      PS_ASSERT(torch::equal(p, before[i++]), "explain: gate cycling did not restore the weights exactly");
  }

  explain_write_outputs(r, out_dir);
  if (opt.report) explain_write_report(r, out_dir);
  return r;
}

}  // namespace phasescope
