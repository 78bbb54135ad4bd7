// serve_test.cpp — `phasescope serve` over HTTP on a tiny untrained checkpoint: every endpoint and its
// reply shape (completions with text and token ids, greedy and seeded sampling, stop, logprobs, echo with
// prompt log-probs, chat, models, tokenize/detokenize in the llama-server and vLLM shapes, health), every
// refusal with its status and OpenAI error object, the token-name codec's exact round trips, batching of
// concurrent requests (and that a right-padded batch answers as the prompts one by one), and that neither a
// stalled client nor a long generation holds others back. Slow and hostile connections, start-up refusals
// and shutdown: serve_connections_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "core/check.h"
#include "data/tasks.h"
#include "serve/text_codec.h"
#include "serve_testing.h"

namespace phasescope {
namespace {

namespace ts = testing_serve;
using json = nlohmann::json;
using testutil::Clock;
using testutil::ms_since;

// One server on the tiny checkpoint for the endpoint tests (built once per binary).
class Serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = ts::tiny_checkpoint("serve");
    server_ = new Server(ts::local_options(dir_));
  }
  static void TearDownTestSuite() {
    delete server_;
    std::filesystem::remove_all(dir_);
  }
  static int port() { return server_->port(); }
  static Vocab vocab() { return task_vocab(ts::tiny_preset().task); }

  static std::string dir_;
  static Server* server_;
};
std::string Serve::dir_;
Server* Serve::server_ = nullptr;

