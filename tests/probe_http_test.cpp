// probe_http_test.cpp — the HTTP client, server tokenizer and probes against a fake OpenAI-compatible
// server on loopback (fake_openai_server.h), whose "model" is a rule with a known phase pattern:
//   positions: usage.prompt_tokens is checked (a server that counts one more refuses the sample), an
//   over-long prompt is refused before sending (the server never sees it), two BOS are refused;
//   faults: 500s then success, 429 with Retry-After (the wait is measured), replies slower than the
//   timeout, malformed JSON, truncated JSON and a connection cut mid-body are all retried; a failure
//   that outlasts the retries is an error, never an answer;
//   endpoints: requests spread over two servers, a failing one is rested; the API key is sent as a
//   bearer token and appears in no error, journal or report;
//   probes: the needle layout recovers a planted per-residue pattern exactly (equal prompt lengths,
//   query position and group moments), multi-token values are teacher-forced, the flip probe finds a
//   planted period 4; `eval`'s lookup layout runs through the HTTP backend; and the CLI killed with
//   SIGKILL mid-run and run again journals every sample exactly once, failed ones retried.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
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
#include "probe/flip.h"
#include "probe/needle.h"
#include "testing.h"

namespace phasescope {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

using testutil::slurp;
using testutil::tmp_dir;

// Fast retries for tests: backoff of 10-50 ms, a short rest.
HttpOptions fast(const std::vector<std::string>& urls, double timeout_s = 2, int retries = 3) {
  HttpOptions o;
  o.base_urls = urls;
  o.api_key_env = "";
  o.concurrency = 8;
  o.timeout_s = timeout_s;
  o.retries = retries;
  o.backoff_s = 0.01;
  o.backoff_max_s = 0.05;
  o.rest_s = 0.5;
  return o;
}

OpenAIOptions api(const std::string& model = "fake-model") {
  OpenAIOptions o;
  o.model = model;
  o.batch = 64;
  return o;
}

// A small record prompt: the last two tokens ("alpha", ":") occur once before, followed by " one".
struct RecordPrompt {
  std::vector<int> tokens;
  int answer = -1;
};
RecordPrompt record_prompt(fake::Server& s, int extra_records = 0) {
  RecordPrompt p;
  std::string text = "\nalpha: one\nbeta: two\n";
  for (int i = 0; i < extra_records; ++i) text += "gamma: three\n";
  text += "alpha:";
  p.tokens.push_back(fake::kBos);
  for (int id : s.tok.encode(text)) p.tokens.push_back(id);
  p.answer = s.tok.encode(" one")[0];
  return p;
}

// ---- units

TEST(HttpUnits, EndpointParsing) {
  HttpEndpoint e = http_endpoint_parse("http://127.0.0.1:8000/v1/");
  EXPECT_EQ(e.origin, "http://127.0.0.1:8000");
  EXPECT_EQ(e.prefix, "");
  e = http_endpoint_parse("https://host.example/proxy/v1");
  EXPECT_EQ(e.origin, "https://host.example");
  EXPECT_EQ(e.prefix, "/proxy");
  EXPECT_THROW(http_endpoint_parse("127.0.0.1:8000"), Error);
  EXPECT_THROW(http_endpoint_parse("ftp://x"), Error);
}

TEST(HttpUnits, RetryAfterAndBackoff) {
  const auto now = std::chrono::system_clock::from_time_t(1445412480);  // Wed, 21 Oct 2015 07:28:00 GMT
  EXPECT_DOUBLE_EQ(http_retry_after_seconds("3", now), 3.0);
  EXPECT_DOUBLE_EQ(http_retry_after_seconds("0.5", now), 0.5);
  EXPECT_DOUBLE_EQ(http_retry_after_seconds("Wed, 21 Oct 2015 07:28:10 GMT", now), 10.0);
  EXPECT_LT(http_retry_after_seconds("", now), 0);
  EXPECT_LT(http_retry_after_seconds("soon", now), 0);
  HttpOptions o;
  o.backoff_s = 0.25;
  o.backoff_max_s = 1;
  EXPECT_DOUBLE_EQ(http_backoff_seconds(o, 0, 1.0), 0.25);
  EXPECT_DOUBLE_EQ(http_backoff_seconds(o, 1, 1.0), 0.5);
  EXPECT_DOUBLE_EQ(http_backoff_seconds(o, 5, 1.0), 1.0);   // capped
  EXPECT_DOUBLE_EQ(http_backoff_seconds(o, 1, 0.0), 0.25);  // half of it jittered
}

TEST(HttpUnits, ReplyParsing) {
  // vLLM legacy logprobs with token ids, alternatives sorted best first
  CompletionChoice c = completion_reply_parse(
      R"({"choices":[{"text":" x","logprobs":{"tokens":["token_id:7"],"token_logprobs":[-0.1],)"
      R"("top_logprobs":[{"token_id:3":-2.0,"token_id:7":-0.1}]}}],"usage":{"prompt_tokens":12}})");
  ASSERT_EQ(c.chosen.size(), 1u);
  EXPECT_EQ(c.chosen[0].id, 7);
  ASSERT_EQ(c.top[0].size(), 2u);
  EXPECT_EQ(c.top[0][0].id, 7);
  EXPECT_EQ(c.top[0][1].id, 3);
  EXPECT_EQ(c.prompt_tokens, 12);
  // the chat form with ids (llama-server), and token_ids (phasescope serve)
  c = completion_reply_parse(
      R"({"choices":[{"text":"a","token_ids":[5],"logprobs":{"content":[{"id":5,"token":"a","logprob":-0.5,)"
      R"("top_logprobs":[{"id":5,"token":"a","logprob":-0.5},{"id":9,"token":"b","logprob":-1.5}]}]}}]})");
  EXPECT_EQ(c.token_ids, std::vector<int>{5});
  EXPECT_EQ(c.top[0][1].id, 9);
  EXPECT_EQ(c.prompt_tokens, -1);
  // malformed, truncated, empty
  EXPECT_THROW(completion_reply_parse("{not json"), std::exception);
  EXPECT_THROW(completion_reply_parse(R"({"choices":[{"text":"a")"), std::exception);
  EXPECT_THROW(completion_reply_parse(R"({"choices":[]})"), std::exception);
  EXPECT_EQ(token_id_from_string("token_id:42"), 42);
  EXPECT_EQ(token_id_from_string(" 42"), -1);
}

// ---- the backend against the fake server

TEST(HttpBackendTest, ScoresTokenIdPromptsAndVerifiesPositions) {
  fake::Server s;
  HttpPool pool(fast({s.url()}));
  ServerTokenizer ts(pool, "fake-model");
  HttpBackend b(pool, api(), &ts);
  const RecordPrompt p = record_prompt(s);
  ScoreResult r = b.score({{p.tokens, p.answer}})[0];
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.top1, p.answer);
  EXPECT_NEAR(r.answer_logprob, -0.05, 1e-12);
  ASSERT_FALSE(r.topk.empty());
  EXPECT_EQ(r.topk[0].first, p.answer);

