// attention.cpp — batched libtorch attention zoo (see attention.h for the contract and
// config.h for the position conventions). Shapes are written next to every tensor.
#include "attention/attention.h"

#include <cmath>
#include <limits>

#include "attention/gathered.h"
#include "core/check.h"

namespace phasescope {

using torch::indexing::Slice;

// ---------------------------------------------------------------------------------------------
// Building blocks

namespace {

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

// One softmax over the score parts joined on the last dim, each with its mask of allowed keys.
// never_empty (every row allows at least one key): the fused softmax, one pass with a fused
// backward; otherwise masked_softmax, which gives an empty row zeros.
torch::Tensor joint_softmax(std::vector<torch::Tensor> parts, std::vector<torch::Tensor> masks,
                            bool never_empty) {
  if (!never_empty) {
    auto scores = parts.size() == 1 ? parts[0] : torch::cat(parts, -1);
    auto allowed = masks.size() == 1 ? masks[0] : torch::cat(masks, -1);
    parts.clear();
    return masked_softmax(scores, allowed);
  }
  // each part masked on its own, then joined: its (broadcast) mask is never materialized, each part's
  // product is released once masked and the masked parts once joined (the callers move their parts in),
  // so the forward holds at most two score-sized tensors at a time (the joined scores and the softmax)
  std::vector<torch::Tensor> masked;
  for (size_t i = 0; i < parts.size(); ++i) {  // where() reads the broadcast mask as it is (no negated copy)
    masked.push_back(torch::where(
        masks[i], parts[i], torch::full({}, -std::numeric_limits<float>::infinity(), parts[i].options())));
    parts[i].reset();
  }
  auto joined = masked.size() == 1 ? masked[0] : torch::cat(masked, -1);
  masked.clear();
  return torch::softmax(joined, -1);
}

// How the raw (uncompressed) tokens are chosen for each query.
struct LocalSpec {
  int64_t block = 1;   // L: queries are processed in blocks of L against keys of this and the previous block
  int64_t window = 0;  // w: keys with q - w < k <= q (0 = no raw tokens, unless tail)
  bool all = false;    // full attention: every earlier token
  torch::Tensor cover_end;  // tail mode: [T] int64, a raw key must have position > cover_end[q]
};

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

}  // namespace

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
