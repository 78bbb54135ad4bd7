// gate_penalty.h — the static-gate entropy bonus: the paper finds phase
// specialization exactly where a compressor's gates concentrate statically (on the same offsets in every
// window). The penalty discourages that concentration and leaves per-window, content-driven gating free:
// for a gate alpha [B, N, W, Hkv, 1 or D] (softmax over the W offsets of each window), E[alpha] is its
// mean over the batch's windows (and channels), one distribution over W per KV head, and
//   penalty = mean over the gates and KV heads of 1 - exp(H(E[alpha])) / W   (0 = uniform on average,
//   1 - 1/W = every window puts all its weight on one offset).
// exp(H(E[alpha])) is explain's static concentration (explain/measures.h gate_static_concentration),
// here differentiable.
// The head-coverage repulsion (the term the paper's idealized model lacks; `phasescope
// theory --coverage` checks it there): each gate's static phase profile g(r) = E[alpha] at the offsets i
// with (o + i) % S = r (o the layer's grid offset), summing to 1; for every pair of gates of one branch
// (key or value; a DeepSeek compressor or its indexer's) in different layers or KV heads, the overlap <g_a,
// g_b> (1/S when both are uniform, 1 when both sit on one phase, 0 on disjoint phases); penalty = the mean
// over those pairs. Not here: the trainer's use (train/trainer.cpp adds lambda x penalty).
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "model/model.h"

namespace phasescope {

// exp(H(E[alpha])) per KV head: alpha [B, N, W, Hkv, 1 or D] -> [Hkv], in [1, W].
torch::Tensor gate_static_concentration_t(const torch::Tensor& alpha);

// The penalty above over every gate in `alphas` (each [B, N, W, Hkv, 1 or D]); 0 when there is none.
torch::Tensor gate_entropy_penalty(const std::vector<torch::Tensor>& alphas);

// One collected gate: where it comes from and its phase geometry.
struct CollectedGate {
  int layer = 0;
  std::string branch;     // "ck" or "cv"
  int S = 0, offset = 0;  // the layer's stride and grid offset: offset i has phase (offset + i) % S
  torch::Tensor alpha;    // [B, N, W, Hkv, 1 or D]
};

// Static phase profiles of one gate: [Hkv, S], each row E[alpha] folded onto phases (sums to 1).
torch::Tensor gate_phase_profiles(const CollectedGate& g);

// The coverage penalty above over the collected gates; 0 when no branch has two gates.
torch::Tensor gate_coverage_penalty(const std::vector<CollectedGate>& gates);

// Collects every gate the model's forward makes while alive (AttentionImpl::set_gate_hook on each layer:
// chunked branches "ck" / "cv", DeepSeek compressors "comp" / "idx_comp" with phase i % m), and removes
// the hooks when destroyed.
class GateCollector {
 public:
  explicit GateCollector(DecoderImpl& model);
  ~GateCollector();
  GateCollector(const GateCollector&) = delete;
  GateCollector& operator=(const GateCollector&) = delete;
  const std::vector<torch::Tensor>& alphas() const { return alphas_; }
  const std::vector<CollectedGate>& gates() const { return gates_; }

 private:
  DecoderImpl& model_;
  std::vector<torch::Tensor> alphas_;
  std::vector<CollectedGate> gates_;  // the same gates with their origin
};

}  // namespace phasescope
