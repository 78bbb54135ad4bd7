// eval_journal_test.cpp — the journal and resuming: records round-trip through JSON; a torn last line
// is ignored on load and cut before appending; duplicates keep the first answer and later answers
// supersede failures; a corrupt complete line is an error naming file:line. Resuming run_eval after a
// kill (between batches, and with the journal cut at arbitrary bytes, torn lines included) loses and
// duplicates nothing and gives the same results as an uninterrupted run; failed samples are retried,
// never scored as wrong; a journal of another run is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/check.h"
#include "eval/journal.h"
#include "eval/runner.h"
#include "eval_testing.h"

namespace phasescope {
namespace {

namespace te = testing_eval;
namespace fs = std::filesystem;

using testutil::slurp;

void spit(const std::string& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

JournalRecord sample_record(int64_t id) {
  JournalRecord r;
  r.id = id;
  r.seed = 7;
  r.base = 1;
  r.cluster = "00ff";
  r.R = 24;
  r.residue = 5;
  r.target_pos = 29;
  r.query_pos = 193;
  r.prompt_len = 194;
  r.shift = 12;
  r.expected = 200;
  r.answer = 200;
  r.logprob = -0.25;
  r.topk = {{200, -0.25}, {201, -2.5}};
  r.ms = 3.5;
  r.protocol = "prefix";
  r.model = "m";
  r.layout = "L";
  r.tokens_hash = "abc";
  return r;
}

TEST(Journal, RecordRoundTripsThroughJson) {
  JournalRecord r = sample_record(3);
  const JournalRecord back =
      journal_record_from_json(nlohmann::json::parse(journal_record_to_json(r).dump()), "x");
  EXPECT_EQ(journal_record_to_json(back), journal_record_to_json(r));
  r.logprob = std::nan("");
  r.error = "boom";
  r.answer = -1;
  const JournalRecord back2 = journal_record_from_json(journal_record_to_json(r), "x");
  EXPECT_TRUE(std::isnan(back2.logprob));
  EXPECT_FALSE(back2.scored());
  EXPECT_FALSE(back2.correct());
}

TEST(Journal, TornLastLineIsIgnoredAndCutBeforeAppending) {
  const std::string dir = testutil::tmp_dir("journal"), path = dir + "/journal.jsonl";
  {
    JournalWriter w(path, {{"model", "test"}});
    w.append(sample_record(0));
    w.append(sample_record(1));
  }
  const std::string whole = slurp(path);
  spit(path, whole + journal_record_to_json(sample_record(2)).dump().substr(0, 40));  // died mid-line
  JournalLoad jl = journal_load(path);
  EXPECT_EQ(jl.records.size(), 2u);
  EXPECT_EQ(jl.torn_bytes, 40);
  {
    JournalWriter w(path, {{"model", "test"}});
    EXPECT_EQ(w.torn_bytes_cut(), 40);
    w.append(sample_record(2));
  }
  jl = journal_load(path);
  EXPECT_EQ(jl.records.size(), 3u);
  EXPECT_EQ(jl.torn_bytes, 0);
  EXPECT_EQ(jl.lines, 3);
  fs::remove_all(dir);
}

TEST(Journal, DuplicatesKeepTheFirstAnswerAndAnswersSupersedeFailures) {
  const std::string dir = testutil::tmp_dir("journal"), path = dir + "/journal.jsonl";
  {
    JournalWriter w(path, {{"model", "test"}});
    JournalRecord failed = sample_record(0);
    failed.error = "timeout";
    failed.answer = -1;
    w.append(failed);            // 0: failed
    w.append(sample_record(1));  // 1: answered
    JournalRecord other = sample_record(1);
    other.answer = 5;
    w.append(other);             // 1 again: ignored
    w.append(sample_record(0));  // 0: answered now
  }
  const JournalLoad jl = journal_load(path);
  ASSERT_EQ(jl.records.size(), 2u);
  EXPECT_TRUE(jl.records[0].scored());
  EXPECT_EQ(jl.records[1].answer, 200);
  EXPECT_EQ(jl.duplicate_lines, 1);
  EXPECT_EQ(jl.error_lines, 1);
  fs::remove_all(dir);
}

TEST(Journal, CorruptCompleteLineNamesFileAndLine) {
  const std::string dir = testutil::tmp_dir("journal"), path = dir + "/journal.jsonl";
  spit(path, journal_record_to_json(sample_record(0)).dump() + "\n{not json\n" +
                 journal_record_to_json(sample_record(1)).dump() + "\n");
  try {
    journal_load(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("journal.jsonl:2"), std::string::npos) << e.what();
  }
  // several bad lines are listed at once: one rerun fixes them all
  spit(path, "{not json\n" + journal_record_to_json(sample_record(1)).dump() + "\n[1]\n{\"id\": 1}\n");
  try {
    journal_load(path);
    FAIL();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("3 line(s) are not journal records"), std::string::npos) << what;
    for (const char* at : {"journal.jsonl:1", "journal.jsonl:3", "journal.jsonl:4"})
      EXPECT_NE(what.find(at), std::string::npos) << at << " in " << what;
  }
  spit(path, "{\"id\": 1}\n");
  try {
    journal_load(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("field 'seed'"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// ---- resuming run_eval

EvalOptions small_options() {
  EvalOptions o;
  o.layout.n_base = 24;  // 576 samples
  o.model = "fake-phase";
  o.bootstrap = 200;
  o.report = false;
  return o;
}

// Per sample id: how many scored lines the journal holds.
std::map<int64_t, int> scored_lines(const std::string& path) {
  std::map<int64_t, int> n;
  std::istringstream in(slurp(path));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("{\"journal_identity\"", 0) == 0) continue;  // the first line: the run's identity
    const JournalRecord r = journal_record_from_json(nlohmann::json::parse(line), path);
    if (r.scored()) n[r.id]++;
  }
  return n;
}

void expect_same_results(const EvalResults& a, const EvalResults& b) {
  nlohmann::json ja = results_to_json(a), jb = results_to_json(b);
  ja.erase("wall_s");
  jb.erase("wall_s");
  EXPECT_EQ(ja, jb);
}

TEST(Resume, KilledBetweenBatchesThenTornThenResumedLosesAndDuplicatesNothing) {
  te::RuleBackend good = te::phase_backend();
  const EvalOptions opt = small_options();
  const std::string clean_dir = testutil::tmp_dir("clean");
  const EvalResults clean = run_eval(good, opt, clean_dir);
  ASSERT_EQ(clean.stats.n_scored, 576);

  const std::string dir = testutil::tmp_dir("killed");
  te::KillingBackend dying(good, 10);  // 10 batches of 16, then the process "dies"
  EXPECT_THROW(run_eval(dying, opt, dir), te::Killed);
  EXPECT_EQ(journal_load(dir + "/journal.jsonl").records.size(), 160u);
  // and it died in the middle of writing the next line
  const std::string torn = journal_record_to_json(sample_record(999)).dump().substr(0, 57);
  spit(dir + "/journal.jsonl", slurp(dir + "/journal.jsonl") + torn);

  const EvalResults resumed = run_eval(good, opt, dir);
  const auto lines = scored_lines(dir + "/journal.jsonl");
  EXPECT_EQ(lines.size(), 576u);
  for (const auto& [id, k] : lines) EXPECT_EQ(k, 1) << "sample " << id;
  expect_same_results(resumed, clean);
  EXPECT_EQ(good.calls, 36 + 10 + 26) << "the rerun scores only what was missing";
  fs::remove_all(clean_dir);
  fs::remove_all(dir);
}

TEST(Resume, JournalCutAtAnyByteResumesToTheSameResults) {
  te::RuleBackend good = te::phase_backend();
  const EvalOptions opt = small_options();
  const std::string clean_dir = testutil::tmp_dir("clean");
  const EvalResults clean = run_eval(good, opt, clean_dir);
  const std::string full = slurp(clean_dir + "/journal.jsonl");
  const size_t line = full.find('\n') + 1;
  // cut points: empty, mid first line, exact line boundaries, mid-line, one byte short of the end
  for (size_t cut :
       {size_t(0), line / 2, line, 5 * line + 1, full.size() / 2, full.size() / 3 + 7, full.size() - 1}) {
    const std::string dir = testutil::tmp_dir("cut");
    spit(dir + "/journal.jsonl", full.substr(0, cut));
    const EvalResults r = run_eval(good, opt, dir);
    const auto lines = scored_lines(dir + "/journal.jsonl");
    EXPECT_EQ(lines.size(), 576u) << "cut at byte " << cut;
    for (const auto& [id, k] : lines) ASSERT_EQ(k, 1) << "cut at byte " << cut << ", sample " << id;
    expect_same_results(r, clean);
    fs::remove_all(dir);
  }
  fs::remove_all(clean_dir);
}

TEST(Resume, FailedSamplesAreRetriedNotScoredAsWrong) {
  te::RuleBackend good = te::phase_backend();
  const EvalOptions opt = small_options();
  const std::string clean_dir = testutil::tmp_dir("clean");
  const EvalResults clean = run_eval(good, opt, clean_dir);

  const std::string dir = testutil::tmp_dir("flaky");
  te::FlakyBackend flaky(good, 4);
  const EvalResults partial = run_eval(flaky, opt, dir);
  EXPECT_GT(partial.stats.n_errors, 100);
  EXPECT_EQ(partial.stats.n_scored + partial.stats.n_errors, 576);
  // correct counts only among answered samples: no residue loses accuracy to failures
  for (int r = 0; r < 24; ++r) {
    const ResidueStat &p = partial.stats.per_residue[r], &c = clean.stats.per_residue[r];
    EXPECT_LE(p.correct, c.correct);
    if (c.acc == 0.0 || c.acc == 1.0) {
      EXPECT_EQ(p.acc, c.acc) << "residue " << r;
    }
  }
  const EvalResults healed = run_eval(good, opt, dir);
  EXPECT_EQ(healed.stats.n_errors, 0);
  expect_same_results(healed, clean);
  fs::remove_all(clean_dir);
  fs::remove_all(dir);
}

TEST(Resume, ABackendThatKeepsFailingStopsWithTheJournalKept) {
  struct Down : Backend {
    std::string describe() const override { return "down"; }
    std::vector<ScoreResult> score(const std::vector<ScoreRequest>&) override {
      fail("http://localhost:1", "connection refused", "start the server");
    }
  } down;
  const std::string dir = testutil::tmp_dir("down");
  try {
    run_eval(down, small_options(), dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 consecutive batches"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("connection refused"), std::string::npos) << e.what();
  }
  EXPECT_EQ(journal_load(dir + "/journal.jsonl").error_lines, 48);
  fs::remove_all(dir);
}

TEST(Resume, AJournalOfAnotherRunIsRefused) {
  te::RuleBackend good = te::phase_backend();
  EvalOptions opt = small_options();
  const std::string dir = testutil::tmp_dir("other");
  run_eval(good, opt, dir);
  opt.model = "another-model";
  try {
    run_eval(good, opt, dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another run"), std::string::npos) << e.what();
  }
  opt = small_options();
  opt.layout.seed = 99;
  EXPECT_THROW(run_eval(good, opt, dir), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace phasescope
