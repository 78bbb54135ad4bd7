// study_grid.h — what a study runs: a grid is a list of runs (preset, seed, overrides), read from a grid
// file; the built-in names (paper, quick, mitigations, ...) are the files grids/<name>.json. A run's
// preset is presets/<preset>.json, shrunk to toy size for a toy grid, with the run's seed and its
// overrides applied as a JSON merge patch.
// Grid file: {"name", "toy": bool, "runs": [{"preset", "family", "paper", "tag", "overrides", and one of
// "seed": 42 (that seed), "seeds": N (the first N of --seeds) or "all", "seed_index": k (the k-th of
// --seeds); none of them: the first of --seeds}]}.
// Not here: running a grid (study.cpp) or judging it (study_findings.h).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"

namespace phasescope {

// KV bytes per token are given at 128K tokens of context, bf16 (2 bytes per value).
constexpr int64_t kStudyKvContext = 131072;
constexpr int kStudyKvBytes = 2;

struct StudyRun {
  std::string preset;                  // preset name (presets/<name>.json)
  uint64_t seed = 42;                  // train.seed
  std::string family;                  // "baseline", "seeds", "window-stride", "kv-heads", "operator", ...
  std::string paper;                   // the paper's name of this run ("W8/S8 · 1 KV"), "" = ours only
  std::string tag;                     // distinguishes runs of one preset and seed with other overrides
  nlohmann::json overrides = nullptr;  // merge patch on the preset JSON (e.g. {"train": {"steps": 400}})
  std::string id() const;              // "<variant>@<seed>": the run's folder name
};

// "<preset>[-<tag>]": a preset under one recipe (a tag names the grid's overrides); the mitigations
// aggregate over seeds per variant.
std::string study_variant(const std::string& preset, const std::string& tag);

struct StudyGrid {
  std::string name;
  bool toy = false;  // every run shrunk to toy size (d 32, T 64, 8 records, 40 steps): minutes, not hours
  std::vector<StudyRun> runs;
};

// grids/: $PHASESCOPE_GRIDS if set, else the source tree's grids/.
std::string study_grid_dir();

// A built-in name (grids/<name>.json) or a grid file path, its runs expanded over `seeds` (empty: 42, 43,
// 44, 45). Throws Error for an unknown grid, a bad file, a seed index beyond --seeds or a duplicated run id.
StudyGrid study_grid(const std::string& name_or_file, const std::vector<uint64_t>& seeds);

// The preset a run trains: presets/<run.preset>.json, shrunk to toy size when toy, train.seed = run.seed,
// then run.overrides as a JSON merge patch; an "attention" patch applies to every layer.
Preset study_preset(const StudyRun& run, bool toy);

// The residues R a run is evaluated and explained on: 24 (a multiple of every W/S stride of the paper), or
// the model's stride S where S does not divide 24 (HCA's m = 16: R = 16), so that residues fold onto
// phases t mod S (and R = S keeps the layout's filler budget 2R - 1 within the default 48).
int study_residues(const Preset& p);

}  // namespace phasescope
