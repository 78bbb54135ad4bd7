// gate_penalty.h — the static-gate entropy bonus (issue 14, candidate 4): the paper finds phase
// specialization exactly where a compressor's gates concentrate statically (on the same offsets in every
// window). The penalty discourages that concentration and leaves per-window, content-driven gating free:
// for a gate alpha [B, N, W, Hkv, 1 or D] (softmax over the W offsets of each window), E[alpha] is its
// mean over the batch's windows (and channels), one distribution over W per KV head, and
//   penalty = mean over the gates and KV heads of 1 - exp(H(E[alpha])) / W   (0 = uniform on average,
//   1 - 1/W = every window puts all its weight on one offset).
// exp(H(E[alpha])) is explain's static concentration (explain/measures.h gate_static_concentration),
// here differentiable. Not here: the trainer's use (train/trainer.cpp adds lambda x penalty).
#pragma once
#include <torch/torch.h>

#include <vector>

#include "model/model.h"

namespace phasescope {

// exp(H(E[alpha])) per KV head: alpha [B, N, W, Hkv, 1 or D] -> [Hkv], in [1, W].
torch::Tensor gate_static_concentration_t(const torch::Tensor& alpha);

// The penalty above over every gate in `alphas` (each [B, N, W, Hkv, 1 or D]); 0 when there is none.
torch::Tensor gate_entropy_penalty(const std::vector<torch::Tensor>& alphas);

// Collects every chunked gate the model's forward makes while alive (AttentionImpl::set_gate_hook on each
// layer), and removes the hooks when destroyed.
class GateCollector {
 public:
  explicit GateCollector(DecoderImpl& model);
  ~GateCollector();
  GateCollector(const GateCollector&) = delete;
  GateCollector& operator=(const GateCollector&) = delete;
  const std::vector<torch::Tensor>& alphas() const { return alphas_; }

 private:
  DecoderImpl& model_;
  std::vector<torch::Tensor> alphas_;
};

}  // namespace phasescope
