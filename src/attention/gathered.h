// gathered.h — the two products of attention over per-query entry selections (DeepSeek CSA reads only
// the top-k entries its indexer picks for each query):
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

torch::Tensor gathered_scores_reference(const torch::Tensor& q, const torch::Tensor& e,
                                        const torch::Tensor& idx);
torch::Tensor gathered_mix_reference(const torch::Tensor& p, const torch::Tensor& e,
                                     const torch::Tensor& idx);

}  // namespace phasescope
