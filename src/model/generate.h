// generate.h — greedy generation from a phasescope model, with the KV cache (prefill once, then one
// cached decode step per token: model.h DecoderImpl::prefill / decode) or without it (the whole forward
// over the growing sequence each step: the reference). Both give the same tokens; the timings show what
// the cache buys. Positions 0..: the prompt starts the sequence.
// Not here: sampling, stop strings, batching of requests (serve/engine.h).
#pragma once
#include <cstdint>
#include <vector>

#include "model/model.h"

namespace phasescope {

struct GenerateResult {
  std::vector<int> tokens;       // the generated tokens (max_tokens of them)
  std::vector<double> logprobs;  // log-probability of each under the model
  double prefill_ms = 0;         // the prompt (cached) or the first step (uncached)
  double per_token_ms = 0;       // mean time of each later step
  bool cached = false;
};

// Throws Error when the prompt is empty, max_tokens < 1, or (cached) the model has no decode path.
GenerateResult generate_greedy(DecoderImpl& model, const std::vector<int>& prompt, int max_tokens,
                               bool cached);

}  // namespace phasescope
