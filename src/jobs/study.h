// study.h — `phasescope study`: a grid of runs (study_grid.h) across seeds, each run trained, evaluated
// under both padding protocols and explained (knockouts, gates, cycling), and the paper's findings judged
// from the data by stated rules (study_findings.h). A run is (preset, seed, overrides); its whole outcome
// is one small JSON file, OUT/runs/<id>/row.json (study_row.h), written last: a run with a row is done, a
// run without one resumes where it stopped (checkpoint, journals). --shard K/N takes every N-th run
// (the K-th of each N), so N machines (or sittings) split a grid; every invocation then aggregates
// whatever rows exist into OUT/study.json, OUT/runs.csv, OUT/phases.csv and OUT/report.html, and says
// which runs are still missing (findings that need them are "inconclusive" until they are in).
// Phase convention: r = target_pos % S (target_pos = absolute position of the target record's key);
// the boundary phase of a W = S design is S - 1 (the key in an entry's last slot, its name in the next).
// Not here: training (train/), evaluation (eval/), the instruments (explain/); this file sequences them.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "jobs/study_findings.h"
#include "jobs/study_grid.h"
#include "jobs/study_mitigations.h"
#include "jobs/study_row.h"

namespace phasescope {

struct StudyOptions {
  std::string grid = "paper";
  std::vector<uint64_t> seeds = {42, 43, 44, 45};
  int shard_k = 1, shard_n = 1;   // this invocation runs the runs i with i % shard_n == shard_k - 1
  std::vector<std::string> runs;  // --runs: only these run ids of the grid (within the shard); empty = all
  std::string out;                // "" = runs/study-<grid name>
  bool fresh = false;             // redo every run of this shard from scratch (rows, checkpoints, journals)
  bool run = true;                // false: only aggregate the rows that exist (--report-only)
  bool train = true;    // false: train nothing; only finish rows whose model is here (probes, more prompts)
  bool report = true;   // PNG plots and report.html (needs gnuplot)
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

}  // namespace phasescope