  // a server that counts one token more (e.g. its own BOS): refused, with the numbers
  s.usage_delta = 1;
  r = b.score({{p.tokens, p.answer}})[0];
  EXPECT_NE(r.error.find("positions not verified"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find(std::to_string(p.tokens.size() + 1)), std::string::npos) << r.error;
  EXPECT_EQ(r.top1, -1);
}

TEST(HttpBackendTest, EveryReplyShapeGivesTheSameAnswer) {
  for (const std::string format : {"vllm", "serve", "text", "llama"}) {
    fake::Server s;
    s.format = format;
    HttpPool pool(fast({s.url()}));
    ServerTokenizer ts(pool, "fake-model");
    HttpBackend b(pool, api(), &ts);
    const RecordPrompt p = record_prompt(s);
    const ScoreResult r = b.score({{p.tokens, p.answer}})[0];
    EXPECT_EQ(r.error, "") << format;
    EXPECT_EQ(r.top1, p.answer) << format;
    EXPECT_NEAR(r.answer_logprob, -0.05, 1e-12) << format;
  }
}

TEST(HttpBackendTest, EchoReadsTheAnswerLogprobEvenForAWrongAnswer) {
  fake::Server s;
  HttpPool pool(fast({s.url()}));
  ServerTokenizer ts(pool, "fake-model");
  OpenAIOptions o = api();
  o.echo = true;
  HttpBackend b(pool, o, &ts);
  const RecordPrompt p = record_prompt(s);
  const int wrong = s.tok.encode(" two")[0];  // not in the fake's top-k at that position
  const std::vector<ScoreResult> r = b.score({{p.tokens, p.answer}, {p.tokens, wrong}});
  ASSERT_EQ(r[0].error, "");
  EXPECT_EQ(r[0].top1, p.answer);
  EXPECT_NEAR(r[0].answer_logprob, -0.05, 1e-12);
  ASSERT_EQ(r[1].error, "");
  EXPECT_EQ(r[1].top1, p.answer);
  EXPECT_NEAR(r[1].answer_logprob, -30.0, 1e-12);  // the fake's floor, read at the answer's position
}

// A server that answers every completion with HTTP 500: after breaker_after requests
// in a row failed, the rest fail at once naming the last error, so a run stops in seconds
TEST(HttpBackendTest, AlwaysFailingServerOpensTheBreaker) {
  fake::Server s;
  s.fault = [&](const httplib::Request& q, httplib::Response& r) {
    if (q.path != "/v1/completions") return false;
    r.status = 500;
    r.set_content("{\"error\":\"overloaded\"}", "application/json");
    return true;
  };
  HttpOptions o = fast({s.url()}, 2, 1);
  o.breaker_after = 8;
  o.rest_after = 1000;  // no rests: the breaker alone
  HttpPool pool(o);
  ServerTokenizer ts(pool, "fake-model");
  HttpBackend b(pool, api(), &ts);
  const RecordPrompt p = record_prompt(s);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<ScoreRequest> reqs(64, ScoreRequest{p.tokens, p.answer});
  const std::vector<ScoreResult> out = b.score(reqs);
  const double s_taken = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int not_sent = 0;
  for (const ScoreResult& r : out) {
    EXPECT_NE(r.error, "");
    not_sent += r.error.find("not sent: the last 8 requests all failed, the last with: HTTP 500") !=
                std::string::npos;
  }
  EXPECT_GT(not_sent, 32) << out.back().error;
  EXPECT_LT(s_taken, 10.0);
}

// Nothing listens at the URL: one attempt, an error that says so and how long it took
TEST(HttpBackendTest, ConnectionRefusedFailsFast) {
  int port = 0;
  {  // a port that was free a moment ago: bound, read, closed (nothing listens)
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port = ntohs(a.sin_port);
    ::close(fd);
  }
  HttpPool pool(fast({"http://127.0.0.1:" + std::to_string(port)}, 2, 4));
  const auto t0 = std::chrono::steady_clock::now();
  const HttpReply r = pool.post("/v1/completions", "{}", [](const std::string&) {});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.attempts, 1) << r.error;
  EXPECT_NE(r.error.find("no reply from http://127.0.0.1:" + std::to_string(port)), std::string::npos)
      << r.error;
  EXPECT_NE(r.error.find("after 1 attempt over"), std::string::npos) << r.error;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  ServerTokenizer ts(pool, "fake-model");
  std::string err;
  try {
    ts.encode("a");
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("check that the server is up"), std::string::npos) << err;
}

