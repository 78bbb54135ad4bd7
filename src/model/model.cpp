// model.cpp — see model.h.
#include "model/model.h"

#include <fmt/format.h>

#include <cmath>

#include "core/check.h"
#include "model/linear_cross_entropy.h"

namespace phasescope {

DecoderImpl::DecoderImpl(const ModelConfig& cfg) : cfg_(cfg) {
  model_config_sync(cfg_, "model config");
  PS_ASSERT(cfg_.vocab_size > 0, "model config: vocab_size must be set from the task vocabulary");
  const int64_t V = cfg_.vocab_size, d = cfg_.d_model, L = cfg_.n_layers, F = cfg_.mlp_hidden;
  const double std = cfg_.init_std, out_std = cfg_.init_std / std::sqrt(2.0 * double(L));

  embed_ = register_parameter("embed", torch::randn({V, d}) * std);
  if (!cfg_.tied_embeddings) lm_head_ = register_parameter("lm_head", torch::randn({V, d}) * std);
  final_norm_ = register_parameter("final_norm", torch::ones({d}));
  for (int64_t l = 0; l < L; ++l) {
    const std::string s = std::to_string(l);
    // attention: the zoo's own parameters, re-initialized at the model's scale
    Attention a(cfg_.layers[size_t(l)]);
    {
      torch::NoGradGuard g;
      for (const ParamSpec& spec : attn_param_specs(a->config()))
        if (spec.init == InitKind::Normal)
          a->param(spec.name).normal_(0.0, (spec.name == "wo" || spec.name == "wo_b") ? out_std : std);
    }
    attn_.push_back(register_module("attn" + s, a));
    attn_norm_.push_back(register_parameter("attn_norm" + s, torch::ones({d})));
    if (cfg_.token_shift > 0)
      shift_.push_back(register_parameter("shift" + s, torch::zeros({cfg_.token_shift, d})));
    if (F > 0) {
      mlp_norm_.push_back(register_parameter("mlp_norm" + s, torch::ones({d})));
      w_gate_.push_back(register_parameter("mlp_gate" + s, torch::randn({F, d}) * std));
      w_up_.push_back(register_parameter("mlp_up" + s, torch::randn({F, d}) * std));
      w_down_.push_back(register_parameter("mlp_down" + s, torch::randn({d, F}) * out_std));
    }
  }
}

torch::Tensor token_shift_apply(const torch::Tensor& x, const torch::Tensor& c) {
  const int64_t T = x.size(1), K = c.size(0);
  auto out = torch::zeros_like(x);
  for (int64_t k = 1; k <= std::min(K, T - 1); ++k)  // x_{t-k}: zero before the sequence start
    out = out + torch::constant_pad_nd(x.narrow(1, 0, T - k), {0, 0, k, 0}) * c[k - 1];
  return out;
}

torch::Tensor DecoderImpl::hidden(const torch::Tensor& tokens, int64_t pos0, std::vector<AttnTrace>* traces) {
  auto h = torch::embedding(embed_, tokens);  // [B, T, d]
  if (traces) traces->assign(attn_.size(), AttnTrace{});
  for (size_t l = 0; l < attn_.size(); ++l) {
    h = mlp_residual(l, h + attn_[l]->forward(attn_input(l, h), pos0, traces ? &(*traces)[l] : nullptr));
  }
  return rms_norm(h, final_norm_, cfg_.norm_eps);
}

bool decoder_can_decode(const ModelConfig& cfg) {
  return cfg.token_shift == 0;  // every attention kind decodes
}

torch::Tensor DecoderImpl::prefill(const torch::Tensor& tokens, std::vector<AttnCache>* caches) {
  PS_ASSERT(decoder_can_decode(cfg_),
            "decode: this model has a layer (or token shift) without a decode path");
  caches->assign(attn_.size(), AttnCache{});
  auto h = torch::embedding(embed_, tokens);  // [B, T, d]
  for (size_t l = 0; l < attn_.size(); ++l)
    h = mlp_residual(l, h + attn_[l]->prefill(attn_input(l, h), &(*caches)[l]));
  return unembed(rms_norm(h, final_norm_, cfg_.norm_eps));
}

torch::Tensor DecoderImpl::decode(const torch::Tensor& tokens, std::vector<AttnCache>* caches) {
  PS_ASSERT(tokens.dim() == 2 && tokens.size(1) == 1, "decode: tokens must be [B, 1]");
  PS_ASSERT(caches->size() == attn_.size(), "decode: one cache per layer (call prefill first)");
  auto h = torch::embedding(embed_, tokens);  // [B, 1, d]
  for (size_t l = 0; l < attn_.size(); ++l)
    h = mlp_residual(l, h + attn_[l]->decode(attn_input(l, h), &(*caches)[l]));
  return unembed(rms_norm(h, final_norm_, cfg_.norm_eps));
}

torch::Tensor DecoderImpl::decode_ragged(const torch::Tensor& tokens,
                                         const std::vector<std::vector<AttnCache>*>& caches) {
  PS_ASSERT(tokens.dim() == 2 && tokens.size(1) == 1, "decode: tokens must be [B, 1]");
  PS_ASSERT(int64_t(caches.size()) == tokens.size(0), "decode: one cache vector per sequence");
  for (const auto* c : caches)
    PS_ASSERT(c && c->size() == attn_.size(), "decode: one cache per layer (call prefill first)");
  auto h = torch::embedding(embed_, tokens);  // [B, 1, d]
  for (size_t l = 0; l < attn_.size(); ++l) {
    auto a = attn_input(l, h);  // [B, 1, d]
    std::vector<torch::Tensor> rows;
    for (size_t b = 0; b < caches.size(); ++b)
      rows.push_back(attn_[l]->decode(a.narrow(0, int64_t(b), 1), &(*caches[b])[l]));  // [1, 1, d]
    h = mlp_residual(l, h + torch::cat(rows, 0));
  }
  return unembed(rms_norm(h, final_norm_, cfg_.norm_eps));
}

torch::Tensor DecoderImpl::attn_input(size_t l, const torch::Tensor& h) {
  auto a = rms_norm(h, attn_norm_[l], cfg_.norm_eps);  // [B, T, d]
  return cfg_.token_shift > 0 ? a + token_shift_apply(a, shift_[l]) : a;
}

torch::Tensor DecoderImpl::mlp_residual(size_t l, const torch::Tensor& h) {
  if (cfg_.mlp_hidden <= 0) return h;
  auto x = rms_norm(h, mlp_norm_[l], cfg_.norm_eps);  // [..., d]
  return h + torch::matmul(torch::silu(torch::matmul(x, w_gate_[l].t())) * torch::matmul(x, w_up_[l].t()),
                           w_down_[l].t());
}

torch::Tensor DecoderImpl::hidden_rows(const torch::Tensor& tokens, const torch::Tensor& rows, int64_t pos0) {
  auto h = torch::embedding(embed_, tokens);  // [B, T, d]
  const size_t L = attn_.size();
  for (size_t l = 0; l + 1 < L; ++l) {
    h = mlp_residual(l, h + attn_[l]->forward(attn_input(l, h), pos0));
  }
  // the last layer: keys and values from every position, the rest for the rows only
  auto hr = h.reshape({-1, h.size(-1)}).index_select(0, rows) +
            attn_[L - 1]->forward_rows(attn_input(L - 1, h), pos0, rows);  // [N, d]
  return rms_norm(mlp_residual(L - 1, hr), final_norm_, cfg_.norm_eps);
}

torch::Tensor DecoderImpl::unembed(const torch::Tensor& h) { return torch::matmul(h, unembed_weight().t()); }

const torch::Tensor& DecoderImpl::unembed_weight() const { return cfg_.tied_embeddings ? embed_ : lm_head_; }

torch::Tensor DecoderImpl::forward(const torch::Tensor& tokens, int64_t pos0) {
  return unembed(hidden(tokens, pos0));
}

torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-1));
}

