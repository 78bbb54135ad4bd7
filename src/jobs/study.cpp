// study.cpp — see study.h.
#include "jobs/study.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <set>

#include "attention/kv_memory.h"
#include "core/build_info.h"
#include "core/check.h"
#include "core/io.h"
#include "core/json_fields.h"
#include "eval/model_backend.h"
#include "eval/runner.h"
#include "eval/stats.h"
#include "explain/explain.h"
#include "model/config.h"
#include "model/load.h"
#include "report/document.h"
#include "report/html.h"
#include "report/phase_plot.h"
#include "train/trainer.h"

namespace phasescope {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr int kR = 24;  // residues: a multiple of every W/S stride (4, 6, 8, 12); see study_residues
constexpr int64_t kKvContext = 131072;  // KV bytes per token are given at 128K tokens, bf16 (2 bytes)
constexpr int kKvBytes = 2;

// The paper's published rows (prefix padding, final checkpoint; design doc §1.5), by preset and seed.
struct PaperRun {
  std::string preset;
  uint64_t seed;
  double val_loss, mean, worst, gap;  // percent
};
const std::vector<PaperRun>& paper_runs() {
  static const std::vector<PaperRun> r = {
      {"full-1kv", 42, 2.466, 18.8, 17.2, 3.1},  {"full-8kv", 42, 2.437, 61.1, 58.4, 4.3},
      {"w8s8-1kv", 42, 2.478, 50.6, 5.7, 75.3},  {"w8s8-8kv", 42, 2.431, 59.4, 9.9, 71.1},
      {"w8s4-1kv", 42, 2.467, 66.9, 46.2, 39.8}, {"w12s12-1kv", 42, 2.487, 33.0, 5.0, 63.2},
      {"no-rope", 42, 2.504, 29.4, 5.0, 40.9},   {"uniform", 42, 2.497, 12.5, 4.7, 19.2},
  };
  return r;
}

std::string pct(double f) { return std::isfinite(f) ? fmt::format("{:.1f}", 100 * f) : "n/a"; }

}  // namespace

std::string study_variant(const std::string& preset, const std::string& tag) {
  return tag.empty() ? preset : preset + "-" + tag;
}

std::string StudyRun::id() const { return study_variant(preset, tag) + "@" + std::to_string(seed); }

// ---------------------------------------------------------------------------------------------- grids

StudyGrid study_grid(const std::string& name, const std::vector<uint64_t>& seeds_in) {
  const std::vector<uint64_t> seeds = seeds_in.empty() ? std::vector<uint64_t>{42, 43, 44, 45} : seeds_in;
  const std::vector<uint64_t> two(seeds.begin(), seeds.begin() + std::min<size_t>(2, seeds.size()));
  StudyGrid g;
  g.name = name;
  auto add = [&](const std::string& preset, const std::vector<uint64_t>& ss, const std::string& family,
                 const std::string& paper, const std::string& tag = "", json overrides = nullptr) {
    for (uint64_t s : ss) g.runs.push_back({preset, s, family, paper, tag, overrides});
  };
  if (name == "paper") {
    add("full-1kv", {seeds[0]}, "baseline", "Full attention · 1 KV");
    add("full-4kv", {seeds[0]}, "baseline", "Full attention · 4 KV");
    add("full-8kv", {seeds[0]}, "baseline", "Full attention · 8 KV");
    // finding (a) needs full attention off its 100% ceiling: the same model stopped early
    add("full-1kv", {seeds[0]}, "baseline", "", "400steps", json{{"train", {{"steps", 400}}}});
    add("w8s8-1kv", seeds, "seeds", "W8/S8 · 1 KV");
    add("w4s4-1kv", two, "window-stride", "W4/S4 · 1 KV");
    add("w8s4-1kv", two, "window-stride", "W8/S4 · 1 KV");
    add("w8s6-1kv", two, "window-stride", "W8/S6 · 1 KV");
    add("w12s12-1kv", two, "window-stride", "W12/S12 · 1 KV");
    add("w12s12-4kv", two, "window-stride", "W12/S12 · 4 KV");
    add("w8s8-2kv", two, "kv-heads", "W8/S8 · 2 KV");
    add("w8s8-4kv", two, "kv-heads", "W8/S8 · 4 KV");
    add("w8s8-8kv", two, "kv-heads", "W8/S8 · 8 KV");
    add("tied-kv", two, "operator", "tied K/V");
    add("uniform", two, "operator", "uniform averaging");
    add("uniform-tied", two, "operator", "uniform · tied · post-norm");
    add("vector-gates", two, "operator", "vector gates");
    add("no-qk-norm", two, "position", "no Q/K norm");
    add("no-gate-bias", two, "position", "no gate bias");
    add("no-rope", two, "position", "no RoPE");
    add("rope16", two, "position", "RoPE on 16 dims");
    add("uncompressed-tail", two, "local-memory", "uncompressed tail · 1 KV");
    add("uncompressed-tail-8kv", two, "local-memory", "uncompressed tail · 8 KV");
    add("deepseek-style", two, "local-memory", "DeepSeek-style kernel");
    add("deepseek-style-scalar", two, "local-memory", "DeepSeek-style kernel, scalar gates");
    add("dsv4-csa", two, "deepseek", "");
    add("hca", two, "deepseek", "");
    add("v41-csa2", two, "deepseek", "");
  } else if (name == "quick") {
    g.toy = true;
    add("full-1kv", {seeds[0]}, "baseline", "Full attention · 1 KV");
    add("w8s8-1kv", two, "seeds", "W8/S8 · 1 KV");
    add("w8s4-1kv", {seeds[0]}, "window-stride", "W8/S4 · 1 KV");
    add("w4s4-1kv", {seeds[0]}, "window-stride", "W4/S4 · 1 KV");
    add("no-rope", {seeds[0]}, "position", "no RoPE");
    add("uniform", {seeds[0]}, "operator", "uniform averaging");
  } else if (name == "mitigations") {
    // issue 14: candidates at the W8/S8 reference's KV memory beside the baselines, three seeds each;
    // the reference and baseline ids are the paper grid's, so `--merge docs/study` copies those rows in
    // first and the run that follows trains only what is missing
    const std::vector<uint64_t> three(seeds.begin(), seeds.begin() + std::min<size_t>(3, seeds.size()));
    // candidates first (the rows this grid exists for), then the baselines the paper grid may not have
    add("w16s8-1kv", three, "candidate: overlap at equal memory", "");
    add("w8s8-shift", three, "candidate: token shift", "");
    add("mixed-s6-s12", three, "candidate: mixed strides", "");
    add("w8s8-gate-entropy", three, "candidate: static-gate entropy bonus", "");
    add("w8s8-stagger", three, "candidate: staggered grids", "");
    add("w8s8-coverage", three, "candidate: head coverage", "");
    add("w8s8-1kv", three, "reference", "W8/S8 · 1 KV");
    add("w8s4-1kv", three, "baseline", "W8/S4 · 1 KV");
    add("uniform", three, "baseline", "uniform averaging");
    add("full-1kv", three, "baseline", "Full attention · 1 KV");
    // carried over (judged against the preset each name extends): staggered grids, the one candidate that
    // kept the reference's numbers and moved its weak phases, on the paper's DeepSeek-style kernel (W8/S4,
    // vector gates, tied K/V: a design that learns at this recipe); then coverage on the DeepSeek-V4 mix
    add("deepseek-style-stagger", three, "carry-over: staggered grids", "");
    add("deepseek-style", three, "carry-over: reference", "DeepSeek-style kernel");
    // the DeepSeek-V4 CSA mix, judged against the preset each name extends. The 4-layer dsv4-csa does not
    // learn the task at the study's recipe (3 of 3 seeds at chance; its dense twin does not learn either:
    // docs/mitigations/README.md), so the fixes go to the same mix at the study's depth, dsv4-csa-2l
    // (a window-only layer, then one CSA layer), seed by seed. The coverage term needs two gates of one
    // branch and this mix has one compressor, so the two carried fixes are the token shift and the
    // static-gate entropy bonus (both reach its compressor; staggered grids are chunked-only).
    add("dsv4-csa", three, "carry-over: reference", "");
    for (uint64_t s : three) {
      add("dsv4-csa-2l", {s}, "carry-over: reference", "");
      add("dsv4-csa-2l-shift", {s}, "carry-over: token shift", "");
      add("dsv4-csa-2l-entropy", {s}, "carry-over: static-gate entropy bonus", "");
    }
  } else {
    const std::string fix =
        "pass --grid paper, --grid quick, --grid mitigations, or a grid file {\"name\", \"toy\", \"runs\": "
        "[{\"preset\", "
        "\"seed\", "
        "...}]}";
    if (!fs::is_regular_file(name)) fail("--grid " + name, "is neither a built-in grid nor a file", fix);
    const json j = json_parse_or_fail(io_read_text(name, fix), name, fix);
    if (!j.is_object() || !j.contains("runs") || !j["runs"].is_array() || j["runs"].empty())
      fail(name, "a grid file is an object with a non-empty \"runs\" list", fix);
    g.name = j.value("name", fs::path(name).stem().string());
    g.toy = j.value("toy", false);
    for (const json& r : j["runs"]) {
      if (!r.is_object() || !r.contains("preset") || !r["preset"].is_string())
        fail(name, "every run needs a \"preset\" name: " + r.dump(), fix);
      StudyRun run;
      run.preset = r["preset"].get<std::string>();
      run.seed = r.contains("seed") && r["seed"].is_number_unsigned() ? r["seed"].get<uint64_t>() : seeds[0];
      run.family = r.value("family", "");
      run.paper = r.value("paper", "");
      run.tag = r.value("tag", "");
      run.overrides = r.contains("overrides") ? r["overrides"] : json(nullptr);
      g.runs.push_back(run);
    }
  }
  std::set<std::string> ids;
  for (const StudyRun& r : g.runs)
    if (!ids.insert(r.id()).second)
      fail("grid " + g.name, "run " + r.id() + " appears twice", "give one of them a distinct \"tag\"");
  return g;
}

