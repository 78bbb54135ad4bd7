// model.h — the Qwen3-style decoder: token embedding, n_layers x [pre-RMSNorm -> attention (any
// kind of the zoo, chosen per layer) -> residual; pre-RMSNorm -> SwiGLU MLP -> residual], final
// RMSNorm, unembedding (tied to the embedding or its own matrix). No biases, fp32 by default.
// Shapes: tokens [B, T] int64 at absolute positions pos0..pos0+T-1; hidden [B, T, d]; logits [B, T, V].
// Not here: training (train/), checkpoint files (model/checkpoint.h), evaluation (eval/).
#pragma once
#include <torch/torch.h>

#include <vector>

#include "attention/attention.h"
#include "model/config.h"

namespace phasescope {

class DecoderImpl : public torch::nn::Module {
 public:
  explicit DecoderImpl(const ModelConfig& cfg);

  torch::Tensor forward(const torch::Tensor& tokens, int64_t pos0 = 0);  // logits [B, T, V]
  // final-normed [B, T, d]; traces (optional): one AttnTrace per layer, filled (explain/, tests)
  torch::Tensor hidden(const torch::Tensor& tokens, int64_t pos0 = 0,
                       std::vector<AttnTrace>* traces = nullptr);
  torch::Tensor unembed(const torch::Tensor& h);  // [..., d] -> [..., V]
  const torch::Tensor& unembed_weight() const;    // [V, d]: the embedding when tied, else the head
  // hidden() at selected rows only ([N] int64, flat b * T + t) -> [N, d]: every layer but the last
  // runs on all positions, the last computes queries, attention, MLP and the final norm for the rows.
  torch::Tensor hidden_rows(const torch::Tensor& tokens, const torch::Tensor& rows, int64_t pos0 = 0);

  // Decode with a KV cache (attention.h AttnCache, one per layer): prefill the prompt tokens [B, T]
  // (positions 0..T-1; returns logits [B, T, V]), then decode one token per sequence [B, 1] at a time
  // (returns logits [B, 1, V]), equal to forward over the whole sequence at its last position up to
  // float summation order. Needs decoder_can_decode(config()).
  torch::Tensor prefill(const torch::Tensor& tokens, std::vector<AttnCache>* caches);
  torch::Tensor decode(const torch::Tensor& tokens, std::vector<AttnCache>* caches);
  // One decode step for sequences of different lengths: tokens [B, 1], caches[b] the per-layer caches of
  // sequence b (each from its own prefill, batch 1). Embedding, norms, MLP and unembedding run batched;
  // each layer's attention runs per sequence over that sequence's cache. Logits [B, 1, V], row b equal to
  // decode(tokens[b], caches[b]). A finished sequence's cache is freed by dropping its vector.
  torch::Tensor decode_ragged(const torch::Tensor& tokens,
                              const std::vector<std::vector<AttnCache>*>& caches);

  const ModelConfig& config() const { return cfg_; }
  Attention& attention(int layer) { return attn_[size_t(layer)]; }

 private:
  torch::Tensor attn_input(size_t layer, const torch::Tensor& h);  // RMSNorm(h) (+ token shift) [B, T, d]
  torch::Tensor mlp_residual(size_t layer,
                             const torch::Tensor& h);  // h + SwiGLU(RMSNorm(h)); h when mlp_hidden = 0

  ModelConfig cfg_;
  torch::Tensor embed_;                              // [V, d]
  torch::Tensor lm_head_;                            // [V, d] (untied only)
  torch::Tensor final_norm_;                         // [d]
  std::vector<Attention> attn_;                      // [n_layers]
  std::vector<torch::Tensor> attn_norm_, mlp_norm_;  // [n_layers] x [d]
  std::vector<torch::Tensor> shift_;                 // [n_layers] x [token_shift, d] (token_shift > 0 only)
  std::vector<torch::Tensor> w_gate_, w_up_;         // [n_layers] x [mlp_hidden, d]
  std::vector<torch::Tensor> w_down_;                // [n_layers] x [d, mlp_hidden]
};
TORCH_MODULE(Decoder);

// Every layer has a decode path (every attention kind does) and there is no token shift.
bool decoder_can_decode(const ModelConfig& cfg);

// sum_{k=1..K} c[k-1] * x[:, t-k, :] (zero where t - k < 0). x [B, T, d], c [K, d] -> [B, T, d].
torch::Tensor token_shift_apply(const torch::Tensor& x, const torch::Tensor& c);

// Mean cross-entropy over positions whose target is >= 0. logits [B, T, V], targets [B, T].
torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets);

// The same mean cross-entropy without the dense logits: only the positions whose target is >= 0
// (rows = flat b * T + t) go through the last layer's query side and the unembedding
// (hidden_rows), so a task scored at 17 of 256 positions (lookup) skips ~93% of that work. Where the
// scored logits would pass 64 MB (a language model's every-token loss), the unembedding and the loss run
// chunked without keeping the logits (linear_cross_entropy.h).
// Equal to lm_loss(model.forward(tokens), targets) up to float summation order (tested).
torch::Tensor lm_loss_scored(DecoderImpl& model, const torch::Tensor& tokens, const torch::Tensor& targets);

// Parameter count and a one-line description, e.g. "2 layers [chunked W8/S8, chunked W8/S8], d=128, 0.3M
// params".
std::string model_describe(DecoderImpl& model);

}  // namespace phasescope
