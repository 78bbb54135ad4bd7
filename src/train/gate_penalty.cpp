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

GateCollector::GateCollector(DecoderImpl& model) : model_(model) {
  for (int l = 0; l < model_.config().n_layers; ++l)
    model_.attention(l)->set_gate_hook(
        [this](const std::string&, const torch::Tensor& alpha) { alphas_.push_back(alpha); });
}

GateCollector::~GateCollector() {
  for (int l = 0; l < model_.config().n_layers; ++l) model_.attention(l)->set_gate_hook(nullptr);
}

}  // namespace phasescope
