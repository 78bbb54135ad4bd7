// probe_http_test.cpp — the probes against a fake OpenAI-compatible server on loopback
// (fake_openai_server.h), whose "model" is a rule with a known phase pattern (the client itself:
// http_client_test.cpp):
//   probes: the needle layout recovers a planted per-residue pattern exactly (equal prompt lengths,
//   query position and group moments), multi-token values are teacher-forced, the flip probe finds a
//   planted period 4; `eval`'s lookup layout runs through the HTTP backend; and the CLI killed with
//   SIGKILL mid-run and run again journals every sample exactly once, failed ones retried.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "eval/journal.h"
#include "eval/runner.h"
#include "fake_openai_server.h"
#include "http/http_pool.h"
#include "http/openai_client.h"
#include "http/server_tokenizer.h"
#include "http_testing.h"
#include "probe/flip.h"
#include "probe/needle.h"
#include "testing.h"

namespace phasescope {
namespace {

namespace fs = std::filesystem;
using testutil::Clock;
using testutil::seconds_since;

using testhttp::api;
using testhttp::fast;
using testhttp::record_prompt;
using testhttp::RecordPrompt;
using testutil::slurp;
using testutil::tmp_dir;

// ---- the probes

// Needle answers from the fake's induction head, wrong when the target key's position mod 8 is bad.
void plant_needle_pattern(fake::Server& s, std::set<int> bad, int key_and_sep_tokens) {
  s.model = [bad, key_and_sep_tokens](const std::vector<int>& t) {
    int64_t q = -1;
    const int p = fake::induction_next(t, &q);
    if (p < 0) return fake::Dist{{fake::kBos, -0.1}};
    if (bad.count(static_cast<int>((q - key_and_sep_tokens) % 8)))
      return fake::Dist{{fake::kBos, -0.2}, {p, -1.7}};
    return fake::Dist{{p, -0.05}, {fake::kBos, -3.5}};
  };
}

TEST(NeedleProbe, RecoversAPlantedPhasePatternExactly) {
  const std::string key = "sk-needle-SECRET-77";
  ::setenv("PHASESCOPE_TEST_KEY", key.c_str(), 1);
  fake::Server s;
  plant_needle_pattern(s, {3, 7}, 2);
  HttpOptions ho = fast({s.url()});
  ho.api_key_env = "PHASESCOPE_TEST_KEY";
  HttpPool pool(ho);
  ServerTokenizer ts(pool, "fake-model");
  HttpBackend b(pool, api(), &ts);
  NeedleSpec spec;
  spec.context = 600;
  spec.samples_per_group =
      16;  // 8 leaves the groups' SDs ~1 token apart (lattice rounding), over the tolerance
  const NeedleDesign d = needle_build(spec, ts, nullptr);
  EXPECT_EQ(d.record_tokens, 4);  // "apple" ":" " pear" "\n"
  EXPECT_LE(d.mean_range, spec.tol_mean);
  EXPECT_LE(d.sd_range, spec.tol_sd);

  // every prompt: the same length and query position, the target's residue as designed
  for (int64_t i = 0; i < d.samples(); ++i) {
    const ScoringSample ps = needle_render(d, i, "fake-model");
    ASSERT_EQ(int64_t(ps.prompt.size()), 600);
    EXPECT_EQ(ps.rec.query_pos, 599);
    EXPECT_EQ(ps.rec.residue, i % 8);
    EXPECT_EQ(ps.rec.target_pos % 8, ps.rec.residue);
    // the target key sits at target_pos, and the prompt ends with it and the separator
    EXPECT_EQ(ps.prompt[size_t(ps.rec.target_pos)], ps.prompt[ps.prompt.size() - 2]);
    EXPECT_EQ(ps.prompt[size_t(ps.rec.target_pos) + 2], ps.answer[0]);
  }

  const std::string out = tmp_dir("needle");
  NeedleRunOptions ro;
  ro.model = "fake-model";
  ro.bootstrap = 100;
  ro.report = false;
  const EvalResults r = needle_run(b, d, ro, out);
  ASSERT_EQ(r.stats.per_residue.size(), 8u);
  for (const ResidueStat& rs : r.stats.per_residue) {
    EXPECT_EQ(rs.n, 16);
    EXPECT_DOUBLE_EQ(rs.acc, (rs.residue == 3 || rs.residue == 7) ? 0.0 : 1.0) << "residue " << rs.residue;
  }
  EXPECT_EQ(r.meta.task, "needle");
  const std::string lp = slurp(out + "/logprob_per_residue.csv");  // the first value token's logprob
  EXPECT_NE(lp.find("\n3,16,16,-1.700000\n"), std::string::npos) << lp;
  EXPECT_NE(lp.find("\n0,16,16,-0.050000\n"), std::string::npos) << lp;
  const JournalLoad jl = journal_load(out + "/journal.jsonl");
  EXPECT_EQ(jl.lines, 128);
  for (const JournalRecord& j : jl.records) EXPECT_FALSE(j.expected_text.empty());

  // the key went out in every request's header and into no file
  for (const auto& f : fs::recursive_directory_iterator(out))
    if (f.is_regular_file()) EXPECT_EQ(slurp(f.path().string()).find(key), std::string::npos) << f.path();
  {
    std::lock_guard<std::mutex> g(s.mu);
    ASSERT_FALSE(s.auth.empty());
    EXPECT_EQ(s.auth.back(), "Bearer " + key);
  }

  // rerun: everything is resumed, nothing is sent again
  const int64_t before = s.completions.load();
  const EvalResults again = needle_run(b, d, ro, out);
  EXPECT_EQ(s.completions.load(), before);
  EXPECT_EQ(again.stats.n_scored, 128);
  fs::remove_all(out);
}

TEST(NeedleProbe, MultiTokenValuesAreTeacherForced) {
  fake::Server s;
  HttpPool pool(fast({s.url()}));
  ServerTokenizer ts(pool, "fake-model");
  HttpBackend b(pool, api(), &ts);
  NeedleSpec spec;
  spec.context = 400;
  spec.samples_per_group = 16;
  spec.value_tokens = 2;
  spec.values = {" big cat", " red fox",  " old owl", " wet dog",
                 " hot tea", " dry sand", " one",     " cold ice"};
  const NeedleDesign d = needle_build(spec, ts, nullptr);
  EXPECT_EQ(d.record_tokens, 5);
  EXPECT_EQ(d.vocab.values.size(), 7u);  // " one" has one token: left out
  const std::string out = tmp_dir("needle2");
  NeedleRunOptions ro;
  ro.model = "fake-model";
  ro.bootstrap = 50;
  ro.report = false;
  const EvalResults r = needle_run(b, d, ro, out);
  EXPECT_DOUBLE_EQ(r.stats.mean, 1.0);
  const JournalLoad jl = journal_load(out + "/journal.jsonl");
  ASSERT_EQ(jl.records.size(), 128u);
  EXPECT_EQ(jl.records[0].expected_seq.size(), 2u);
  EXPECT_EQ(jl.records[0].answer_seq, jl.records[0].expected_seq);
  EXPECT_EQ(s.completions.load(), 256);  // two requests per sample
  fs::remove_all(out);
}

// Natural-text filler: each base example's passage is cut by its records at the shift, and nothing else
// moves (the same lengths and residues as with a repeated filler token).
TEST(NeedleProbe, PassagesFillAroundTheRecordsInOrder) {
  fake::Server s;
  HttpPool pool(fast({s.url()}));
  ServerTokenizer ts(pool, "fake-model");
  NeedleSpec spec;
  spec.context = 600;
  spec.samples_per_group = 16;
  const int n_pass = 5;  // fewer than the base examples: passage b % 5
  for (int i = 0; i < n_pass; ++i) {
    std::vector<int> p;
    for (int k = 0; k < 600; ++k) p.push_back(10000000 + 1000 * i + k);  // ids no other piece uses
    spec.passages.push_back(p);
  }
  EXPECT_NE(testutil::error_of([&] { needle_build(spec, ts, nullptr); }).find("verify = false"),
            std::string::npos);
  spec.verify = false;
  const NeedleDesign d = needle_build(spec, ts, nullptr);
  const int64_t fill = 2 * spec.R + 1 + d.rest;  // filler tokens per prompt
  for (int64_t i = 0; i < d.samples(); ++i) {
    const ScoringSample ps = needle_render(d, i, "fake-model");
    ASSERT_EQ(int64_t(ps.prompt.size()), 600);
    EXPECT_EQ(ps.rec.target_pos % 8, i % 8);
    const std::vector<int>& p = spec.passages[size_t(i / 8) % n_pass];
    std::vector<int> seen;  // the passage's tokens in the prompt, in order
    for (int t : ps.prompt)
      if (t >= 10000000) seen.push_back(t);
    ASSERT_EQ(int64_t(seen.size()), fill);
    EXPECT_TRUE(std::equal(seen.begin(), seen.end(), p.begin())) << "sample " << i;
    const int s = d.shift[size_t(i / 8)][size_t(i % 8)];  // 1 + s of them before the records
    const size_t first_key = size_t(ps.rec.target_pos - d.bases[size_t(i / 8)].target * d.record_tokens);
    EXPECT_EQ(ps.prompt[first_key - 1 - d.vocab.filler_end.size()], p[size_t(s)]) << "sample " << i;
  }
  spec.passages[2].resize(size_t(fill - 1));
  EXPECT_NE(testutil::error_of([&] { needle_build(spec, ts, nullptr); }).find("needle passage 2"),
            std::string::npos);
}

TEST(FlipProbe, FindsThePlantedPeriodOnTheFp8Template) {
  fake::Server s;
  const int fp = s.tok.id_of("FP"), eight = s.tok.id_of("8"), thirty_two = s.tok.id_of("32");
  // "8" wins when the prompt length is 0 or 1 mod 4, "32" otherwise: a period of 4 in L
  s.model = [=](const std::vector<int>& t) {
    if (t.empty() || t.back() != fp) return fake::Dist{{fake::kBos, -0.1}};
    const bool eight_wins = t.size() % 4 <= 1;
    return eight_wins ? fake::Dist{{eight, -0.2}, {thirty_two, -1.8}}
                      : fake::Dist{{thirty_two, -0.3}, {eight, -1.5}};
  };
  HttpPool pool(fast({s.url()}));
  ServerTokenizer ts(pool, "fake-model");
  HttpBackend b(pool, api(), &ts);
  const FlipDesign d = flip_build(flip_fp8_example(), ts, nullptr);
  ASSERT_EQ(d.points.size(), 16u);  // L = 24..39, one "=" per token
  for (size_t i = 1; i < d.points.size(); ++i) EXPECT_EQ(d.points[i].units, d.points[i - 1].units + 1);
  const std::string out = tmp_dir("flip");
  FlipRunOptions ro;
  ro.model = "fake-model";
  const FlipResult r = flip_run(b, d, ro, out);
  EXPECT_EQ(r.comparisons, 16);
  EXPECT_EQ(r.best.P, 4);
  EXPECT_EQ(r.best.follows, 16);
  EXPECT_EQ(r.baseline.follows, 8);
  EXPECT_TRUE(r.flips == 7 || r.flips == 8) << r.flips;  // pairs of winners: AABB... or ABBA...
  for (const FlipPointResult& p : r.points) {
    const size_t T = d.points[size_t(&p - &r.points[0])].prompt.size();
    EXPECT_EQ(p.winner, T % 4 <= 1 ? 0 : 1) << "L " << p.L;
  }
  EXPECT_TRUE(fs::exists(out + "/flip.json"));
  EXPECT_NE(slurp(out + "/flip.txt").find("period: P = 4"), std::string::npos);
  fs::remove_all(out);
}

// A tokenizer that glues a sign to the newline after it, as DeepSeek's and GPT-4-style pre-tokenizers do
// ("=\n" and " =\n" are one token); every other character, and " =", is one token. BOS = 0.
struct GluingTokens : TokenSource {
  std::vector<std::string> pieces = {"<s>", "=\n", " =\n", " =", "="};
  int id(const std::string& p) const {
    for (size_t i = 0; i < pieces.size(); ++i)
      if (pieces[i] == p) return static_cast<int>(i);
    return 1000 + static_cast<unsigned char>(p[0]);
  }
  std::string describe() const override { return "gluing"; }
  int bos_id() const override { return 0; }
  std::vector<int> encode(const std::string& s) const override {
    std::vector<int> out;
    for (size_t i = 0; i < s.size();) {
      size_t n = 1;
      for (const std::string& p : {std::string(" =\n"), std::string("=\n"), std::string(" =")})
        if (s.compare(i, p.size(), p) == 0) {
          n = p.size();
          break;
        }
      out.push_back(id(s.substr(i, n)));
      i += n;
    }
    return out;
  }
  std::string decode(const std::vector<int>& t) const override {
    std::string s;
    for (int x : t) s += x < 1000 ? pieces[size_t(x)] : std::string(1, char(x - 1000));
    return s;
  }
};

TEST(FlipProbe, ATokenThatStraddlesTheFillersEndCountsInL) {
  GluingTokens ts;
  FlipSpec spec;
  spec.template_text = "ab\n{filler}\ncd(FP";
  spec.families = {{"equals", " ="}};
  spec.candidates = {"8", "32"};
  spec.L_min = 4;
  spec.L_max = 9;
  const FlipDesign d = flip_build(spec, ts, nullptr);
  ASSERT_EQ(d.points.size(), 6u);
  for (const FlipPoint& p : d.points) {
    // BOS a b \n, then n signs whose last one is glued to the newline: L = 4 + n
    EXPECT_EQ(p.L, 4 + p.units);
    EXPECT_EQ(p.prompt[0], 0);
  }
  // n = 2: "<s>" "a" "b" "\n" "=" " =\n" "c" "d" "(" "F" "P": the glued token is the 6th
  EXPECT_EQ(d.points[2].units, 2);
  EXPECT_EQ(ts.decode({d.points[2].prompt[5]}), " =\n");
}

// A flip result whose margin log p(8) - log p(32) at each L is margin(L); two families, the second offset.
FlipResult margin_result(const std::function<double(int)>& margin) {
  FlipResult r;
  r.candidates = {"8", "32"};
  r.families = {"equals", "dashes"};
  for (int f = 0; f < 2; ++f)
    for (int L = 24; L < 56; ++L) {
      FlipPointResult p;
      p.family = f;
      p.L = L;
      p.logprob = {-1.0 + margin(L) + 0.5 * f, -1.0};
      r.points.push_back(p);
    }
  return r;
}

TEST(FlipProbe, MarginByPhaseFindsAPlantedPhaseAboveItsLineAndNoiseBelowIt) {
  // a trend in L plus 0.5 nats at phase 7 of 8: the line is removed, the phase is found
  const FlipPhase planted =
      flip_margin_by_phase(margin_result([](int L) { return 0.03 * L + (L % 8 == 7 ? 0.5 : 0); }), 8, 1);
  EXPECT_EQ(planted.points, 64);
  ASSERT_EQ(planted.folded.size(), 8u);
  EXPECT_EQ(planted.folded_n, std::vector<int>(8, 8));
  EXPECT_EQ(std::max_element(planted.folded.begin(), planted.folded.end()) - planted.folded.begin(), 7);
  EXPECT_GT(planted.share, 0.9);  // the line's residual is all phase, up to the line's pull by the spikes
  EXPECT_NEAR(planted.range, 0.5, 0.05);
  EXPECT_LT(planted.p_value, 0.01);
  EXPECT_LT(planted.share_null_q95, planted.share);
  EXPECT_NEAR(planted.margin[0], 0.03 * 24, 1e-12);  // the raw margin, family 0
  // a line alone leaves nothing to fold
  const FlipPhase line = flip_margin_by_phase(margin_result([](int L) { return 2.0 - 0.01 * L; }), 8, 1);
  EXPECT_NEAR(line.share, 0.0, 1e-9);
  EXPECT_NEAR(line.range, 0.0, 1e-9);
  // seeded noise: no phase beyond chance, and the same seed gives the same null
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0, 0.1);
  std::map<int, double> by_L;
  for (int L = 24; L < 56; ++L) by_L[L] = noise(rng);
  const FlipResult noisy = margin_result([&](int L) { return by_L[L]; });
  const FlipPhase a = flip_margin_by_phase(noisy, 8, 3), b = flip_margin_by_phase(noisy, 8, 3);
  EXPECT_GT(a.p_value, 0.05);
  EXPECT_EQ(a.share_null_q95, b.share_null_q95);
  EXPECT_EQ(a.p_value, b.p_value);
  // an unknown log-probability drops that point; three candidates are refused
  FlipResult unknown = noisy;
  unknown.points[3].logprob[1] = std::nan("");
  const FlipPhase u = flip_margin_by_phase(unknown, 8, 3);
  EXPECT_EQ(u.points, 63);
  EXPECT_TRUE(std::isnan(u.margin[3]));
  FlipResult three = noisy;
  three.candidates.push_back("4");
  EXPECT_THROW(flip_margin_by_phase(three, 8, 3), Error);
}

TEST(FlipProbe, TheShortFp8ExampleFitsAToyContext) {
  fake::Server s;
  HttpPool pool(fast({s.url()}));
  ServerTokenizer ts(pool, "fake-model");
  const FlipDesign full = flip_build(flip_fp8_example(), ts, nullptr);
  const FlipDesign short_form = flip_build(flip_fp8_short_example(), ts, nullptr);
  ASSERT_EQ(short_form.points.size(), 16u);
  EXPECT_EQ(short_form.spec.candidates, full.spec.candidates);
  // the same ending, a far shorter prompt
  const std::vector<int>& a = full.points[0].prompt;
  const std::vector<int>& b = short_form.points[0].prompt;
  EXPECT_EQ(a.back(), b.back());
  EXPECT_LT(b.size() * 3, a.size());
  EXPECT_LT(short_form.points.back().prompt.size() + short_form.points.back().candidates[1].size(), 128u);
}

TEST(EvalOverHttp, LookupLayoutThroughTheHttpBackend) {
  // phasescope serve's shape: token ids in, token ids out; the fake's induction head answers lookups
  fake::Server s;
  s.format = "serve";
  HttpPool pool(fast({s.url()}));
  OpenAIOptions o = api();
  o.bos_id = 0;
  HttpBackend b(pool, o, nullptr);
  EvalOptions opt;
  opt.layout.n_base = 24;
  opt.model = "fake";
  opt.bootstrap = 50;
  opt.report = false;
  const std::string out = tmp_dir("evalhttp");
  const EvalResults r = run_eval(b, opt, out);
  EXPECT_EQ(r.stats.n_scored, 24 * 24);
  EXPECT_EQ(r.stats.n_errors, 0);
  EXPECT_DOUBLE_EQ(r.stats.mean, 1.0);
  EXPECT_EQ(s.completions.load(), 24 * 24);
  fs::remove_all(out);
}

// ---- the CLI, killed mid-run and run again

int64_t count_lines(const std::string& path) {
  const std::string t = slurp(path);
  return std::count(t.begin(), t.end(), '\n');
}

pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

TEST(ProbeCli, ResumeAfterKillLosesNothingAndDuplicatesNothing) {
  fake::Server s;
  std::atomic<bool> flaky{true}, hold{true};
  std::atomic<int> n{0};
  s.fault = [&](const httplib::Request& q, httplib::Response& r) {
    if (q.path != "/v1/completions") return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!flaky) return false;
    const int i = n++;
    // the first run is held from its 64th request on until it has been killed, so it cannot finish
    // first however the machine schedules the test (half of the 128 samples at most get journaled)
    while (i >= 64 && hold) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (i % 5 == 2) {  // the first run: some requests fail for good (no retries)
      r.status = 500;
      return true;
    }
    return false;
  };
  const std::string out = tmp_dir("cli");
  const std::vector<std::string> args = {PHASESCOPE_CLI,
                                         "probe",
                                         "needle",
                                         "--base-url",
                                         s.url(),
                                         "--model",
                                         "fake-model",
                                         "--context",
                                         "400",
                                         "--samples-per-group",
                                         "16",
                                         "--concurrency",
                                         "2",
                                         "--batch",
                                         "8",
                                         "--retries",
                                         "0",
                                         "--timeout-s",
                                         "5",
                                         "--bootstrap",
                                         "50",
                                         "--no-report",
                                         "--out",
                                         out};
  const std::string journal = out + "/journal.jsonl";

