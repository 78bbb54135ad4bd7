// report.h — what `phasescope theory` shows and writes: the terminal summary of a run (per seed and
// head: the offsets each head's key and value select, their masses, collisions, uncovered phases, the
// loss and whether it is exact or sampled) or of a sweep (the coverage table), and the files of --out:
//   results.json      every number printed, plus the config and the loss kind
//   trajectories.csv  run only: seed,step,loss,head,branch,offset,p (long format; p = mean probability)
//   sweep.csv         sweep only: one row per config
//   *.png             gnuplot plots: p^K/p^V trajectories per head, loss, per-phase coverage (run);
//                     coverage vs each swept parameter (sweep)
//   report.html       self-contained: the tables and the PNGs embedded as base64
// Not here: any simulation (flow.h) or plotting machinery (report/gnuplot.h).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "theory/flow.h"

namespace phasescope {

// One sentence on how the loss was obtained for this config (exact population, or sampled how).
std::string theory_loss_note(const TheoryConfig& cfg);

std::string theory_format_run(const TheoryRun& run);
std::string theory_format_sweep(const TheorySweep& sweep);

nlohmann::json theory_config_json(const TheoryConfig& cfg);
nlohmann::json theory_run_json(const TheoryRun& run);
nlohmann::json theory_sweep_json(const TheorySweep& sweep);

// Write the files listed above into `dir` (created if needed).
void theory_write_run(const std::string& dir, const TheoryRun& run);
void theory_write_sweep(const std::string& dir, const TheorySweep& sweep);

}  // namespace phasescope