// ---------------------------------------------------------------------------------------------- one run

// The preset a run trains: the named preset, shrunk for toy grids, the seed, then the run's overrides.
// preset_to_json writes every layer's attention under "layers", which preset_from_json merges over
// "attention": so a patch of "attention" is applied to each layer as well, or it would be lost.
Preset study_preset(const StudyRun& run, bool toy) {
  json j = json::parse(preset_to_json(preset_load(run.preset)));
  auto patch_attention = [&j](const json& patch) {
    j["attention"].merge_patch(patch);
    for (json& layer : j["layers"]) layer.merge_patch(patch);
  };
  if (toy) {
    j.merge_patch(
        {{"model", {{"d_model", 32}, {"head_dim", 8}}},
         {"task",
          {{"seq_len", 64},
           {"n_records", 8},
           {"n_demos", 4},
           {"min_records", 4},
           {"curriculum_steps", 0},
           {"curriculum_length", false},
           {"repeat_steps", 0}}},
         {"train", {{"steps", 40}, {"batch", 8}, {"warmup", 5}, {"eval_every", 0}, {"ckpt_every", 40}}}});
    // DeepSeek ratios of 128 need more than a toy row's 64 tokens
    for (json& layer : j["layers"])
      if (layer.contains("ratio") && layer["ratio"].get<int>() > 16) layer["ratio"] = 16;
  }
  j["train"]["seed"] = run.seed;
  if (!run.overrides.is_null()) {
    json o = run.overrides;
    if (o.contains("attention")) {
      patch_attention(o["attention"]);
      o.erase("attention");
    }
    j.merge_patch(o);
  }
  j["name"] = run.preset + (run.tag.empty() ? "" : "-" + run.tag);
  return preset_from_json(j.dump(), "study run " + run.id());
}

int study_residues(const Preset& p) {
  const int S = std::max(1, display_stride(p));
  return kR % S == 0 ? kR : S;
}

namespace {

json interval(const Interval& i) { return json::array({i.lo, i.hi}); }

json protocol_row(const EvalResults& r) {
  const Stats& s = r.stats;
  json folded = json::array(), folded_n = json::array(), per_res = json::array();
  int weakest = -1;
  for (size_t i = 0; i < s.folded.size(); ++i) {
    folded.push_back(s.folded[i].acc);
    folded_n.push_back(s.folded[i].n);
    if (s.folded[i].n > 0 && (weakest < 0 || s.folded[i].acc < s.folded[size_t(weakest)].acc))
      weakest = int(i);
  }
  for (const ResidueStat& x : s.per_residue) per_res.push_back(x.acc);
  return {{"n", s.n_scored},
          {"mean", s.mean},
          {"mean_ci", interval(s.mean_ci)},
          {"worst", s.worst},
          {"worst_ci", interval(s.worst_ci)},
          {"best", s.best},
          {"gap", s.gap},
          {"gap_ci", interval(s.gap_ci)},
          {"gap_null_q95", s.gap_null_q95},
          {"period", s.period.P},
          {"p_value", s.p_value},
          {"R", s.R},
          {"S", s.S},
          {"folded", folded},
          {"folded_n", folded_n},
          {"per_residue", per_res},
          {"weakest_phase", weakest}};
}

json explain_row(const ExplainResults& x) {
  json ko = json::array(), gates = json::array(), cyc = json::array();
  for (const KnockoutRow& k : x.knockouts)
    ko.push_back(
        {{"label", k.label}, {"layer", k.layer}, {"kv_head", k.kv_head}, {"rel", k.rel}, {"acc", k.acc.acc}});
  for (const GateStats& gs : x.gates)
    gates.push_back({{"layer", gs.layer},
                     {"branch", gs.branch},
                     {"kv_head", gs.kv_head},
                     {"static", gs.static_conc},
                     {"window", gs.window_conc},
                     {"peak", gs.peak},
                     {"profile", gs.profile},
                     {"W", gs.W}});
  for (const CyclingRow& c : x.cycling)
    cyc.push_back({{"layer", c.layer},
                   {"delta", c.delta},
                   {"r2", c.r2},
                   {"r2_no_boundary", c.r2_no_boundary},
                   {"acc", c.acc.acc}});
  return {{"S", x.S},       {"clean", x.clean.acc}, {"knockouts", ko},
          {"gates", gates}, {"cycling", cyc},       {"cycling_note", x.cycling_note}};
}

// Evaluation prompts per run and protocol: 192 per residue (the issue's floor: a flat model's noise-only
// gap is then ~12 points at 20% accuracy), 48 at toy size.
int64_t study_samples(const StudyOptions& opt, const StudyGrid& grid, int R = kR) {
  return opt.samples > 0 ? opt.samples : (grid.toy ? 48 : 192) * R;
}

// The fewest prompts any protocol of a row was scored on (0 for a row without protocols).
int64_t row_min_samples(const json& row) {
  int64_t n = std::numeric_limits<int64_t>::max();
  if (!row.contains("protocols") || row["protocols"].empty()) return 0;
  for (const auto& [k, p] : row["protocols"].items()) n = std::min<int64_t>(n, p.value("n", int64_t(0)));
  return n;
}

// Train, evaluate and explain one run (each stage resumes), then write its row.
json study_one(const StudyRun& run, const StudyGrid& grid, const StudyOptions& opt, const std::string& dir) {
  std::ostream* log = opt.log;
  const Preset p = study_preset(run, grid.toy);
  const std::string model_dir = (fs::path(dir) / "model").string();
  TrainOptions topt;
  topt.out_dir = model_dir;
  topt.fresh = opt.fresh;
  if (!log) topt.log = [](const std::string&) {};
  const TrainResult tr = train_run(p, topt);
  if (tr.nan_stop) fail("study run " + run.id(), tr.message, "lower train.lr in its overrides and rerun");
  const LoadedModel trained = model_load(model_dir);
  json row = {{"id", run.id()},        {"preset", run.preset},       {"seed", run.seed},
              {"family", run.family},  {"paper", run.paper},         {"tag", run.tag},
              {"steps", trained.step}, {"train_seconds", tr.seconds}};
  if (!run.overrides.is_null()) row["overrides"] = run.overrides;  // what the tag stands for
  row["commit"] = build_commit();          // the build that computed this row (core/build_info.h)
  row["threads"] = at::get_num_threads();  // training is bit-reproducible for a fixed thread count
  const AttnConfig& a0 = trained.preset.model.layers[0];
  row["kind"] = attn_kind_name(a0.kind);
  row["S"] = attn_stride(a0);
  row["W"] = a0.kind == AttnKind::Chunked ? a0.W : attn_stride(a0);
  row["n_kv_heads"] = trained.preset.model.n_kv_heads;
  row["kv_bytes_per_token"] = model_kv_bytes_per_token(trained.preset.model.layers, kKvContext, kKvBytes);
  row["kv_context"] = kKvContext;
  {
    LoadedModel m = trained;  // shares the module; heldout_loss only reads it
    row["val_loss"] = heldout_loss(*m.model, m.preset, grid.toy ? 64 : 512, 20261204);
  }

  const int R = study_residues(trained.preset);
  const int64_t samples = study_samples(opt, grid, R);
  json protocols = json::object();
  for (PadProtocol protocol : {PadProtocol::Prefix, PadProtocol::InSequence}) {
    LoadedModel m = trained;
    EvalOptions eo = eval_options_for(m.preset, protocol, samples, R, 1);
    eo.fresh = opt.fresh;
    eo.report = false;
    eo.bootstrap = 2000;
    eo.log_layout = false;
    ModelBackend backend(std::move(m), run.id());
    // the folder names the prompt count: a row upgraded to more prompts scores them in a new journal
    // (the layout, hence the journal's identity, depends on the count) and the old one is kept
    const std::string eval_dir =
        (fs::path(dir) / "eval" / fmt::format("{}-n{}", pad_protocol_name(protocol), samples)).string();
    const EvalResults r = run_eval(backend, eo, eval_dir);
    protocols[pad_protocol_name(protocol)] = protocol_row(r);
  }
  row["protocols"] = protocols;

  LoadedModel m = trained;
  ExplainOptions xo;
  xo.samples = grid.toy ? 1152 : 576;  // toy prompts are short: more blocks balance the layout
  xo.calib_samples = grid.toy ? 48 : 192;
  xo.R = R;
  xo.fresh = opt.fresh;
  xo.report = false;
  const ExplainResults xr = explain_run(m.model, m.preset, xo, (fs::path(dir) / "explain").string());
  row["explain"] = explain_row(xr);
  return row;
}

// ---------------------------------------------------------------------------------------------- findings

const json* prot(const json& row, const std::string& protocol) {
  if (!row.contains("protocols") || !row["protocols"].contains(protocol)) return nullptr;
  return &row["protocols"][protocol];
}
bool is_ref(const json& row, const std::string& preset) {
  return row.value("preset", "") == preset && row.value("tag", "") == "";
}
double num(const json& j, const char* k) {
  return j.contains(k) && j[k].is_number() ? j[k].get<double>() : std::nan("");
}
// A run that has not learned the task says nothing about phases: every finding but (a) leaves out runs
// whose mean accuracy (prefix) is below this, and lists them as "not learned".
constexpr double kLearned = 0.10;
bool learned(const json& row) {
  const json* p = prot(row, "prefix");
  return p && num(*p, "mean") >= kLearned;
}

// beyond sampling noise: the gap's lower 95% bound exceeds the gap noise alone reaches (95th percentile)
bool gap_beyond_noise(const json& p) { return p["gap_ci"][0].get<double>() > num(p, "gap_null_q95"); }

json finding(const std::string& id, const std::string& claim, const std::string& rule,
             const std::string& verdict, const json& figures) {
  return {{"id", id}, {"claim", claim}, {"rule", rule}, {"verdict", verdict}, {"figures", figures}};
}

}  // namespace