// The status, and an OpenAI error object with a message, the given type, param and code.
void expect_error(const ts::Reply& r, int status, const std::string& param, const std::string& code) {
  EXPECT_EQ(r.status, status) << r.raw;
  ASSERT_TRUE(r.body.is_object() && r.body.contains("error")) << r.raw;
  const json& e = r.body["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.raw;
  EXPECT_EQ(e["type"], status == 404 ? "not_found_error" : "invalid_request_error") << r.raw;
  if (param.empty()) {
    EXPECT_TRUE(e["param"].is_null()) << r.raw;
  } else {
    EXPECT_EQ(e["param"], param) << r.raw;
  }
  EXPECT_EQ(e["code"], code) << r.raw;
}

// ---- the codec

TEST(TextCodec, RoundTripsExactlyBothWays) {
  const Vocab v = task_vocab(ts::tiny_preset().task);
  std::vector<int> all;
  for (int id = 0; id < v.size(); ++id) all.push_back(id);
  const std::string text = text_decode(v, all);
  std::vector<int> back;
  std::string err;
  ASSERT_TRUE(text_encode(v, text, &back, &err)) << err;
  EXPECT_EQ(back, all);
  EXPECT_EQ(text_decode(v, back), text);
  EXPECT_EQ(text.substr(0, 20), "bos f0 f1 f2 f3 f4 f");
  // whitespace runs are accepted; the canonical form has single spaces
  ASSERT_TRUE(text_encode(v, "  bos\tk17 \n n3  ", &back, &err));
  EXPECT_EQ(back, (std::vector<int>{v.bos(), v.key(17), v.name(3)}));
  EXPECT_EQ(text_decode(v, back), "bos k17 n3");
  // pieces concatenate to the text
  std::string pieces;
  for (size_t i = 0; i < back.size(); ++i) pieces += text_piece(v, back[i], i == 0);
  EXPECT_EQ(pieces, "bos k17 n3");
  // not names: refused with the word and what is accepted
  for (const char* bad : {"hello", "k128", "k017", "n-1", "f16", "b256", "K1", "bos,", "k"}) {
    EXPECT_FALSE(text_encode(v, std::string("bos ") + bad, &back, &err)) << bad;
    EXPECT_NE(err.find(std::string("'") + bad + "'"), std::string::npos) << err;
    EXPECT_NE(err.find("k0..k127"), std::string::npos) << err;
  }
  ASSERT_TRUE(text_encode(v, "   ", &back, &err));
  EXPECT_TRUE(back.empty());
}

// ---- endpoints

TEST_F(Serve, HealthAndModels) {
  const ts::Reply h = ts::get(port(), "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.body, json::parse(R"({"status":"ok"})"));
  const ts::Reply m = ts::get(port(), "/v1/models");
  ASSERT_EQ(m.status, 200) << m.raw;
  EXPECT_EQ(m.body["object"], "list");
  ASSERT_EQ(m.body["data"].size(), 1u);
  EXPECT_EQ(m.body["data"][0]["id"], "tiny-w8s8");
  EXPECT_EQ(m.body["data"][0]["object"], "model");
  EXPECT_EQ(m.body["data"][0]["max_model_len"], 128);
}

TEST_F(Serve, CompletionsWithTextAndTokenIdsAgree) {
  const Vocab v = vocab();
  const json by_text = ts::post(port(), "/v1/completions",
                                json{{"prompt", "bos k1 n2 k3 n4 k1"}, {"max_tokens", 4}, {"temperature", 0}})
                           .body;
  const std::vector<int> ids = {v.bos(), v.key(1), v.name(2), v.key(3), v.name(4), v.key(1)};
  const ts::Reply r =
      ts::post(port(), "/v1/completions",
               json{{"model", "tiny-w8s8"}, {"prompt", ids}, {"max_tokens", 4}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& b = r.body;
  EXPECT_EQ(b["object"], "text_completion");
  EXPECT_EQ(b["model"], "tiny-w8s8");
  EXPECT_TRUE(b["id"].is_string() && b["created"].is_number_integer());
  ASSERT_EQ(b["choices"].size(), 1u);
  const json& c = b["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_TRUE(c["logprobs"].is_null());
  const std::vector<int> gen = c["token_ids"].get<std::vector<int>>();
  ASSERT_EQ(gen.size(), 4u);
  std::string text;
  for (int t : gen) text += text_piece(v, t, false);
  EXPECT_EQ(c["text"], text);  // " n7 k2 ..." continues the prompt's text
  EXPECT_EQ(b["usage"], json::parse(R"({"prompt_tokens":6,"completion_tokens":4,"total_tokens":10})"));
  // the text prompt is the same tokens; greedy decoding is deterministic
  EXPECT_EQ(by_text["choices"][0]["token_ids"], c["token_ids"]);
  EXPECT_EQ(by_text["choices"][0]["text"], c["text"]);
  // several prompts in one request: one choice each, in order, usage summed
  const ts::Reply two = ts::post(port(), "/v1/completions",
                                 json{{"prompt", json::array({ids, std::vector<int>{v.bos(), v.key(9)}})},
                                      {"max_tokens", 4},
                                      {"temperature", 0}});
  ASSERT_EQ(two.status, 200) << two.raw;
  ASSERT_EQ(two.body["choices"].size(), 2u);
  EXPECT_EQ(two.body["choices"][0]["token_ids"], c["token_ids"]);
  EXPECT_EQ(two.body["choices"][1]["index"], 1);
  EXPECT_EQ(two.body["usage"]["prompt_tokens"], 8);
  EXPECT_EQ(two.body["usage"]["completion_tokens"], 8);
  const ts::Reply texts =
      ts::post(port(), "/v1/completions",
               json{{"prompt", {"bos k1 n2 k3 n4 k1", "bos k9"}}, {"max_tokens", 4}, {"temperature", 0}});
  ASSERT_EQ(texts.status, 200) << texts.raw;
  EXPECT_EQ(texts.body["choices"], two.body["choices"]);
}

TEST_F(Serve, LogprobsAndEchoFollowVllm) {
  const Vocab v = vocab();
  const std::vector<int> ids = {v.bos(), v.key(5), v.name(6), v.key(5)};
  const ts::Reply r = ts::post(port(), "/v1/completions",
                               json{{"prompt", ids}, {"max_tokens", 3}, {"temperature", 0}, {"logprobs", 3}});
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& c = r.body["choices"][0];
  const json& lp = c["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 3u);
  ASSERT_EQ(lp["token_logprobs"].size(), 3u);
  ASSERT_EQ(lp["top_logprobs"].size(), 3u);
  ASSERT_EQ(lp["text_offset"].size(), 3u);
  std::string joined;
  for (size_t t = 0; t < 3; ++t) {
    const std::string tok = lp["tokens"][t];
    EXPECT_EQ(lp["text_offset"][t], joined.size());
    joined += tok;
    const json& top = lp["top_logprobs"][t];
    EXPECT_EQ(top.size(), 3u);  // greedy: the chosen token is the best, so k entries
    ASSERT_TRUE(top.contains(tok));
    // greedy: the chosen token has the highest log-prob of the step
    for (auto it = top.begin(); it != top.end(); ++it)
      EXPECT_LE(it.value().get<double>(), top[tok].get<double>());
    EXPECT_EQ(top[tok], lp["token_logprobs"][t]);
    EXPECT_LT(lp["token_logprobs"][t].get<double>(), 0.0);
  }
  EXPECT_EQ(joined, c["text"]);

  // echo: the prompt's tokens first (the first without a log-prob), then the generated ones
  const ts::Reply e =
      ts::post(port(), "/v1/completions",
               json{{"prompt", ids}, {"max_tokens", 3}, {"temperature", 0}, {"logprobs", 2}, {"echo", true}});
  ASSERT_EQ(e.status, 200) << e.raw;
  const json& ec = e.body["choices"][0];
  EXPECT_EQ(ec["text"], "bos k5 n6 k5" + c["text"].get<std::string>());
  const json& el = ec["logprobs"];
  ASSERT_EQ(el["tokens"].size(), 7u);
  EXPECT_EQ(el["tokens"][0], "bos");
  EXPECT_TRUE(el["token_logprobs"][0].is_null());
  EXPECT_TRUE(el["top_logprobs"][0].is_null());
  std::string echoed;
  for (size_t t = 0; t < 7; ++t) {
    EXPECT_EQ(el["text_offset"][t], echoed.size());
    echoed += el["tokens"][t].get<std::string>();
  }
  EXPECT_EQ(echoed, ec["text"]);
  for (size_t t = 0; t < 3; ++t)
    EXPECT_NEAR(el["token_logprobs"][4 + t].get<double>(), lp["token_logprobs"][t].get<double>(), 1e-6);
  // a prompt token's echoed log-prob is the next-token log-prob of the prompt before it
  for (size_t t = 1; t < ids.size(); ++t) {
    const std::vector<int> head(ids.begin(), ids.begin() + long(t));
    const ts::Reply s = ts::post(port(), "/v1/completions",
                                 json{{"prompt", head},
                                      {"max_tokens", 1},
                                      {"temperature", 0},
                                      {"logprobs", 20},
                                      {"return_tokens_as_token_ids", true}});
    const json& top = s.body["choices"][0]["logprobs"]["top_logprobs"][0];
    const std::string key = "token_id:" + std::to_string(ids[t]);
    if (top.contains(key))
      EXPECT_NEAR(top[key].get<double>(), el["token_logprobs"][t].get<double>(), 1e-5) << t;
  }
  // max_tokens 0 with echo: the prompt's log-probs alone (scoring)
  const ts::Reply z = ts::post(port(), "/v1/completions",
                               json{{"prompt", ids}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 0}});
  ASSERT_EQ(z.status, 200) << z.raw;
  EXPECT_EQ(z.body["choices"][0]["text"], "bos k5 n6 k5");
  EXPECT_EQ(z.body["choices"][0]["token_ids"].size(), 0u);
  EXPECT_EQ(z.body["usage"]["completion_tokens"], 0);
  for (size_t t = 1; t < 4; ++t)
    EXPECT_EQ(z.body["choices"][0]["logprobs"]["token_logprobs"][t], el["token_logprobs"][t]);
}

TEST_F(Serve, SeededSamplingIsReproducibleAndNIsHonoured) {
  const json req{{"prompt", "bos k1 n2"}, {"max_tokens", 12}, {"temperature", 1.0}, {"seed", 7}, {"n", 3}};
  const ts::Reply a = ts::post(port(), "/v1/completions", req);
  const ts::Reply b = ts::post(port(), "/v1/completions", req);
  ASSERT_EQ(a.status, 200) << a.raw;
  ASSERT_EQ(a.body["choices"].size(), 3u);
  EXPECT_EQ(a.body["choices"], b.body["choices"]);                                  // same seed, same samples
  EXPECT_NE(a.body["choices"][0]["token_ids"], a.body["choices"][1]["token_ids"]);  // sample j uses seed + j
  json other = req;
  other["seed"] = 8;
  other["n"] = 1;
  const ts::Reply c = ts::post(port(), "/v1/completions", other);
  EXPECT_EQ(c.body["choices"][0]["token_ids"], a.body["choices"][1]["token_ids"]);  // seed 8 = seed 7 + 1
  EXPECT_EQ(a.body["usage"]["completion_tokens"], 36);
  // greedy ignores the seed
  const ts::Reply g1 =
      ts::post(port(), "/v1/completions",
               json{{"prompt", "bos k1"}, {"max_tokens", 5}, {"temperature", 0}, {"seed", 1}});
  const ts::Reply g2 =
      ts::post(port(), "/v1/completions",
               json{{"prompt", "bos k1"}, {"max_tokens", 5}, {"temperature", 0}, {"seed", 2}});
  EXPECT_EQ(g1.body["choices"], g2.body["choices"]);
}

TEST_F(Serve, StopStringsAndStopTokens) {
  const Vocab v = vocab();
  const json base{{"prompt", "bos k1 n2 k3"}, {"max_tokens", 6}, {"temperature", 1.0}, {"seed", 3}};
  const json full = ts::post(port(), "/v1/completions", base).body["choices"][0];
  const std::vector<int> gen = full["token_ids"].get<std::vector<int>>();
  ASSERT_EQ(gen.size(), 6u);
  // find the first generated token whose name does not occur earlier in the text, and stop on it
  size_t k = 0;
  std::string before;
  for (; k < gen.size(); ++k) {
    if (before.find(text_token_name(v, gen[k])) == std::string::npos) break;
    before += text_piece(v, gen[k], false);
  }
  ASSERT_LT(k, gen.size());
  json req = base;
  req["stop"] = text_token_name(v, gen[k]);
  const json cut = ts::post(port(), "/v1/completions", req).body["choices"][0];
  EXPECT_EQ(cut["finish_reason"], "stop");
  EXPECT_EQ(cut["token_ids"].size(), k + 1);  // the token that completed the stop string is reported
  EXPECT_EQ(cut["text"], before + " ");       // the text ends where the stop string begins
  req.erase("stop");
  req["stop_token_ids"] = {gen[k]};
  const json cut2 = ts::post(port(), "/v1/completions", req).body["choices"][0];
  EXPECT_EQ(cut2["finish_reason"], "stop");
  EXPECT_EQ(cut2["token_ids"].size(), k + 1);
  EXPECT_EQ(cut2["text"], before);
}

TEST_F(Serve, ChatUsesTheDocumentedTemplate) {
  // template: BOS, then each message's content tokens; the reply is the generated tokens
  const ts::Reply r = ts::post(
      port(), "/v1/chat/completions",
      json{{"model", "tiny-w8s8"},
           {"messages", {{{"role", "system"}, {"content", "k1 n2"}}, {{"role", "user"}, {"content", "k1"}}}},
           {"max_tokens", 3},
           {"temperature", 0},
           {"logprobs", true},
           {"top_logprobs", 2}});
  ASSERT_EQ(r.status, 200) << r.raw;
  const json same =
      ts::post(port(), "/v1/completions",
               json{{"prompt", "bos k1 n2 k1"}, {"max_tokens", 3}, {"temperature", 0}, {"logprobs", 2}})
          .body["choices"][0];
  const json& c = r.body["choices"][0];
  EXPECT_EQ(r.body["object"], "chat.completion");
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(c["message"]["content"], same["text"].get<std::string>().substr(1));
  EXPECT_EQ(c["token_ids"], same["token_ids"]);
  EXPECT_EQ(c["finish_reason"], "length");
  ASSERT_EQ(c["logprobs"]["content"].size(), 3u);
  for (size_t t = 0; t < 3; ++t) {
    const json& item = c["logprobs"]["content"][t];
    EXPECT_EQ(item["logprob"], same["logprobs"]["token_logprobs"][t]);
    EXPECT_EQ(item["top_logprobs"].size(), 2u);
    EXPECT_TRUE(item["bytes"].is_array());
  }
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 3);
  // content as text parts is the same prompt
  const ts::Reply parts = ts::post(
      port(), "/v1/chat/completions",
      json{{"messages",
            {{{"role", "user"},
              {"content", {{{"type", "text"}, {"text", "k1 n2"}}, {{"type", "text"}, {"text", "k1"}}}}}}},
           {"max_tokens", 3},
           {"temperature", 0}});
  EXPECT_EQ(parts.body["choices"][0]["token_ids"], c["token_ids"]) << parts.raw;
}

TEST_F(Serve, TokenizeAndDetokenizeInBothShapes) {
  const Vocab v = vocab();
  const std::vector<int> ids = {v.bos(), v.key(17), v.name(3), v.filler(2), v.byte(104)};
  // llama-server: {"content"} -> {"tokens"}
  ts::Reply r = ts::post(port(), "/tokenize", json{{"content", "bos k17 n3 f2 b104"}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body, (json{{"tokens", ids}}));
  r = ts::post(port(), "/tokenize",
               json{{"content", "k17 n3"}, {"add_special", true}, {"with_pieces", true}});
  EXPECT_EQ(r.body, (json{{"tokens",
                           {{{"id", v.bos()}, {"piece", "bos"}},
                            {{"id", v.key(17)}, {"piece", " k17"}},
                            {{"id", v.name(3)}, {"piece", " n3"}}}}}))
      << r.raw;
  // vLLM: {"prompt"} -> {"count", "max_model_len", "tokens", "token_strs"}
  r = ts::post(port(), "/tokenize", json{{"model", "tiny-w8s8"}, {"prompt", "bos k17 n3 f2 b104"}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["count"], 5);
  EXPECT_EQ(r.body["max_model_len"], 128);
  EXPECT_EQ(r.body["tokens"], ids);
  EXPECT_TRUE(r.body["token_strs"].is_null());
  r = ts::post(port(), "/tokenize",
               json{{"prompt", "k17"}, {"add_special_tokens", true}, {"return_token_strs", true}});
  EXPECT_EQ(r.body["tokens"], json({v.bos(), v.key(17)}));
  EXPECT_EQ(r.body["token_strs"], json::parse(R"(["bos"," k17"])"));
  r = ts::post(port(), "/tokenize", json{{"messages", {{{"role", "user"}, {"content", "k1 n2"}}}}});
  EXPECT_EQ(r.body["tokens"], json({v.bos(), v.key(1), v.name(2)}));  // the chat template
  // detokenize: both shapes take {"tokens"}; the reply carries "prompt" (vLLM) and "content" (llama-server)
  r = ts::post(port(), "/detokenize", json{{"tokens", ids}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["prompt"], "bos k17 n3 f2 b104");
  EXPECT_EQ(r.body["content"], "bos k17 n3 f2 b104");
  // round trip through both endpoints, every id
  std::vector<int> all;
  for (int id = 0; id < v.size(); ++id) all.push_back(id);
  const std::string text = ts::post(port(), "/detokenize", json{{"tokens", all}}).body["prompt"];
  EXPECT_EQ(ts::post(port(), "/tokenize", json{{"prompt", text}}).body["tokens"], all);
}

TEST_F(Serve, RefusalsAreOpenAiErrorObjectsWithTheRightStatus) {
  const std::string C = "/v1/completions";
  // bad JSON, not an object
  expect_error(ts::post(port(), C, std::string("{\"prompt\": ")), 400, "", "invalid_json");
  expect_error(ts::post(port(), C, std::string("[1, 2]")), 400, "", "invalid_json");
  expect_error(ts::post(port(), "/tokenize", std::string("nope")), 400, "", "invalid_json");
  // fields of the wrong type, unknown fields, values out of range
  expect_error(ts::post(port(), C, json{{"prompt", "bos"}, {"max_tokens", "ten"}}), 400, "max_tokens",
               "invalid_type");
  expect_error(ts::post(port(), C, json{{"prompt", "bos"}, {"max_tokens", 1.5}}), 400, "max_tokens",
               "invalid_type");
  expect_error(ts::post(port(), C, json{{"prompt", "bos"}, {"temperature", "hot"}}), 400, "temperature",
               "invalid_type");
  expect_error(ts::post(port(), C, json{{"prompt", "bos"}, {"echo", 1}}), 400, "echo", "invalid_type");
  expect_error(ts::post(port(), C, json{{"prompt", "bos"}, {"stop", 5}}), 400, "stop", "invalid_type");
  expect_error(ts::post(port(), C, json{{"prompt", 17}}), 400, "prompt", "invalid_type");
  expect_error(ts::post(port(), C, json{{"prompt", {0, "k1"}}}), 400, "prompt", "invalid_type");
  expect_error(ts::post(port(), C, json{{"prompt", "bos"}, {"frobnicate", true}}), 400, "frobnicate",
               "unknown_parameter");
  expect_error(ts::post(port(), C, json{{"prompt", "bos"}, {"logprobs", 21}}), 400, "logprobs",
               "invalid_value");
  expect_error(ts::post(port(), C, json{{"prompt", "bos"}, {"max_tokens", -1}}), 400, "max_tokens",
               "invalid_value");
  expect_error(ts::post(port(), C, json{{"prompt", "bos"}, {"stream", true}}), 400, "stream", "unsupported");
  expect_error(ts::post(port(), C, json{{"max_tokens", 1}}), 400, "prompt", "missing_parameter");
  // prompts the model cannot read
  expect_error(ts::post(port(), C, json{{"prompt", "bos hello"}}), 400, "prompt", "invalid_text");
  expect_error(ts::post(port(), C, json{{"prompt", {0, 9999}}}), 400, "prompt", "invalid_token");
  expect_error(ts::post(port(), C, json{{"prompt", {0, -1}}}), 400, "prompt", "invalid_token");
  expect_error(ts::post(port(), C, json{{"prompt", ""}}), 400, "prompt", "invalid_value");
  // longer than the context: refused, never truncated (prompt alone, and prompt + max_tokens)
  const std::vector<int> long_prompt(129, 0), fits(128, 0);
  const ts::Reply over = ts::post(port(), C, json{{"prompt", long_prompt}, {"max_tokens", 0}});
  expect_error(over, 400, "prompt", "context_length_exceeded");
  EXPECT_NE(over.body["error"]["message"].get<std::string>().find("maximum context length is 128 tokens"),
            std::string::npos);
  expect_error(ts::post(port(), C, json{{"prompt", fits}, {"max_tokens", 1}}), 400, "prompt",
               "context_length_exceeded");
  EXPECT_EQ(ts::post(port(), C, json{{"prompt", fits}, {"max_tokens", 0}, {"echo", true}}).status, 200);
  expect_error(
      ts::post(port(), "/v1/chat/completions",
               json{{"messages", {{{"role", "user"}, {"content", text_decode(vocab(), long_prompt)}}}}}),
      400, "messages", "context_length_exceeded");
  // unknown model: 404 on every endpoint that names one
  expect_error(ts::post(port(), C, json{{"model", "gpt-4"}, {"prompt", "bos"}}), 404, "model",
               "model_not_found");
  expect_error(ts::post(port(), "/v1/chat/completions",
                        json{{"model", "gpt-4"}, {"messages", {{{"role", "user"}, {"content", "k1"}}}}}),
               404, "model", "model_not_found");
  expect_error(ts::post(port(), "/tokenize", json{{"model", "x"}, {"prompt", "bos"}}), 404, "model",
               "model_not_found");
  // chat specifics
  expect_error(ts::post(port(), "/v1/chat/completions", json{{"messages", json::array()}}), 400, "messages",
               "invalid_value");
  expect_error(
      ts::post(port(), "/v1/chat/completions", json{{"messages", {{{"role", "wizard"}, {"content", "k1"}}}}}),
      400, "messages[0].role", "invalid_value");
  expect_error(ts::post(port(), "/v1/chat/completions",
                        json{{"messages", {{{"role", "user"}, {"content", "k1"}}}}, {"top_logprobs", 2}}),
               400, "top_logprobs", "invalid_value");
  // tokenize / detokenize
  expect_error(ts::post(port(), "/tokenize", json{{"text", "bos"}}), 400, "text", "unknown_parameter");
  expect_error(ts::post(port(), "/tokenize", json::object()), 400, "content", "missing_parameter");
  expect_error(ts::post(port(), "/tokenize", json{{"content", "bos"}, {"prompt", "bos"}}), 400, "content",
               "invalid_value");
  expect_error(ts::post(port(), "/detokenize", json{{"tokens", {0, 100000}}}), 400, "tokens",
               "invalid_token");
  expect_error(ts::post(port(), "/detokenize", json{{"tokens", "bos"}}), 400, "tokens", "invalid_type");
  // unknown paths and wrong methods
  expect_error(ts::get(port(), "/v1/embeddings"), 404, "", "not_found");
  const ts::Reply m = ts::get(port(), C);
  EXPECT_EQ(m.status, 405);
  EXPECT_EQ(m.body["error"]["code"], "method_not_allowed");
  // and the server is still fine
  EXPECT_EQ(ts::get(port(), "/health").status, 200);
}

// ---- batching

// hostile bodies: a field nested ~90,000 deep (enough to overflow the stack of a recursive reader) and a
// number beyond double's range (1e400) are 400s, never a crash or a 500; a Range header is ignored, never
// a 206 slice of the JSON reply
TEST_F(Serve, HostileBodiesAreClientErrorsAndTheServerLives) {
  const std::string C = "/v1/completions", nest = std::string(90000, '[') + std::string(90000, ']');
  expect_error(ts::post(port(), C, "{\"model\": " + nest + "}"), 400, "", "invalid_json");
  expect_error(ts::post(port(), C, "{\"prompt\": " + nest + "}"), 400, "", "invalid_json");
  expect_error(ts::post(port(), "/tokenize", "{\"content\": " + nest + "}"), 400, "", "invalid_json");
  const ts::Reply big = ts::post(port(), C, std::string("{\"prompt\": \"bos k3\", \"temperature\": 1e400}"));
  expect_error(big, 400, "", "invalid_json");
  EXPECT_NE(big.raw.find("number overflow"), std::string::npos) << big.raw;
  EXPECT_EQ(ts::get(port(), "/health").status, 200);
  // bodies past 8 MiB and id lists past 16 x max_model_len are refused with what to do
  const ts::Reply huge = ts::post(port(), C, "{\"prompt\": \"" + std::string(9 << 20, 'x') + "\"}");
  expect_error(huge, 413, "", "request_too_large");
  std::vector<int> many(16 * 256 + 1, 0);
  expect_error(ts::post(port(), "/detokenize", json{{"tokens", many}}), 400, "tokens", "too_many_tokens");
  httplib::Client cli("127.0.0.1", port());
  auto res = cli.Post(C.c_str(), httplib::Headers{{"Range", "bytes=0-1"}},
                      R"({"prompt": "bos k3", "max_tokens": 1, "temperature": 0})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_TRUE(json::parse(res->body).contains("choices")) << res->body;
}

TEST(ServeBatching, ConcurrentRequestsShareForwardPassesAndAnswerAsAlone) {
  const std::string dir = ts::tiny_checkpoint("batch");
  ServeOptions o = ts::local_options(dir);
  o.batch_window_ms = 300;  // generous, so 8 threads surely arrive inside one window on a loaded machine
  Server server(o);
  const Vocab v = task_vocab(ts::tiny_preset().task);
  std::vector<json> reqs;
  for (int i = 0; i < 8; ++i)
    reqs.push_back(json{{"prompt", {v.bos(), v.key(i), v.name(i + 1), v.key(i)}},
                        {"max_tokens", 3},
                        {"temperature", 0},
                        {"logprobs", 1}});
  // concurrent
  std::vector<json> together(reqs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reqs.size(); ++i)
    threads.emplace_back([&, i] { together[i] = ts::post(server.port(), "/v1/completions", reqs[i]).body; });
  for (auto& t : threads) t.join();
  const EngineStats st = server.stats();
  std::printf("  8 concurrent requests x 3 tokens: %lld forward passes, largest batch %d\n",
              (long long)st.forwards, st.max_rows);
  EXPECT_GE(st.max_rows, 2);  // how many share a pass depends on thread start-up on a loaded machine
  EXPECT_LT(st.forwards, 24);
  // one by one (a second server with the default 2 ms window, same checkpoint): the same answers
  Server single(ts::local_options(dir));
  for (size_t i = 0; i < reqs.size(); ++i) {
    const json alone = ts::post(single.port(), "/v1/completions", reqs[i]).body;
    EXPECT_EQ(alone["choices"][0]["token_ids"], together[i]["choices"][0]["token_ids"]) << i;
    const json& a = alone["choices"][0]["logprobs"]["token_logprobs"];
    const json& b = together[i]["choices"][0]["logprobs"]["token_logprobs"];
    for (size_t t = 0; t < 3; ++t) EXPECT_NEAR(a[t].get<double>(), b[t].get<double>(), 1e-5);
  }
  server.shutdown();
  std::filesystem::remove_all(dir);
}

// Generation on the KV cache (prefill once, then ragged cached decode steps for sequences of different
// lengths in one batch) returns what the whole-forward reference path returns: the same tokens, greedy
// and seeded sampling, log-probs of generated and echoed prompt tokens within 1e-4.
TEST(ServeKvCache, CachedGenerationEqualsTheWholeForwardPath) {
  const std::string dir = ts::tiny_checkpoint("kvcache");
  ServeOptions oc = ts::local_options(dir), ou = ts::local_options(dir);
  oc.batch_window_ms = 300;  // the three requests share steps: ragged decode over different lengths
  ou.kv_cache = false;
  Server cached(oc), reference(ou);
  const Vocab v = task_vocab(ts::tiny_preset().task);
  std::vector<json> reqs;
  for (int len : {3, 40, 97}) {
    std::vector<int> p = {v.bos()};
    for (int t = 1; t < len; ++t)
      p.push_back(t % 3 == 0 ? v.filler(t % 16) : (t % 2 ? v.key(t % 128) : v.name((7 * t) % 128)));
    reqs.push_back(json{{"prompt", p},
                        {"max_tokens", 12},
                        {"temperature", 0},
                        {"logprobs", 5},
                        {"echo", true},
                        {"return_tokens_as_token_ids", true}});
  }
  reqs.push_back(json{{"prompt", {v.bos(), v.key(3), v.name(4), v.key(3)}},
                      {"max_tokens", 12},
                      {"temperature", 1.0},
                      {"seed", 11},
                      {"logprobs", 0}});
  std::vector<json> got(reqs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reqs.size(); ++i)
    threads.emplace_back([&, i] { got[i] = ts::post(cached.port(), "/v1/completions", reqs[i]).body; });
  for (auto& t : threads) t.join();
  double max_diff = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const json want = ts::post(reference.port(), "/v1/completions", reqs[i]).body["choices"][0];
    const json& have = got[i]["choices"][0];
    EXPECT_EQ(have["token_ids"], want["token_ids"]) << "request " << i;
    const json &a = have["logprobs"]["token_logprobs"], &b = want["logprobs"]["token_logprobs"];
    ASSERT_EQ(a.size(), b.size()) << i;
    for (size_t t = 0; t < a.size(); ++t) {
      if (b[t].is_null()) {
        EXPECT_TRUE(a[t].is_null());
        continue;
      }
      max_diff = std::max(max_diff, std::fabs(a[t].get<double>() - b[t].get<double>()));
    }
    if (reqs[i]["logprobs"] == 5) {  // the generated tokens' top-5 (the last 12 positions)
      const json &ta = have["logprobs"]["top_logprobs"], &tb = want["logprobs"]["top_logprobs"];
      for (size_t t = ta.size() - 12; t < ta.size(); ++t)
        for (auto it = tb[t].begin(); it != tb[t].end(); ++it) {
          ASSERT_TRUE(ta[t].contains(it.key())) << i << " " << t << " " << it.key();
          max_diff = std::max(max_diff, std::fabs(it.value().get<double>() - ta[t][it.key()].get<double>()));
        }
    }
  }
  std::printf("  KV cache vs whole forward: log-probs differ by at most %.3g\n", max_diff);
  EXPECT_LE(max_diff, 1e-4);
  const EngineStats sc = cached.stats(), su = reference.stats();
  EXPECT_TRUE(sc.kv_cache);
  EXPECT_FALSE(su.kv_cache);
  EXPECT_EQ(sc.prefills, 4);
  EXPECT_EQ(sc.cached_steps, 4 * 11);  // every token after the first comes from a cached step
  EXPECT_EQ(su.cached_steps, 0);
  EXPECT_GE(sc.max_rows, 2);
  cached.shutdown();
  reference.shutdown();
  std::filesystem::remove_all(dir);
}

TEST_F(Serve, RightPaddedBatchEqualsPromptsOneByOne) {
  // one request = one forward pass: prompts of lengths 3, 40 and 97 right-padded to 97
  const Vocab v = vocab();
  std::vector<std::vector<int>> prompts;
  for (int len : {3, 40, 97}) {
    std::vector<int> p = {v.bos()};
    for (int t = 1; t < len; ++t)
      p.push_back(t % 3 == 0 ? v.filler(t % 16) : (t % 2 ? v.key(t % 128) : v.name((7 * t) % 128)));
    prompts.push_back(p);
  }
  const json req{{"prompt", prompts},
                 {"max_tokens", 1},
                 {"temperature", 0},
                 {"logprobs", 5},
                 {"return_tokens_as_token_ids", true}};
  const ts::Reply together = ts::post(port(), "/v1/completions", req);
  ASSERT_EQ(together.status, 200) << together.raw;
  double max_diff = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    json one = req;
    one["prompt"] = prompts[i];
    const json alone = ts::post(port(), "/v1/completions", one).body["choices"][0];
    const json& mixed = together.body["choices"][i];
    EXPECT_EQ(alone["token_ids"], mixed["token_ids"]) << "prompt of length " << prompts[i].size();
    const json& ta = alone["logprobs"]["top_logprobs"][0];
    const json& tb = mixed["logprobs"]["top_logprobs"][0];
    ASSERT_EQ(ta.size(), tb.size());
    for (auto it = ta.begin(); it != ta.end(); ++it) {
      ASSERT_TRUE(tb.contains(it.key())) << it.key();
      max_diff = std::max(max_diff, std::fabs(it.value().get<double>() - tb[it.key()].get<double>()));
    }
  }
  std::printf("  padded batch vs one by one: top-5 log-probs differ by at most %.3g\n", max_diff);
  EXPECT_LE(max_diff, 1e-5);
}

// ---- nobody holds others back

TEST_F(Serve, StalledClientsAndLongGenerationsHoldNobodyBack) {
  // three clients stall mid-request; others are answered at once
  std::vector<int> stalled;
  for (int i = 0; i < 3; ++i) stalled.push_back(ts::stalled_connection(port()));
  for (int fd : stalled) ASSERT_GE(fd, 0);
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    const ts::Reply r = ts::post(port(), "/v1/completions",
                                 json{{"prompt", "bos k1"}, {"max_tokens", 1}, {"temperature", 0}});
    EXPECT_EQ(r.status, 200);
    EXPECT_LT(ms_since(t0), 2000.0);
  }
  for (int fd : stalled) ::close(fd);

  // a long generation in flight; short requests that arrive later finish first (they join its batches)
  std::atomic<double> long_done_ms{0};
  const int64_t generated_before = server_->stats().tokens_generated;
  const auto t0 = Clock::now();
  std::thread slow([&] {
    const ts::Reply r = ts::post(port(), "/v1/completions",
                                 json{{"prompt", "bos k2"}, {"max_tokens", 120}, {"temperature", 0}});
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body["usage"]["completion_tokens"], 120);
    long_done_ms = ms_since(t0);
  });
  // the short ones are sent as soon as the long one generates (not after a fixed sleep, which on the
  // KV cache was close to the long one's whole generation time)
  while (server_->stats().tokens_generated == generated_before && ms_since(t0) < 20000)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  std::vector<double> short_ms(3, 0.0);
  std::vector<std::thread> shorts;
  for (int i = 0; i < 3; ++i)
    shorts.emplace_back([&, i] {
      const ts::Reply r = ts::post(port(), "/v1/completions",
                                   json{{"prompt", "bos k3"}, {"max_tokens", 1}, {"temperature", 0}});
      EXPECT_EQ(r.status, 200);
      short_ms[i] = ms_since(t0);
    });
  for (std::thread& th : shorts) th.join();
  const double short_done_ms = *std::max_element(short_ms.begin(), short_ms.end());
  slow.join();
  std::printf("  short requests done at %.0f ms, the 120-token one at %.0f ms\n", short_done_ms,
              long_done_ms.load());
  EXPECT_LT(short_done_ms, long_done_ms.load());
}

}  // namespace
}  // namespace phasescope
