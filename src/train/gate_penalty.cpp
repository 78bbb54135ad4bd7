// gate_penalty.cpp — see gate_penalty.h.
#include "train/gate_penalty.h"

namespace phasescope {

torch::Tensor gate_static_concentration_t(const torch::Tensor& alpha) {
  auto mean = alpha.mean(std::vector<int64_t>{0, 1}).mean(-1);  // [W, Hkv]: E[alpha] over windows, channels
  auto h = -(mean * torch::log(mean.clamp_min(1e-30))).sum(0);  // [Hkv] entropy over the W offsets
  return torch::exp(h);
}

torch::Tensor gate_entropy_penalty(const std::vector<torch::Tensor>& alphas) {
  if (alphas.empty()) return torch::zeros({});
  std::vector<torch::Tensor> terms;
  for (const torch::Tensor& a : alphas)
    terms.push_back(1.0 - gate_static_concentration_t(a) / double(a.size(2)));
  return torch::cat(terms).mean();
}

torch::Tensor gate_phase_profiles(const CollectedGate& g) {
  auto mean = g.alpha.mean(std::vector<int64_t>{0, 1}).mean(-1);  // [W, Hkv]
  const int64_t W = mean.size(0);
  auto phase = (torch::arange(W, torch::kInt64) + g.offset).remainder(g.S).to(mean.device());  // [W]
  auto prof = torch::zeros({g.S, mean.size(1)}, mean.options()).index_add(0, phase, mean);     // [S, Hkv]
  return (prof / prof.sum(0, true)).t();                                                       // [Hkv, S]
}

torch::Tensor gate_coverage_penalty(const std::vector<CollectedGate>& gates) {
  std::vector<torch::Tensor> overlaps;
  for (const char* branch : {"ck", "cv", "comp", "idx_comp"}) {
    std::vector<torch::Tensor> prof;  // one [S] row per (layer, KV head) of this branch
    std::vector<int> stride;
    for (const CollectedGate& g : gates) {
      if (g.branch != branch) continue;
      auto p = gate_phase_profiles(g);
      for (int64_t h = 0; h < p.size(0); ++h) {
        prof.push_back(p[h]);
        stride.push_back(g.S);
      }
    }
    for (size_t a = 0; a < prof.size(); ++a)
      for (size_t b = a + 1; b < prof.size(); ++b)
        if (stride[a] == stride[b]) overlaps.push_back((prof[a] * prof[b]).sum().unsqueeze(0));
  }
  if (overlaps.empty()) return torch::zeros({});
  return torch::cat(overlaps).mean();
}

GateCollector::GateCollector(DecoderImpl& model) : model_(model) {
  for (int l = 0; l < model_.config().n_layers; ++l) {
    const AttnConfig& c = model_.attention(l)->config();
    // a DeepSeek compressor's offset i has phase i % m (attention.h GateHook); a chunked one (o + i) % S
    const int S = attn_is_ds(c) ? c.ratio : c.S, o = attn_is_ds(c) ? 0 : c.grid_offset;
    model_.attention(l)->set_gate_hook(
        [this, l, S, o](const std::string& branch, const torch::Tensor& alpha) {
          alphas_.push_back(alpha);
          gates_.push_back({l, branch, S, o, alpha});
        });
  }
}

GateCollector::~GateCollector() {
  for (int l = 0; l < model_.config().n_layers; ++l) model_.attention(l)->set_gate_hook(nullptr);
}

}  // namespace phasescope