json study_findings(const std::vector<json>& rows) {
  json out = json::array();
  const std::string P = "prefix";

  {  // (a) full attention flat where it is off the ceiling
    json figs = json::array();
    int qualifying = 0, flat = 0, not_flat = 0;
    for (const json& r : rows) {
      if (r.value("kind", "") != "full") continue;
      for (const std::string protocol : {"prefix", "in-sequence"}) {
        const json* p = prot(r, protocol);
        if (!p) continue;
        const double mean = num(*p, "mean"), gap = num(*p, "gap"),
                     bar = std::max(0.061, num(*p, "gap_null_q95"));
        const bool off = mean >= 0.2 && mean <= 0.9;
        std::string v = !off                      ? "at ceiling/floor"
                        : gap <= bar              ? "flat"
                        : (*p)["gap_ci"][0] > bar ? "not flat"
                                                  : "unclear";
        if (off) {
          ++qualifying;
          flat += v == "flat";
          not_flat += v == "not flat";
        }
        figs.push_back({{"run", r["id"]},
                        {"protocol", protocol},
                        {"mean", mean},
                        {"gap", gap},
                        {"bar", bar},
                        {"status", v}});
      }
    }
    const std::string verdict = qualifying == 0      ? "inconclusive"
                                : not_flat > 0       ? "does not hold"
                                : flat == qualifying ? "holds"
                                                     : "inconclusive";
    out.push_back(finding("a", "full attention is flat across residues (gap within 6.1 points)",
                          "over full-attention runs and protocols with mean in [20%, 90%]: flat if gap <= "
                          "max(6.1 pts, the noise-only "
                          "gap's 95th percentile), not flat if the gap's lower 95% bound exceeds that bar; "
                          "holds if every such run "
                          "is flat, does not hold if any is not flat, inconclusive if none is off the "
                          "ceiling or some are unclear",
                          verdict, figs));
  }

  // the reference W8/S8 · 1 KV per seed (prefix)
  std::map<uint64_t, const json*> ref;
  json not_learned = json::array();
  for (const json& r : rows)
    if (prot(r, P) && !learned(r) && r.value("S", 0) > 0) not_learned.push_back(r["id"]);
  for (const json& r : rows)
    if (is_ref(r, "w8s8-1kv") && learned(r)) ref[r["seed"].get<uint64_t>()] = &r;

  {  // (b) W8/S8: large gap, boundary phase weakest
    json figs = json::array();
    int large = 0, boundary = 0;
    for (const auto& [seed, r] : ref) {
      const json& p = *prot(*r, P);
      const int S = (*r)["S"].get<int>();
      const bool is_large = num(p, "gap") >= 0.30 && gap_beyond_noise(p);
      const bool is_boundary = p["weakest_phase"].get<int>() == S - 1;
      large += is_large;
      boundary += is_boundary;
      figs.push_back({{"seed", seed},
                      {"gap", p["gap"]},
                      {"gap_ci", p["gap_ci"]},
                      {"weakest_phase", p["weakest_phase"]},
                      {"boundary_phase", S - 1},
                      {"folded", p["folded"]}});
    }
    const int n = int(ref.size());
    const std::string verdict = n < 2                               ? "inconclusive"
                                : large == n && boundary == n       ? "holds"
                                : 2 * boundary < n || 2 * large < n ? "does not hold"
                                                                    : "inconclusive";
    out.push_back(
        finding("b", "W8/S8 · 1 KV has a large gap and its boundary phase (7) is the weakest in every seed",
                "per reference seed (prefix): large = gap >= 30 pts and its lower 95% bound beyond the "
                "noise-only 95th percentile; boundary = the weakest folded phase is S - 1. Holds if both in "
                "every seed (>= 2 seeds), does not hold if either is true in fewer than half of the seeds",
                verdict, figs));
  }

  {  // (c) W8/S4 gap smaller than W8/S8's
    json figs = json::array();
    int smaller = 0, larger = 0;
    for (const json& r : rows) {
      if (!is_ref(r, "w8s4-1kv") || !learned(r)) continue;
      const uint64_t seed = r["seed"].get<uint64_t>();
      if (!ref.count(seed)) continue;
      const double g4 = num(*prot(r, P), "gap"), g8 = num(*prot(*ref[seed], P), "gap");
      smaller += g4 < g8;
      larger += g4 > g8;
      figs.push_back({{"seed", seed}, {"gap_w8s4", g4}, {"gap_w8s8", g8}});
    }
    const int n = int(figs.size());
    const std::string verdict = n == 0         ? "inconclusive"
                                : smaller == n ? "holds"
                                : larger == n  ? "does not hold"
                                               : "inconclusive";
    out.push_back(
        finding("c", "W8/S4's gap is smaller than W8/S8's",
                "per seed with both runs (prefix): holds if W8/S4's gap is smaller in every seed, does not "
                "hold if it is larger in every seed, else inconclusive",
                verdict, figs));
  }

  {  // (d) period = S
    json figs = json::array();
    std::map<int, int> match, mismatch, silent;
    for (const json& r : rows) {
      const std::string pr = r.value("preset", "");
      if (r.value("tag", "") != "" || (pr != "w4s4-1kv" && pr != "w8s4-1kv" && pr != "w8s6-1kv" &&
                                       pr != "w8s8-1kv" && pr != "w12s12-1kv"))
        continue;
      if (!learned(r)) continue;
      const json* p = prot(r, P);
      const int S = r["S"].get<int>(), got = (*p)["period"].get<int>();
      (got == 0 ? silent : got == S ? match : mismatch)[S]++;
      figs.push_back({{"run", r["id"]}, {"S", S}, {"period", got}, {"p_value", (*p)["p_value"]}});
    }
    bool all_s = true, any_mismatch = false;
    for (int S : {4, 6, 8, 12}) {
      all_s = all_s && match[S] > 0;
      any_mismatch = any_mismatch || mismatch[S] > 0;
    }
    const std::string verdict = any_mismatch ? "does not hold" : all_s ? "holds" : "inconclusive";
    out.push_back(
        finding("d", "the period of the accuracy equals the stride S, for S in {4, 6, 8, 12}",
                "the period detector on each W/S run (prefix, R = 24): holds if every S has a run whose "
                "period is S and no run detects another period; does not hold if any run detects a "
                "period other than its S; inconclusive otherwise (no phase dependence detected, or an S "
                "missing)",
                verdict, figs));
  }

  {  // (e) knockout losses concentrate on few phases
    json figs = json::array();
    int compressed_runs = 0, concentrated_runs = 0;
    for (const json& r : rows) {
      if (!r.contains("explain") || !learned(r)) continue;
      const bool compressed = r.value("S", 0) > 0;
      int matter = 0, conc = 0;
      for (const json& k : r["explain"]["knockouts"]) {
        double lo = 1e9, hi = -1e9, sum = 0;
        int n = 0;
        for (const json& v : k["rel"]) {
          if (!v.is_number()) continue;
          const double loss = -v.get<double>();
          lo = std::min(lo, loss);
          hi = std::max(hi, loss);
          sum += loss;
          ++n;
        }
        if (n == 0 || sum / n < 20) continue;
        ++matter;
        conc += hi >= 50 && lo <= 20;
      }
      if (compressed) {
        ++compressed_runs;
        concentrated_runs += conc > 0;
      }
      figs.push_back({{"run", r["id"]},
                      {"compressed", compressed},
                      {"knockouts_that_matter", matter},
                      {"concentrated", conc}});
    }
    const std::string verdict = compressed_runs == 0                       ? "inconclusive"
                                : 2 * concentrated_runs >= compressed_runs ? "holds"
                                : concentrated_runs == 0                   ? "does not hold"
                                                                           : "inconclusive";
    out.push_back(
        finding("e", "knockout losses concentrate on a few phases per layer or KV head under compression",
                "a knockout (layer, or KV head) matters if it costs >= 20% of clean accuracy on average over "
                "phases; it is concentrated if some phase loses >= 50% while another loses <= 20%. Holds if "
                "at least half of the compressed runs have a concentrated knockout, does not hold if none "
                "has, else inconclusive",
                verdict, figs));
  }

  {  // (f) gate cycling
    // R^2 is unbounded below (a cycled profile unlike the shifted one scores -1000 or less), so runs and
    // conditions are summarized by medians: one outlier cannot decide the verdict
    auto median = [](const std::vector<double>& v) { return quantile(v, 0.5); };
    json figs = json::array();
    std::vector<double> run_r2;
    int conds = 0, boundary_weakest = 0;
    for (const json& r : rows) {
      if (!r.contains("explain") || r["explain"]["cycling"].empty() || !learned(r)) continue;
      const int S = r["explain"]["S"].get<int>();
      std::vector<double> r2s;
      for (const json& c : r["explain"]["cycling"]) {
        if (c["layer"].get<int>() != -1) continue;
        r2s.push_back(num(c, "r2_no_boundary"));
        const std::vector<double> acc = c["acc"].get<std::vector<double>>();
        ++conds;
        boundary_weakest += int(std::min_element(acc.begin(), acc.end()) - acc.begin()) == S - 1;
      }
      if (r2s.empty()) continue;
      run_r2.push_back(median(r2s));
      figs.push_back({{"run", r["id"]}, {"median_r2_no_boundary", run_r2.back()}});
    }
    const double r2 = median(run_r2);
    const double share = conds ? double(boundary_weakest) / conds : std::nan("");
    figs.push_back({{"median_r2_no_boundary", r2}, {"boundary_weakest_share", share}});
    const std::string verdict = run_r2.empty()              ? "inconclusive"
                                : r2 >= 0.6 && share >= 0.8 ? "holds"
                                : r2 < 0.3 || share < 0.5   ? "does not hold"
                                                            : "inconclusive";
    out.push_back(finding(
        "f", "cycling the gates moves the within-window weak spots (R^2 >= 0.6) but not the boundary phase",
        "over W = S runs, every chunked layer cycled by delta in {+-1, +-2, +-3}: the median over runs of "
        "each run's median R^2 of A_delta(r) against A_0((r - delta) mod S) without the boundary phase, "
        "and the share of cycled conditions whose weakest phase is S - 1. Holds if R^2 >= 0.6 and share "
        ">= 80%, does not hold if R^2 < 0.3 or share < 50%",
        verdict, figs));
  }

  {  // (g) persistence without RoPE and with uniform averaging
    json figs = json::array();
    int n = 0, persists = 0;
    for (const json& r : rows) {
      if ((!is_ref(r, "no-rope") && !is_ref(r, "uniform")) || !learned(r)) continue;
      const json* p = prot(r, P);
      const bool ok = gap_beyond_noise(*p) && (*p)["period"].get<int>() == r["S"].get<int>();
      ++n;
      persists += ok;
      figs.push_back({{"run", r["id"]},
                      {"gap", (*p)["gap"]},
                      {"gap_ci", (*p)["gap_ci"]},
                      {"gap_null_q95", (*p)["gap_null_q95"]},
                      {"period", (*p)["period"]},
                      {"persists", ok}});
    }
    const std::string verdict = n == 0          ? "inconclusive"
                                : persists == n ? "holds"
                                : persists == 0 ? "does not hold"
                                                : "inconclusive";
    out.push_back(
        finding("g", "the periodic weak spot persists without RoPE and with uniform averaging",
                "no-rope and uniform runs (prefix): persists if the gap's lower 95% bound exceeds the "
                "noise-only 95th percentile and the detected period is S. Holds if every run persists, does "
                "not hold if none does",
                verdict, figs));
  }
  // every finding but (a) left these out
  for (json& f : out)
    if (f["id"] != "a") {
      f["rule"] = f["rule"].get<std::string>() +
                  ". Runs whose prefix mean is below 10% have not learned the task and are left out";
      f["left_out_not_learned"] = not_learned;
    }
  return out;
}

