// gate_test.cpp — `phasescope gate` (audit/gate.h): each condition fails on its own with a line that names
// it, invariance that is missing or not "pass" fails --require-invariance, a gate with no condition is an
// error, and the CLI's exit codes (0 pass, 1 a failed condition or an error).
#include "audit/gate.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>

#include "core/check.h"
#include "testing.h"

namespace phasescope {
namespace {

PhaseCard card(double worst, double best, const char* batch_verdict = nullptr,
               const char* prefix_verdict = nullptr) {
  PhaseCard c;
  c.grid.period = 4;
  for (int p = 0; p < 4; ++p) c.folded.push_back({p, 10, 5, p == 2 ? best : worst, 0, 1});
  c.worst = worst;
  c.best = best;
  c.gap = best - worst;
  c.mean = (worst + best) / 2;
  if (batch_verdict) c.checks.push_back({{"name", "batch-invariance"}, {"verdict", batch_verdict}});
  if (prefix_verdict) c.checks.push_back({{"name", "prefix-cache-invariance"}, {"verdict", prefix_verdict}});
  card_rank_phases(&c);
  return c;
}

TEST(Gate, EachConditionFailsOnItsOwnLine) {
  GateOptions o;
  o.max_gap = 10;
  EXPECT_TRUE(gate_failures(card(0.50, 0.58), o).empty());
  auto f = gate_failures(card(0.20, 0.58), o);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].find("gap: 38.0 points"), std::string::npos) << f[0];
  o.min_worst = 30;
  f = gate_failures(card(0.20, 0.58), o);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_NE(f[1].find("worst: 20.0% < --min-worst 30"), std::string::npos) << f[1];
  EXPECT_TRUE(gate_failures(card(0.35, 0.40), o).empty());
}

TEST(Gate, InvarianceMustBeShownAndPass) {
  GateOptions o;
  o.require_invariance = true;
  EXPECT_TRUE(gate_failures(card(0.3, 0.4, "pass", "pass"), o).empty());
  auto f = gate_failures(card(0.3, 0.4), o);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_NE(f[0].find("batch-invariance: not in the card"), std::string::npos) << f[0];
  f = gate_failures(card(0.3, 0.4, "fail", "inconclusive"), o);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_NE(f[0].find("verdict fail"), std::string::npos);
  EXPECT_NE(f[1].find("prefix-cache-invariance: verdict inconclusive"), std::string::npos);
  EXPECT_NE(testutil::error_of([&] { gate_failures(card(0.3, 0.4), GateOptions{}); }).find("no condition"),
            std::string::npos);
}

int run_cli(const std::string& args) {
  const std::string cmd = std::string(PHASESCOPE_CLI) + " gate " + args + " > /dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(Gate, ExitCodes) {
  const std::string dir = testutil::tmp_dir("gate");
  card_write(card(0.50, 0.58, "pass", "pass"), dir + "/good.json");
  card_write(card(0.10, 0.58, "fail", "pass"), dir + "/bad.json");
  EXPECT_EQ(run_cli("--card " + dir + "/good.json --max-gap 10 --min-worst 40 --require-invariance"), 0);
  EXPECT_EQ(run_cli("--card " + dir + "/bad.json --max-gap 10"), 1);
  EXPECT_EQ(run_cli("--card " + dir + "/bad.json --require-invariance"), 1);
  EXPECT_EQ(run_cli("--card " + dir + "/good.json"), 1);  // no condition: an error
  EXPECT_EQ(run_cli("--card " + dir + "/missing.json --max-gap 10"), 1);
}

}  // namespace
}  // namespace phasescope