TEST(HttpBackendTest, ServerErrorsAreRetriedUntilSuccess) {
  fake::Server s;
  std::atomic<int> n{0};
  s.fault = [&](const httplib::Request& q, httplib::Response& r) {
    if (q.path != "/v1/completions" || n++ >= 2) return false;
    r.status = 500;
    r.set_content("{\"error\":\"overloaded\"}", "application/json");
    return true;
  };
  HttpPool pool(fast({s.url()}));
  ServerTokenizer ts(pool, "fake-model");
  HttpBackend b(pool, api(), &ts);
  const RecordPrompt p = record_prompt(s);
  const ScoreResult r = b.score({{p.tokens, p.answer}})[0];
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.top1, p.answer);
  EXPECT_EQ(s.completions.load(), 3);

  // a failure that outlasts the retries is an error (journaled, retried on resume), not an answer
  n = -100;
  const ScoreResult e = b.score({{p.tokens, p.answer}})[0];
  EXPECT_NE(e.error.find("HTTP 500"), std::string::npos) << e.error;
  EXPECT_NE(e.error.find("4 attempts"), std::string::npos) << e.error;
  EXPECT_EQ(e.top1, -1);
}

TEST(HttpBackendTest, HonoursRetryAfterOn429) {
  fake::Server s;
  std::atomic<int> n{0};
  s.fault = [&](const httplib::Request& q, httplib::Response& r) {
    if (q.path != "/v1/completions" || n++ >= 1) return false;
    r.status = 429;
    r.set_header("Retry-After", "1");
    r.set_content("{\"error\":\"rate limited\"}", "application/json");
    return true;
  };
  HttpPool pool(fast({s.url()}));
  ServerTokenizer ts(pool, "fake-model");
  HttpBackend b(pool, api(), &ts);
  const RecordPrompt p = record_prompt(s);
  const auto t0 = Clock::now();
  const ScoreResult r = b.score({{p.tokens, p.answer}})[0];
  const double waited = seconds_since(t0);
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.top1, p.answer);
  EXPECT_GE(waited, 1.0);  // the server asked for one second; the backoff alone would be 10-50 ms
  EXPECT_LT(waited, 3.0);
}