std::string study_format_findings(const json& findings) {
  std::string s = fmt::format("{:<3} {:<15} {}\n", "id", "verdict", "claim");
  for (const json& f : findings)
    s += fmt::format("{:<3} {:<15} {}\n", f["id"].get<std::string>(), f["verdict"].get<std::string>(),
                     f["claim"].get<std::string>());
  return s;
}

json study_gate_accuracy(const std::vector<json>& rows) {
  json out = json::array();
  for (const json& r : rows) {
    const json* p = prot(r, "prefix");
    if (!p || !r.contains("explain") || r.value("kind", "") != "chunked" ||
        r.value("W", 0) != r.value("S", -1))
      continue;
    const int S = r["S"].get<int>();
    std::vector<double> acc;
    for (const json& v : (*p)["folded"]) acc.push_back(v.is_number() ? v.get<double>() : std::nan(""));
    if (int(acc.size()) != S) continue;
    json gates = json::array();
    for (const json& g : r["explain"]["gates"]) {
      const std::vector<double> prof = g["profile"].get<std::vector<double>>();
      if (int(prof.size()) != S) continue;
      json rs = json::object();
      for (int shift : {0, 1}) {
        std::vector<double> x;
        for (int ph = 0; ph < S; ++ph) x.push_back(prof[size_t((ph + shift) % S)]);
        rs[shift == 0 ? "r_same_offset" : "r_next_offset"] = stats_pearson(acc, x);
      }
      gates.push_back({{"layer", g["layer"]},
                       {"branch", g["branch"]},
                       {"kv_head", g["kv_head"]},
                       {"peak", g["peak"]},
                       {"static", g["static"]},
                       {"r_same_offset", rs["r_same_offset"]},
                       {"r_next_offset", rs["r_next_offset"]}});
    }
    out.push_back({{"run", r["id"]},
                   {"S", S},
                   {"prefix_folded", (*p)["folded"]},
                   {"weakest_phase", (*p)["weakest_phase"]},
                   {"gates", gates}});
  }
  return out;
}

json study_ablations(const std::vector<json>& rows) {
  json out = json::array();
  for (const json& r : rows) {
    if (r.value("tag", "").empty()) continue;
    const json* ref = nullptr;
    for (const json& q : rows)
      if (q.value("preset", "") == r.value("preset", "") && q.value("seed", 0) == r.value("seed", 0) &&
          q.value("tag", "").empty())
        ref = &q;
    json a = {{"run", r["id"]}, {"reference", ref ? (*ref)["id"] : json(nullptr)}};
    for (const std::string protocol : {"prefix", "in-sequence"}) {
      const json* p = prot(r, protocol);
      if (!p) continue;
      const int S = (*p)["S"].get<int>();
      json e = {{"mean", (*p)["mean"]},
                {"gap", (*p)["gap"]},
                {"gap_ci", (*p)["gap_ci"]},
                {"period", (*p)["period"]},
                {"weakest_phase", (*p)["weakest_phase"]},
                {"boundary_weakest", (*p)["weakest_phase"].get<int>() == S - 1},
                {"learned", protocol != "prefix" || num(*p, "mean") >= kLearned},
                {"folded", (*p)["folded"]}};
      if (ref && prot(*ref, protocol)) {
        const json& q = *prot(*ref, protocol);
        e["reference_mean"] = q["mean"];
        e["reference_gap"] = q["gap"];
        e["reference_weakest_phase"] = q["weakest_phase"];
      }
      a[protocol] = e;
    }
    out.push_back(a);
  }
  return out;
}

