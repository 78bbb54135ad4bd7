// study_report.h — what a study folder shows a person: runs.csv (one line per run and protocol),
// phases.csv (one line per run, protocol and phase) and report.html (findings, runs beside the paper's
// published numbers, per-phase plots by family, the reference per seed, ablations, static gates against
// the weak phases, knockouts, gates and cycling). All CSV goes through core/csv.h.
// Not here: computing rows or findings (study.cpp, study_findings.h).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "jobs/study_row.h"

namespace phasescope {

std::string study_runs_csv(const std::vector<StudyRow>& rows);
std::string study_phases_csv(const std::vector<StudyRow>& rows);

// Writes out/report.html and its figures under out/figures/ (needs gnuplot). `study` is study.json's
// content (findings, ablations, gate_accuracy, command, missing).
void study_report(const nlohmann::json& study, const std::vector<StudyRow>& rows, const std::string& out);

}  // namespace phasescope