TEST(HttpBackendTest, SlowRepliesTimeOutAndAreRetried) {
  fake::Server s;
  std::atomic<int> n{0};
  std::atomic<bool> always{false};
  s.fault = [&](const httplib::Request& q, httplib::Response&) {
    if (q.path == "/v1/completions" && (always || n++ == 0))
      std::this_thread::sleep_for(std::chrono::milliseconds(700));
    return false;  // then answer normally (too late for the client)
  };
  HttpOptions o = fast({s.url()}, 0.25, 2);
  HttpPool pool(o);
  ServerTokenizer ts(pool, "fake-model");
  HttpBackend b(pool, api(), &ts);
  const RecordPrompt p = record_prompt(s);
  auto t0 = Clock::now();
  const ScoreResult r = b.score({{p.tokens, p.answer}})[0];
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.top1, p.answer);
  EXPECT_LT(seconds_since(t0), 0.65);  // cut at the timeout, not after the slow reply

  always = true;
  t0 = Clock::now();
  const ScoreResult e = b.score({{p.tokens, p.answer}})[0];
  EXPECT_NE(e.error.find("timeout"), std::string::npos) << e.error;
  EXPECT_LT(seconds_since(t0), 1.5);
}

TEST(HttpBackendTest, MalformedTruncatedAndCutRepliesAreRetried) {
  fake::Server s;
  std::atomic<int> n{0};
  std::atomic<bool> always{false};
  s.fault = [&](const httplib::Request& q, httplib::Response& r) {
    if (q.path != "/v1/completions") return false;
    const int k = always ? 0 : n++;
    if (k == 0) {
      r.set_content("{not json", "application/json");  // malformed
    } else if (k == 1) {
      r.set_content(R"({"choices":[{"text":" one","logprobs":{"tok)", "application/json");  // truncated JSON
    } else if (k == 2) {  // the connection dies mid-body: 100 of the announced 1000 bytes
      r.set_content_provider(1000, "application/json", [](size_t, size_t, httplib::DataSink& sink) {
        const std::string part(100, ' ');
        sink.write(part.data(), part.size());
        return false;
      });
    } else {
      return false;
    }
    return true;
  };
  HttpPool pool(fast({s.url()}, 2, 4));
  ServerTokenizer ts(pool, "fake-model");
  HttpBackend b(pool, api(), &ts);
  const RecordPrompt p = record_prompt(s);
  const ScoreResult r = b.score({{p.tokens, p.answer}})[0];
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.top1, p.answer);
  EXPECT_EQ(s.completions.load(), 4);

  always = true;
  const ScoreResult e = b.score({{p.tokens, p.answer}})[0];
  EXPECT_NE(e.error.find("unusable reply"), std::string::npos) << e.error;
  EXPECT_EQ(e.top1, -1);
}

