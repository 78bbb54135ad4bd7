// gathered.h — attention over per-query entry selections (DeepSeek CSA reads only the top-k entries its
// indexer picks for each query, and its window layers the w tokens before each query): the selection
// (index_select_topk, below) and the two products:
//   gathered_scores: s[b, t, h, k] = sum_d q[b, t, h, d] * e[b, idx[b, t, k], d]
//   gathered_mix:    o[b, t, h, d] = sum_k p[b, t, h, k] * e[b, idx[b, t, k], d]
// q: [B, T, H, D], p: [B, T, H, K], e: [B, N, D] (one KV head), idx: [B, T, K] int64 in [0, N) (callers
// clamp unpicked slots to a valid entry and mask those columns themselves). Differentiable in q / p and
// e, not in idx. The readable reference is gather-then-matmul (gathered_*_reference); the fast path is
// three plain loops over rows (dot products with gathered rows, weighted sums of gathered rows, and
// their scatter-add back to entries) with their own backward, for CPU float / double; other devices and
// dtypes take the reference. Why: libtorch's bmm over T tiny [H, D] x [D, K] products runs one mm call
// (and three tensor views) per query: at T = 8192 that overhead, forward and backward, was most of CSA's
// time, and the gathered [B, T, K, D] copies most of its memory.
#pragma once
#include <torch/torch.h>

namespace phasescope {

torch::Tensor gathered_scores(const torch::Tensor& q, const torch::Tensor& e, const torch::Tensor& idx);
torch::Tensor gathered_mix(const torch::Tensor& p, const torch::Tensor& e, const torch::Tensor& idx);

// DeepSeek CSA's indexer, scores and selection in one pass per query row:
//   score(t, j) = sum_h w[b, t, h] * ReLU(q[b, t, h, :] . k[b, j, :])  for the visible entries j < n_vis[t]
//   picks [B, T, min(topk, N)]: the min(topk, n_vis[t]) visible entries of highest score, ties to the
//   earlier entry, in no particular order, -1 past them
// q: [B, T, HI, DI] (rotated), w: [B, T, HI] (scaled), k: [B, N, DI], n_vis: [T] int64 (entries are
// visible in order, so the visible ones are a prefix). Not differentiable (a discrete choice). The fast
// path scores one row at a time (no [T, HI, N] products), bounds the k-th score by the maxima of groups
// of entries and picks the k best of the entries at or above it by (score, earlier entry), so ties go to
// the earlier entry by construction; CPU float / double, else the reference.
torch::Tensor index_select_topk(const torch::Tensor& q, const torch::Tensor& w, const torch::Tensor& k,
                                const torch::Tensor& n_vis, int64_t topk);
// the reference: all scores as one product (index_scores), then topk_earliest_ties
torch::Tensor index_select_topk_reference(const torch::Tensor& q, const torch::Tensor& w,
                                          const torch::Tensor& k, const torch::Tensor& n_vis, int64_t topk);
// score [B, T, N] as above, every entry (no visibility)
torch::Tensor index_scores(const torch::Tensor& q, const torch::Tensor& w, const torch::Tensor& k);
// of the visible entries (vis, broadcast to score [B, T, N]; score -inf where not visible), the k with
// the highest scores, ties to the earlier entry, all visible ones when fewer: [B, T, min(k, N)] in no
// particular order, -1 past them. One partial top-k gives the k-th score; only rows whose ties straddle
// it need more.
torch::Tensor topk_earliest_ties(const torch::Tensor& score, const torch::Tensor& vis, int64_t k);

torch::Tensor gathered_scores_reference(const torch::Tensor& q, const torch::Tensor& e,
                                        const torch::Tensor& idx);
torch::Tensor gathered_mix_reference(const torch::Tensor& p, const torch::Tensor& e,
                                     const torch::Tensor& idx);

}  // namespace phasescope