namespace {
// The `phasescope train` flags that apply a run's grid overrides, or nothing when some override has no
// flag (the run is then redone through the study). "" for no overrides.
std::optional<std::string> train_flags(const json& overrides) {
  if (overrides.is_null() || overrides.empty()) return std::string();
  static const std::map<std::pair<std::string, std::string>, std::string> flags = {
      {{"model", "n_layers"}, "--layers"},
      {{"model", "token_shift"}, "--token-shift"},
      {{"train", "steps"}, "--steps"},
      {{"train", "dense_warmup_steps"}, "--dense-warmup"}};
  std::string out;
  for (const auto& [section, fields] : overrides.items()) {
    if (!fields.is_object()) return std::nullopt;
    for (const auto& [field, value] : fields.items()) {
      const auto f = flags.find({section, field});
      if (f == flags.end() || !value.is_number_integer()) return std::nullopt;
      out += fmt::format(" {} {}", f->second, value.get<int64_t>());
    }
  }
  return out;
}
}  // namespace

json study_mitigations(const std::vector<json>& rows, const std::string& reference) {
  const std::vector<std::string> protocols = {"prefix", "in-sequence"};
  json out;
  out["reference"] = reference;
  out["kv_context"] = kKvContext;
  out["kv_bytes_per_value"] = kKvBytes;
  // one row per run and protocol, with the commands that rebuild it outside the study
  json flat = json::array();
  for (const json& r : rows)
    for (const std::string& protocol : protocols) {
      const json* p = prot(r, protocol);
      if (!p) continue;
      const std::string preset = r["preset"], dir = "runs/" + r["id"].get<std::string>();
      const std::string tag = r.value("tag", "");
      // rows before 2026-12-06 carry no overrides: their tagged runs are redone through the study
      const std::optional<std::string> flags =
          tag.empty() ? std::optional<std::string>("") : train_flags(r.value("overrides", json(nullptr)));
      flat.push_back(
          {{"preset", preset},
           {"seed", r["seed"]},
           {"tag", tag},
           {"variant", study_variant(preset, tag)},  // the unit of every aggregate below
           {"family", r.value("family", "")},
           {"protocol", protocol},
           {"kv_bytes_per_token", r["kv_bytes_per_token"]},
           {"mean", (*p)["mean"]},
           {"mean_ci", (*p)["mean_ci"]},
           {"worst", (*p)["worst"]},
           {"worst_ci", (*p)["worst_ci"]},
           {"gap", (*p)["gap"]},
           {"gap_ci", (*p)["gap_ci"]},
           {"weakest_phase", (*p)["weakest_phase"]},
           {"period", (*p)["period"]},
           {"n", (*p)["n"]},
           {"val_loss", r["val_loss"]},
           {"train_seconds", r["train_seconds"]},
           {"commit", r.value("commit", "")},
           {"command",
            flags ? fmt::format("phasescope train --preset {} --seed {}{} --out {} && phasescope eval "
                                "--checkpoint {} --protocol {} --samples {} --R {} --bootstrap 2000 "
                                "--seed 1 --out {}/eval-{}",
                                preset, r["seed"].get<uint64_t>(), *flags, dir, dir, protocol,
                                (*p)["n"].get<int64_t>(), (*p).value("R", kR), dir, protocol)
                  : "phasescope study --grid mitigations (run " + r["id"].get<std::string>() +
                        ": the preset with the grid's overrides)"}});
    }
  out["rows"] = flat;

  // per variant (preset and tag: a tag is another recipe, e.g. a dense warm-up) and protocol over seeds
  auto avg = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? std::nan("") : s / double(v.size());
  };
  std::vector<std::string> order, preset_names;  // variants and presets, in row order
  std::map<std::string, std::pair<std::string, std::string>> preset_tag;  // variant -> (preset, tag)
  for (const json& r : flat) {
    if (preset_tag.emplace(r["variant"], std::pair<std::string, std::string>(r["preset"], r["tag"])).second)
      order.push_back(r["variant"]);
    if (std::find(preset_names.begin(), preset_names.end(), r["preset"].get<std::string>()) ==
        preset_names.end())
      preset_names.push_back(r["preset"]);
  }
  json presets = json::array(), frontier = json::array();
  for (const std::string& variant : order) {
    const auto& [preset, tag] = preset_tag.at(variant);
    std::vector<double> worst_all, mean_all;
    double kv = 0;
    std::string family;
    for (const std::string& protocol : protocols) {
      std::map<std::string, std::vector<double>> f;
      std::vector<uint64_t> seeds;
      for (const json& r : flat)
        if (r["variant"] == variant && r["protocol"] == protocol) {
          for (const char* k : {"mean", "worst", "gap", "val_loss"}) f[k].push_back(r[k].get<double>());
          seeds.push_back(r["seed"]);
          kv = r["kv_bytes_per_token"];
          family = r["family"];
        }
      if (seeds.empty()) continue;
      json e = {{"preset", preset},     {"tag", tag},     {"variant", variant},      {"family", family},
                {"protocol", protocol}, {"seeds", seeds}, {"kv_bytes_per_token", kv}};
      for (auto& [k, v] : f)
        e[k] = {{"mean", avg(v)},
                {"min", *std::min_element(v.begin(), v.end())},
                {"max", *std::max_element(v.begin(), v.end())}};
      presets.push_back(e);
      worst_all.insert(worst_all.end(), f["worst"].begin(), f["worst"].end());
      mean_all.insert(mean_all.end(), f["mean"].begin(), f["mean"].end());
    }
    if (!worst_all.empty())
      frontier.push_back({{"preset", preset},
                          {"tag", tag},
                          {"variant", variant},
                          {"family", family},
                          {"kv_bytes_per_token", kv},
                          {"worst", avg(worst_all)},
                          {"mean", avg(mean_all)}});
  }
  out["presets"] = presets;
  out["frontier"] = frontier;

  // the target, per candidate and protocol, seed by seed against the reference of that seed
  const std::string rule =
      "at the reference's KV bytes per token (within 0.5%), on every seed the reference also has: worst >= 2 "
      "x the reference's worst, gap <= the reference's gap / 2, and mean >= the lower end of the reference "
      "mean's 95% interval (the mean is not lowered beyond noise); 'meets' when every such seed passes, "
      "with at least 3 seeds; a seed whose reference row has not learned the task (mean below 10%) is not "
      "paired (nothing to double or halve). The reference is " +
      reference +
      ", except for a candidate named BASE-x where preset BASE has rows here (a fix carried over to "
      "another design, e.g. dsv4-csa-coverage against dsv4-csa); a candidate run with a grid tag (another "
      "recipe, e.g. a dense warm-up) is paired with the reference's run of the same tag and seed";
  json goal = json::array();
  for (const std::string& variant : order) {
    const auto& [preset, tag] = preset_tag.at(variant);
    std::string base = reference;  // the longest other preset that `preset` extends as BASE-x
    size_t base_len = 0;
    for (const std::string& other : preset_names)
      if (other != preset && other.size() > base_len && preset.rfind(other + "-", 0) == 0) {
        base = other;
        base_len = other.size();
      }
    // judged: every "candidate..." row, and a "carry-over..." row that extends another preset here; a
    // carried-over design's own reference ("carry-over: reference", e.g. dsv4-csa or dsv4-csa-2l, even
    // when its name extends another design's) is not a candidate
    bool candidate = false;
    for (const json& r : flat) {
      const std::string fam = r["family"];
      if (r["variant"] == variant &&
          (fam.rfind("candidate", 0) == 0 ||
           (fam.rfind("carry-over", 0) == 0 && fam != "carry-over: reference" && base != reference)))
        candidate = true;
    }
    if (!candidate) continue;
    for (const std::string& protocol : protocols) {
      json seeds = json::array();
      int pass = 0, paired = 0;
      bool equal_memory = true;
      for (const json& c : flat) {
        if (c["variant"] != variant || c["protocol"] != protocol) continue;
        const json* ref = nullptr;
        for (const json& q : flat)
          if (q["preset"] == base && q["protocol"] == protocol && q["seed"] == c["seed"] && q["tag"] == tag)
            ref = &q;
        if (!ref || num(*ref, "mean") < kLearned) continue;
        ++paired;
        const double kv_ratio =
            c["kv_bytes_per_token"].get<double>() / (*ref)["kv_bytes_per_token"].get<double>();
        equal_memory = equal_memory && std::abs(kv_ratio - 1) <= 0.005;
        const bool worst_ok = c["worst"].get<double>() >= 2 * (*ref)["worst"].get<double>();
        const bool gap_ok = c["gap"].get<double>() <= (*ref)["gap"].get<double>() / 2;
        const bool mean_ok = c["mean"].get<double>() >= (*ref)["mean_ci"][0].get<double>();
        pass += worst_ok && gap_ok && mean_ok;
        seeds.push_back({{"seed", c["seed"]},
                         {"worst", c["worst"]},
                         {"reference_worst", (*ref)["worst"]},
                         {"gap", c["gap"]},
                         {"reference_gap", (*ref)["gap"]},
                         {"mean", c["mean"]},
                         {"reference_mean", (*ref)["mean"]},
                         {"reference_mean_lo", (*ref)["mean_ci"][0]},
                         {"kv_ratio", kv_ratio},
                         {"worst_doubled", worst_ok},
                         {"gap_halved", gap_ok},
                         {"mean_kept", mean_ok}});
      }
      const std::string verdict = paired < 3       ? "inconclusive (fewer than 3 paired seeds)"
                                  : !equal_memory  ? "not at equal memory"
                                  : pass == paired ? "meets"
                                                   : "does not meet";
      goal.push_back({{"preset", preset},
                      {"tag", tag},
                      {"variant", variant},
                      {"reference", study_variant(base, tag)},
                      {"protocol", protocol},
                      {"paired_seeds", paired},
                      {"seeds_passing", pass},
                      {"verdict", verdict},
                      {"per_seed", seeds}});
    }
  }
  out["goal_rule"] = rule;
  out["goal"] = goal;
  return out;
}

