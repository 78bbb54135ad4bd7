// attention_blocks.cpp — see attention_blocks.h.
#include "attention/attention_blocks.h"

#include <cmath>
#include <limits>

#include "attention/gathered.h"
#include "core/check.h"

namespace phasescope {
namespace attention_blocks {

using torch::indexing::Slice;

torch::Tensor matmul_wt(const torch::Tensor& x, const torch::Tensor& w) { return torch::matmul(x, w.t()); }

// Softmax over the last dim restricted to `mask`; a row with nothing allowed gives all zeros.
torch::Tensor masked_softmax(const torch::Tensor& scores, const torch::Tensor& mask) {
  const double ninf = -std::numeric_limits<double>::infinity();
  auto s = scores.masked_fill(mask.logical_not(), ninf);
  auto mx = std::get<0>(s.max(-1, /*keepdim=*/true)).detach();
  mx = torch::where(torch::isfinite(mx), mx, torch::zeros_like(mx));
  auto e = torch::exp(s - mx);
  auto den = e.sum(-1, /*keepdim=*/true);
  return e / torch::where(den > 0, den, torch::ones_like(den));
}

// A mask as the small tensor it was broadcast from: every dim of stride 0 (an expand) narrowed to size 1.
torch::Tensor unexpand(torch::Tensor m) {
  for (int64_t d = 0; d < m.dim(); ++d)
    if (m.stride(d) == 0 && m.size(d) > 1) m = m.narrow(d, 0, 1);
  return m;
}

// One softmax over the score parts joined on the last dim, each with its mask of allowed keys.
// never_empty (every row allows at least one key): libtorch's softmax, one pass with a fused
// backward; otherwise masked_softmax, which gives an empty row zeros.
torch::Tensor joint_softmax(std::vector<torch::Tensor> parts, std::vector<torch::Tensor> masks,
                            bool never_empty) {
  if (!never_empty) {
    auto scores = parts.size() == 1 ? parts[0] : torch::cat(parts, -1);
    auto allowed = masks.size() == 1 ? masks[0] : torch::cat(masks, -1);
    parts.clear();
    return masked_softmax(scores, allowed);
  }
  // each part masked on its own, then joined: a part gets a bias of 0 where allowed and -inf elsewhere,
  // made at the mask's unbroadcast size (x + 0 is x exactly, so the softmax is the one of the masked
  // scores bit for bit). A part that owns its values (the callers' products, moved in) takes the bias in
  // place: no score-sized temporary, and no backward pass for the mask (an add passes its gradient
  // through, where a where() writes a masked copy). A broadcast part (the sink) is added to out of place.
  // The forward holds at most two score-sized tensors at a time (the joined scores and the softmax).
  const double ninf = -std::numeric_limits<double>::infinity();
  std::vector<torch::Tensor> masked;
  for (size_t i = 0; i < parts.size(); ++i) {
    const torch::Tensor m = unexpand(masks[i]);
    auto bias =
        torch::zeros(m.sizes(), parts[i].options().requires_grad(false)).masked_fill_(m.logical_not(), ninf);
    bool broadcast = false;
    for (int64_t d = 0; d < parts[i].dim(); ++d) broadcast = broadcast || parts[i].stride(d) == 0;
    masked.push_back(broadcast ? parts[i] + bias : parts[i].add_(bias));
    parts[i].reset();
  }
  auto joined = masked.size() == 1 ? masked[0] : torch::cat(masked, -1);
  masked.clear();
  return torch::softmax(joined, -1);
}

// Per-query picks' softmax mass back to one column per key, for the traces of the gathered paths:
// p [B, T, H, K] on the picks idx [B, T, K] (clamped to a valid column), counted where ok ([B or 1, T, K]
// bool): [B, H, T, X].
torch::Tensor picks_to_columns(const torch::Tensor& p, const torch::Tensor& idx, const torch::Tensor& ok,
                               int64_t X) {
  const int64_t B = p.size(0), T = p.size(1), H = p.size(2), K = p.size(3);
  auto mass = (p.detach() * ok.unsqueeze(2).to(p.dtype())).permute({0, 2, 1, 3});  // [B, H, T, K]
  return torch::zeros({B, H, T, X}, p.options()).scatter_add_(3, idx.unsqueeze(1).expand({B, H, T, K}), mass);
}

// joint_attention's per-query path: one KV head, raw tokens a sliding window of w >= 1 (t-w, t], and
// entries none or picked per query (an indexer's entry_idx [B, T, K], -1 = none). Every part of the
// softmax is laid out [B, T, H, X] and both raw products go through the gathered kernels with the picks
// t-w+1+i: w products per query where the blocked path runs 2L masked ones, and no block padding or
// permutes (the entry part is already per query). The DeepSeek window-only and CSA layers take it.
//   q [B, T, H, D] (scaled), k, v [B, T, D] raw keys and values, kc, vc [B, N, D] or undefined, sink [H]
//   or undefined. Returns [B, T, H, D].
torch::Tensor per_query_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& kc, const torch::Tensor& vc,
                                  const torch::Tensor& entry_idx, int64_t window, const torch::Tensor& sink,
                                  AttnTrace* trace) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), w = std::min<int64_t>(window, T);
  const int64_t N = kc.defined() ? kc.size(1) : 0, K = N > 0 ? entry_idx.size(2) : 0;
  auto iopt = torch::TensorOptions().dtype(torch::kInt64).device(q.device());
  // raw pick i of query t is token t - w + 1 + i: [T, w]; before the sequence's start it is masked
  auto ri = torch::arange(T, iopt).view({T, 1}) - (w - 1) + torch::arange(w, iopt).view({1, w});
  auto raw_ok = ri >= 0;                                                    // [T, w]
  auto rsel = ri.clamp_min(0).unsqueeze(0).expand({B, T, w}).contiguous();  // [B, T, w]
  std::vector<torch::Tensor> parts = {gathered_scores(q, k, rsel)};         // [B, T, H, w]
  std::vector<torch::Tensor> masks = {raw_ok.view({1, T, 1, w})};
  torch::Tensor sel;  // [B, T, K], unpicked slots clamped to entry 0 and masked
  if (N > 0) {
    sel = entry_idx.clamp_min(0);
    parts.push_back(gathered_scores(q, kc, sel));  // [B, T, H, K]
    masks.push_back((entry_idx >= 0).unsqueeze(2));
  }
  if (sink.defined()) {
    parts.push_back(sink.view({1, 1, H, 1}).expand({B, T, H, 1}));
    masks.push_back(torch::ones({1, 1, 1, 1}, iopt.dtype(torch::kBool)));
  }
  auto p = joint_softmax(std::move(parts), std::move(masks), /*never_empty=*/true);  // the query sees itself
  const int64_t n_rest = p.size(-1) - w - K;
  std::vector<int64_t> sizes = {w};
  if (K > 0) sizes.push_back(K);
  if (n_rest > 0) sizes.push_back(n_rest);
  auto p_parts = p.split_with_sizes(sizes, -1);
  auto o = gathered_mix(p_parts[0], v, rsel);  // [B, T, H, D]
  if (K > 0) o = o + gathered_mix(p_parts[1], vc, sel);

  if (trace && trace->probs) {  // [B, H, T, N] and [B, H, T, T]
    if (N > 0) trace->entry_prob = picks_to_columns(p_parts[1], sel, entry_idx >= 0, N);
    trace->raw_prob = picks_to_columns(p_parts[0], rsel, raw_ok.unsqueeze(0), T);
  }
  return o;
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               int64_t block) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), Hkv = k.size(2), G = H / Hkv;
  const double ninf = -std::numeric_limits<double>::infinity();
  auto iopt = torch::TensorOptions().dtype(torch::kInt64).device(q.device());
  auto qh = q.view({B, T, Hkv, G, D}).permute({0, 2, 3, 1, 4});     // [B, Hkv, G, T, D]
  auto kh = k.permute({0, 2, 1, 3}), vh = v.permute({0, 2, 1, 3});  // [B, Hkv, T, D]
  std::vector<torch::Tensor> out;
  for (int64_t t0 = 0; t0 < T; t0 += block) {
    const int64_t t1 = std::min(T, t0 + block), Lb = t1 - t0;
    // the block's G heads' queries stacked as rows: [B, Hkv, G*Lb, D] x [B, Hkv, D, t1]
    auto qb = qh.narrow(3, t0, Lb).reshape({B, Hkv, G * Lb, D});
    auto s = torch::matmul(qb, kh.narrow(2, 0, t1).transpose(-1, -2)).view({B, Hkv, G, Lb, t1});
    // key j is visible to query t0 + i iff j <= t0 + i: a bias of 0 or -inf (x + 0 is x), [Lb, t1]
    auto future = torch::arange(t1, iopt).view({1, t1}) > (torch::arange(Lb, iopt) + t0).view({Lb, 1});
    s.add_(torch::zeros({Lb, t1}, s.options().requires_grad(false)).masked_fill_(future, ninf));
    auto p = torch::softmax(s, -1).view({B, Hkv, G * Lb, t1});
    out.push_back(torch::matmul(p, vh.narrow(2, 0, t1)).view({B, Hkv, G, Lb, D}));
  }
  auto o = out.size() == 1 ? out[0] : torch::cat(out, 3);  // [B, Hkv, G, T, D]
  return o.permute({0, 3, 1, 2, 4}).reshape({B, T, H, D});
}

