// serve_crosscheck_test.cpp — the point of `phasescope serve`: one checkpoint measured in process
// (ModelBackend, as `phasescope eval` does) and over HTTP (a minimal scorer here, POSTing token ids to
// /v1/completions) on the same seeded layout samples gives identical per-sample answers: the same top-1,
// the same top-5 ids, log-probs equal within 1e-5 (the answer's log-prob over HTTP comes from an echo
// request, a different slice of the same forward), and therefore identical per-residue tables.
// Both protocols, R = 8, on a tiny untrained checkpoint: exactness matters here, not accuracy.
// Two clients: a minimal scorer written here (the wire format by hand), and the product's HttpBackend
// (what `phasescope eval --base-url` runs), which must agree with the in-process tables as well.
// And both probes (needle, flip) run end to end against the served checkpoint as the CLI runs them:
// no --model (the server's only one), the server's /tokenize, its token space.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/check.h"
#include "eval/journal.h"
#include "eval/model_backend.h"
#include "eval/runner.h"
#include "http/http_pool.h"
#include "http/openai_client.h"
#include "probe/flip.h"
#include "probe/needle.h"
#include "probe/probe_setup.h"
#include "serve_testing.h"

namespace phasescope {
namespace {

namespace ts = testing_serve;
using json = nlohmann::json;

// A Backend over HTTP: per batch, one request for the top-1 and top-5 (max_tokens 1, logprobs 5) and one
// echo request (prompt + answer, max_tokens 0) for log p(answer).
struct HttpScorer : Backend {
  int port = 0;
  std::string model;
  int64_t requests = 0;
  std::string describe() const override { return "tiny over HTTP (phasescope serve)"; }
  int max_batch() const override { return 16; }
  std::vector<ScoreResult> score(const std::vector<ScoreRequest>& batch) override {
    json prompts = json::array(), with_answer = json::array();
    for (const ScoreRequest& r : batch) {
      prompts.push_back(r.tokens);
      std::vector<int> t = r.tokens;
      t.push_back(r.answer);
      with_answer.push_back(t);
    }
    const ts::Reply a = ts::post(port, "/v1/completions",
                                 json{{"model", model},
                                      {"prompt", prompts},
                                      {"max_tokens", 1},
                                      {"temperature", 0},
                                      {"logprobs", 5},
                                      {"return_tokens_as_token_ids", true}});
    const ts::Reply b = ts::post(
        port, "/v1/completions",
        json{{"model", model}, {"prompt", with_answer}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 0}});
    requests += 2;
    if (a.status != 200 || b.status != 200)
      fail("http scorer", "HTTP " + std::to_string(a.status) + " " + a.raw, "see the server");
    std::vector<ScoreResult> out(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      const json& c = a.body["choices"][i];
      out[i].top1 = c["token_ids"][0];
      for (auto it = c["logprobs"]["top_logprobs"][0].begin(); it != c["logprobs"]["top_logprobs"][0].end();
           ++it)
        out[i].topk.push_back({std::stoi(it.key().substr(9)), it.value().get<double>()});  // "token_id:17"
      std::sort(out[i].topk.begin(), out[i].topk.end(),
                [](const auto& x, const auto& y) { return x.second > y.second; });
      out[i].answer_logprob = b.body["choices"][i]["logprobs"]["token_logprobs"].back();
    }
    return out;
  }
};

// The tiny preset with 16 names, trained for a few seconds: it has learned that a name follows a key, and
// picks among the 16 names by context, so about one answer in 16 is right and the per-residue tables are
// not all zero (an untrained model never names the answer, which would make equal tables prove nothing).
std::string lightly_trained_checkpoint() {
  Preset p = ts::tiny_preset();
  p.task.n_names = 16;
  p.task.n_keys = 32;
  p.task.mqar_pairs = 8;
  p.task.mqar_queries = 4;
  p.task.curriculum_steps = 0;
  p.train.steps = 60;
  p.train.batch = 8;
  p.train.warmup = 10;
  p.train.eval_every = 0;
  p.train.ckpt_every = 60;
  p.train.log_every = 60;
  TrainOptions t;
  t.out_dir = testutil::tmp_dir("xcheck");
  t.log = [](const std::string&) {};
  train_run(preset_from_json(preset_to_json(p), "cross-check preset"), t);
  return t.out_dir;
}

TEST(ServeCrossCheck, InProcessAndHttpGiveIdenticalAnswersAndTables) {
  const std::string ckpt = lightly_trained_checkpoint();
  Server server(ts::local_options(ckpt));
  HttpScorer http;
  http.port = server.port();
  http.model = server.model_id();
  ModelBackend local(model_load(ckpt), "tiny-w8s8");

  for (PadProtocol protocol : {PadProtocol::Prefix, PadProtocol::InSequence}) {
    EvalOptions o = eval_options_for(local.preset(), protocol, 192, 8, 11);
    o.bootstrap = 200;
    o.report = false;
    o.log = nullptr;
    const std::string dir_local = testutil::tmp_dir("xcheck-local"),
                      dir_http = testutil::tmp_dir("xcheck-http");
    const EvalResults a = run_eval(local, o, dir_local);
    const EvalResults b = run_eval(http, o, dir_http);

    // per sample: the same answer, the same top-5, log-probs within 1e-5
    const JournalLoad ja = journal_load(dir_local + "/journal.jsonl"),
                      jb = journal_load(dir_http + "/journal.jsonl");
    ASSERT_EQ(ja.records.size(), 192u);
    ASSERT_EQ(jb.records.size(), ja.records.size());
    std::map<int64_t, const JournalRecord*> by_id;
    for (const JournalRecord& r : jb.records) by_id[r.id] = &r;
    double max_top = 0, max_answer = 0;
    int64_t correct = 0;
    for (const JournalRecord& x : ja.records) {
      const JournalRecord* y = by_id[x.id];
      ASSERT_NE(y, nullptr) << x.id;
      ASSERT_TRUE(x.scored() && y->scored()) << y->error;
      EXPECT_EQ(x.answer, y->answer) << "sample " << x.id;
      EXPECT_EQ(x.tokens_hash, y->tokens_hash);
      ASSERT_EQ(x.topk.size(), 5u);
      ASSERT_EQ(y->topk.size(), 5u);
      for (size_t k = 0; k < 5; ++k) {
        EXPECT_EQ(x.topk[k].first, y->topk[k].first) << "sample " << x.id << " rank " << k;
        max_top = std::max(max_top, std::fabs(x.topk[k].second - y->topk[k].second));
      }
      max_answer = std::max(max_answer, std::fabs(x.logprob - y->logprob));
      correct += x.correct();
    }
    EXPECT_GT(correct, 0);  // the tables below have something in them
    std::printf(
        "  %s: %zu samples, %lld right; top-5 log-probs differ by at most %.3g, answer log-probs by %.3g\n",
        pad_protocol_name(protocol).c_str(), ja.records.size(), (long long)correct, max_top, max_answer);
    EXPECT_LE(max_top, 1e-5);
    EXPECT_LE(max_answer, 1e-5);

    // therefore the same per-residue table, folded table and summary statistics
    ASSERT_EQ(a.stats.per_residue.size(), 8u);
    for (size_t r = 0; r < a.stats.per_residue.size(); ++r) {
      EXPECT_EQ(a.stats.per_residue[r].n, b.stats.per_residue[r].n) << r;
      EXPECT_EQ(a.stats.per_residue[r].correct, b.stats.per_residue[r].correct) << r;
    }
    for (size_t r = 0; r < a.stats.folded.size(); ++r)
      EXPECT_EQ(a.stats.folded[r].correct, b.stats.folded[r].correct);
    EXPECT_EQ(a.stats.mean, b.stats.mean);
    EXPECT_EQ(a.stats.gap, b.stats.gap);
    EXPECT_EQ(a.stats.p_value, b.stats.p_value);
    EXPECT_EQ(a.stats.period.P, b.stats.period.P);
    EXPECT_EQ(results_format_table(a), results_format_table(b));
    const std::string csv_a = results_csv({a}), csv_b = results_csv({b});
    EXPECT_EQ(csv_a, csv_b);
    std::filesystem::remove_all(dir_local);
    std::filesystem::remove_all(dir_http);
  }
  std::printf("  HTTP scorer: %lld requests; server: %lld forward passes, largest batch %d\n",
              (long long)http.requests, (long long)server.stats().forwards, server.stats().max_rows);
  server.shutdown();
  std::filesystem::remove_all(ckpt);
}

// The same comparison through the product's client: HttpBackend (pool, retries, verified positions,
// echo for the answer's log-prob), i.e. `phasescope eval --base-url URL --model NAME --checkpoint DIR`.
TEST(ServeCrossCheck, HttpBackendMatchesInProcess) {
  const std::string ckpt = lightly_trained_checkpoint();
  Server server(ts::local_options(ckpt));
  ModelBackend local(model_load(ckpt), "tiny-w8s8");
  HttpOptions ho;
  ho.base_urls = {"http://127.0.0.1:" + std::to_string(server.port())};
  ho.api_key_env = "";
  ho.concurrency = 8;
  ho.retries = 0;
  HttpPool pool(ho);
  OpenAIOptions oo;
  oo.model = server.model_id();
  oo.echo = true;
  oo.require_usage = true;
  oo.bos_id = 0;
  HttpBackend http(pool, oo, nullptr);

  EvalOptions o = eval_options_for(local.preset(), PadProtocol::Prefix, 192, 8, 5);
  o.bootstrap = 200;
  o.report = false;
  o.log = nullptr;
  const std::string dir_local = testutil::tmp_dir("xcheck2-local"),
                    dir_http = testutil::tmp_dir("xcheck2-http");
  const EvalResults a = run_eval(local, o, dir_local);
  const EvalResults b = run_eval(http, o, dir_http);
  const JournalLoad ja = journal_load(dir_local + "/journal.jsonl"),
                    jb = journal_load(dir_http + "/journal.jsonl");
  ASSERT_EQ(jb.records.size(), ja.records.size());
  std::map<int64_t, const JournalRecord*> by_id;
  for (const JournalRecord& r : jb.records) by_id[r.id] = &r;
  int64_t correct = 0;
  for (const JournalRecord& x : ja.records) {
    const JournalRecord* y = by_id[x.id];
    ASSERT_NE(y, nullptr) << x.id;
    ASSERT_TRUE(y->scored()) << y->error;
    EXPECT_EQ(x.answer, y->answer) << "sample " << x.id;
    EXPECT_NEAR(x.logprob, y->logprob, 1e-5) << "sample " << x.id;
    correct += x.correct();
  }
  EXPECT_GT(correct, 0);
  for (size_t r = 0; r < a.stats.per_residue.size(); ++r)
    EXPECT_EQ(a.stats.per_residue[r].correct, b.stats.per_residue[r].correct) << r;
  EXPECT_EQ(results_format_table(a), results_format_table(b));
  EXPECT_EQ(results_csv({a}), results_csv({b}));
  server.shutdown();
  std::filesystem::remove_all(dir_local);
  std::filesystem::remove_all(dir_http);
  std::filesystem::remove_all(ckpt);
}

// `phasescope probe needle|flip --base-url URL` against `phasescope serve`, out of the box: the model
// is the server's only one, the tokenizer its /tokenize, the words its own token names (the model card
// lists its token space), answers' log-probs by echo; every sample is scored, none fails.
TEST(ServeCrossCheck, ProbesRunAgainstOurOwnServer) {
  const std::string ckpt = lightly_trained_checkpoint();
  Server server(ts::local_options(ckpt));
  ProbeConnectOptions co;
  co.http.base_urls = {server.url()};
  co.http.api_key_env = "";
  co.http.concurrency = 8;
  co.echo_on_phasescope = true;
  ProbeConnection c = probe_connect(co);  // no --model
  EXPECT_EQ(c.model.id, server.model_id());
  ASSERT_TRUE(c.model.token_space.present);
  EXPECT_EQ(c.model.token_space.keys, 32);
  EXPECT_EQ(c.model.token_space.names, 16);
  EXPECT_EQ(c.model.max_model_len, server.max_model_len());
  EXPECT_TRUE(c.backend->options().echo);

  // the needle: 8 residues x 32 prompts of the server's context less two (the echoed answer and one
  // token to generate)
  NeedleSpec spec;
  spec.context = server.max_model_len() - 2;
  spec.samples_per_group = 32;
  spec = needle_token_space_spec(spec, c.model.token_space.fillers, c.model.token_space.keys,
                                 c.model.token_space.names);
  const NeedleDesign d = needle_build(spec, *c.tokens, nullptr);
  EXPECT_EQ(d.vocab.keys.size(), 32u);
  EXPECT_EQ(d.vocab.values.size(), 16u);
  NeedleRunOptions ro;
  ro.model = c.model.id;
  ro.bootstrap = 50;
  ro.report = false;
  const std::string dir_needle = testutil::tmp_dir("probe-needle");
  const EvalResults r = needle_run(*c.backend, d, ro, dir_needle);
  EXPECT_EQ(r.stats.n_scored, 8 * 32);
  EXPECT_EQ(r.stats.n_errors, 0);
  for (const ResidueStat& x : r.stats.per_residue) EXPECT_EQ(x.n, 32) << x.residue;
  for (const JournalRecord& x : journal_load(dir_needle + "/journal.jsonl").records)
    ASSERT_TRUE(std::isfinite(x.logprob)) << "sample " << x.id << ": echo gives every answer's log-prob";

  // the flip: its token-space example, every length compared
  const ServedTokenSpace& sp = c.model.token_space;
  const FlipDesign fd =
      flip_build(flip_token_space_example(sp.fillers, sp.keys, sp.names), *c.tokens, nullptr);
  FlipRunOptions fo;
  fo.model = c.model.id;
  const std::string dir_flip = testutil::tmp_dir("probe-flip");
  const FlipResult f = flip_run(*c.backend, fd, fo, dir_flip);
  EXPECT_EQ(f.unscored, 0);
  EXPECT_EQ(f.comparisons, int(fd.points.size()));
  EXPECT_EQ(fd.points.size(), 16u);  // L = 24..39
  server.shutdown();
  for (const std::string& dir : {dir_needle, dir_flip, ckpt}) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace phasescope