// ---------------------------------------------------------------------------------------------- aggregate

namespace {

// The mitigations table for the terminal: per preset and protocol, figures averaged over seeds with their
// range, then the goal's verdicts.
std::string study_format_mitigations(const json& m) {
  std::string t = fmt::format(
      "\nmitigations at {} tokens (KV bytes per token, bf16); figures in %, mean over seeds "
      "[min..max]\n",
      m["kv_context"].get<int64_t>());
  t += fmt::format("{:<20} {:<12} {:>5} {:>8} {:>18} {:>18} {:>18} {:>7}\n", "preset", "protocol", "seeds",
                   "KV B/tok", "mean", "worst", "gap", "val");
  auto cell = [](const json& f) {
    return fmt::format("{} [{}..{}]", pct(f["mean"].get<double>()), pct(f["min"].get<double>()),
                       pct(f["max"].get<double>()));
  };
  for (const json& e : m["presets"])
    t += fmt::format("{:<20} {:<12} {:>5} {:>8.2f} {:>18} {:>18} {:>18} {:>7.3f}\n",
                     e["variant"].get<std::string>(), e["protocol"].get<std::string>(), e["seeds"].size(),
                     e["kv_bytes_per_token"].get<double>(), cell(e["mean"]), cell(e["worst"]), cell(e["gap"]),
                     e["val_loss"]["mean"].get<double>());
  t += "goal: " + m["goal_rule"].get<std::string>() + "\n";
  for (const json& g : m["goal"])
    t += fmt::format("  {:<20} {:<12} vs {:<10} {} ({} of {} seeds pass)\n", g["variant"].get<std::string>(),
                     g["protocol"].get<std::string>(), g["reference"].get<std::string>(),
                     g["verdict"].get<std::string>(), g["seeds_passing"].get<int>(),
                     g["paired_seeds"].get<int>());
  return t;
}

std::string runs_csv(const json& runs) {
  std::string s =
      "run,preset,seed,family,protocol,n,mean,mean_lo,mean_hi,worst,best,gap,gap_lo,gap_hi,gap_null_q95,"
      "period,p_value,val_loss,kv_bytes_per_token,weakest_phase\n";
  for (const json& r : runs)
    s += fmt::format(
        "{},{},{},{},{},{},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{},{:.3g},{:.4f},{:"
        ".1f},{}\n",
        r["run"].get<std::string>(), r["preset"].get<std::string>(), r["seed"].get<uint64_t>(),
        r["family"].get<std::string>(), r["protocol"].get<std::string>(), r["n"].get<int64_t>(),
        num(r, "mean"), r["mean_ci"][0].get<double>(), r["mean_ci"][1].get<double>(), num(r, "worst"),
        num(r, "best"), num(r, "gap"), r["gap_ci"][0].get<double>(), r["gap_ci"][1].get<double>(),
        num(r, "gap_null_q95"), r["period"].get<int>(), num(r, "p_value"), num(r, "val_loss"),
        num(r, "kv_bytes_per_token"), r["weakest_phase"].get<int>());
  return s;
}

std::string phases_csv(const std::vector<json>& rows) {
  std::string s = "run,protocol,S,phase,acc,n\n";
  for (const json& r : rows)
    for (const auto& [protocol, p] : r["protocols"].items())
      for (size_t i = 0; i < p["folded"].size(); ++i)
        s += fmt::format("{},{},{},{},{:.4f},{}\n", r["id"].get<std::string>(), protocol, p["S"].get<int>(),
                         i, p["folded"][i].is_number() ? p["folded"][i].get<double>() : std::nan(""),
                         p["folded_n"][i].get<int64_t>());
  return s;
}

void study_report(const json& study, const std::vector<json>& rows, const std::string& out) {
  ReportDoc doc;
  doc.title = "phasescope study: " + study["grid"].get<std::string>();
  doc.intro_html =
      "<p>" +
      html_escape(fmt::format("{} runs with a row, {} missing. Command: {}. Accuracy in %, gap = best - "
                              "worst residue (R = 24), 95% cluster-bootstrap intervals.",
                              rows.size(), study["missing"].size(), study["command"].get<std::string>())) +
      "</p>";
  // findings
  {
    std::vector<std::vector<std::string>> t;
    for (const json& f : study["findings"])
      t.push_back({f["id"].get<std::string>(), f["claim"].get<std::string>(), f["verdict"].get<std::string>(),
                   f["rule"].get<std::string>()});
    report_add_section(doc, {"findings", "Findings (a)-(g), judged by code",
                             html_table({"id", "claim", "verdict", "rule"}, t)});
  }
  // runs beside the paper
  {
    std::vector<std::vector<std::string>> t;
    for (const json& r : study["runs"]) {
      std::string paper = "";
      for (const PaperRun& pr : paper_runs())
        if (r["run"] == StudyRun{pr.preset, pr.seed, "", "", "", nullptr}.id() &&
            r["protocol"] == "prefix")  // untagged runs
          paper = fmt::format("{:.3f} / {:.1f} / {:.1f} / {:.1f}", pr.val_loss, pr.mean, pr.worst, pr.gap);
      t.push_back({r["run"].get<std::string>(), r["protocol"].get<std::string>(),
                   fmt::format("{:.3f}", num(r, "val_loss")),
                   fmt::format("{} [{}, {}]", pct(num(r, "mean")), pct(r["mean_ci"][0].get<double>()),
                               pct(r["mean_ci"][1].get<double>())),
                   pct(num(r, "worst")),
                   fmt::format("{} [{}, {}]", pct(num(r, "gap")), pct(r["gap_ci"][0].get<double>()),
                               pct(r["gap_ci"][1].get<double>())),
                   std::to_string(r["period"].get<int>()),
                   fmt::format("{:.0f}", num(r, "kv_bytes_per_token")), paper});
    }
    report_add_section(doc, {"runs", "Runs beside the paper",
                             html_table({"run", "protocol", "val loss", "mean", "worst", "gap", "period",
                                         "KV B/token @128K", "paper: loss / mean / worst / gap"},
                                        t)});
  }
  // folded per-phase plots per family and protocol
  {
    std::string html;
    std::map<std::string, std::vector<const json*>> by_family;
    for (const json& r : rows) by_family[r.value("family", "")].push_back(&r);
    for (const auto& [family, rs] : by_family)
      for (const std::string protocol : {"prefix", "in-sequence"}) {
        std::vector<PhaseProfile> profiles;
        for (const json* r : rs) {
          const json* p = prot(*r, protocol);
          if (!p) continue;
          PhaseProfile pp;
          pp.name = (*r)["id"].get<std::string>();
          for (const json& v : (*p)["folded"])
            pp.acc.push_back(v.is_number() ? v.get<double>() : std::nan(""));
          profiles.push_back(pp);
        }
        if (profiles.empty()) continue;
        const std::string png =
            (fs::path(out) / "figures" / fmt::format("folded-{}-{}.png", family, protocol)).string();
        io_make_dirs((fs::path(out) / "figures").string());
        plot_phase_profiles(fmt::format("{} ({} padding): accuracy per phase t mod S", family, protocol),
                            "phase", profiles, png);
        html += html_png(png, family + " " + protocol);
      }
    report_add_section(doc, {"phases", "Per-phase accuracy by family (folded to t mod S)", html});
  }
  // the reference per seed
  {
    std::vector<std::vector<std::string>> t;
    for (const json& r : rows)
      if (is_ref(r, "w8s8-1kv"))
        for (const std::string protocol : {"prefix", "in-sequence"}) {
          const json* p = prot(r, protocol);
          if (!p) continue;
          std::string phases;
          for (const json& v : (*p)["folded"])
            phases += pct(v.is_number() ? v.get<double>() : std::nan("")) + " ";
          t.push_back({std::to_string(r["seed"].get<uint64_t>()), protocol, phases,
                       std::to_string((*p)["weakest_phase"].get<int>())});
        }
    report_add_section(doc, {"reference", "W8/S8 · 1 KV per seed: folded accuracy and the weakest phase",
                             html_table({"seed", "protocol", "phase 0..7 (%)", "weakest"}, t)});
  }  // tagged runs against their untagged reference, and where the static gates sit relative to the weak
     // phases
  {
    std::vector<std::vector<std::string>> t;
    for (const json& a : study["ablations"])
      for (const std::string protocol : {"prefix", "in-sequence"}) {
        if (!a.contains(protocol)) continue;
        const json& e = a[protocol];
        std::string phases;
        for (const json& v : e["folded"]) phases += pct(v.is_number() ? v.get<double>() : std::nan("")) + " ";
        t.push_back({a["run"].get<std::string>(),
                     a["reference"].is_null() ? "-" : a["reference"].get<std::string>(), protocol,
                     pct(num(e, "mean")) +
                         (e.contains("reference_mean") ? " (" + pct(num(e, "reference_mean")) + ")" : ""),
                     pct(num(e, "gap")) +
                         (e.contains("reference_gap") ? " (" + pct(num(e, "reference_gap")) + ")" : ""),
                     std::to_string(e["weakest_phase"].get<int>()) +
                         (e.contains("reference_weakest_phase")
                              ? " (" + std::to_string(e["reference_weakest_phase"].get<int>()) + ")"
                              : ""),
                     phases});
      }
    if (!t.empty())
      report_add_section(
          doc,
          {"ablations", "Ablations: tagged runs beside their reference (in brackets)",
           html_table({"run", "reference", "protocol", "mean", "gap", "weakest phase", "phase 0..S-1 (%)"},
                      t)});
    std::vector<std::vector<std::string>> g;
    for (const json& r : study["gate_accuracy"])
      for (const json& x : r["gates"])
        g.push_back({r["run"].get<std::string>(),
                     fmt::format("L{} {} h{}", x["layer"].get<int>(), x["branch"].get<std::string>(),
                                 x["kv_head"].get<int>()),
                     std::to_string(x["peak"].get<int>()), fmt::format("{:.2f}", num(x, "r_same_offset")),
                     fmt::format("{:.2f}", num(x, "r_next_offset"))});
    if (!g.empty())
      report_add_section(
          doc, {"gate-accuracy", "Static gates against the weak phases (W = S runs, prefix)",
                "<p>Pearson r between the folded accuracy at phase p and a gate's static profile at offset p "
                "(same) or p + 1 (the record's name, next offset), mod S.</p>" +
                    html_table({"run", "gate", "peak offset", "r (offset p)", "r (offset p+1)"}, g)});
  }

  // knockouts, gates, cycling
  {
    std::vector<std::vector<std::string>> ko, gates, cyc;
    for (const json& r : rows) {
      if (!r.contains("explain")) continue;
      for (const json& k : r["explain"]["knockouts"]) {
        std::string rel;
        for (const json& v : k["rel"])
          rel += v.is_number() ? fmt::format("{:.0f} ", v.get<double>()) : "n/a ";
        ko.push_back({r["id"].get<std::string>(), k["label"].get<std::string>(), rel});
      }
      for (const json& g : r["explain"]["gates"])
        gates.push_back({r["id"].get<std::string>(),
                         fmt::format("L{} {} h{}", g["layer"].get<int>(), g["branch"].get<std::string>(),
                                     g["kv_head"].get<int>()),
                         fmt::format("{:.2f}", num(g, "static")), fmt::format("{:.2f}", num(g, "window")),
                         std::to_string(g["peak"].get<int>())});
      for (const json& c : r["explain"]["cycling"])
        cyc.push_back({r["id"].get<std::string>(), std::to_string(c["layer"].get<int>()),
                       std::to_string(c["delta"].get<int>()), fmt::format("{:.2f}", num(c, "r2")),
                       fmt::format("{:.2f}", num(c, "r2_no_boundary"))});
    }
    report_add_section(doc, {"knockouts", "Knockouts: relative change per phase (%, prefix)",
                             html_table({"run", "knocked out", "phase 0..S-1"}, ko)});
    report_add_section(
        doc,
        {"gates", "Gate concentration (1 = one-hot .. W = uniform)",
         html_table({"run", "gate", "static exp(H(E[a]))", "per window E[exp(H(a))]", "peak phase"}, gates)});
    report_add_section(doc,
                       {"cycling", "Gate cycling: R^2 of A_delta(r) vs A_0((r - delta) mod S)",
                        html_table({"run", "layer (-1 = all)", "delta", "R^2", "R^2 w/o boundary"}, cyc)});
  }
  report_write(doc, (fs::path(out) / "report.html").string());
}

std::string fmt_duration(double seconds) {
  if (seconds < 90) return fmt::format("{:.0f} s", seconds);
  if (seconds < 5400) return fmt::format("{:.0f} min", seconds / 60);
  return fmt::format("{:.1f} h", seconds / 3600);
}

// The one reader of a run's row: runs/<id>/row.json under a study folder. Null when there is none (the
// run has not finished); a row that does not parse fails with the fix (delete it: that run is redone).
std::string row_path_of(const std::string& out, const std::string& id) {
  return (fs::path(out) / "runs" / id / "row.json").string();
}

json row_read(const std::string& path) {
  if (!fs::exists(path)) return nullptr;
  const std::string fix = "delete " + path + " (that run is redone)";
  return json_parse_or_fail(io_read_text(path, fix), path, fix);
}

}  // namespace