// One joint softmax over raw tokens (block-local), compressed entries and the sink.
//   q:  [B, T, H, D]        k, v: [B, T, Hkv, D]      (raw tokens at pos0 + t)
//   kc, vc: [B, N, Hkv, D]  entry_last: [N] int64      (entry n visible to p iff entry_last[n] <= p)
//   entry_idx: [B, T, K] int64 or undefined: an indexer's selection. Each query then reads only its K
//              entries (-1 = none), gathered per query: T x K entry products instead of T x N (Hkv = 1)
//   sink: [H] or undefined. Returns [B, T, H, D].
torch::Tensor joint_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& kc, const torch::Tensor& vc,
                              const torch::Tensor& entry_last, const torch::Tensor& entry_idx,
                              const LocalSpec& local, const torch::Tensor& sink, int64_t pos0,
                              AttnTrace* trace) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), Hkv = k.size(2), G = H / Hkv;
  const int64_t L = std::max<int64_t>(1, std::min(local.block, T));
  const int64_t nb = (T + L - 1) / L, Tp = nb * L, KB = nb > 1 ? 2 : 1;
  const int64_t N = kc.defined() ? kc.size(1) : 0;
  const double scale = 1.0 / std::sqrt(double(D));
  auto iopt = torch::TensorOptions().dtype(torch::kInt64).device(q.device());
  if (local.all && N == 0 && !sink.defined() && !(trace && trace->probs) && T > kCausalQueryBlock)
    return causal_attention(q * scale, k, v);
  if (Hkv == 1 && !local.all && !local.cover_end.defined() && local.window >= 1 &&
      (N == 0 || entry_idx.defined())) {
    const bool e = N > 0;
    return per_query_attention(q * scale, k.squeeze(2), v.squeeze(2), e ? kc.squeeze(2) : torch::Tensor(),
                               e ? vc.squeeze(2) : torch::Tensor(), entry_idx, local.window, sink, trace);
  }

  // queries in blocks: [B, Hkv, nb, G, L, D]
  // the 1/sqrt(D) scale on the queries (T x H x D values) rather than on the scores (T x H x keys): one
  // score-sized temporary less, which is most of the peak memory of a long sequence; scaled once here for
  // the raw and the entry products alike
  auto qp = torch::constant_pad_nd(q * scale, {0, 0, 0, 0, 0, Tp - T});
  auto qb = qp.view({B, nb, L, Hkv, G, D}).permute({0, 3, 1, 4, 2, 5});

  // raw keys/values of the previous and current block: [B, Hkv, nb, KB*L, D]
  auto blocks = [&](const torch::Tensor& t) {
    auto tp = torch::constant_pad_nd(t, {0, 0, 0, 0, 0, Tp - T});  // [B, Tp, Hkv, D]
    auto cur = tp.view({B, nb, L, Hkv, D});
    torch::Tensor kw = cur;
    if (KB == 2) {
      auto prev =
          torch::constant_pad_nd(tp.narrow(1, 0, Tp - L), {0, 0, 0, 0, L, 0}).view({B, nb, L, Hkv, D});
      kw = torch::cat({prev, cur}, 2);  // [B, nb, 2L, Hkv, D]
    }
    return kw.permute({0, 3, 1, 2, 4});
  };
  auto kw = blocks(k), vw = blocks(v);
  // products batch over (B, Hkv, nb) with the G heads' L queries stacked as rows: a few hundred
  // 64 x 32 products rather than thousands of 16 x 32 ones (libtorch's small-matrix bmm path
  // loops per batch and dominated the step)
  auto qf = qb.reshape({B, Hkv, nb, G * L, D});  // [B, Hkv, nb, G*L, D], scaled
  auto s_raw = torch::matmul(qf, kw.transpose(-1, -2)).reshape({B, Hkv, nb, G, L, KB * L});

  // which raw key each query may see: [nb, L, KB*L] (broadcast over B, Hkv, G)
  auto qi = (torch::arange(nb, iopt).view({nb, 1, 1}) * L + torch::arange(L, iopt).view({1, L, 1}));
  auto ki = (torch::arange(nb, iopt).view({nb, 1, 1}) - (KB - 1)) * L +
            torch::arange(KB * L, iopt).view({1, 1, KB * L});
  // padded queries (qi >= T, dropped at the end) keep their causal keys, so no row is empty
  auto raw_ok = (ki >= 0) & (ki <= qi);
  if (local.cover_end.defined()) {
    auto ce = torch::constant_pad_nd(local.cover_end, {0, Tp - T}).view({nb, L, 1});
    raw_ok = raw_ok & (ki + pos0 > ce);
  } else if (!local.all) {
    raw_ok = raw_ok & (qi - ki < local.window);
  }
  std::vector<torch::Tensor> parts = {s_raw};
  std::vector<torch::Tensor> masks = {
      raw_ok.view({1, 1, nb, 1, L, KB * L}).expand({B, Hkv, nb, G, L, KB * L})};

  // compressed entries: scores [B, Hkv, nb, G, L, N], visible iff entry_last <= query position
  torch::Tensor vcb, sel;  // gathered: sel [B, Tp, K] (clamped to a valid entry; masked below)
  const bool gathered = N > 0 && entry_idx.defined();
  const int64_t NE = gathered ? entry_idx.size(2) : N;  // entry columns of the joint softmax
  if (gathered) {  // the indexer picked K entries per query: gather them, one [H, D] x [D, K] product each
    PS_ASSERT(Hkv == 1, "joint_attention: gathered entries need one KV head");
    auto idx = torch::constant_pad_nd(entry_idx, {0, 0, 0, Tp - T}, -1);  // [B, Tp, K]
    auto valid = idx >= 0;
    sel = idx.clamp_min(0);
    auto sc = gathered_scores(qp, kc.squeeze(2), sel);  // [B, Tp, H, K]
    parts.push_back(sc.view({B, nb, L, 1, H, NE}).permute({0, 3, 1, 4, 2, 5}));
    masks.push_back(valid.view({B, 1, nb, 1, L, NE}).expand({B, 1, nb, H, L, NE}));
  } else if (N >
             0) {  // every query block reads the same entries: one [nb*G*L, D] x [D, N] product per (B, Hkv)
    auto kcb = kc.permute({0, 2, 3, 1});  // [B, Hkv, D, N]
    vcb = vc.permute({0, 2, 1, 3});       // [B, Hkv, N, D]
    parts.push_back(torch::matmul(qf.reshape({B, Hkv, nb * G * L, D}), kcb).reshape({B, Hkv, nb, G, L, N}));
    auto vis = entry_last.view({1, 1, N}) <= (qi + pos0);  // [nb, L, N]
    masks.push_back(vis.view({1, 1, nb, 1, L, N}).expand({B, Hkv, nb, G, L, N}));
  }
  if (sink.defined()) {
    parts.push_back(sink.view({1, Hkv, 1, G, 1, 1}).expand({B, Hkv, nb, G, L, 1}));
    masks.push_back(torch::ones({B, Hkv, nb, G, L, 1}, iopt.dtype(torch::kBool)));
  }
  // a row can only be empty when the raw part may exclude the query itself (tail mode, window 0)
  // and there is no sink
  auto p = joint_softmax(std::move(parts), std::move(masks),
                         sink.defined() || local.all || (local.window >= 1 && !local.cover_end.defined()));
  // the columns split into raw, entry and sink parts (split, not narrow: the backward joins the parts'
  // gradients once instead of padding each to p's full size and summing them)
  const int64_t n_rest = p.size(-1) - KB * L - NE;
  auto p_parts = p.split_with_sizes(
      n_rest > 0 ? std::vector<int64_t>{KB * L, NE, n_rest} : std::vector<int64_t>{KB * L, NE}, -1);
  auto p_raw = p_parts[0];
  auto o = torch::matmul(p_raw.reshape({B, Hkv, nb, G * L, KB * L}), vw).reshape({B, Hkv, nb, G, L, D});
  torch::Tensor p_sel;  // gathered: [B, Tp, H, K]
  if (gathered) {
    p_sel = p_parts[1].permute({0, 2, 4, 1, 3, 5}).reshape({B, Tp, H, NE});
    o = o + gathered_mix(p_sel, vc.squeeze(2), sel).view({B, nb, L, 1, H, D}).permute({0, 3, 1, 4, 2, 5});
  } else if (N > 0) {
    o = o + torch::matmul(p_parts[1].reshape({B, Hkv, nb * G * L, N}), vcb).reshape({B, Hkv, nb, G, L, D});
  }

  if (trace && trace->probs) {
    auto to_bhtx = [&](const torch::Tensor& t) {  // [B, Hkv, nb, G, L, X] -> [B, H, T, X]
      return t.permute({0, 1, 3, 2, 4, 5}).reshape({B, H, Tp, t.size(-1)}).narrow(2, 0, T);
    };
    if (gathered) {  // back to one column per entry: [B, H, T, N]
      trace->entry_prob = picks_to_columns(p_sel.narrow(1, 0, T), sel.narrow(1, 0, T), entry_idx >= 0, N);
    } else if (N > 0) {
      trace->entry_prob = to_bhtx(p.narrow(-1, KB * L, N)).detach();
    }
    auto dense = torch::zeros({B, H, T, T}, q.options());
    auto pr = to_bhtx(p_raw).detach();                                             // [B, H, T, KB*L]
    auto kidx = ki.expand({nb, L, KB * L}).reshape({Tp, KB * L}).narrow(0, 0, T);  // key index per slot
    auto valid = (kidx >= 0) & (kidx < T);
    auto kclamped = kidx.clamp(0, T - 1).view({1, 1, T, KB * L}).expand({B, H, T, KB * L});
    dense.scatter_add_(3, kclamped, pr * valid.view({1, 1, T, KB * L}).to(pr.dtype()));
    trace->raw_prob = dense;
  }
  return o.permute({0, 2, 4, 1, 3, 5}).reshape({B, Tp, H, D}).narrow(1, 0, T);
}

