// attention.h — the batched libtorch implementation of every attention kind (one module, one
// switch on AttnKind). Differentiable, any dtype (tests run it in fp64 against the reference).
// Memory and time of the compressed kinds grow as T x (w + T/S): the local window is computed in
// blocks of L tokens against the current and previous block, the compressed entries as a T x N
// score matrix; no T x T mask is ever built except for `full` itself.
// Decode (prefill, then one token at a time with AttnCache) for every kind.
// Not here: the loop oracle (reference.h), the decoder around it (model/).
#pragma once
#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>
#include <utility>

#include "attention/config.h"
#include "attention/reference.h"
#include "attention/rowwise.h"

namespace phasescope {

// Optional diagnostics of one forward pass (tests, interp/). Filling it costs extra memory.
struct AttnTrace {
  bool probs = true;          // fill entry_prob and raw_prob (B*H*T*(T+N) values); off for long inputs
  torch::Tensor entry_prob;   // [B, H, T, N] softmax mass on each compressed entry (0 = not attended)
  torch::Tensor entry_start;  // [N] absolute first-token position of each entry (its RoPE position)
  torch::Tensor raw_prob;     // [B, H, T, T] softmax mass on each raw token (dense; small T only)
  // Gate weights per window over its W offsets (offset i of entry j is token j*S + i - (W - S) for the
  // DeepSeek overlap, o + j*S + i for chunked with grid offset o; its phase is (o + i) % S, o = 0 but
  // for a staggered grid). Offsets before position 0 (a staggered grid's partial block) weigh 0.
  torch::Tensor gate_alpha;  // chunked: [B, N, W, Hkv, 1 or D] key branch; DeepSeek: the compressor's
                             // [B, N, kappa*m, 1, D] (one branch, K = V)
  torch::Tensor
      gate_alpha_v;  // chunked with separate K/V: [B, N, W, Hkv, 1 or D] value branch; else undefined
  // DeepSeek kinds: the compressed K = V entries after RMSNorm and RoPE at j*m, [B, N, D]; with an
  // indexer, the selection: index_topk [B, T, index_topk] entry indices j (score descending, ties to
  // the earlier entry, -1 where fewer are visible) and index_score [B, T, N] (-inf where not visible)
  torch::Tensor entry_kv;
  torch::Tensor index_topk;
  torch::Tensor index_score;
};

// Called on the per-head attention outputs o [B, T, H, D] (positions pos0.., after DeepSeek's output
// de-rotation) just before the output matrix; returns what goes on. Used by explain/ (capture, mean
// replacement); unset in training and evaluation.
using HeadHook = std::function<torch::Tensor(const torch::Tensor& o)>;

// Called with every chunked entry gate a forward makes, with its graph: branch "ck" or "cv" and alpha
// [B, N, W, Hkv, 1 or D] (softmax over W). Used by training regularizers (train/gate_penalty.h); unset
// otherwise. Uniform gates have no distribution to report. Chunked kinds report branches "ck" / "cv"
// (offset i = token s + i of the entry starting at s); the DeepSeek compressors "comp" and "idx_comp"
// with W = kappa*m, Hkv = 1, D = the entry width (offset i = token (j - kappa + 1)*m + i of entry j:
// with overlap the previous block's m tokens, then the block's own), so offset i has phase i % m.
using GateHook = std::function<void(const std::string& branch, const torch::Tensor& alpha)>;

// The decode-time state of one layer for a batch of sequences that advance together (same length),
// exactly what attn_kv_memory (kv_memory.h) counts: raw keys/values of the tokens still visible (full:
// all; window / chunked: the last w; uncompressed tail: those after the last finished entry's end),
// the finished compressed entries, and what an unfinished entry still needs (chunked: the hidden states
// of its tokens; DeepSeek: the compressors' open state).
struct AttnCache {
  int64_t pos = 0;       // tokens seen: the next token's absolute position
  int64_t raw_from = 0;  // position of the first raw token kept
  torch::Tensor k, v;    // [B, n_raw, Hkv, D] after Q/K norm and RoPE (v: no norm, no RoPE); DeepSeek:
                         // the latents [B, n_raw, 1, D] after kv_norm and RoPE, and v is k (K = V)
  torch::Tensor kc, vc;  // [B, N, Hkv, D] finished entries (vc is kc when tied, and for DeepSeek)
  bool tied = false;     // vc is kc
  bool latent = false;   // v is k (DeepSeek)
  torch::Tensor x_open;  // chunked: [B, n_open, d] hidden states of tokens [N*S, pos)
  // DeepSeek: the indexer's keys of the finished entries [B, N, index_dim], and each compressor's open
  // state as the official inference code keeps it: per token of the previous block (overlap only) and
  // the open block, a = Wkv x and z = Wgate x + ape[t mod m], [B, coff*m, coff*width] each (coff = 2
  // with overlap; rows: previous block's tokens, then the open block's, t mod m within each; rows of
  // tokens not seen yet or before position 0: a = 0, z = -inf).
  torch::Tensor ki;
  torch::Tensor comp_a, comp_z;  // the entries' compressor, width D
  torch::Tensor idx_a, idx_z;    // the indexer's compressor, width index_dim (undefined without indexer)
  int64_t entries = 0;           // N
  int64_t values() const;        // values held per sequence (vc / v counted once when shared)
};

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const AttnConfig& cfg);

  // x: [B, T, d] hidden states at absolute positions pos0 .. pos0+T-1. Returns [B, T, d].
  torch::Tensor forward(const torch::Tensor& x, int64_t pos0 = 0, AttnTrace* trace = nullptr);

  // The same output at selected rows only: rows [N] int64, flat b * T + t. Keys and values come
  // from every position; queries, scores and W_o only for the rows (the last layer of a model whose
  // loss reads a few positions). Returns [N, d], equal to forward(x, pos0).reshape({-1, d})
  // .index_select(0, rows) up to float summation order. Full, window and chunked kinds (window >= 1,
  // no uncompressed tail, no head hook) take the fast path when rows are at most a quarter of B x T;
  // every other case computes all rows and gathers.
  torch::Tensor forward_rows(const torch::Tensor& x, int64_t pos0, const torch::Tensor& rows);

  // Decode. prefill: forward(x, 0) for x [B, T, d] at positions 0..T-1, and the cache after it.
  // decode: one more token per sequence, x [B, 1, d] at position cache->pos; returns [B, 1, d], equal to
  // the last row of forward over the whole sequence up to float summation order (tested). No head hook,
  // no trace.
  torch::Tensor prefill(const torch::Tensor& x, AttnCache* cache);
  torch::Tensor decode(const torch::Tensor& x, AttnCache* cache);

  const AttnConfig& config() const { return cfg_; }
  void set_head_hook(HeadHook hook) { head_hook_ = std::move(hook); }  // empty = none
  void set_gate_hook(GateHook hook) { gate_hook_ = std::move(hook); }  // empty = none
  const GateHook& gate_hook() const { return gate_hook_; }
  torch::Tensor& param(const std::string& name);  // throws if this config has no such parameter

 private:
  torch::Tensor forward_mha(const torch::Tensor& x, int64_t pos0, AttnTrace* trace,
                            const torch::Tensor& rows = torch::Tensor());
  torch::Tensor forward_ds(const torch::Tensor& x, int64_t pos0, AttnTrace* trace);

  torch::Tensor output(const torch::Tensor& o);  // o [B, T, H, D] -> hook -> W_o -> [B, T, d]
  torch::Tensor mha_queries(const torch::Tensor& x, const torch::Tensor& pos);
  std::pair<torch::Tensor, torch::Tensor> mha_keys_values(const torch::Tensor& x, const torch::Tensor& pos);
  // DeepSeek projections at positions pos [T]: queries [B, T, H, D] (and the low-rank qa [B, T, q_rank]
  // the indexer reads), the K = V latents [B, T, 1, D]; forward_ds, prefill and decode call them.
  torch::Tensor ds_queries(const torch::Tensor& x, const torch::Tensor& pos, torch::Tensor* qa);
  torch::Tensor ds_latents(const torch::Tensor& x, const torch::Tensor& pos);
  torch::Tensor prefill_ds(const torch::Tensor& x, AttnCache* cache);
  torch::Tensor decode_ds(const torch::Tensor& x, AttnCache* cache);
  void chunked_entries(const torch::Tensor& xg, const torch::Tensor& starts, torch::Tensor* kc,
                       torch::Tensor* vc, torch::Tensor* alpha_k, torch::Tensor* alpha_v);

  AttnConfig cfg_;
  std::map<std::string, torch::Tensor> params_;
  HeadHook head_hook_;
  GateHook gate_hook_;
};
TORCH_MODULE(Attention);

// fp64 copies of the module's parameters for the reference, and the way back (tests set weights).
RefParams attention_export(AttentionImpl& module);
void attention_import(AttentionImpl& module, const RefParams& params);

// Give biases, sinks and norm weights random values too (they start at 0 / 1), so comparisons
// against the reference exercise every parameter. Uses torch's global generator.
void attention_randomize(AttentionImpl& module);

// ---------------------------------------------------------------------------------------------
// Building blocks, exposed for the model and for tests.

// RMSNorm and RoPE: attention/rowwise.h (included above).

}  // namespace phasescope
