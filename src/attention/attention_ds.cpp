// attention_ds.cpp — the DeepSeek kinds of the batched module (dsv4-csa, hca, v41-csa2, dsv4-window):
// low-rank queries, the shared latent, compressed entries with the indexer's picks, and their prefill and
// decode with the compressed cache. The contract is attention.h's; the W/S kinds are attention.cpp.
#include <cmath>
#include <limits>

#include "attention/attention.h"
#include "attention/attention_blocks.h"
#include "attention/gathered.h"
#include "core/check.h"

namespace phasescope {

using torch::indexing::Slice;
using namespace attention_blocks;

// DeepSeek V4 compressor (prefix "comp_" or "idx_comp_"), output `width` dims per entry.
// a = Wkv x, z = Wgate x + ape[p mod m]: [B, T, kappa*width]. Entry j pools per channel the m
// tokens of block j through the C half and, when overlapping, block j-1 through the P half
// (tokens before pos0 are absent: logit -inf). Then RMSNorm and RoPE at j*m.
// Returns [B, N, 1, width]; starts [N] = j*m.
static torch::Tensor ds_compress(AttentionImpl& mod, const AttnConfig& c, const torch::Tensor& x,
                                 int64_t pos0, const std::string& pre, int64_t width, int rope_dims,
                                 torch::Tensor* starts, torch::Tensor* alpha_out = nullptr) {
  const int64_t T = x.size(1), m = c.ratio;
  auto iopt = torch::TensorOptions().dtype(torch::kInt64).device(x.device());
  const int64_t j0 = (pos0 + m - 1) / m, j1 = (pos0 + T) / m - 1, N = std::max<int64_t>(0, j1 - j0 + 1);
  if (N == 0) return torch::Tensor();
  auto a = matmul_wt(x, mod.param(pre + "wkv"));    // [B, T, kappa*width]
  auto z = matmul_wt(x, mod.param(pre + "wgate"));  // [B, T, kappa*width]
  if (c.offset_bias)
    z = z + mod.param(pre + "ape").index({torch::remainder(torch::arange(pos0, pos0 + T, iopt), m)});
  auto jj = torch::arange(j0, j0 + N, iopt);                                    // [N]
  auto cur = jj.view({N, 1}) * m + torch::arange(m, iopt).view({1, m}) - pos0;  // [N, m] token index
  const int64_t ch = c.overlap ? width : 0;                                     // C half offset
  auto feat = a.narrow(-1, ch, width).index({Slice(), cur});                    // [B, N, m, width]
  auto logit = z.narrow(-1, ch, width).index({Slice(), cur});                   // [B, N, m, width]
  if (c.overlap) {
    auto prev = cur - m;  // [N, m]
    auto present = (prev >= 0).view({1, N, m, 1});
    auto pc = prev.clamp_min(0);
    auto pf = a.narrow(-1, 0, width).index({Slice(), pc});
    auto pl = z.narrow(-1, 0, width)
                  .index({Slice(), pc})
                  .masked_fill(present.logical_not(), -std::numeric_limits<double>::infinity());
    feat = torch::cat({pf, feat}, 2L);  // [B, N, 2m, width]
    logit = torch::cat({pl, logit}, 2L);
  }
  auto alpha = torch::softmax(logit, 2);                    // [B, N, kappa*m, width]
  if (alpha_out) *alpha_out = alpha.detach().unsqueeze(3);  // [B, N, kappa*m, 1, width]
  if (mod.gate_hook())
    mod.gate_hook()(pre.substr(0, pre.size() - 1), alpha.unsqueeze(3));         // "comp", "idx_comp"
  auto pooled = (alpha * feat).sum(2);                                          // [B, N, width]
  pooled = rms_norm(pooled, mod.param(pre + "norm"), c.norm_eps).unsqueeze(2);  // [B, N, 1, width]
  if (starts) *starts = jj * m;
  return rope_apply(pooled, jj * m, attn_rope_inv_freq(c, rope_dims));
}

// The indexer's queries at positions pos [T] (qa [B, T, q_rank], x [B, T, d]): qI [B, T, HI, DI]
// (rotated) and the head weights w [B, T, HI] (scaled), for I(t, j) = sum_h w_h(t) ReLU(qI_h(t) . kI_j)
// (gathered.h: index_select_topk, index_scores). forward and decode.
static std::pair<torch::Tensor, torch::Tensor> ds_index_queries(AttentionImpl& mod, const AttnConfig& c,
                                                                const torch::Tensor& qa,
                                                                const torch::Tensor& x,
                                                                const torch::Tensor& pos) {
  torch::NoGradGuard no_grad;  // a selection, never differentiated
  const int64_t B = x.size(0), T = x.size(1), HI = c.index_heads, DI = c.index_dim;
  auto qi = rope_apply(matmul_wt(qa, mod.param("idx_wq_b")).view({B, T, HI, DI}), pos,
                       attn_rope_inv_freq(c, attn_index_rope_dims(c)));  // [B, T, HI, DI]
  auto w = matmul_wt(x, mod.param("idx_ww")) * (1.0 / std::sqrt(double(DI)) / std::sqrt(double(HI)));
  return {qi, w};
}

// query: x -> W_qa -> RMSNorm -> W_qb, per-head RMS (V4 only), RoPE: [B, T, H, D]; *qa [B, T, q_rank]
torch::Tensor AttentionImpl::ds_queries(const torch::Tensor& x, const torch::Tensor& pos, torch::Tensor* qa) {
  const AttnConfig& c = cfg_;
  *qa = rms_norm(matmul_wt(x, param("wq_a")), param("q_a_norm"), c.norm_eps);
  auto q = matmul_wt(*qa, param("wq_b")).view({x.size(0), x.size(1), c.n_heads, c.head_dim});
  if (c.q_head_norm) q = rms_norm(q, torch::Tensor(), c.norm_eps);
  return rope_apply(q, pos, attn_rope_inv_freq(c, attn_rope_dims(c)));
}

// one latent per token, both key and value: [B, T, 1, D]
torch::Tensor AttentionImpl::ds_latents(const torch::Tensor& x, const torch::Tensor& pos) {
  const AttnConfig& c = cfg_;
  return rope_apply(rms_norm(matmul_wt(x, param("wkv")), param("kv_norm"), c.norm_eps).unsqueeze(2), pos,
                    attn_rope_inv_freq(c, attn_rope_dims(c)));
}

torch::Tensor AttentionImpl::forward_ds(const torch::Tensor& x, int64_t pos0, AttnTrace* trace) {
  const AttnConfig& c = cfg_;
  const int64_t B = x.size(0), T = x.size(1), D = c.head_dim;
  const int rd = attn_rope_dims(c);
  auto iopt = torch::TensorOptions().dtype(torch::kInt64).device(x.device());
  auto pos = torch::arange(pos0, pos0 + T, iopt);  // [T]

  torch::Tensor qa;
  auto q = ds_queries(x, pos, &qa);  // [B, T, H, D]
  auto lat = ds_latents(x, pos);     // [B, T, 1, D]

  // compressed entries [B, N, 1, D], visible iff (j+1)*m - 1 <= p (none for a window-only layer)
  torch::Tensor starts, kc;
  if (c.kind != AttnKind::DsWindow)
    kc = ds_compress(*this, c, x, pos0, "comp_", D, rd, &starts, trace ? &trace->gate_alpha : nullptr);
  torch::Tensor entry_last, entry_idx;
  if (kc.defined()) {
    const int64_t N = kc.size(1);
    entry_last = starts + c.ratio - 1;
    if (trace) {
      trace->entry_start = starts;
      trace->entry_kv = kc.squeeze(2).detach();
    }
    if (c.index_topk > 0) {
      // indexer: I(t, j) = sum_h w_h(t) ReLU(qI_h(t) . kI_j), top-min(k, visible) per query
      auto ki = ds_compress(*this, c, x, pos0, "idx_comp_", c.index_dim, attn_index_rope_dims(c), nullptr)
                    .squeeze(2);   // [B, N, DI]
      torch::NoGradGuard no_grad;  // the selection is discrete; the LM loss does not train the indexer
      auto [qi, w] = ds_index_queries(*this, c, qa, x, pos);
      // entries are visible in order (entry_last ascends): query t sees the first n_vis[t] of them
      auto n_vis = torch::searchsorted(entry_last, pos, /*out_int32=*/false, /*right=*/true);  // [T]
      entry_idx = index_select_topk(qi, w, ki, n_vis, c.index_topk);  // [B, T, min(k, N)]
      if (trace) {  // the scores of every query against every entry, -inf where not visible
        auto vis = torch::arange(N, iopt).view({1, N}) < n_vis.view({T, 1});  // [T, N]
        auto score = index_scores(qi, w, ki).masked_fill(vis.logical_not().unsqueeze(0),
                                                         -std::numeric_limits<double>::infinity());
        const int64_t kk = std::min<int64_t>(c.index_topk, N);
        auto order =
            std::get<1>(torch::sort(score, /*stable=*/true, /*dim=*/-1, /*descending=*/true));  // [B, T, N]
        auto keep = torch::clamp_max(vis.sum(-1), c.index_topk);                                // [T]
        auto take = (torch::arange(N, iopt).view({1, N}) < keep.view({T, 1})).unsqueeze(0).expand({B, T, N});
        // the picks in selection order (score descending, ties to the earlier entry), -1 past the kept ones
        const int64_t k = c.index_topk;
        const int64_t j0 = starts[0].item<int64_t>() / c.ratio;  // first entry's index
        auto picks = (order.narrow(-1, 0, kk) + j0)
                         .masked_fill(take.narrow(-1, 0, kk).logical_not(), -1);  // [B, T, kk]
        trace->index_topk = kk == k ? picks : torch::cat({picks, torch::full({B, T, k - kk}, -1, iopt)}, -1);
        trace->index_score = score.detach();
      }
    }
  }

  LocalSpec local;
  local.window = c.window;
  local.block = std::max(1, c.window);
  auto sink = c.sink ? param("sink") : torch::Tensor();
  auto o =
      joint_attention(q, lat, lat, kc, kc, entry_last, entry_idx, local, sink, pos0, trace);  // [B, T, H, D]
  o = rope_apply(o, pos, attn_rope_inv_freq(c, rd), /*sign=*/-1);  // de-rotate the output's rotary dims
  return output(o);
}

// ---------------------------------------------------------------------------------------------
// DeepSeek decode: the window's latents, the finished entries (and indexer keys), and each compressor's
// open state (AttnCache). An entry is pooled from the state when its block's last token arrives, with the
// same softmax over offsets (and the previous block's half) as ds_compress.

// The compressor inputs of tokens x [B, n, d] at positions pos [n]: a = Wkv x, z = Wgate x + ape[p mod m],
// [B, n, coff*width] each.
static std::pair<torch::Tensor, torch::Tensor> ds_token_state(AttentionImpl& mod, const AttnConfig& c,
                                                              const torch::Tensor& x,
                                                              const torch::Tensor& pos,
                                                              const std::string& pre) {
  auto a = matmul_wt(x, mod.param(pre + "wkv"));
  auto z = matmul_wt(x, mod.param(pre + "wgate"));
  if (c.offset_bias) z = z + mod.param(pre + "ape").index({torch::remainder(pos, c.ratio)});
  return {a, z};
}

// The open state after the tokens x [B, T, d] at positions 0..T-1: rows for the previous block (overlap)
// and the open block j = T / m; the token at p sits in row p - (j - coff + 1) * m.
static void ds_state_prefill(AttentionImpl& mod, const AttnConfig& c, const torch::Tensor& x,
                             const std::string& pre, int64_t width, torch::Tensor* a_buf,
                             torch::Tensor* z_buf) {
  const int64_t B = x.size(0), T = x.size(1), m = c.ratio, coff = c.overlap ? 2 : 1, j = T / m;
  const int64_t first = (j - coff + 1) * m;  // position of row 0 (negative: before the sequence)
  *a_buf = torch::zeros({B, coff * m, coff * width}, x.options());
  *z_buf = torch::full({B, coff * m, coff * width}, -std::numeric_limits<double>::infinity(), x.options());
  const int64_t from = std::max<int64_t>(0, first);
  if (from >= T) return;
  auto iopt = torch::TensorOptions().dtype(torch::kInt64).device(x.device());
  auto pos = torch::arange(from, T, iopt);
  auto [a, z] = ds_token_state(mod, c, x.narrow(1, from, T - from), pos, pre);
  *a_buf = a_buf->index_copy(1, pos - first, a);
  *z_buf = z_buf->index_copy(1, pos - first, z);
}

// Append the token x [B, 1, d] at position p to the open state; when it completes block j = p / m,
// return entry j ([B, 1, 1, width], RMSNorm, RoPE at j*m, as ds_compress) and move to block j + 1.
static torch::Tensor ds_state_decode(AttentionImpl& mod, const AttnConfig& c, const torch::Tensor& x,
                                     int64_t p, const std::string& pre, int64_t width, int rope_dims,
                                     torch::Tensor* a_buf, torch::Tensor* z_buf) {
  const int64_t m = c.ratio, coff = c.overlap ? 2 : 1;
  auto iopt = torch::TensorOptions().dtype(torch::kInt64).device(x.device());
  auto pos = torch::full({1}, p, iopt);
  auto [a, z] = ds_token_state(mod, c, x, pos, pre);  // [B, 1, coff*width]
  auto row = torch::full({1}, (coff - 1) * m + p % m, iopt);
  *a_buf = a_buf->index_copy(1, row, a);
  *z_buf = z_buf->index_copy(1, row, z);
  if ((p + 1) % m != 0) return torch::Tensor();
  const int64_t j = p / m;
  // overlap: the previous block through the first half of the channels, the open block through the
  // second; rows [B, coff*m, width] each
  torch::Tensor feat = a_buf->narrow(2, (coff - 1) * width, width),
                logit = z_buf->narrow(2, (coff - 1) * width, width);
  if (c.overlap) {
    feat = torch::cat(
        {a_buf->narrow(1, 0, m).narrow(2, 0, width), a_buf->narrow(1, m, m).narrow(2, width, width)}, 1);
    logit = torch::cat(
        {z_buf->narrow(1, 0, m).narrow(2, 0, width), z_buf->narrow(1, m, m).narrow(2, width, width)}, 1);
  }
  auto pooled = (torch::softmax(logit, 1) * feat).sum(1);  // [B, width]
  pooled =
      rms_norm(pooled, mod.param(pre + "norm"), c.norm_eps).unsqueeze(1).unsqueeze(2);  // [B, 1, 1, width]
  auto entry = rope_apply(pooled, torch::full({1}, j * m, iopt), attn_rope_inv_freq(c, rope_dims));
  // the next block: the open block's rows become the previous block's (overlap); the open rows empty
  const int64_t B = x.size(0), cw = coff * width;
  auto empty_a = torch::zeros({B, m, cw}, x.options());
  auto empty_z = torch::full({B, m, cw}, -std::numeric_limits<double>::infinity(), x.options());
  *a_buf = c.overlap ? torch::cat({a_buf->narrow(1, m, m), empty_a}, 1) : empty_a;
  *z_buf = c.overlap ? torch::cat({z_buf->narrow(1, m, m), empty_z}, 1) : empty_z;
  return entry;
}

torch::Tensor AttentionImpl::prefill_ds(const torch::Tensor& x, AttnCache* cache) {
  const AttnConfig& c = cfg_;
  auto out = forward(x, 0);  // [B, T, d]
  const int64_t B = x.size(0), T = x.size(1), D = c.head_dim;
  AttnCache& C = *cache;
  C = AttnCache();
  C.pos = T;
  C.tied = C.latent = true;
  auto iopt = torch::TensorOptions().dtype(torch::kInt64).device(x.device());
  C.raw_from = std::max<int64_t>(0, T - c.window);
  C.k = ds_latents(x.narrow(1, C.raw_from, T - C.raw_from), torch::arange(C.raw_from, T, iopt));
  C.v = C.k;
  if (c.kind == AttnKind::DsWindow) return out;
  C.entries = T / c.ratio;
  C.kc = C.entries > 0 ? ds_compress(*this, c, x, 0, "comp_", D, attn_rope_dims(c), nullptr)
                       : torch::zeros({B, 0, 1, D}, x.options());  // [B, N, 1, D]
  C.vc = C.kc;
  ds_state_prefill(*this, c, x, "comp_", D, &C.comp_a, &C.comp_z);
  if (c.index_topk > 0) {
    C.ki = C.entries > 0
               ? ds_compress(*this, c, x, 0, "idx_comp_", c.index_dim, attn_index_rope_dims(c), nullptr)
                     .squeeze(2)
               : torch::zeros({B, 0, c.index_dim}, x.options());  // [B, N, DI]
    ds_state_prefill(*this, c, x, "idx_comp_", c.index_dim, &C.idx_a, &C.idx_z);
  }
  return out;
}

torch::Tensor AttentionImpl::decode_ds(const torch::Tensor& x, AttnCache* cache) {
  const AttnConfig& c = cfg_;
  AttnCache& C = *cache;
  const int64_t B = x.size(0), H = c.n_heads, D = c.head_dim, p = C.pos;
  auto iopt = torch::TensorOptions().dtype(torch::kInt64).device(x.device());
  auto pos = torch::full({1}, p, iopt);
  torch::Tensor qa;
  auto q = ds_queries(x, pos, &qa);  // [B, 1, H, D]
  C.k = torch::cat({C.k, ds_latents(x, pos)}, 1);
  // the entry this token completes (block p / m), and the indexer's key for it
  if (c.kind != AttnKind::DsWindow) {
    auto e = ds_state_decode(*this, c, x, p, "comp_", D, attn_rope_dims(c), &C.comp_a, &C.comp_z);
    if (c.index_topk > 0) {
      auto ke = ds_state_decode(*this, c, x, p, "idx_comp_", c.index_dim, attn_index_rope_dims(c), &C.idx_a,
                                &C.idx_z);
      if (ke.defined()) C.ki = torch::cat({C.ki, ke.squeeze(2)}, 1);  // [B, N, DI]
    }
    if (e.defined()) {
      C.kc = torch::cat({C.kc, e}, 1);
      C.entries += 1;
    }
    C.vc = C.kc;
  }
  // the window: the last w latents, this token's included
  const int64_t keep_from = std::max<int64_t>(0, p + 1 - c.window);
  if (keep_from > C.raw_from) {
    C.k = C.k.narrow(1, keep_from - C.raw_from, C.k.size(1) - (keep_from - C.raw_from));
    C.raw_from = keep_from;
  }
  C.v = C.k;
  // one softmax over the window, the entries the indexer picks (all without indexer) and the sink;
  // every finished entry is visible to this query
  const double scale = 1.0 / std::sqrt(double(D));
  auto qg = q.view({B, 1, H, D});  // [B, Hkv=1, H, D]
  std::vector<torch::Tensor> parts = {torch::matmul(qg, C.k.permute({0, 2, 3, 1})) *
                                      scale};  // [B, 1, H, n_raw]
  const int64_t n_raw = C.k.size(1), N = C.entries;
  if (N > 0) {
    auto sc = torch::matmul(qg, C.kc.permute({0, 2, 3, 1})) * scale;  // [B, 1, H, N]
    if (c.index_topk > 0 && N > c.index_topk) {
      torch::NoGradGuard no_grad;
      auto [qi, w] = ds_index_queries(*this, c, qa, x, pos);
      auto picks = index_select_topk(qi, w, C.ki, torch::full({1}, N, iopt), c.index_topk);  // [B, 1, k]
      auto picked =
          torch::zeros({B, 1, N}, iopt.dtype(torch::kBool)).scatter(-1, picks, true);  // k < N: all valid
      sc = sc.masked_fill(picked.logical_not().view({B, 1, 1, N}), -std::numeric_limits<double>::infinity());
    }
    parts.push_back(sc);
  }
  if (c.sink) parts.push_back(param("sink").view({1, 1, H, 1}).expand({B, 1, H, 1}));
  auto prob = torch::softmax(torch::cat(parts, -1), -1);
  auto o = torch::matmul(prob.narrow(-1, 0, n_raw), C.k.permute({0, 2, 1, 3}));  // [B, 1, H, D]
  if (N > 0) o = o + torch::matmul(prob.narrow(-1, n_raw, N), C.kc.permute({0, 2, 1, 3}));
  C.pos = p + 1;
  o = rope_apply(o.reshape({B, 1, H, D}), pos, attn_rope_inv_freq(c, attn_rope_dims(c)), /*sign=*/-1);
  return output(o);
}

}  // namespace phasescope
