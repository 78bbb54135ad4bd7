// cmd_gate.cpp — `phasescope gate --card card.json [--max-gap PTS] [--min-worst PCT] [--require-invariance]`:
// exit 0 when every condition holds, else 1 with one "FAIL ..." line per failed condition on stdout
// (audit/gate.h); a bad card or no condition is an error (exit 1 too, its message on stderr).
#include <fmt/format.h>

#include <cstdlib>
#include <memory>

#include "audit/gate.h"
#include "tools/commands.h"

namespace phasescope {

void add_gate_command(CLI::App& app) {
  struct Args {
    std::string card;
    double max_gap = 0, min_worst = 0;
    GateOptions opt;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("gate", "exit non-zero when a phase card misses a release's conditions");
  cmd->add_option("--card", a->card, "card.json (phasescope eval, probe needle or audit)")->required();
  auto* gap = cmd->add_option("--max-gap", a->max_gap, "largest gap allowed (best - worst residue, points)");
  auto* worst =
      cmd->add_option("--min-worst", a->min_worst, "lowest worst-residue accuracy allowed (percent)");
  cmd->add_flag("--require-invariance", a->opt.require_invariance,
                "the audit's batch- and prefix-cache-invariance checks must pass");
  cmd->callback([a, gap, worst] {
    if (*gap) a->opt.max_gap = a->max_gap;
    if (*worst) a->opt.min_worst = a->min_worst;
    const std::vector<std::string> failed = gate_failures(card_read(a->card), a->opt);
    for (const std::string& line : failed) fmt::print("FAIL {}\n", line);
    if (!failed.empty()) std::exit(1);
    fmt::print("gate passed: {}\n", a->card);
  });
}

}  // namespace phasescope