int study_merge_rows(const std::string& from, const std::string& out, const std::set<std::string>& ids,
                     std::ostream* log) {
  const fs::path src = fs::path(from) / "runs";
  if (!fs::is_directory(src))
    fail(from, "has no runs/ folder: it is not a study output folder",
         "pass the --out folder of another study invocation (it holds runs/<id>/row.json)");
  if (fs::equivalent(fs::path(from), fs::path(out))) return 0;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(src))
    if (e.is_directory()) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  int copied = 0;
  for (const fs::path& d : dirs) {
    const fs::path row = d / "row.json";
    if (!fs::exists(row)) continue;                   // unfinished there: it resumes where it was started
    if (!ids.count(d.filename().string())) continue;  // another grid's run
    const std::string text = io_read_text(row.string(), "");
    const std::string fix = "delete " + row.string() + " (that run is redone) or leave it out of --merge";
    const json j = json_parse_or_fail(text, row.string(), fix);
    if (!j.contains("id") || j["id"] != d.filename().string())
      fail(row.string(), "its id does not match its folder " + d.filename().string(), fix);
    const fs::path dst = row_path_of(out, d.filename().string());
    if (fs::exists(dst)) {
      if (row_read(dst.string()) != j && log)
        *log << fmt::format("merge: {} has a row here already; kept it, not the one in {}\n",
                            d.filename().string(), from);
      continue;
    }
    io_make_dirs(dst.parent_path().string());
    io_write_atomic(dst.string(), text);
    ++copied;
  }
  if (log) *log << fmt::format("merge: {} rows copied from {}\n", copied, from);
  return copied;
}

void study_shard_parse(const std::string& text, StudyOptions* opt) {
  const size_t slash = text.find('/');
  try {
    if (slash == std::string::npos) throw std::invalid_argument("no slash");
    opt->shard_k = std::stoi(text.substr(0, slash));
    opt->shard_n = std::stoi(text.substr(slash + 1));
  } catch (const std::exception&) {
    fail("--shard " + text, "is not K/N", "pass --shard 1/2 (the first of two shards)");
  }
}

