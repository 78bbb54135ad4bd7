// attention.cpp — batched libtorch attention zoo (see attention.h for the contract and config.h for the
// position conventions): the module, the W/S kinds (full, window, chunked) with their prefill and decode,
// the output projection and the parameter exchange with the reference. The DeepSeek kinds are
// attention_ds.cpp; the pieces both use are attention_blocks.h. Shapes are written next to every tensor.
#include "attention/attention.h"

#include <cmath>
#include <limits>

#include "attention/attention_blocks.h"
#include "attention/gathered.h"
#include "core/check.h"

namespace phasescope {

using torch::indexing::Slice;
using namespace attention_blocks;

// ---------------------------------------------------------------------------------------------
// The module

AttentionImpl::AttentionImpl(const AttnConfig& cfg) : cfg_(cfg) {
  attn_config_validate(cfg_, "attention config");
  for (const ParamSpec& s : attn_param_specs(cfg_)) {
    torch::Tensor t;
    switch (s.init) {
      case InitKind::Normal:
        t = torch::randn(s.shape) * s.std;
        break;
      case InitKind::Ones:
        t = torch::ones(s.shape);
        break;
      case InitKind::Zeros:
        t = torch::zeros(s.shape);
        break;
    }
    params_[s.name] = register_parameter(s.name, t);
  }
}

torch::Tensor& AttentionImpl::param(const std::string& name) {
  auto it = params_.find(name);
  if (it == params_.end())
    fail("attention", "no parameter '" + name + "' for kind " + attn_kind_name(cfg_.kind), "");
  return it->second;
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, int64_t pos0, AttnTrace* trace) {
  PS_ASSERT(x.dim() == 3 && x.size(2) == cfg_.d_model, "attention input must be [B, T, d_model]");
  PS_ASSERT(pos0 >= 0, "pos0 must be >= 0");
  switch (cfg_.kind) {
    case AttnKind::Full:
    case AttnKind::Window:
    case AttnKind::Chunked:
      return forward_mha(x, pos0, trace);
    case AttnKind::DsCsa:
    case AttnKind::DsHca:
    case AttnKind::DsCsa2:
    case AttnKind::DsWindow:
      return forward_ds(x, pos0, trace);
  }
  return {};
}

torch::Tensor AttentionImpl::forward_rows(const torch::Tensor& x, int64_t pos0, const torch::Tensor& rows) {
  PS_ASSERT(x.dim() == 3 && x.size(2) == cfg_.d_model, "attention input must be [B, T, d_model]");
  PS_ASSERT(rows.dim() == 1 && rows.scalar_type() == torch::kInt64, "forward_rows: rows must be [N] int64");
  const bool mha =
      cfg_.kind == AttnKind::Full || cfg_.kind == AttnKind::Window || cfg_.kind == AttnKind::Chunked;
  // per row the fast path gathers its keys (T for full attention): worth it only for a few rows
  const bool few = 4 * rows.size(0) <= x.size(0) * x.size(1);
  const bool fast = few && mha && !head_hook_ && (cfg_.kind == AttnKind::Full || cfg_.window >= 1) &&
                    !(cfg_.kind == AttnKind::Chunked && cfg_.uncompressed_tail);
  if (fast) return forward_mha(x, pos0, nullptr, rows);
  return forward(x, pos0).reshape({-1, cfg_.d_model}).index_select(0, rows);
}

// Full / window / chunked projections of x [B, T, d] at positions pos [T]: queries [B, T, H, D] and keys
// [B, T, Hkv, D] with the Q/K RMSNorm (when configured) and RoPE, values [B, T, Hkv, D] as projected.
// forward, prefill and decode all call these.
torch::Tensor AttentionImpl::mha_queries(const torch::Tensor& x, const torch::Tensor& pos) {
  const AttnConfig& c = cfg_;
  auto q = matmul_wt(x, param("wq")).view({x.size(0), x.size(1), c.n_heads, c.head_dim});
  if (c.qk_norm) q = rms_norm(q, param("q_norm"), c.norm_eps);
  return rope_apply(q, pos, attn_rope_inv_freq(c, attn_rope_dims(c)));
}

std::pair<torch::Tensor, torch::Tensor> AttentionImpl::mha_keys_values(const torch::Tensor& x,
                                                                       const torch::Tensor& pos) {
  const AttnConfig& c = cfg_;
  const int64_t B = x.size(0), T = x.size(1), Hkv = c.n_kv_heads, D = c.head_dim;
  auto k = matmul_wt(x, param("wk")).view({B, T, Hkv, D});
  if (c.qk_norm) k = rms_norm(k, param("k_norm"), c.norm_eps);
  return {rope_apply(k, pos, attn_rope_inv_freq(c, attn_rope_dims(c))),
          matmul_wt(x, param("wv")).view({B, T, Hkv, D})};
}

torch::Tensor AttentionImpl::forward_mha(const torch::Tensor& x, int64_t pos0, AttnTrace* trace,
                                         const torch::Tensor& rows) {
  const AttnConfig& c = cfg_;
  const int64_t B = x.size(0), T = x.size(1), H = c.n_heads, D = c.head_dim;
  auto iopt = torch::TensorOptions().dtype(torch::kInt64).device(x.device());
  auto pos = torch::arange(pos0, pos0 + T, iopt);  // [T]

  // raw projections: q [B, T, H, D] (with rows: [1, N, H, D] at the rows' positions), k / v [B, T, Hkv, D]
  auto xq = rows.defined() ? x.reshape({B * T, c.d_model}).index_select(0, rows).unsqueeze(0)
                           : x;  // [1, N, d] or x
  auto q = mha_queries(xq, rows.defined() ? rows.remainder(T) + pos0 : pos);
  auto [k, v] = mha_keys_values(x, pos);

  LocalSpec local;
  torch::Tensor kc, vc, entry_last;
  if (c.kind == AttnKind::Full) {
    local.all = true;
    local.block = T;
  } else {
    local.window = c.window;
    local.block = std::max(1, c.window);
  }

  if (c.kind == AttnKind::Chunked) {
    // entries j = j0 .. j0+N-1: start o + j*S >= pos0 (or the partial block j = -1 at pos0 = 0) and
    // last token o + j*S + W - 1 <= pos0 + T - 1 (chunk_first_entry, chunk_entry_count)
    const int64_t S = c.S, W = c.W, o = c.grid_offset;
    const int64_t j0 = chunk_first_entry(c, pos0), N = chunk_entry_count(c, pos0, T);
    if (N > 0) {
      auto starts = torch::arange(j0, j0 + N, iopt) * S + o;  // [N] first token (may be < 0: partial)
      torch::Tensor alpha_k, alpha_v;
      chunked_entries(entry_tokens(x, starts, pos0, W), starts, &kc, &vc, trace ? &alpha_k : nullptr,
                      trace ? &alpha_v : nullptr);
      if (trace) {
        trace->gate_alpha = alpha_k;
        trace->gate_alpha_v = alpha_v;
      }
      entry_last = starts + W - 1;
      if (trace) trace->entry_start = starts.clamp_min(0);
    }
    if (c.uncompressed_tail) {
      // last token covered by a visible entry: latest j with o + j*S + W - 1 <= p, if j >= j0
      auto p = pos.to(torch::kFloat64);
      auto jl = torch::floor((p - double(W - 1 + o)) / double(S)).to(torch::kInt64);  // [T]
      local.cover_end = torch::where(jl >= j0, jl * S + o + W - 1, torch::full_like(jl, pos0 - 1));
      local.block = W + S - 1;  // the tail never exceeds W + S - 2 tokens before the query
      local.window = 0;
    }
  }

  auto sink = c.sink ? param("sink") : torch::Tensor();
  if (rows.defined()) {
    PS_ASSERT(!local.cover_end.defined() && (local.all || local.window >= 1),
              "forward_rows: no fast path for this kind");
    auto o = rows_attention(q.squeeze(0), k, v, kc, vc, entry_last, local, sink, pos0, rows);  // [N, H, D]
    return matmul_wt(o.reshape({rows.size(0), H * D}), param("wo"));                           // [N, d]
  }
  auto o = joint_attention(q, k, v, kc, vc, entry_last, torch::Tensor(), local, sink, pos0, trace);
  return output(o);
}

// Chunked entries from their tokens' hidden states: xg [B, N, W, d] (offset i of the entry starting at
// s = o + j*S is token s + i), starts [N] those s. Offsets with s + i < 0 (the partial block of a
// staggered grid; their rows of xg are placeholders) get no gate mass. kc [B, N, Hkv, D] is pooled,
// RMS-normed (k_norm) and rotated at max(s, 0); vc the value branch's pool (or kc when tied). alpha_k /
// alpha_v (optional): the gates [B, N, W, Hkv, 1 or D]. The one place entries are made: forward,
// prefill and decode call it.
void AttentionImpl::chunked_entries(const torch::Tensor& xg, const torch::Tensor& starts, torch::Tensor* kc,
                                    torch::Tensor* vc, torch::Tensor* alpha_k, torch::Tensor* alpha_v) {
  const AttnConfig& c = cfg_;
  const int64_t B = xg.size(0), N = xg.size(1), W = c.W, Hkv = c.n_kv_heads, D = c.head_dim;
  // absent offsets [1, N, W, 1, 1], or undefined when every token is there (the usual case)
  torch::Tensor absent;
  if (starts.min().item<int64_t>() < 0)
    absent =
        (starts.view({N, 1}) + torch::arange(W, starts.options()).view({1, W}) < 0).view({1, N, W, 1, 1});
  auto pool = [&](const std::string& br, torch::Tensor* alpha_out) {
    torch::Tensor payload;  // [B, N, W, Hkv, D]
    if (c.per_offset_payload)
      payload = per_offset_apply(xg, param(br + "_payload"));
    else
      payload = matmul_wt(xg, param(br + "_payload").reshape({Hkv * D, c.d_model})).view({B, N, W, Hkv, D});
    torch::Tensor alpha;  // [B, N, W, Hkv, 1 or D]
    if (c.gate == GateKind::Uniform) {
      alpha = torch::full({1, 1, W, 1, 1}, 1.0 / double(W), xg.options()).expand({B, N, W, Hkv, 1});
      if (absent.defined()) {
        auto here = (~absent).to(xg.scalar_type());  // [1, N, W, 1, 1]
        alpha = (here / here.sum(2, true)).expand({B, N, W, Hkv, 1});
      }
    } else {
      auto zw = param(br + "_gate_w");
      if (c.gate == GateKind::Scalar) zw = zw.unsqueeze(2);  // [Hkv, W, 1, d]
      auto logits = per_offset_apply(xg, zw);                // [B, N, W, Hkv, 1 or D]
      if (c.gate_bias) {
        auto b = param(br + "_gate_b");  // [Hkv, W] or [Hkv, W, D]
        b = c.gate == GateKind::Scalar ? b.t().unsqueeze(-1) : b.permute({1, 0, 2});
        logits = logits + b;
      }
      if (absent.defined()) logits = logits.masked_fill(absent, -std::numeric_limits<double>::infinity());
      alpha = torch::softmax(logits, 2);
      if (gate_hook_) gate_hook_(br, alpha);
    }
    if (alpha_out) *alpha_out = alpha.detach();
    return (alpha * payload).sum(2);  // [B, N, Hkv, D]
  };
  auto pooled = pool("ck", alpha_k);
  if (c.qk_norm) pooled = rms_norm(pooled, param("k_norm"), c.norm_eps);
  *kc = rope_apply(pooled, starts.clamp_min(0), attn_rope_inv_freq(c, attn_comp_rope_dims(c)));
  *vc = c.tied_kv ? *kc : pool("cv", alpha_v);
}

// ---------------------------------------------------------------------------------------------
// Decode: prefill once, then one token at a time with the cache attn_kv_memory counts.

int64_t AttnCache::values() const {
  auto n = [](const torch::Tensor& t) { return t.defined() ? t.numel() : int64_t(0); };
  const int64_t B = k.defined() ? k.size(0) : 1;
  const int64_t held = n(k) + (latent ? 0 : n(v)) + n(kc) + (tied ? 0 : n(vc)) + n(x_open) + n(ki) +
                       n(comp_a) + n(comp_z) + n(idx_a) + n(idx_z);
  return held / std::max<int64_t>(B, 1);
}

torch::Tensor AttentionImpl::prefill(const torch::Tensor& x, AttnCache* cache) {
  const AttnConfig& c = cfg_;
  PS_ASSERT(x.dim() == 3 && x.size(2) == c.d_model, "prefill input must be [B, T, d_model]");
  if (attn_is_ds(c)) return prefill_ds(x, cache);
  auto out = forward(x, 0);  // [B, T, d]
  const int64_t B = x.size(0), T = x.size(1), Hkv = c.n_kv_heads, D = c.head_dim;
  AttnCache& C = *cache;
  C = AttnCache();
  C.pos = T;
  C.tied = c.kind == AttnKind::Chunked && c.tied_kv;
  auto iopt = torch::TensorOptions().dtype(torch::kInt64).device(x.device());
  // the raw tokens kept: all (full), the last w (window / chunked), or those after the last finished
  // entry's end (uncompressed tail)
  int64_t keep_from = 0;
  if (c.kind == AttnKind::Chunked) {
    const int64_t j0 = chunk_first_entry(c, 0);
    C.entries = chunk_entry_count(c, 0, T);
    if (C.entries > 0) {
      auto starts = torch::arange(j0, j0 + C.entries, iopt) * c.S + c.grid_offset;  // [N]
      chunked_entries(entry_tokens(x, starts, 0, c.W), starts, &C.kc, &C.vc, nullptr, nullptr);
    } else {
      C.kc = torch::zeros({B, 0, Hkv, D}, x.options());
      C.vc = C.kc;
    }
    // the tokens the next, unfinished entry needs: from its start on (never before position 0)
    const int64_t open_from = std::max<int64_t>(0, chunk_entry_start(c, j0 + C.entries));
    C.x_open = x.narrow(1, open_from, T - open_from);  // [B, n_open, d]
    keep_from = c.uncompressed_tail ? (C.entries > 0 ? chunk_entry_start(c, j0 + C.entries - 1) + c.W : 0)
                                    : T - c.window;
  } else if (c.kind == AttnKind::Window) {
    keep_from = T - c.window;
  }
  keep_from = std::clamp<int64_t>(keep_from, 0, T);
  auto xr = x.narrow(1, keep_from, T - keep_from);  // [B, n_raw, d]
  auto pos = torch::arange(keep_from, T, iopt);
  std::tie(C.k, C.v) = mha_keys_values(xr, pos);
  C.raw_from = keep_from;
  return out;
}

torch::Tensor AttentionImpl::decode(const torch::Tensor& x, AttnCache* cache) {
  const AttnConfig& c = cfg_;
  PS_ASSERT(x.dim() == 3 && x.size(1) == 1 && x.size(2) == c.d_model, "decode input must be [B, 1, d_model]");
  if (attn_is_ds(c)) return decode_ds(x, cache);
  AttnCache& C = *cache;
  const int64_t B = x.size(0), H = c.n_heads, Hkv = c.n_kv_heads, D = c.head_dim, G = H / Hkv, p = C.pos;
  auto iopt = torch::TensorOptions().dtype(torch::kInt64).device(x.device());
  auto pos = torch::full({1}, p, iopt);
  // this token's query, key and value at position p
  auto q = mha_queries(x, pos);           // [B, 1, H, D]
  auto [k, v] = mha_keys_values(x, pos);  // [B, 1, Hkv, D] each
  C.k = torch::cat({C.k, k}, 1);
  C.v = torch::cat({C.v, v}, 1);
  // a chunked entry that this token completes: the next one, j = j0 + entries, tokens [s, s + W) with
  // s = o + j*S; x_open holds the tokens [max(s, 0), p]
  if (c.kind == AttnKind::Chunked) {
    C.x_open = torch::cat({C.x_open, x}, 1);
    const int64_t j = chunk_first_entry(c, 0) + C.entries, s = chunk_entry_start(c, j);
    if (s + c.W - 1 == p) {
      auto starts = torch::full({1}, s, iopt);
      torch::Tensor kc, vc;
      chunked_entries(entry_tokens(C.x_open, starts, std::max<int64_t>(s, 0), c.W), starts, &kc, &vc, nullptr,
                      nullptr);  // [B, 1, Hkv, D]
      C.kc = torch::cat({C.kc, kc}, 1);
      C.vc = C.tied ? C.kc : torch::cat({C.vc, vc}, 1);
      C.entries += 1;
      // the next entry starts S later
      const int64_t drop = std::max<int64_t>(0, s + c.S) - std::max<int64_t>(0, s);
      C.x_open = C.x_open.narrow(1, drop, C.x_open.size(1) - drop);
    }
  }
  // drop raw tokens no query from now on sees
  int64_t keep_from = C.raw_from;
  if (c.kind == AttnKind::Window || (c.kind == AttnKind::Chunked && !c.uncompressed_tail))
    keep_from = std::max<int64_t>(0, p + 1 - c.window);
  else if (c.kind == AttnKind::Chunked)
    keep_from = C.entries > 0 ? chunk_entry_start(c, chunk_first_entry(c, 0) + C.entries - 1) + c.W : 0;
  if (keep_from > C.raw_from) {
    C.k = C.k.narrow(1, keep_from - C.raw_from, C.k.size(1) - (keep_from - C.raw_from));
    C.v = C.v.narrow(1, keep_from - C.raw_from, C.v.size(1) - (keep_from - C.raw_from));
    C.raw_from = keep_from;
  }
  // one softmax over the raw tokens kept, the finished entries and the sink
  const double scale = 1.0 / std::sqrt(double(D));
  auto qg = q.view({B, Hkv, G, D});
  auto kr = C.k.permute({0, 2, 3, 1});                                 // [B, Hkv, D, n_raw]
  std::vector<torch::Tensor> parts = {torch::matmul(qg, kr) * scale};  // [B, Hkv, G, n_raw]
  const int64_t n_raw = C.k.size(1), N = C.kc.defined() ? C.kc.size(1) : 0;
  if (N > 0) parts.push_back(torch::matmul(qg, C.kc.permute({0, 2, 3, 1})) * scale);  // [B, Hkv, G, N]
  if (c.sink) parts.push_back(param("sink").view({1, Hkv, G, 1}).expand({B, Hkv, G, 1}));
  auto prob = torch::softmax(torch::cat(parts, -1), -1);
  auto o = torch::matmul(prob.narrow(-1, 0, n_raw), C.v.permute({0, 2, 1, 3}));  // [B, Hkv, G, D]
  if (N > 0) o = o + torch::matmul(prob.narrow(-1, n_raw, N), C.vc.permute({0, 2, 1, 3}));
  C.pos = p + 1;
  return output(o.reshape({B, 1, H, D}));
}

torch::Tensor AttentionImpl::output(const torch::Tensor& o) {
  const int64_t B = o.size(0), T = o.size(1);
  auto h = head_hook_ ? head_hook_(o) : o;  // [B, T, H, D]
  PS_ASSERT(h.sizes() == o.sizes(), "attention head hook must return [B, T, H, D] unchanged in shape");
  if (cfg_.o_groups == 0) return matmul_wt(h.reshape({B, T, cfg_.n_heads * cfg_.head_dim}), param("wo"));
  // V4's grouped low-rank output: group g (heads g*H/G .. (g+1)*H/G - 1, contiguous) -> o_rank dims
  const int64_t G = cfg_.o_groups, R = cfg_.o_rank, HDg = cfg_.n_heads * cfg_.head_dim / G;
  auto hg = h.reshape({B, T, G, 1, HDg});                                 // [B, T, G, 1, H*D/G]
  auto wa = param("wo_a").view({G, R, HDg});                              // [G, R, H*D/G]
  auto r = torch::matmul(hg, wa.transpose(1, 2)).reshape({B, T, G * R});  // [B, T, G*R]
  return matmul_wt(r, param("wo_b"));
}

// ---------------------------------------------------------------------------------------------
// Parameter exchange with the reference

RefParams attention_export(AttentionImpl& module) {
  RefParams out;
  for (const auto& item : module.named_parameters()) {
    auto t = item.value().detach().to(torch::kCPU, torch::kFloat64).contiguous();
    RefTensor r;
    r.shape = t.sizes().vec();
    r.data.assign(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
    out[item.key()] = std::move(r);
  }
  return out;
}

void attention_import(AttentionImpl& module, const RefParams& params) {
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters()) {
    auto it = params.find(item.key());
    if (it == params.end())
      fail("attention_import", "missing parameter '" + item.key() + "'", "export from the same config");
    auto src = torch::tensor(it->second.data, torch::kFloat64).view(it->second.shape);
    PS_ASSERT(src.sizes() == item.value().sizes(), "shape mismatch for " + item.key());
    item.value().copy_(src);
  }
}

void attention_randomize(AttentionImpl& module) {
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters()) {
    const std::string& n = item.key();
    auto& p = item.value();
    if (n.find("norm") != std::string::npos)
      p.copy_(1.0 + 0.1 * torch::randn_like(p));
    else if (n == "sink" || n.find("_gate_b") != std::string::npos || n.find("ape") != std::string::npos)
      p.copy_(0.5 * torch::randn_like(p));
  }
}

}  // namespace phasescope
