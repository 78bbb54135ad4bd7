// study_mitigations.h — the mitigation grid's aggregate (docs/mitigations/results.json): candidate fixes
// at the reference's KV memory, judged seed by seed against the reference by a stated goal, with the
// commands that rebuild every row. A pure function of rows: tests feed synthetic rows.
// Not here: running the grid (study.cpp) or the paper's findings (study_findings.h).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "jobs/study_row.h"

namespace phasescope {

// From rows whose reference is preset `reference`: "rows" (one per run and protocol: preset, seed,
// protocol, kv_bytes_per_token at 128K, mean, worst, gap with intervals, val_loss, train_seconds, and the
// commands that reproduce the run, with the prompts and residues the row was scored on), "presets" (per
// variant = preset[-tag] and protocol over seeds: mean of each figure and its min..max), "frontier" (per
// variant: KV bytes per token, worst and mean averaged over seeds and protocols) and "goal": per
// candidate variant (family "candidate...", or "carry-over..." for a preset BASE-x judged against BASE)
// and protocol, the target checked on every seed against the reference's run of the same seed and tag
// (a tag is another recipe, e.g. a dense warm-up), with the rule stated; "left_out_not_learned": the
// reference runs below 10% that were therefore not paired.
nlohmann::json study_mitigations(const std::vector<StudyRow>& rows, const std::string& reference);

// The mitigations table for the terminal: per variant and protocol, figures averaged over seeds with
// their range, then the goal's verdicts.
std::string study_format_mitigations(const nlohmann::json& m);

}  // namespace phasescope