StudyResult study_run(const StudyOptions& opt) {
  const StudyGrid grid = study_grid(opt.grid, opt.seeds);
  if (opt.shard_n < 1 || opt.shard_k < 1 || opt.shard_k > opt.shard_n)
    fail("--shard " + std::to_string(opt.shard_k) + "/" + std::to_string(opt.shard_n), "K must be in 1..N",
         "pass --shard 1/2 on one machine and --shard 2/2 on the other");
  StudyResult res;
  res.out = opt.out.empty() ? "runs/study-" + grid.name : opt.out;
  io_make_dirs((fs::path(res.out) / "runs").string());
  std::ostream* log = opt.log;
  const auto t0 = std::chrono::steady_clock::now();

  // rows finished elsewhere (other shards' output folders): copied in, never recomputed
  std::set<std::string> ids;
  for (const StudyRun& run : grid.runs) ids.insert(run.id());
  for (const std::string& from : opt.merge) res.merged += study_merge_rows(from, res.out, ids, log);

  // this shard's runs that have no row yet (or a row scored on fewer prompts than asked)
  if (opt.run) {
    const int64_t samples = study_samples(opt, grid);
    std::vector<size_t> todo;
    for (size_t i = 0; i < grid.runs.size(); ++i)
      if (int(i % size_t(opt.shard_n)) == opt.shard_k - 1) todo.push_back(i);
    // expected wall time: a run's cost grows with its steps x layers, so the rate is the median of
    // wall_seconds / (steps x layers) over the rows there are (a first guess without rows), times each
    // run's own steps x layers; refined after every run this invocation finishes
    std::vector<double> units;  // [grid.runs.size()] steps x layers of each run
    for (const StudyRun& run : grid.runs) {
      const Preset p = study_preset(run, grid.toy);
      units.push_back(double(std::max(1, p.train.steps)) * double(std::max<int64_t>(1, p.model.n_layers)));
    }
    std::vector<double> rates;  // seconds per step and layer
    for (size_t i = 0; i < grid.runs.size(); ++i) {
      const json row = row_read(row_path_of(res.out, grid.runs[i].id()));
      if (row.is_object() && row.contains("wall_seconds"))
        rates.push_back(num(row, "wall_seconds") / units[i]);
    }
    double units_left = 0;
    int to_run = 0;
    for (size_t i : todo)
      if (opt.fresh || !fs::exists(row_path_of(res.out, grid.runs[i].id()))) {
        ++to_run;
        units_left += units[i];
      }
    auto rate = [&] {
      if (rates.empty()) return grid.toy ? 20.0 / (40 * 2) : 600.0 / (2000 * 2);
      return quantile(rates, 0.5);
    };
    if (log)
      *log << fmt::format(
          "{} of this shard's {} runs to train; expected wall time ~{} ({:.1f} ms per step and layer, {})\n",
          to_run, todo.size(), fmt_duration(units_left * rate()), 1e3 * rate(),
          rates.empty() ? "first guess" : "median of the rows there are");
    int done = 0, ran = 0;
    for (size_t i : todo) {
      const StudyRun& run = grid.runs[i];
      const std::string dir = (fs::path(res.out) / "runs" / run.id()).string();
      const std::string row_path = row_path_of(res.out, run.id());
      ++done;
      if (opt.fresh) fs::remove_all(dir);
      const json old_row = row_read(row_path);
      if (!old_row.is_null()) {
        if (row_min_samples(old_row) >= samples) {
          if (log) *log << fmt::format("[{}/{}] {}: done (row.json)\n", done, todo.size(), run.id());
          continue;
        }
      }
      const bool upgrade = !old_row.is_null();
      if (log) {
        *log << fmt::format("[{}/{}] {}: {} -> {}\n", done, todo.size(), run.id(),
                            upgrade
                                ? fmt::format("row scored on {} prompts: evaluate again on {} (the trained "
                                              "model is reused)",
                                              row_min_samples(old_row), samples)
                                : std::string("train, evaluate (prefix, in-sequence), explain"),
                            dir);
        log->flush();
      }
      const auto r0 = std::chrono::steady_clock::now();
      json row;
      try {
        row = study_one(run, grid, opt, dir);
      } catch (const Error& e) {
        // one run's failure does not stop an unattended grid: it is recorded, the rest go on, and the
        // next invocation tries it again (it has no row)
        res.failed.push_back({run.id(), e.what()});
        if (log) *log << fmt::format("    FAILED: {}\n", e.what());
        continue;
      }
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - r0).count();
      row["wall_seconds"] = wall;
      if (upgrade) {  // training happened in the earlier invocation: keep its time and binary
        row["train_seconds"] = old_row.value("train_seconds", 0.0);
        row["wall_seconds"] = old_row.value("train_seconds", 0.0) + wall;
        row["train_commit"] = old_row.value("train_commit", old_row.value("commit", std::string("unknown")));
        row["train_threads"] = old_row.value("train_threads", old_row.value("threads", json()));
        row["upgraded_from_samples"] = row_min_samples(old_row);
      }
      io_write_atomic(row_path, row.dump(1) + "\n");
      if (!upgrade) {
        rates.push_back(wall / units[i]);
        units_left -= units[i];
        ++ran;
      }
      if (log) {
        const json& p = row["protocols"]["prefix"];
        const int left = to_run - ran;
        *log << fmt::format(
            "    prefix: mean {} worst {} gap {} period {}; val loss {:.3f}; {:.0f} s; {} runs left, ETA "
            "{}\n",
            pct(num(p, "mean")), pct(num(p, "worst")), pct(num(p, "gap")), p["period"].get<int>(),
            num(row, "val_loss"), wall, left, fmt_duration(std::max(0.0, units_left) * rate()));
        log->flush();
      }
    }
  }

  // aggregate every row there is
  std::vector<json> rows;
  json runs = json::array();
  for (const StudyRun& run : grid.runs) {
    json row = row_read(row_path_of(res.out, run.id()));
    if (row.is_null()) {
      res.missing.push_back(run.id());
      continue;
    }
    for (const auto& [protocol, p] : row["protocols"].items()) {
      json r = p;
      r.erase("folded");
      r.erase("folded_n");
      r.erase("per_residue");
      r["run"] = row["id"];
      r["preset"] = row["preset"];
      r["seed"] = row["seed"];
      r["family"] = row["family"];
      r["protocol"] = protocol;
      r["val_loss"] = row["val_loss"];
      r["kv_bytes_per_token"] = row["kv_bytes_per_token"];
      runs.push_back(r);
    }
    rows.push_back(std::move(row));
  }
  json& s = res.study;
  s["schema"] = "phasescope-study";
  s["version"] = 1;
  s["grid"] = grid.name;
  s["toy"] = grid.toy;
  s["command"] = opt.command;
  s["commit"] = build_commit();  // of this aggregate; each row records its own
  s["seeds"] = opt.seeds;
  s["kv_bytes"] = {{"context", kKvContext}, {"bytes_per_value", kKvBytes}};
  s["runs"] = runs;
  s["findings"] = study_findings(rows);
  s["gate_accuracy"] = study_gate_accuracy(rows);
  s["ablations"] = study_ablations(rows);
  s["missing"] = res.missing;
  json failed = json::array();
  for (const auto& [id, error] : res.failed) failed.push_back({{"run", id}, {"error", error}});
  s["failed"] = failed;  // runs of this invocation that stopped with an error (they stay missing)
  json weakest = json::array();
  for (const json& r : rows)
    if (is_ref(r, "w8s8-1kv"))
      weakest.push_back({{"seed", r["seed"]},
                         {"prefix", r["protocols"]["prefix"]["weakest_phase"]},
                         {"in-sequence", r["protocols"]["in-sequence"]["weakest_phase"]},
                         {"prefix_folded", r["protocols"]["prefix"]["folded"]}});
  s["reference_weakest_phases"] = weakest;
  s["wall_seconds_rows"] = [&] {
    double w = 0;
    for (const json& r : rows) w += num(r, "wall_seconds");
    return w;
  }();
  if (grid.name == "mitigations") {
    json m = study_mitigations(rows, "w8s8-1kv");
    m["schema"] = "phasescope-mitigations";
    m["version"] = 1;
    m["command"] = opt.command;
    m["commit"] = build_commit();
    io_write_atomic((fs::path(res.out) / "results.json").string(), m.dump(1) + "\n");
    if (log) *log << study_format_mitigations(m);
  }
  io_write_atomic((fs::path(res.out) / "study.json").string(), s.dump(1) + "\n");
  io_write_atomic((fs::path(res.out) / "runs.csv").string(), runs_csv(runs));
  io_write_atomic((fs::path(res.out) / "phases.csv").string(), phases_csv(rows));
  if (opt.report && !rows.empty()) study_report(s, rows, res.out);
  if (log) {
    *log << fmt::format("\n{} of {} runs have rows ({} missing); this invocation took {:.0f} s\n",
                        rows.size(), grid.runs.size(), res.missing.size(),
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (const auto& [id, error] : res.failed) *log << fmt::format("failed: {}: {}\n", id, error);
    *log << study_format_findings(s["findings"]);
  }
  return res;
}

}  // namespace phasescope