  // run 1: killed with SIGKILL once a few batches are journaled
  const pid_t pid = spawn(args, out + "/run1.log");
  const auto t0 = Clock::now();
  while (count_lines(journal) < 24 && seconds_since(t0) < 60)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  hold = false;  // the held requests of the dead run now answer no one
  ASSERT_TRUE(WIFSIGNALED(status)) << slurp(out + "/run1.log");
  const JournalLoad first = journal_load(journal);
  ASSERT_GE(first.lines, 24);
  ASSERT_LT(first.lines, 128) << "the run finished before it was killed: nothing was tested";
  ASSERT_GT(first.error_lines, 0);
  std::set<int64_t> failed_first;
  for (const JournalRecord& r : first.records)
    if (!r.scored()) failed_first.insert(r.id);

  // run 2: a healthy server; the same command completes the journal
  flaky = false;
  const pid_t pid2 = spawn(args, out + "/run2.log");
  ::waitpid(pid2, &status, 0);
  const std::string log2 = slurp(out + "/run2.log");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << log2;
  EXPECT_NE(log2.find(std::to_string(first.lines - first.error_lines) + " already journaled"),
            std::string::npos)
      << log2;

  // every sample exactly once with an answer; failed ones were retried; nothing scored twice
  std::map<int64_t, int> scored_lines;
  std::istringstream in(slurp(journal));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("{\"journal_identity\"", 0) == 0) continue;  // the first line: the run's identity
    const JournalRecord r = journal_record_from_json(nlohmann::json::parse(line), "journal");
    if (r.scored()) scored_lines[r.id]++;
  }
  EXPECT_EQ(scored_lines.size(), 128u);
  for (const auto& [id, k] : scored_lines) EXPECT_EQ(k, 1) << "sample " << id;
  for (int64_t id : failed_first)
    EXPECT_EQ(scored_lines.count(id), 1u) << "failed sample " << id << " not retried";
  const JournalLoad final_load = journal_load(journal);
  EXPECT_EQ(final_load.duplicate_lines, 0);
  EXPECT_TRUE(fs::exists(out + "/results.json"));
  fs::remove_all(out);
}

}  // namespace
}  // namespace phasescope
