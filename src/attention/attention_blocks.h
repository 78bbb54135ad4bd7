// attention_blocks.h — the pieces the batched attention module (attention.cpp, attention_ds.cpp) is
// built from: masked and joint softmaxes, the per-query and blocked joint attention over raw tokens plus
// compressed entries, and the chunked compressor's gathers. Internal to src/attention/: the module's
// public face is attention.h. Shapes: B batch, T queries, H query heads, Hkv KV heads, D head dim,
// N compressed entries, W window of an entry, w raw-token window.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "attention/attention.h"

namespace phasescope {
namespace attention_blocks {

// How the raw (uncompressed) tokens are chosen for each query.
struct LocalSpec {
  int64_t block = 1;   // L: queries are processed in blocks of L against keys of this and the previous block
  int64_t window = 0;  // w: keys with q - w < k <= q (0 = no raw tokens, unless tail)
  bool all = false;    // full attention: every earlier token
  torch::Tensor cover_end;  // tail mode: [T] int64, a raw key must have position > cover_end[q]
};

torch::Tensor matmul_wt(const torch::Tensor& x, const torch::Tensor& w);

// Softmax over the last dim restricted to `mask`; a row with nothing allowed gives all zeros.
torch::Tensor masked_softmax(const torch::Tensor& scores, const torch::Tensor& mask);

// One softmax over the score parts joined on the last dim, each with its mask of allowed keys.
// never_empty (every row allows at least one key): libtorch's softmax of the masked scores, one pass
// with a fused backward; otherwise masked_softmax, which gives an empty row zeros.
torch::Tensor joint_softmax(std::vector<torch::Tensor> parts, std::vector<torch::Tensor> masks,
                            bool never_empty);

// Per-query picks' softmax mass back to one column per key, for the traces of the gathered paths:
// p [B, T, H, K] on the picks idx [B, T, K] (clamped to a valid column), counted where ok ([B or 1, T, K]
// bool): [B, H, T, X].
torch::Tensor picks_to_columns(const torch::Tensor& p, const torch::Tensor& idx, const torch::Tensor& ok,
                               int64_t X);

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
                                  AttnTrace* trace);

// Causal attention over every earlier token (full attention with no entries and no sink), its queries
// in blocks of `block`: the block of queries [t0, t1) reads keys [0, t1) only, so the masked half of the
// T x T scores is mostly never formed (at T = 512 and blocks of 128, 10/16 of the products and of the
// softmax), and without autograd one block's scores are alive at a time. The same values as the one
// T x T softmax up to rounding (a row's sum runs over t1 keys instead of T).
//   q [B, T, H, D] (scaled), k, v [B, T, Hkv, D]. Returns [B, T, H, D].
constexpr int64_t kCausalQueryBlock = 128;
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               int64_t block = kCausalQueryBlock);

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
                              AttnTrace* trace);

// joint_attention for selected query rows only (never-empty rows: full, or a window >= 1).
//   q: [N, H, D] at rows (flat b * T + t); k, v: [B, T, Hkv, D]; kc, vc: [B, Ne, Hkv, D] or undefined;
//   entry_last [Ne]; sink [H] or undefined. Returns [N, H, D].
torch::Tensor rows_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& kc, const torch::Tensor& vc,
                             const torch::Tensor& entry_last, const LocalSpec& local,
                             const torch::Tensor& sink, int64_t pos0, const torch::Tensor& rows);

// The hidden states of chunked entries' tokens: x [B, T, d] holds positions pos0 .., starts [N] the
// entries' first positions. Returns [B, N, W, d], row (n, i) = token starts[n] + i; rows before pos0
// (the partial block of a staggered grid) repeat token pos0 as a placeholder the gate masks out.
torch::Tensor entry_tokens(const torch::Tensor& x, const torch::Tensor& starts, int64_t pos0, int64_t W);

// Apply one map per in-window offset: xg [B, N, W, d], w [Hkv, W, R, d] -> [B, N, W, Hkv, R].
torch::Tensor per_offset_apply(const torch::Tensor& xg, const torch::Tensor& w);

}  // namespace attention_blocks
}  // namespace phasescope