// joint_attention for selected query rows only (never-empty rows: full, or a window >= 1).
//   q: [N, H, D] at rows (flat b * T + t); k, v: [B, T, Hkv, D]; kc, vc: [B, Ne, Hkv, D] or undefined;
//   entry_last [Ne]; sink [H] or undefined. Returns [N, H, D].
torch::Tensor rows_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& kc, const torch::Tensor& vc,
                             const torch::Tensor& entry_last, const LocalSpec& local,
                             const torch::Tensor& sink, int64_t pos0, const torch::Tensor& rows) {
  const int64_t N = q.size(0), H = q.size(1), D = q.size(2), B = k.size(0), T = k.size(1), Hkv = k.size(2),
                G = H / Hkv;
  const double scale = 1.0 / std::sqrt(double(D));
  auto iopt = torch::TensorOptions().dtype(torch::kInt64).device(q.device());
  auto b = rows.div(T, "floor"), t = rows.remainder(T);  // [N], [N]
  // raw keys: the whole sequence (full) or the w positions t-w+1 .. t (window), [N, K]
  const int64_t K = local.all ? T : std::min<int64_t>(local.window, T);
  auto idx = local.all ? torch::arange(T, iopt).view({1, T}).expand({N, T})
                       : t.view({N, 1}) - (K - 1) + torch::arange(K, iopt).view({1, K});
  auto raw_ok = (idx >= 0) & (idx <= t.view({N, 1}));                    // [N, K]
  auto flat = (b.view({N, 1}) * T + idx.clamp(0, T - 1)).reshape({-1});  // [N*K]
  auto kr = k.reshape({B * T, Hkv, D}).index_select(0, flat).view({N, K, Hkv, D});
  auto vr = v.reshape({B * T, Hkv, D}).index_select(0, flat).view({N, K, Hkv, D});
  auto qg = q.reshape({N, Hkv, G, D});
  std::vector<torch::Tensor> parts = {torch::matmul(qg, kr.permute({0, 2, 3, 1})) * scale};  // [N, Hkv, G, K]
  std::vector<torch::Tensor> masks = {raw_ok.view({N, 1, 1, K}).expand({N, Hkv, G, K})};
  torch::Tensor vcr;
  int64_t Ne = 0;
  if (kc.defined() && kc.size(1) > 0) {
    Ne = kc.size(1);
    auto kcr = kc.index_select(0, b);                                       // [N, Ne, Hkv, D]
    vcr = vc.index_select(0, b).permute({0, 2, 1, 3});                      // [N, Hkv, Ne, D]
    parts.push_back(torch::matmul(qg, kcr.permute({0, 2, 3, 1})) * scale);  // [N, Hkv, G, Ne]
    auto vis = entry_last.view({1, Ne}) <= (t + pos0).view({N, 1});         // [N, Ne]
    masks.push_back(vis.view({N, 1, 1, Ne}).expand({N, Hkv, G, Ne}));
  }
  if (sink.defined()) {
    parts.push_back(sink.view({1, Hkv, G, 1}).expand({N, Hkv, G, 1}));
    masks.push_back(torch::ones({N, Hkv, G, 1}, iopt.dtype(torch::kBool)));
  }
  auto p = joint_softmax(std::move(parts), std::move(masks), /*never_empty=*/true);
  auto o = torch::matmul(p.narrow(-1, 0, K), vr.permute({0, 2, 1, 3}));  // [N, Hkv, G, D]
  if (Ne > 0) o = o + torch::matmul(p.narrow(-1, K, Ne), vcr);
  return o.reshape({N, H, D});
}

