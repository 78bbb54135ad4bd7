// v4_gates.h — the static phase preferences of a real DeepSeek-V4 checkpoint's compressors, read
// from their offset biases alone (no forward pass, a few megabytes of a checkpoint).
//
// A V4 compressor's gate logit for token t, channel c is z_t[c] = (W_gate x_t)[c] + ape[t mod m][c]:
// the content part W_gate x_t plus a static bias per in-block offset (ape). This module reads the
// static part: per channel, the softmax of the ape logits over the entry's W slots (W = m, or 2m
// for CSA's overlap: slots 0..m-1 = the previous block through the first half of ape's channels,
// slots m..2m-1 = the current block through the second half), and from it
//   profile   alpha(k) = mean over channels of that softmax (sums to 1), g(k) = W * alpha(k)
//             (1 = uniform), slot k covers phase k mod m;
//   static concentration     exp(H(alpha)) (1 = one slot .. W = uniform), the paper's exp(H(E[alpha]));
//   per-channel concentration mean over channels of exp(H(softmax_c)) (how peaked each channel is);
//   argmax share(k) the fraction of channels whose bias peaks at slot k; favoured slots: g(k) largest.
// What a static bias cannot show: the content part, which can override it per window (explain's
// per-window concentration does that on phasescope models).
// Not here: reading the checkpoint (model/v4_checkpoint.h), CLI (tools/cmd_v4.cpp).
#pragma once
#include <string>
#include <vector>

#include "model/v4_checkpoint.h"

namespace phasescope {

struct V4GateProfile {
  int layer = 0;
  std::string branch;                // "kv" (the layer's compressor) or "indexer" (the indexer's compressor)
  int ratio = 0;                     // m
  int slots = 0;                     // W = m, or 2m with overlap
  int channels = 0;                  // d (per half)
  std::vector<double> alpha;         // [W] mean softmax over channels
  std::vector<double> g;             // [W] W * alpha
  std::vector<double> argmax_share;  // [W]
  double static_concentration = 0;   // exp(H(alpha))
  double channel_concentration = 0;  // mean_c exp(H(softmax_c))
  std::vector<int> favoured;         // slots by g, descending, while g > 1 (at most 3)
};

// The profile of one ape tensor [m, kappa * d] (kappa = 2: overlap halves as above).
V4GateProfile v4_gate_profile(const std::vector<double>& ape, int m, int kappa);

// Every compressed layer's compressor and indexer compressor; reads only the ape tensors.
std::vector<V4GateProfile> v4_gates(V4Checkpoint& ck);

// Writes gates.json, gates.csv and one heatmap per slot count (gates_w{W}.png: rows = layer and
// branch, columns = slots, cells = g) into out_dir; returns the terminal table.
std::string v4_gates_report(const V4Checkpoint& ck, const std::vector<V4GateProfile>& rows,
                            const std::string& out_dir);

}  // namespace phasescope
