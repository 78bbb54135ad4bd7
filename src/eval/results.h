// results.h — the outputs of one evaluation that people and scripts read: results.json (schema in
// docs/results-schema.md, name "phasescope.eval.results", version 1), a CSV of the per-residue and
// folded rows, and terminal tables (one run; several runs side by side).
// Accuracies, intervals and gaps are fractions in [0, 1] in files; the terminal shows percent.
// results_from_json reads back everything results_to_json writes, so combined reports can be built
// from results.json files alone. Not here: computing statistics (stats.h) or plots (eval_report.h).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/stats.h"

namespace phasescope {

constexpr const char* kResultsSchema = "phasescope.eval.results";
constexpr int kResultsVersion = 1;

struct EvalMeta {
  std::string model;     // preset / run name ("w8s8-1kv")
  std::string protocol;  // "prefix" | "in-sequence"
  std::string task = "lookup";
  std::string backend;  // Backend::describe()
  std::string layout;   // layout_fingerprint() of the design
  int n_base = 0;       // base examples (paired blocks)
  int pad = 0;          // filler tokens per prompt
  int64_t prompt_len = 0, query_pos = 0;
  double tol_mean = 0, tol_sd = 0;        // the layout's tolerances (tokens)
  std::string journal = "journal.jsonl";  // relative to the folder of results.json
  double wall_s = 0;      // scoring time of the run that wrote the file (0 when all was resumed)
  std::string align;      // "" = not aligned; else the alignment's tag (align/align_layout.h)
  double added_mean = 0;  // aligned: mean tokens inserted per prompt (taken back out of the filler)
};

struct EvalResults {
  EvalMeta meta;
  Stats stats;
};

// The statistics of a journal (every sample scored so far) with the run's metadata: the one way every
// command (eval, probe needle, explain) turns a journal into results.
EvalResults results_from_journal(const std::string& journal_path, const StatsOptions& so,
                                 const EvalMeta& meta);

nlohmann::json results_to_json(const EvalResults& r);
EvalResults results_from_json(const nlohmann::json& j, const std::string& where);  // throws Error
EvalResults results_read(const std::string& path);                                 // throws Error

// results.json (atomic write)
void results_write_json(const EvalResults& r, const std::string& path);

// CSV: model,protocol,kind,index,n,correct,acc,ci_low,ci_high with kind = residue | folded.
std::string results_csv(const std::vector<EvalResults>& runs);

// The per-residue table, folded accuracy, summary with intervals, period, test and layout moments.
std::string results_format_table(const EvalResults& r);

// One row per run: model, protocol, samples, mean, worst (residue), best, gap, with intervals, p, period.
std::string results_format_compare(const std::vector<EvalResults>& runs);

}  // namespace phasescope