// The hidden states of chunked entries' tokens: x [B, T, d] holds positions pos0 .., starts [N] the
// entries' first positions. Returns [B, N, W, d], row (n, i) = token starts[n] + i; rows before pos0
// (the partial block of a staggered grid) repeat token pos0 as a placeholder the gate masks out.
torch::Tensor entry_tokens(const torch::Tensor& x, const torch::Tensor& starts, int64_t pos0, int64_t W) {
  auto tok = starts.view({-1, 1}) + torch::arange(W, starts.options()).view({1, W}) - pos0;  // [N, W]
  return x.index({Slice(), tok.clamp_min(0)});
}

// Apply one map per in-window offset: xg [B, N, W, d], w [Hkv, W, R, d] -> [B, N, W, Hkv, R].
torch::Tensor per_offset_apply(const torch::Tensor& xg, const torch::Tensor& w) {
  const int64_t B = xg.size(0), N = xg.size(1), W = xg.size(2), d = xg.size(3);
  const int64_t Hkv = w.size(0), R = w.size(2);
  auto xw = xg.permute({2, 0, 1, 3}).reshape({W, B * N, d});   // [W, B*N, d]
  auto ww = w.permute({1, 3, 0, 2}).reshape({W, d, Hkv * R});  // [W, d, Hkv*R]
  return torch::bmm(xw, ww).view({W, B, N, Hkv, R}).permute({1, 2, 0, 3, 4});
}

}  // namespace attention_blocks
}  // namespace phasescope
