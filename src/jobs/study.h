// study.h — `phasescope study`: the paper's grid of runs (§1.5-1.6) across seeds, each run trained,
// evaluated under both padding protocols and explained (knockouts, gates, cycling), and the seven
// findings (a)-(g) checked from the data by stated rules. A run is (preset, seed, overrides); its whole
// outcome is one small JSON file, OUT/runs/<id>/row.json, written last: a run with a row is done, a
// run without one resumes where it stopped (checkpoint, journals). --shard K/N takes every N-th run
// (the K-th of each N), so N machines (or sittings) split a grid; every invocation then aggregates
// whatever rows exist into OUT/study.json, OUT/runs.csv, OUT/phases.csv and OUT/report.html, and says
// which runs are still missing (findings that need them are "inconclusive" until they are in).
// Phase convention: r = target_pos % S (target_pos = absolute position of the target record's key);
// the boundary phase of a W = S design is S - 1 (the key in an entry's last slot, its name in the next).
// Not here: training (train/), evaluation (eval/), the instruments (explain/); this file sequences them
// and judges the findings.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"

namespace phasescope {

struct StudyRun {
  std::string preset;                  // preset name (presets/<name>.json)
  uint64_t seed = 42;                  // train.seed
  std::string family;                  // "baseline", "seeds", "window-stride", "kv-heads", "operator", ...
  std::string paper;                   // the paper's name of this run ("W8/S8 · 1 KV"), "" = ours only
  std::string tag;                     // distinguishes runs of one preset and seed with other overrides
  nlohmann::json overrides = nullptr;  // merge patch on the preset JSON (e.g. {"train": {"steps": 400}})
  std::string id() const;              // "<variant>@<seed>": the run's folder name
};

// "<preset>[-<tag>]": a preset under one recipe (a tag names the grid's overrides); study_mitigations
// aggregates over seeds per variant.
std::string study_variant(const std::string& preset, const std::string& tag);

struct StudyGrid {
  std::string name;
  bool toy = false;  // every run shrunk to toy size (d 32, T 64, 8 records, 40 steps): minutes, not hours
  std::vector<StudyRun> runs;
};

// "paper": every run of the paper's table mapped to a preset (baselines full attention 1/4/8 KV plus a
// harder full-attention setting off the ceiling; the reference W8/S8 · 1 KV on every seed; every other
// compressed family on the first two seeds), plus our DeepSeek-V4 CSA/HCA and V4.1 CSA2. "quick": a
// toy grid for tests and a first look (full, W8/S8 on two seeds, W8/S4, W4/S4, no RoPE, uniform).
// "mitigations" (issue 14): the W8/S8 reference, W8/S4, uniform averaging and full attention beside the
// candidates at the reference's KV memory (W16/S8 overlap, token shift, mixed strides W6/S6 + W12/S12),
// three seeds each.
// Anything else is a grid file: {"name", "toy": bool, "runs": [{"preset", "seed", "family", "paper",
// "tag", "overrides"}]}. seeds: the reference's seeds (default 42, 43, 44, 45; families take the first
// two, baselines the first). Throws Error for an unknown grid, a bad file or a duplicated run id.
StudyGrid study_grid(const std::string& name_or_file, const std::vector<uint64_t>& seeds);

// The preset a run trains: presets/<run.preset>.json, shrunk to toy size when toy, train.seed = run.seed,
// then run.overrides as a JSON merge patch; an "attention" patch applies to every layer.
Preset study_preset(const StudyRun& run, bool toy);

// The residues R a run is evaluated and explained on: 24 (a multiple of every W/S stride of the paper), or
// the model's stride S where S does not divide 24 (HCA's m = 16: R = 16), so that residues fold onto
// phases t mod S (and R = S keeps the layout's filler budget 2R - 1 within the default 48). Prompts per
// residue stay 192, so such a run scores R * 192 per protocol.
int study_residues(const Preset& p);

struct StudyOptions {
  std::string grid = "paper";
  std::vector<uint64_t> seeds = {42, 43, 44, 45};
  int shard_k = 1, shard_n = 1;  // this invocation runs the runs i with i % shard_n == shard_k - 1
  std::string out;               // "" = runs/study-<grid name>
  bool fresh = false;            // redo every run of this shard from scratch (rows, checkpoints, journals)
  bool run = true;               // false: only aggregate the rows that exist (--report-only)
  bool report = true;            // PNG plots and report.html (needs gnuplot)
  int64_t samples = 0;  // evaluation prompts per protocol (0: 192 per residue: 4608 at R = 24; toy 48 per
                        // residue). A row scored on fewer is evaluated again (its trained model reused)
  std::vector<std::string> merge;  // other study output folders whose rows are copied in first
  std::string command;             // the command line, recorded in study.json
  std::ostream* log = nullptr;
};

struct StudyResult {
  nlohmann::json study;                                     // what study.json holds
  std::vector<std::string> missing;                         // run ids without a row
  int merged = 0;                                           // rows copied in by --merge
  std::vector<std::pair<std::string, std::string>> failed;  // (run id, error) of runs that threw here
  std::string out;
};

// "K/N" -> opt->shard_k, opt->shard_n (Error naming --shard when it is not K/N; study_run checks the range).
void study_shard_parse(const std::string& text, StudyOptions* opt);

// Copy the rows of another study output folder (from/runs/<id>/row.json) whose run ids are in `ids` (this
// grid's runs) into out/runs/ where out has none; a row out already holds is kept. Returns how many were
// copied; Error naming the folder when it is not a study output. Unfinished runs there are not copied
// (they resume where they were started).
int study_merge_rows(const std::string& from, const std::string& out, const std::set<std::string>& ids,
                     std::ostream* log);

// Run this shard's runs that have no row yet, then aggregate every row under out/runs/.
StudyResult study_run(const StudyOptions& opt);

// The findings (a)-(g) from rows (row.json objects), each {"id", "claim", "rule", "verdict",
// "figures"}; verdict "holds" | "does not hold" | "inconclusive". Pure: tests feed rows directly.
nlohmann::json study_findings(const std::vector<nlohmann::json>& rows);

// issue 14: the mitigation rows as docs/mitigations/results.json wants them, from rows (row.json objects)
// whose reference is preset `reference`: "rows" (one per run and protocol: preset, seed, protocol,
// kv_bytes_per_token at 128K, mean, worst, gap with intervals, val_loss, train_seconds, and the commands
// that reproduce the run, with the prompts and residues the row was scored on), "presets" (per variant =
// preset[-tag] and protocol over seeds: mean of each figure and its min..max), "frontier" (per variant: KV
// bytes per token, worst and mean averaged over seeds and protocols) and "goal": per candidate variant
// (family "candidate...", or "carry-over..." for a preset BASE-x judged against BASE) and protocol, the
// issue's target checked on every seed against the reference's run of the same seed and tag (a tag is
// another recipe, e.g. a dense warm-up), with the rule stated. Pure: tests feed rows.
nlohmann::json study_mitigations(const std::vector<nlohmann::json>& rows, const std::string& reference);

// Where the weak phases sit relative to the static gates: for each chunked W = S row with explain gates,
// per layer, branch and KV head, Pearson r between the prefix accuracy folded to phase p and the gate's
// static profile at offset p ("r_same_offset") and p + 1 mod S ("r_next_offset": the record's name
// follows its key). Descriptive; no verdict.
nlohmann::json study_gate_accuracy(const std::vector<nlohmann::json>& rows);

// Each tagged row (an ablation of a preset) beside the untagged row of the same preset and seed, per
// protocol: mean, gap, weakest phase, whether the boundary phase S - 1 is the weakest, and the
// reference's mean, gap and weakest phase.
nlohmann::json study_ablations(const std::vector<nlohmann::json>& rows);

// The findings as a plain-text table (id, verdict, the figures in one line).
std::string study_format_findings(const nlohmann::json& findings);

}  // namespace phasescope
