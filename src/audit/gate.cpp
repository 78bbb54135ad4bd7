// gate.cpp — the release conditions of gate.h, read from a card.
#include "audit/gate.h"

#include <fmt/format.h>

#include <cmath>

#include "core/check.h"

namespace phasescope {

const std::vector<std::string>& gate_invariance_checks() {
  static const std::vector<std::string> names = {"batch-invariance", "prefix-cache-invariance"};
  return names;
}

std::vector<std::string> gate_failures(const PhaseCard& card, const GateOptions& opt) {
  if (!opt.max_gap && !opt.min_worst && !opt.require_invariance)
    fail("gate", "no condition given", "pass --max-gap PTS, --min-worst PCT and/or --require-invariance");
  std::vector<std::string> out;
  if (opt.max_gap) {
    if (!std::isfinite(card.gap))
      out.push_back(fmt::format("gap: the card has no gap (no scored residues); --max-gap {} cannot hold",
                                *opt.max_gap));
    else if (100 * card.gap > *opt.max_gap)
      out.push_back(fmt::format("gap: {:.1f} points (phase {} strongest, {} weakest) > --max-gap {}",
                                100 * card.gap, card.strongest_phase, card.weakest_phase, *opt.max_gap));
  }
  if (opt.min_worst) {
    if (!std::isfinite(card.worst))
      out.push_back(
          fmt::format("worst: the card has no worst residue; --min-worst {} cannot hold", *opt.min_worst));
    else if (100 * card.worst < *opt.min_worst)
      out.push_back(fmt::format("worst: {:.1f}% < --min-worst {}", 100 * card.worst, *opt.min_worst));
  }
  if (opt.require_invariance)
    for (const std::string& name : gate_invariance_checks()) {
      std::string verdict;
      if (card.checks.is_array())
        for (const auto& c : card.checks)
          if (c.is_object() && c.value("name", "") == name) verdict = c.value("verdict", "");
      if (verdict.empty())
        out.push_back(fmt::format("{}: not in the card (run `phasescope audit`, which measures it)", name));
      else if (verdict != "pass")
        out.push_back(fmt::format("{}: verdict {} (--require-invariance needs pass)", name, verdict));
    }
  return out;
}

}  // namespace phasescope
