// eval_runner_test.cpp — the paper's controls through the whole pipeline (layout -> fake backend ->
// journal -> statistics), with fake backends that find the target key by scanning the tokens:
//   shifting all inputs by k permutes the residue groups exactly (a backend whose correctness depends
//   on the target key's position mod 8), and a phase-flat backend's residue groups agree within their
//   intervals (no period, large p), while the phase-dependent one is flagged with period 8;
//   results.json / CSV / table are written and the journal records measured positions.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/check.h"
#include "eval/runner.h"
#include "eval_testing.h"

namespace phasescope {
namespace {

namespace te = testing_eval;
namespace fs = std::filesystem;

EvalOptions options(PadProtocol p, int offset) {
  EvalOptions o;
  o.layout.protocol = p;
  o.layout.n_base = 48;
  o.layout.offset = offset;
  o.model = "fake";
  o.bootstrap = 300;
  o.report = false;
  return o;
}

TEST(Controls, ShiftingAllInputsByKPermutesResidueGroupsExactly) {
  // The backend's answers depend on the target key's absolute position mod 8, as a W8/S8 model's would.
  // Shift every prompt by k tokens: the prompts that formed residue group r now form group r + k, and
  // since they now sit at phase r + k they are answered as group r + k was. Grouped by their original
  // residue the accuracy profile is rotated by k; grouped by measured residue it is unchanged.
  for (PadProtocol p : {PadProtocol::Prefix, PadProtocol::InSequence}) {
    te::RuleBackend phase = te::phase_backend();
    const std::string d0 = testutil::tmp_dir("shift0");
    const EvalResults base = run_eval(phase, options(p, 0), d0);
    EXPECT_EQ(base.stats.period.P, 8) << base.stats.period.note;  // phase dependent: the test has teeth
    const JournalLoad j0 = journal_load(d0 + "/journal.jsonl");
    std::map<int64_t, const JournalRecord*> at0;  // by sample id = base * R + original residue
    for (const JournalRecord& r : j0.records) at0[r.id] = &r;
    for (int k : {1, 3, 8, 13}) {
      const std::string dk = testutil::tmp_dir("shiftk");
      const EvalResults shifted = run_eval(phase, options(p, k), dk);
      const JournalLoad jk = journal_load(dk + "/journal.jsonl");
      ASSERT_EQ(j0.records.size(), jk.records.size());
      std::vector<int64_t> by_label_k(24, 0), by_label_0(24, 0);
      for (const JournalRecord& s : jk.records) {
        const JournalRecord* r = at0[s.id];
        ASSERT_NE(r, nullptr);
        // membership: the same prompt, k tokens later, one residue group over
        EXPECT_EQ(s.target_pos, r->target_pos + k);
        EXPECT_EQ(s.residue, (r->residue + k) % 24);
        // answered as the offset-0 prompt of the same base example at residue r + k was
        const JournalRecord* same_phase = at0[int64_t(s.base) * 24 + s.residue];
        ASSERT_NE(same_phase, nullptr);
        EXPECT_EQ(s.correct(), same_phase->correct()) << "sample " << s.id << " k=" << k;
        by_label_k[r->residue] += s.correct() ? 1 : 0;
      }
      for (const JournalRecord& r : j0.records) by_label_0[r.residue] += r.correct() ? 1 : 0;
      for (int r = 0; r < 24; ++r) {
        // grouped by original residue: the profile rotated by k
        EXPECT_EQ(by_label_k[r], by_label_0[(r + k) % 24])
            << pad_protocol_name(p) << " k=" << k << " r=" << r;
        // grouped by measured residue: identical (the backend only sees absolute phase)
        EXPECT_EQ(shifted.stats.per_residue[r].correct, base.stats.per_residue[r].correct);
        EXPECT_EQ(shifted.stats.per_residue[r].n, base.stats.per_residue[r].n);
      }
      fs::remove_all(dk);
    }
    fs::remove_all(d0);
  }
}

TEST(Controls, FlatBackendsResidueGroupsAgreeWithinIntervals) {
  for (PadProtocol p : {PadProtocol::Prefix, PadProtocol::InSequence}) {
    te::RuleBackend flat = te::flat_backend();
    const std::string dir = testutil::tmp_dir("flat");
    const EvalResults r = run_eval(flat, options(p, 0), dir);
    const Stats& s = r.stats;
    const double pooled = [&] {
      int64_t c = 0, n = 0;
      for (const ResidueStat& x : s.per_residue) {
        c += x.correct;
        n += x.n;
      }
      return double(c) / double(n);
    }();
    int excluded = 0;
    for (const ResidueStat& x : s.per_residue) excluded += (pooled < x.ci_low || pooled > x.ci_high) ? 1 : 0;
    std::printf(
        "  flat backend, %s: mean %.3f, gap %.3f, %d of 24 intervals exclude the pooled %.3f, p=%.3f\n",
        pad_protocol_name(p).c_str(), s.mean, s.gap, excluded, pooled, s.p_value);
    EXPECT_LE(excluded, 3);
    EXPECT_GT(s.p_value, 0.05);
    EXPECT_EQ(s.period.P, 0);
    EXPECT_EQ(s.design, "paired");
    fs::remove_all(dir);
  }
}

TEST(Controls, PhaseDependentBackendIsFlagged) {
  te::RuleBackend phase = te::phase_backend({0, 1, 2, 3, 4, 5, 6});  // boundary phase 7 always wrong
  const std::string dir = testutil::tmp_dir("phase");
  const EvalResults r = run_eval(phase, options(PadProtocol::Prefix, 0), dir);
  EXPECT_EQ(r.stats.worst, 0.0);
  EXPECT_EQ(r.stats.worst_residue % 8, 7);
  EXPECT_EQ(r.stats.folded[7].acc, 0.0);
  EXPECT_LT(r.stats.p_value, 1e-20);
  EXPECT_EQ(r.stats.period.P, 8) << r.stats.period.note;
  EXPECT_GT(r.stats.gap_ci_percentile.lo, 0.5);  // the bootstrap replicates
  EXPECT_GT(r.stats.gap_ci.lo, 0.45);            // the simultaneous interval, conservative by construction
  fs::remove_all(dir);
}

TEST(Runner, WritesItsFilesAndMeasuredPositions) {
  te::RuleBackend phase = te::phase_backend();
  const std::string dir = testutil::tmp_dir("files");
  std::ostringstream log;
  EvalOptions o = options(PadProtocol::InSequence, 0);
  o.log = &log;
  const EvalResults r = run_eval(phase, o, dir);
  for (const char* f : {"journal.jsonl", "results.json", "per_residue.csv", "table.txt", "layout.txt"})
    EXPECT_TRUE(fs::exists(dir + "/" + f)) << f;
  EXPECT_NE(log.str().find("group means span"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("1152/1152 scored"), std::string::npos) << log.str();
  const EvalResults back = results_read(dir + "/results.json");
  EXPECT_EQ(back.meta.model, "fake");
  EXPECT_EQ(back.meta.protocol, "in-sequence");
  // BOS + 64 records + 32 base gap fillers + 48 pad + 8 demonstrations + the query
  const int64_t len = 1 + 2 * 64 + 32 + 48 + 2 * 8 + 1;
  EXPECT_EQ(back.meta.prompt_len, len);
  EXPECT_NEAR(back.stats.pos_mean_range, 0.0, 1e-9);
  for (const JournalRecord& j : journal_load(dir + "/journal.jsonl").records) {
    EXPECT_EQ(j.query_pos, len - 1);
    EXPECT_EQ(j.prompt_len, len);
    EXPECT_EQ(j.target_pos % 24, j.residue);
    EXPECT_EQ(j.model, "fake");
    EXPECT_EQ(j.protocol, "in-sequence");
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace phasescope

namespace phasescope {
namespace {

// A server that answers every request with an error, in one batch (fewer than the 3 failed batches that
// stop a run): no sample scored is a failure naming the last error, never a table of '?', and no
// results are written
TEST(Runner, NoScoredSampleIsAFailureNotAReport) {
  struct AlwaysFails : Backend {
    std::string describe() const override { return "always failing"; }
    int max_batch() const override { return 100000; }
    std::vector<ScoreResult> score(const std::vector<ScoreRequest>& reqs) override {
      std::vector<ScoreResult> out(reqs.size());
      for (ScoreResult& r : out) r.error = "HTTP 500 from the server";
      return out;
    }
  } backend;
  const std::string dir = testutil::tmp_dir("allfail");
  EvalOptions o = options(PadProtocol::Prefix, 0);
  std::string err;
  try {
    run_eval(backend, o, dir);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("no sample was scored: all 1152 failed; last error: HTTP 500 from the server"),
            std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(dir + "/results.json"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace phasescope
