// generate.cpp — see generate.h.
#include "model/generate.h"

#include <chrono>

#include "core/check.h"

namespace phasescope {

GenerateResult generate_greedy(DecoderImpl& model, const std::vector<int>& prompt, int max_tokens,
                               bool cached) {
  if (prompt.empty())
    fail("generate", "the prompt is empty", "give at least one token (e.g. --prompt \"bos k1 n1 k1\")");
  if (max_tokens < 1) fail("generate", "max_tokens must be at least 1", "pass --max-tokens 16");
  if (cached && !decoder_can_decode(model.config()))
    fail("generate", "this model has a layer without a decode path yet (DeepSeek kinds, or token shift)",
         "pass --no-cache to generate with the whole forward each step");
  torch::NoGradGuard ng;
  using Clock = std::chrono::steady_clock;
  GenerateResult r;
  r.cached = cached;
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  std::vector<AttnCache> caches;
  double later_ms = 0;
  auto pick = [&](const torch::Tensor& last_logits) {  // [V] -> the greedy token, its log-prob
    auto lp = torch::log_softmax(last_logits.to(torch::kFloat64), -1);
    const int64_t tok = lp.argmax().item<int64_t>();
    r.tokens.push_back(int(tok));
    r.logprobs.push_back(lp[tok].item<double>());
    seq.push_back(tok);
  };
  for (int i = 0; i < max_tokens; ++i) {
    const auto t0 = Clock::now();
    torch::Tensor logits;
    if (!cached) {
      logits = model.forward(torch::tensor(seq, torch::kInt64).unsqueeze(0));  // [1, T, V]
    } else if (i == 0) {
      logits = model.prefill(torch::tensor(seq, torch::kInt64).unsqueeze(0), &caches);
    } else {
      logits = model.decode(torch::full({1, 1}, seq.back(), torch::kInt64), &caches);  // [1, 1, V]
    }
    pick(logits[0][logits.size(1) - 1]);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (i == 0)
      r.prefill_ms = ms;
    else
      later_ms += ms;
  }
  r.per_token_ms = max_tokens > 1 ? later_ms / (max_tokens - 1) : 0;
  return r;
}

}  // namespace phasescope