torch::Tensor lm_loss_scored(DecoderImpl& model, const torch::Tensor& tokens, const torch::Tensor& targets) {
  auto flat = targets.reshape({-1});            // [B*T]
  auto rows = flat.ge(0).nonzero().squeeze(1);  // [N] flat b*T+t
  PS_ASSERT(rows.numel() > 0, "lm_loss_scored: no position has a target");
  auto h = model.hidden_rows(tokens, rows);  // [N, d]
  const auto& w = model.unembed_weight();    // [V, d]
  if (linear_cross_entropy_pays(h.size(0), w.size(0)))
    return linear_cross_entropy(h, w, flat.index_select(0, rows));  // no [N, V] logits kept
  return torch::nn::functional::cross_entropy(model.unembed(h), flat.index_select(0, rows));
}

std::string model_describe(DecoderImpl& model) {
  const ModelConfig& c = model.config();
  int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  std::string kinds;
  for (const auto& a : c.layers) {
    std::string k = attn_kind_name(a.kind);
    if (a.kind == AttnKind::Chunked)
      k += fmt::format(" W{}/S{}{}", a.W, a.S, a.grid_offset ? fmt::format("+{}", a.grid_offset) : "");
    if (attn_is_ds(a) && a.ratio > 0) k += fmt::format(" m{}", a.ratio);
    kinds += (kinds.empty() ? "" : ", ") + k;
  }
  return fmt::format("{} layers [{}], d={}, heads={}x{} (kv {}), mlp={}, vocab={}, {:.2f}M params",
                     c.n_layers, kinds, c.d_model, c.n_heads, c.head_dim, c.n_kv_heads, c.mlp_hidden,
                     c.vocab_size, n / 1e6);
}

}  // namespace phasescope
