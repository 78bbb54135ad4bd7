// gate.h — `phasescope gate`: a phase card (eval/card.h) against a release's conditions, one line per
// condition that fails, so a model or engine release can be gated in CI:
//   --max-gap PTS         the card's gap (best - worst residue, points) must be <= PTS
//   --min-worst PCT       the card's worst residue (percent) must be >= PCT
//   --require-invariance  the card must hold the audit's batch-invariance and prefix-cache-invariance
//                         checks, each with verdict "pass" ("fail", "inconclusive" and a missing check
//                         all fail the gate: an invariance that was not shown is not assumed)
// A card without a finite gap or worst fails the conditions that read them. No condition given is an
// Error (a gate that checks nothing would always pass).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "eval/card.h"

namespace phasescope {

struct GateOptions {
  std::optional<double> max_gap;    // points
  std::optional<double> min_worst;  // percent
  bool require_invariance = false;
};

// The failed conditions, one line each ("" for none). Throws Error when no condition is given.
std::vector<std::string> gate_failures(const PhaseCard& card, const GateOptions& opt);

// The invariance checks `--require-invariance` asks for.
const std::vector<std::string>& gate_invariance_checks();

}  // namespace phasescope
