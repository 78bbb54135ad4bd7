// study_testing.h — synthetic study rows for the tests of the study's rules (study_test.cpp,
// study_findings_test.cpp): rows are written as JSON (readable) and read by the one row reader, as
// row.json files are.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "jobs/study_row.h"

namespace phasescope {
namespace testing_study {

using json = nlohmann::json;

inline std::vector<StudyRow> typed(const std::vector<json>& rows) {
  std::vector<StudyRow> out;
  for (const json& r : rows)
    out.push_back(study_row_from_json(r, "synthetic row " + r["id"].get<std::string>()));
  return out;
}

// A row's protocol entry (the simultaneous gap interval given as it is) and a row around it.
inline json prot_entry(double mean, double worst, double gap, double gap_lo, double q95, int period,
                       int weakest, std::vector<double> folded = {}) {
  return json{{"n", 1152},
              {"mean", mean},
              {"mean_ci", {mean - 0.05, mean + 0.05}},
              {"worst", worst},
              {"best", worst + gap},
              {"gap", gap},
              {"gap_ci", {gap_lo, gap + 0.1}},
              {"gap_ci_method", "simultaneous"},
              {"gap_null_q95", q95},
              {"period", period},
              {"p_value", 1e-9},
              {"folded", folded},
              {"weakest_phase", weakest}};
}
inline json row_entry(const std::string& preset, uint64_t seed, const std::string& kind, int S, int kv_heads,
                      const json& prefix, double val_loss = 2.0) {
  return json{{"id", preset + "@" + std::to_string(seed)},
              {"preset", preset},
              {"seed", seed},
              {"tag", ""},
              {"kind", kind},
              {"S", S},
              {"W", S},
              {"n_kv_heads", kv_heads},
              {"val_loss", val_loss},
              {"protocols", {{"prefix", prefix}}}};
}
}  // namespace testing_study
}  // namespace phasescope
