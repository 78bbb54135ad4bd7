// study.cpp — see study.h.
#include "jobs/study.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <ostream>

#include "attention/kv_memory.h"
#include "core/build_info.h"
#include "core/check.h"
#include "core/format.h"
#include "core/io.h"
#include "core/json_fields.h"
#include "eval/copy_loss.h"
#include "eval/model_backend.h"
#include "eval/runner.h"
#include "explain/explain.h"
#include "jobs/study_lm.h"
#include "jobs/study_report.h"
#include "model/load.h"
#include "train/trainer.h"

namespace phasescope {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Evaluation prompts per run and protocol: 192 per residue (a flat model's noise-only gap is then ~12
// points at 20% accuracy), 48 at toy size.
int64_t study_samples(const StudyOptions& opt, const StudyGrid& grid, int R) {
  return opt.samples > 0 ? opt.samples : (grid.toy ? 48 : 192) * R;
}

// Every layer's stride (0 = exact attention).
std::vector<int> preset_strides(const Preset& p) {
  std::vector<int> s;
  for (const AttnConfig& a : p.model.layers) s.push_back(attn_stride(a));
  return s;
}

// The row's description of the trained model: what it is, what its KV cache costs, its held-out loss.
// What a language model's training departs from pure pretraining by; "" = a pure language model.
std::string corpus_deviation(const TaskConfig& t) {
  std::vector<std::string> parts;
  if (t.lookup_ratio > 0)
    parts.push_back(
        fmt::format("{:.1f}% of training rows are lookup rows (task.lookup_ratio)", 100 * t.lookup_ratio));
  if (t.repeat_ratio > 0)
    parts.push_back(fmt::format(
        "{:.1f}% of training rows repeat a span of their own text (task.repeat_ratio){}",
        100 * t.repeat_ratio, t.repeat_steps > 0 ? fmt::format(", before step {}", t.repeat_steps) : ""));
  return fmt::format("{}", fmt::join(parts, "; "));
}

StudyRow row_of_model(const StudyRun& run, const LoadedModel& trained, bool toy) {
  StudyRow row;
  row.id = run.id();
  row.preset = run.preset;
  row.seed = run.seed;
  row.family = run.family;
  row.paper = run.paper;
  row.tag = run.tag;
  row.overrides = run.overrides;
  row.steps = trained.step;
  row.commit = build_commit();          // the build that computed this row (core/build_info.h)
  row.threads = at::get_num_threads();  // training is bit-reproducible for a fixed thread count
  const AttnConfig& a0 = trained.preset.model.layers[0];
  row.kind = attn_kind_name(a0.kind);
  row.S = attn_stride(a0);
  row.W = a0.kind == AttnKind::Chunked ? a0.W : attn_stride(a0);
  row.strides = preset_strides(trained.preset);
  row.n_kv_heads = int(trained.preset.model.n_kv_heads);
  row.kv_bytes_per_token =
      model_kv_bytes_per_token(trained.preset.model.layers, kStudyKvContext, kStudyKvBytes);
  row.kv_context = kStudyKvContext;
  LoadedModel m = trained;  // shares the module; heldout_loss only reads it
  row.val_loss = heldout_loss(*m.model, m.preset, toy ? 64 : 512, 20261204);
  return row;
}

// Train, evaluate and explain one run (each stage resumes); the row, not yet written. A language model's
// probe that failed is left out of the row and named in probe_failures.
StudyRow study_one(const StudyRun& run, const StudyGrid& grid, const StudyOptions& opt,
                   const std::string& dir, std::vector<std::string>* probe_failures) {
  // train (or resume)
  const Preset p = study_preset(run, grid.toy);
  const std::string model_dir = (fs::path(dir) / "model").string();
  TrainOptions topt;
  topt.out_dir = model_dir;
  topt.fresh = opt.fresh;
  if (!opt.log) topt.log = [](const std::string&) {};
  TrainResult tr;  // --no-train: the model on disk as it is (its row records the step it reached)
  if (opt.train) tr = train_run(p, topt);
  if (tr.nan_stop) fail("study run " + run.id(), tr.message, "lower train.lr in its overrides and rerun");
  const LoadedModel trained = model_load(model_dir);
  StudyRow row = row_of_model(run, trained, grid.toy);
  row.train_seconds = tr.seconds;

  // evaluate under both padding protocols; the folder names the prompt count, so a row upgraded to more
  // prompts scores them in a new journal and the old one is kept
  const int R = study_residues(trained.preset);
  const int64_t samples = study_samples(opt, grid, R);
  for (PadProtocol protocol : {PadProtocol::Prefix, PadProtocol::InSequence}) {
    LoadedModel m = trained;
    EvalOptions eo = eval_options_for(m.preset, protocol, samples, R, 1);
    eo.fresh = opt.fresh;
    eo.report = false;
    eo.bootstrap = 2000;
    eo.log_layout = false;
    ModelBackend backend(std::move(m), run.id());
    const std::string eval_dir =
        (fs::path(dir) / "eval" / fmt::format("{}-n{}", pad_protocol_name(protocol), samples)).string();
    row.protocols[pad_protocol_name(protocol)] = study_protocol_of(run_eval(backend, eo, eval_dir));
  }

  // explain: knockouts, gates, cycling
  LoadedModel m = trained;
  ExplainOptions xo;
  xo.samples = grid.toy ? 1152 : 576;  // toy prompts are short: more blocks balance the layout
  xo.calib_samples = grid.toy ? 48 : 192;
  xo.R = R;
  xo.fresh = opt.fresh;
  xo.report = false;
  row.explain = study_explain_of(explain_run(m.model, m.preset, xo, (fs::path(dir) / "explain").string()));

  // a language model: the copy loss by phase, and what departs from pure pretraining
  if (trained.preset.task.task == "corpus") {
    const Corpus corpus = corpus_open(trained.preset.task.corpus, CorpusVerify::kSizes);
    CopyLossOptions co;
    co.R = R;
    co.S = std::max(1, display_stride(trained.preset));
    co.span = grid.toy ? 8 : 32;
    co.gap = grid.toy ? 8 : 64;
    co.spans = grid.toy ? 4 : 32;
    const CopyLossResult cl = copy_loss_by_phase(*m.model, corpus.val, corpus.boundary_id, co);
    row.copy_loss = StudyCopyLoss{cl.per_residue,
                                  cl.folded,
                                  cl.first_copy,
                                  cl.mean,
                                  cl.worst,
                                  cl.gap,
                                  cl.worst_phase,
                                  cl.gap_ci_percentile,
                                  cl.tokens_per_residue};
    row.deviation = corpus_deviation(trained.preset.task);
    // the needle and the flip: one that cannot be built or scored does not cost the row its training
    for (const std::string& f : study_lm_probes(row, trained, corpus, R, samples, opt.fresh, dir)) {
      probe_failures->push_back(f);
      if (opt.log) *opt.log << fmt::format("    {} FAILED (the row is written without it)\n", f);
    }
  }
  return row;
}

// Expected wall time: a run's cost grows with its steps x layers, so the rate is the median of
// wall_seconds / (steps x layers) over the rows there are (a first guess without rows), refined after
// every run this invocation finishes.
struct WallClock {
  std::vector<double> units;  // [runs] steps x layers of each run of the grid
  std::vector<double> rates;  // seconds per step and layer of the finished rows
  bool toy = false;
  double rate() const {
    if (rates.empty()) return toy ? 20.0 / (40 * 2) : 600.0 / (2000 * 2);
    return quantile(rates, 0.5);
  }
};

WallClock wall_clock_of(const StudyGrid& grid, const std::string& out) {
  WallClock w;
  w.toy = grid.toy;
  for (const StudyRun& run : grid.runs) {
    const Preset p = study_preset(run, grid.toy);
    w.units.push_back(double(std::max(1, p.train.steps)) * double(std::max<int64_t>(1, p.model.n_layers)));
  }
  for (size_t i = 0; i < grid.runs.size(); ++i) {
    const std::optional<StudyRow> row = study_row_read(study_row_path(out, grid.runs[i].id()));
    if (row && std::isfinite(row->wall_seconds)) w.rates.push_back(row->wall_seconds / w.units[i]);
  }
  return w;
}

// Run (or upgrade) this shard's runs that need it; failures are recorded, the rest go on.
void study_run_pending(const StudyGrid& grid, const StudyOptions& opt, StudyResult& res) {
  std::ostream* log = opt.log;
  const int64_t samples = study_samples(opt, grid, 24);
  std::vector<size_t> todo;
  for (size_t i = 0; i < grid.runs.size(); ++i)
    if (int(i % size_t(opt.shard_n)) == opt.shard_k - 1 &&
        (opt.runs.empty() ||
         std::find(opt.runs.begin(), opt.runs.end(), grid.runs[i].id()) != opt.runs.end()))
      todo.push_back(i);
  WallClock clock = wall_clock_of(grid, res.out);
  double units_left = 0;
  int to_run = 0;
  for (size_t i : todo)
    if (opt.train && (opt.fresh || !fs::exists(study_row_path(res.out, grid.runs[i].id())))) {
      ++to_run;
      units_left += clock.units[i];
    }
  if (log)
    *log << fmt::format(
        "{} of this shard's {} runs to train; expected wall time ~{} ({:.1f} ms per step and layer, {})\n",
        to_run, todo.size(), fmt_duration(units_left * clock.rate()), 1e3 * clock.rate(),
        clock.rates.empty() ? "first guess" : "median of the rows there are");
  int done = 0, ran = 0;
  for (size_t i : todo) {
    const StudyRun& run = grid.runs[i];
    const std::string dir = (fs::path(res.out) / "runs" / run.id()).string();
    const std::string row_path = study_row_path(res.out, run.id());
    ++done;
    if (opt.fresh) fs::remove_all(dir);
    const std::optional<StudyRow> old_row = study_row_read(row_path);
    // a language model's row from before a probe (needle, flip) gets it where its trained model is still on
    // disk (run folders are not committed: elsewhere the row stands as it is)
    const std::vector<std::string> lacks =
        old_row && fs::exists(fs::path(dir) / "model" / "checkpoint.safetensors")
            ? study_lm_probes_missing(*old_row)
            : std::vector<std::string>{};
    if (old_row && study_row_min_samples(*old_row) >= samples) {
      if (log)
        *log << fmt::format("[{}/{}] {}: {}\n", done, todo.size(), run.id(),
                            lacks.empty()
                                ? std::string("done (row.json)")
                                : fmt::format("row without the {}: score {} alone (the trained "
                                              "model is reused)",
                                              fmt::join(lacks, " and "), lacks.size() > 1 ? "them" : "it"));
      if (!lacks.empty()) {
        try {  // the missing probes alone: nothing else of the row is computed again
          StudyRow row = *old_row;
          const std::vector<std::string> failed = study_lm_probes_add(row, opt.fresh, dir);
          for (const std::string& f : failed) {
            res.failed.push_back({run.id(), f});
            if (log) *log << fmt::format("    {} FAILED (the row is kept without it)\n", f);
          }
          if (failed.size() < lacks.size()) study_row_write(row_path, row);
        } catch (const Error& e) {
          res.failed.push_back({run.id(), e.what()});
          if (log) *log << fmt::format("    FAILED (the row stays as it was): {}\n", e.what());
        }
      }
      continue;
    }
    if (!opt.train && (!old_row || !fs::exists(fs::path(dir) / "model" / "checkpoint.safetensors"))) {
      if (log)
        *log << fmt::format("[{}/{}] {}: {} (--no-train)\n", done, todo.size(), run.id(),
                            old_row ? "its trained model is not here: left as it is"
                                    : "no row (not trained, or not finished): skipped");
      continue;
    }
    if (log) {
      *log << fmt::format(
          "[{}/{}] {}: {} -> {}\n", done, todo.size(), run.id(),
          !old_row
              ? std::string("train, evaluate (prefix, in-sequence), explain")
              : fmt::format("row scored on {} prompts: evaluate again on {} (the trained model is reused)",
                            study_row_min_samples(*old_row), samples),
          dir);
      log->flush();
    }
    const auto r0 = std::chrono::steady_clock::now();
    StudyRow row;
    try {
      std::vector<std::string> probe_failures;  // recorded; the next invocation adds the probe
      row = study_one(run, grid, opt, dir, &probe_failures);
      for (const std::string& f : probe_failures) res.failed.push_back({run.id(), f});
    } catch (const Error& e) {
      // one run's failure does not stop an unattended grid: it is recorded, and the next invocation tries
      // it again (it has no row)
      res.failed.push_back({run.id(), e.what()});
      if (log) *log << fmt::format("    FAILED: {}\n", e.what());
      continue;
    }
    const double wall = seconds_since(r0);
    row.wall_seconds = wall;
    if (old_row) {  // training happened in the earlier invocation: keep its time and binary
      row.train_seconds = old_row->train_seconds;
      row.wall_seconds = old_row->train_seconds + wall;
      row.train_commit = old_row->train_commit.empty() ? old_row->commit : old_row->train_commit;
      row.train_threads = old_row->train_threads.is_null() ? old_row->threads : old_row->train_threads;
      if (study_row_min_samples(*old_row) < samples)
        row.upgraded_from_samples = study_row_min_samples(*old_row);
    }
    study_row_write(row_path, row);
    if (!old_row) {
      clock.rates.push_back(wall / clock.units[i]);
      units_left -= clock.units[i];
      ++ran;
    }
    if (log) {
      const StudyProtocol& p = row.protocols.at("prefix");
      *log << fmt::format(
          "    prefix: mean {} worst {} gap {} period {}; val loss {:.3f}; {:.0f} s; {} runs left, ETA {}\n",
          pct(p.mean), pct(p.worst), pct(p.gap), p.period, row.val_loss, wall, to_run - ran,
          fmt_duration(std::max(0.0, units_left) * clock.rate()));
      log->flush();
    }
  }
}

// Every row there is, in grid order; rows that predate the strides field get them from their preset.
std::vector<StudyRow> study_rows(const StudyGrid& grid, StudyResult& res) {
  std::vector<StudyRow> rows;
  for (const StudyRun& run : grid.runs) {
    std::optional<StudyRow> row = study_row_read(study_row_path(res.out, run.id()));
    if (!row) {
      res.missing.push_back(run.id());
      continue;
    }
    if (row->strides.empty()) row->strides = preset_strides(study_preset(run, grid.toy));
    rows.push_back(std::move(*row));
  }
  return rows;
}

// study.json's content from the rows.
json study_json(const StudyGrid& grid, const StudyOptions& opt, const StudyResult& res,
                const std::vector<StudyRow>& rows) {
  json runs = json::array(), weakest = json::array(), failed = json::array();
  double wall = 0;
  for (const StudyRow& r : rows) {
    for (const auto& [protocol, p] : r.protocols) {
      json e = study_protocol_summary_json(p);
      e["run"] = r.id;
      e["preset"] = r.preset;
      e["seed"] = r.seed;
      e["family"] = r.family;
      e["protocol"] = protocol;
      e["val_loss"] = std::isfinite(r.val_loss) ? json(r.val_loss) : json(nullptr);
      e["kv_bytes_per_token"] = r.kv_bytes_per_token;
      runs.push_back(e);
    }
    if (study_is_design(r, "w8s8-1kv") && r.protocol("prefix") && r.protocol("in-sequence"))
      weakest.push_back({{"seed", r.seed},
                         {"prefix", r.protocol("prefix")->weakest_phase},
                         {"in-sequence", r.protocol("in-sequence")->weakest_phase},
                         {"prefix_folded", r.protocol("prefix")->folded}});
    if (std::isfinite(r.wall_seconds)) wall += r.wall_seconds;
  }
  for (const auto& [id, error] : res.failed) failed.push_back({{"run", id}, {"error", error}});
  json s;
  s["schema"] = "phasescope-study";
  s["version"] = 1;
  s["grid"] = grid.name;
  s["toy"] = grid.toy;
  s["command"] = opt.command;
  s["commit"] = build_commit();  // of this aggregate; each row records its own
  s["seeds"] = opt.seeds;
  s["kv_bytes"] = {{"context", kStudyKvContext}, {"bytes_per_value", kStudyKvBytes}};
  s["runs"] = runs;
  s["findings"] = study_findings(rows);
  s["gate_accuracy"] = study_gate_accuracy(rows);
  s["ablations"] = study_ablations(rows);
  s["missing"] = res.missing;
  s["failed"] = failed;  // runs of this invocation that stopped with an error (they stay missing)
  s["reference_weakest_phases"] = weakest;
  s["wall_seconds_rows"] = wall;
  json copy = json::array();  // language models: the copy loss by phase (nats)
  for (const StudyRow& r : rows)
    if (r.copy_loss)
      copy.push_back(
          {{"run", r.id},
           {"folded", r.copy_loss->folded},
           {"mean", r.copy_loss->mean},
           {"gap", r.copy_loss->gap},
           {"gap_ci_percentile", {r.copy_loss->gap_ci_percentile.lo, r.copy_loss->gap_ci_percentile.hi}},
           {"worst_phase", r.copy_loss->worst_phase},
           {"deviation", r.deviation}});
  if (!copy.empty()) s["copy_loss"] = copy;
  json flip = json::array();  // language models: the padding flip on code and its margin by phase
  for (const StudyRow& r : rows)
    if (r.flip)
      if (r.flip) {
        json e = study_flip_json(*r.flip);
        e.erase("L");  // the per-length lists stay in the row
        e.erase("margin");
        e["run"] = r.id;
        flip.push_back(e);
      }
  if (!flip.empty()) s["flip"] = flip;
  return s;
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
    const std::string id = d.filename().string();
    const fs::path row = d / "row.json";
    if (!fs::exists(row) || !ids.count(id))
      continue;  // unfinished there (it resumes there), or another grid's
    const std::string text = io_read_text(row.string(), "");
    const std::string fix = "delete " + row.string() + " (that run is redone) or leave it out of --merge";
    const StudyRow theirs = study_row_from_json(json_parse_or_fail(text, row.string(), fix), row.string());
    if (theirs.id != id) fail(row.string(), "its id does not match its folder " + id, fix);
    const std::string dst = study_row_path(out, id);
    if (fs::exists(dst)) {
      if (log && json::parse(io_read_text(dst, "")) != json::parse(text))
        *log << fmt::format("merge: {} has a row here already; kept it, not the one in {}\n", id, from);
      continue;
    }
    io_make_dirs(fs::path(dst).parent_path().string());
    io_write_atomic(dst, text);
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
  if (!opt.runs.empty()) {  // --runs names runs of this grid, never a typo's empty set
    std::vector<std::string> ids;
    for (const StudyRun& r : grid.runs) ids.push_back(r.id());
    for (const std::string& id : opt.runs)
      if (std::find(ids.begin(), ids.end(), id) == ids.end())
        fail("--runs " + id, "is not a run of grid " + grid.name + " (with --seeds as given)",
             "pass ids as in runs/<id>/: " + fmt::format("{}", fmt::join(ids, ", ")));
  }
  if (opt.fresh && !opt.train)
    fail("--fresh with --no-train",
         "--fresh deletes this shard's runs and --no-train would train none of them", "pass one of the two");
  StudyResult res;
  res.out = opt.out.empty() ? "runs/study-" + grid.name : opt.out;
  io_make_dirs((fs::path(res.out) / "runs").string());
  const auto t0 = std::chrono::steady_clock::now();

  // rows finished elsewhere (other shards' output folders): copied in, never recomputed
  std::set<std::string> ids;
  for (const StudyRun& run : grid.runs) ids.insert(run.id());
  for (const std::string& from : opt.merge) res.merged += study_merge_rows(from, res.out, ids, opt.log);

  // this shard's runs, then the aggregate of every row there is
  if (opt.run) study_run_pending(grid, opt, res);
  const std::vector<StudyRow> rows = study_rows(grid, res);
  res.study = study_json(grid, opt, res, rows);
  if (grid.name == "mitigations") {
    json m = study_mitigations(rows, "w8s8-1kv");
    m["schema"] = "phasescope-mitigations";
    m["version"] = 1;
    m["command"] = opt.command;
    m["commit"] = build_commit();
    io_write_atomic((fs::path(res.out) / "results.json").string(), m.dump(1) + "\n");
    if (opt.log) *opt.log << study_format_mitigations(m);
  }
  io_write_atomic((fs::path(res.out) / "study.json").string(), res.study.dump(1) + "\n");
  io_write_atomic((fs::path(res.out) / "runs.csv").string(), study_runs_csv(rows));
  io_write_atomic((fs::path(res.out) / "phases.csv").string(), study_phases_csv(rows));
  if (opt.report && !rows.empty()) study_report(res.study, rows, res.out);
  if (opt.log) {
    *opt.log << fmt::format("\n{} of {} runs have rows ({} missing); this invocation took {:.0f} s\n",
                            rows.size(), grid.runs.size(), res.missing.size(), seconds_since(t0));
    for (const auto& [id, error] : res.failed) *opt.log << fmt::format("failed: {}: {}\n", id, error);
    *opt.log << study_format_findings(res.study["findings"]);
  }
  return res;
}

}  // namespace phasescope
