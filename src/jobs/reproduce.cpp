// reproduce.cpp — see reproduce.h.
#include "jobs/reproduce.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "core/check.h"
#include "eval/model_backend.h"
#include "eval/runner.h"
#include "explain/explain.h"
#include "explain/explain_report.h"
#include "model/config.h"
#include "model/load.h"
#include "train/trainer.h"

namespace phasescope {

namespace fs = std::filesystem;

std::vector<PaperRow> paper_rows() {
  // ../shared/design/phase-sensitivity-paper.md section 1.5 (the authors' page and data):
  // prefix padding, final checkpoint; in-sequence numbers are public for W8/S8 seed 42 only
  // (folded to phase mod 8; mean and gap as published, worst = the lowest folded phase).
  const std::string src =
      "Zhu et al. 2026, Periodic Weak Spots (arXiv 2609.36322): the authors' project page, "
      "section 'Controlled pretraining', and its published run data";
  return {
      {"full-1kv", "prefix", 18.8, 17.2, 3.1, src},
      {"w8s8-1kv", "prefix", 50.6, 5.7, 75.3, src},
      {"w8s4-1kv", "prefix", 66.9, 46.2, 39.8, src},
      {"w8s8-1kv", "in-sequence", 27.6, 3.5, 44.0, src},
  };
}

namespace {

// The run a model gets in this mode: the preset itself, or a tiny version for --quick.
Preset reproduce_preset(const std::string& name, const ReproduceOptions& opt) {
  Preset p = preset_load(name);
  if (opt.quick) {
    p.model.d_model = 64;
    p.model.head_dim = 16;
    p.task.seq_len = 128;
    p.task.n_records = 16;
    p.task.n_demos = 8;
    p.task.min_records = 8;
    p.task.curriculum_steps = 0;
    p.train.steps = 60;
    p.train.batch = 16;
    p.train.warmup = 10;
    p.train.eval_every = 0;
    p.train.ckpt_every = 30;
  }
  if (opt.steps > 0) p.train.steps = opt.steps;
  return preset_from_json(preset_to_json(p), "reproduce preset " + name);
}

std::string pct(double f) { return std::isfinite(f) ? fmt::format("{:.1f}", 100 * f) : "n/a"; }
std::string pct_or_na(double v) { return v < 0 ? "n/a" : fmt::format("{:.1f}", v); }

}  // namespace

std::string reproduce_run(const ReproduceOptions& opt_in) {
  // --quick and the full run keep separate folders, so neither resumes, refuses or overwrites the other
  ReproduceOptions opt = opt_in;
  if (opt.out.empty()) opt.out = opt.quick ? "runs/reproduce-quick" : "runs/reproduce";
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t samples = opt.samples > 0 ? opt.samples : 48 * 24;
  std::vector<std::string> results;
  std::vector<ReportSection> explained;
  for (size_t i = 0; i < opt.models.size(); ++i) {
    const std::string& name = opt.models[i];
    // train (or reuse / resume) the model
    Preset p = reproduce_preset(name, opt);
    const std::string model_dir = (fs::path(opt.out) / "models" / name).string();
    fmt::print("\n=== [{}/{}] {}: {} steps of {} (checkpoint {}) ===\n", i + 1, opt.models.size(), name,
               p.train.steps, p.task.task, model_dir);
    std::fflush(stdout);
    TrainOptions topt;
    topt.out_dir = model_dir;
    topt.fresh = opt.retrain;
    TrainResult tr = train_run(p, topt);
    if (tr.nan_stop)
      fail("reproduce " + name, tr.message, "lower train.lr in presets/" + name + ".json and rerun");

    // evaluate it under both padding protocols (one load; the backends share the module)
    const LoadedModel trained = model_load(model_dir);
    for (PadProtocol protocol : {PadProtocol::Prefix, PadProtocol::InSequence}) {
      LoadedModel m = trained;
      EvalOptions eo = eval_options_for(m.preset, protocol, samples, 24, 1);
      // a retrained model starts its evaluations over (journals are bound to weights); the layout is
      // the same for every model, so its table is printed once per protocol
      eo.fresh = opt.retrain;
      eo.log_layout = i == 0;
      ModelBackend backend(std::move(m), name);
      const std::string eval_dir = (fs::path(opt.out) / "eval" / name / pad_protocol_name(protocol)).string();
      fmt::print("--- {} / {} padding: {} prompts -> {}\n", name, pad_protocol_name(protocol),
                 eo.layout.n_base * 24, eval_dir);
      std::fflush(stdout);
      run_eval(backend, eo, eval_dir);
      results.push_back((fs::path(eval_dir) / "results.json").string());
    }

    // why: knockouts, gate profiles, gate cycling (prefix protocol)
    if (opt.explain) {
      LoadedModel m = trained;
      ExplainOptions xo;
      xo.samples = opt.quick ? 1152 : 576;  // the quick task's short prompts need 48 blocks to balance
      xo.calib_samples = opt.quick ? 48 : 192;
      xo.log = &std::cout;
      xo.fresh = opt.retrain;
      const std::string explain_dir = (fs::path(opt.out) / "explain" / name).string();
      fmt::print("--- {} / explain -> {}\n", name, explain_dir);
      ExplainResults xr = explain_run(m.model, m.preset, xo, explain_dir);
      fmt::print("{}", explain_summary(xr));
      explained.push_back(explain_report_section(xr, explain_dir, "explain-" + name));
    }
  }

  // one report over all runs, and the table beside the paper's numbers
  auto runs = eval_combined_report(
      results, opt.out, opt.quick ? "phasescope reproduce --quick" : "phasescope reproduce", explained);
  fmt::print("\n{}\n", results_format_compare(runs));
  fmt::print(
      "side by side with the paper (percent; ours: mean of residue accuracies [95% cluster-bootstrap CI])\n");
  fmt::print("{:<10} {:<12} | {:>22} {:>8} {:>22} | {:>7} {:>7} {:>7}\n", "model", "protocol", "ours mean",
             "worst", "gap", "paper", "worst", "gap");
  for (const auto& r : runs) {
    PaperRow paper;
    for (const auto& row : paper_rows())
      if (row.model == r.meta.model && row.protocol == r.meta.protocol) paper = row;
    const Stats& s = r.stats;
    fmt::print("{:<10} {:<12} | {:>22} {:>8} {:>22} | {:>7} {:>7} {:>7}\n", r.meta.model, r.meta.protocol,
               fmt::format("{} [{}, {}]", pct(s.mean), pct(s.mean_ci.lo), pct(s.mean_ci.hi)), pct(s.worst),
               fmt::format("{} [{}, {}]", pct(s.gap), pct(s.gap_ci.lo), pct(s.gap_ci.hi)),
               pct_or_na(paper.mean), pct_or_na(paper.worst), pct_or_na(paper.gap));
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string report = (fs::path(opt.out) / "report.html").string();
  fmt::print("\npaper numbers: {}\nwall time {:.0f} s; report {}\n", paper_rows()[0].source, wall, report);
  return report;
}

}  // namespace phasescope
