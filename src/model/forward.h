// forward.h — the one forward pass every scorer of a checkpoint shares: the in-process evaluation backend
// (eval/model_backend.h), the server (serve/engine.h) and the benchmarks, so a prompt scored in process
// and over HTTP goes through the same operations in the same order. Prompts of different lengths share
// one batch, right-padded (the decoder is causal, so padding after a prompt never changes the logits at
// the prompt's last position).
// Not here: loading a checkpoint (model/load.h), scoring rules or any phase logic (eval/).
#pragma once
#include <torch/torch.h>

#include <vector>

#include "model/model.h"

namespace phasescope {

// The prompts right-padded into one batch tokens [B, T] (T = the longest prompt), one forward, the
// final-normed hidden state at each prompt's last token [B, d], unembedded and log-softmaxed in fp32:
// returns [B, V] natural-log probabilities of the next token. `hidden`, when given, receives the
// final-normed states of every position [B, T, d] (rows past a prompt's end are padding). Throws Error
// for an empty prompt or a token id outside the vocabulary. The caller holds a torch::NoGradGuard.
torch::Tensor model_last_logprobs(DecoderImpl& model, const std::vector<const std::vector<int>*>& prompts,
                                  torch::Tensor* hidden = nullptr);

// Teacher-forced log-probabilities of each prompt's own tokens: out[i][t] = log p(prompt_i[t + 1] | tokens
// 0..t), t = 0 .. len_i - 2, from the same right-padded batch and forward. For losses over a whole
// sequence (the copy loss of eval/copy_loss.h); the caller holds a torch::NoGradGuard.
std::vector<std::vector<double>> model_next_token_logprobs(
    DecoderImpl& model, const std::vector<const std::vector<int>*>& prompts);

}  // namespace phasescope
