// http_testing.h — what the HTTP tests share (http_client_test, probe_http_test): pool options with fast
// retries, backend options for the fake server's model, and a small record prompt the fake's induction
// "model" answers. Header-only; include after gtest and fake_openai_server.h.
#pragma once
#include <string>
#include <vector>

#include "fake_openai_server.h"
#include "http/http_pool.h"
#include "http/openai_client.h"

namespace phasescope {
namespace testhttp {

// Fast retries for tests: backoff of 10-50 ms, a short rest.
inline HttpOptions fast(const std::vector<std::string>& urls, double timeout_s = 2, int retries = 3) {
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

inline OpenAIOptions api(const std::string& model = "fake-model") {
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
inline RecordPrompt record_prompt(fake::Server& s, int extra_records = 0) {
  RecordPrompt p;
  std::string text = "\nalpha: one\nbeta: two\n";
  for (int i = 0; i < extra_records; ++i) text += "gamma: three\n";
  text += "alpha:";
  p.tokens.push_back(fake::kBos);
  for (int id : s.tok.encode(text)) p.tokens.push_back(id);
  p.answer = s.tok.encode(" one")[0];
  return p;
}

}  // namespace testhttp
}  // namespace phasescope