TEST(HttpBackendTest, OverLongPromptIsRefusedBeforeSending) {
  fake::Server s;
  s.max_model_len = 24;  // listed in /v1/models, as vLLM does
  HttpPool pool(fast({s.url()}));
  ServerTokenizer ts(pool, "fake-model");
  HttpBackend b(pool, api(), &ts);
  EXPECT_EQ(b.context_length(), 24);
  const RecordPrompt longp = record_prompt(s, 4);
  ASSERT_GT(longp.tokens.size(), 24u);
  const ScoreResult r = b.score({{longp.tokens, longp.answer}})[0];
  EXPECT_NE(r.error.find("exceeds the server's context of 24"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("never truncated"), std::string::npos) << r.error;
  EXPECT_EQ(s.completions.load(), 0);  // the server never saw it
  EXPECT_EQ(s.max_prompt_seen.load(), 0);
}

TEST(HttpBackendTest, DoubleBosIsRefused) {
  fake::Server s;
  HttpPool pool(fast({s.url()}));
  ServerTokenizer ts(pool, "fake-model");
  HttpBackend b(pool, api(), &ts);
  RecordPrompt p = record_prompt(s);
  std::vector<int> twice = p.tokens;
  twice.insert(twice.begin(), fake::kBos);
  const ScoreResult r = b.score({{twice, p.answer}})[0];
  EXPECT_NE(r.error.find("double BOS"), std::string::npos) << r.error;

  // text prompts: the server adds BOS itself, so a text that starts with the BOS text is refused
  OpenAIOptions o = api();
  o.prompt = PromptForm::Text;
  HttpBackend bt(pool, o, &ts);
  std::vector<int> bos_text{fake::kBos};
  for (int id : s.tok.encode("<s>alpha")) bos_text.push_back(id);
  const ScoreResult rt = bt.score({{bos_text, p.answer}})[0];
  EXPECT_NE(rt.error.find("double BOS"), std::string::npos) << rt.error;
  EXPECT_EQ(s.completions.load(), 0);
  // and a plain text prompt works, its count verified against the server's (BOS included)
  const ScoreResult ok = bt.score({{p.tokens, p.answer}})[0];
  EXPECT_EQ(ok.error, "");
  EXPECT_EQ(ok.top1, p.answer);
}

TEST(HttpBackendTest, RequestsSpreadOverEndpointsAndAFailingOneRests) {
  fake::Server a, c;
  c.fault = [](const httplib::Request& q, httplib::Response& r) {
    if (q.path != "/v1/completions") return false;
    r.status = 503;
    return true;
  };
  HttpOptions o = fast({a.url(), c.url()});
  o.rest_after = 2;
  o.rest_s = 30;  // long enough that the test never sees it back
  HttpPool pool(o);
  ServerTokenizer ts(pool, "fake-model");
  HttpBackend b(pool, api(), &ts);
  const RecordPrompt p = record_prompt(a);
  // the same ids mean the same text on both fakes only if both saw the words: tokenize there too
  c.tok.encode("\nalpha: one\nbeta: two\nalpha:");
  std::vector<ScoreRequest> batch(60, ScoreRequest{p.tokens, p.answer});
  const std::vector<ScoreResult> r = b.score(batch);
  for (const ScoreResult& x : r) EXPECT_EQ(x.error, "");
  EXPECT_LE(c.completions.load(), 2 + 8);  // rested after 2 failures (a few more were already in flight)
  EXPECT_GE(a.completions.load(), 60);
  const std::vector<HttpEndpointStats> st = pool.stats();
  EXPECT_GE(st[1].rests, 1);
  EXPECT_EQ(st[0].failures, 0);

  // both healthy: the work is spread
  fake::Server d, e;
  HttpPool pool2(fast({d.url(), e.url()}));
  OpenAIOptions o2 = api();
  o2.bos_id = fake::kBos;
  HttpBackend b2(pool2, o2, nullptr);  // token ids in, token ids out (vLLM's token_id:N)
  const std::vector<ScoreResult> r2 =
      b2.score(std::vector<ScoreRequest>(60, ScoreRequest{p.tokens, p.answer}));
  for (const ScoreResult& x : r2) EXPECT_EQ(x.error, "");
  EXPECT_GE(d.completions.load(), 20);
  EXPECT_GE(e.completions.load(), 20);
}

TEST(HttpBackendTest, ApiKeyIsSentButScrubbedFromErrors) {
  const std::string key = "sk-test-SECRET-4242";
  ::setenv("PHASESCOPE_TEST_KEY", key.c_str(), 1);
  fake::Server s;
  s.fault = [](const httplib::Request& q, httplib::Response& r) {
    if (q.path != "/v1/completions") return false;
    r.status = 401;  // a server that echoes the header it refused
    r.set_content("{\"error\":\"bad key " + q.get_header_value("Authorization") + "\"}", "application/json");
    return true;
  };
  HttpOptions o = fast({s.url()});
  o.api_key_env = "PHASESCOPE_TEST_KEY";
  HttpPool pool(o);
  ServerTokenizer ts(pool, "fake-model");
  HttpBackend b(pool, api(), &ts);
  const RecordPrompt p = record_prompt(s);
  const ScoreResult r = b.score({{p.tokens, p.answer}})[0];
  EXPECT_NE(r.error.find("HTTP 401"), std::string::npos) << r.error;
  EXPECT_EQ(r.error.find(key), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("***"), std::string::npos) << r.error;
  EXPECT_EQ(s.completions.load(), 1);  // 401 is not retried
  EXPECT_EQ(pool.describe().find(key), std::string::npos);
  EXPECT_EQ(b.describe().find(key), std::string::npos);
  std::lock_guard<std::mutex> g(s.mu);
  ASSERT_FALSE(s.auth.empty());
  EXPECT_EQ(s.auth.back(), "Bearer " + key);
}

TEST(ServerTokenizerTest, LlamaAndVllmShapes) {
  fake::Server s;
  HttpPool pool(fast({s.url()}));
  ServerTokenizer vllm(pool, "fake-model");  // auto: the fake answers {prompt} with a count, as vLLM does
  ServerTokenizer llama(pool, "fake-model", TokenizeFlavor::Llama);
  const std::string text = "hello world: 123\n";
  const std::vector<int> t = vllm.encode(text);
  EXPECT_EQ(vllm.flavor(), TokenizeFlavor::Vllm);
  EXPECT_EQ(t, llama.encode(text));
  EXPECT_EQ(t.size(), 5u);  // "hello", " world", ":", " 123", "\n", and no BOS
  EXPECT_NE(t[0], fake::kBos);
  EXPECT_EQ(vllm.bos_id(), fake::kBos);
  EXPECT_EQ(llama.bos_id(), fake::kBos);
  EXPECT_EQ(vllm.decode(t), text);
  EXPECT_EQ(llama.decode(t), text);
  EXPECT_EQ(vllm.encode_many({"a b", "c"}),
            (std::vector<std::vector<int>>{llama.encode("a b"), llama.encode("c")}));
}

TEST(HttpBackendTest, ChatCompletionsMeasureTheTemplateOffset) {
  fake::Server s;
  const int answer = s.tok.encode(" one")[0];
  s.model = [answer](const std::vector<int>&) { return fake::Dist{{answer, -0.05}, {fake::kBos, -3.5}}; };
  HttpPool pool(fast({s.url()}));
  ServerTokenizer ts(pool, "fake-model");
  OpenAIOptions o = api();
  o.api = ApiKind::Chat;
  HttpBackend b(pool, o, &ts);
  const auto [offset, total] = b.chat_overhead();
  EXPECT_EQ(offset, 1 + int64_t(s.tok.encode("<|user|>\n").size()));
  EXPECT_EQ(total, 1 + int64_t(s.tok.encode("<|user|>\n\n<|assistant|>\n").size()));
  const RecordPrompt p = record_prompt(s);
  const ScoreResult r = b.score({{p.tokens, p.answer}})[0];
  EXPECT_EQ(r.error, "");  // usage.prompt_tokens = content + template, as measured
  EXPECT_EQ(r.top1, p.answer);
}

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
  std::atomic<bool> flaky{true};
  std::atomic<int> n{0};
  s.fault = [&](const httplib::Request& q, httplib::Response& r) {
    if (q.path != "/v1/completions") return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (flaky && n++ % 5 == 2) {  // the first run: some requests fail for good (no retries)
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
