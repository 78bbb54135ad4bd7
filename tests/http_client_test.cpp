// http_client_test.cpp — the HTTP client and the server tokenizer against a fake OpenAI-compatible server
// on loopback (fake_openai_server.h):
//   positions: usage.prompt_tokens is checked (a server that counts one more refuses the sample), an
//   over-long prompt is refused before sending (the server never sees it), two BOS are refused;
//   faults: 500s then success, 429 with Retry-After (the wait is measured), replies slower than the
//   timeout, malformed JSON, truncated JSON and a connection cut mid-body are all retried; a failure
//   that outlasts the retries is an error, never an answer;
//   endpoints: requests spread over two servers, a failing one is rested; the API key is sent as a
//   bearer token and appears in no error, journal or report; chat completions measure the template.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "core/check.h"
#include "fake_openai_server.h"
#include "http/http_pool.h"
#include "http/openai_client.h"
#include "http/server_tokenizer.h"
#include "http_testing.h"
#include "testing.h"

namespace phasescope {
namespace {

using testutil::Clock;
using testutil::seconds_since;

using testhttp::api;
using testhttp::fast;
using testhttp::record_prompt;
using testhttp::RecordPrompt;

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
  const double s_taken = seconds_since(t0);
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
  EXPECT_LT(seconds_since(t0), 2.0);
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

}  // namespace
}  // namespace phasescope
