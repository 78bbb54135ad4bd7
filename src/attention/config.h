// config.h — the one configuration struct and kind enum for every attention mechanism in the zoo,
// plus the parameter inventory (names, shapes, init) that the batched module and the scalar
// reference both read. Torch-free on purpose: configs, presets and the reference compile fast.
//
// Letters used across attention/: B = batch, T = tokens in the sequence, d = model width,
// H = query heads, Hkv = KV heads (1 = MQA), G = H / Hkv query heads per KV head, D = head dim,
// W = compression window, S = stride, m = DeepSeek ratio, N = compressed entries, w = local window.
// Positions are absolute 0-based token indices p = pos0 + t (pos0 = where the sequence starts in
// the stream); chunk boundaries are anchored at p = 0, so phase = p % S.
//   chunked:  entry j covers tokens [o + j*S, o + j*S + W), o = grid_offset (0 unless staggered);
//             exists iff o + j*S >= pos0, or it is the first partial block (below); visible to a
//             query at p iff o + j*S + W - 1 <= p; RoPE of its key at its first token max(o + j*S, 0).
//             Staggered (o > 0): at the stream start (pos0 = 0) the block [0, o) is entry j = -1,
//             pooled over the tokens it holds (offsets i < S - o are absent: no gate mass), so no
//             token is left out of the layer's memory. chunk_first_entry / chunk_entry_count below.
//   DeepSeek: entry j pools block j = [j*m, (j+1)*m) (plus block j-1 when overlapping); exists iff
//             j*m >= pos0; visible iff (j+1)*m - 1 <= p, i.e. j < floor((p+1)/m); RoPE at j*m.
// Not here: any tensor code (attention.h) or the loop reference (reference.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace phasescope {

enum class AttnKind {
  Full,      // causal softmax attention over every earlier token
  Window,    // exact local attention over the last w tokens, current included
  Chunked,   // the paper's general W/S compressor + exact local window, one joint softmax
  DsCsa,     // DeepSeek-V4 CSA: m = 4, overlapping previous-block half, indexer top-k, K = V latent
  DsHca,     // DeepSeek-V4 HCA: ratio m (128 in V4), no overlap, dense over visible entries
  DsCsa2,    // DeepSeek-V4.1 CSA2: ratio 2, no overlap, no offset bias
  DsWindow,  // DeepSeek-V4's window-only layers (compress ratio 0): the same MQA latent, sink and
             // output as CSA/HCA, attention over the exact window only, no compressor
};

enum class GateKind {
  Scalar,   // one gate logit per in-window offset: s_i = Z_i . h + b_i
  Vector,   // one gate logit per offset and channel: s_i = Z_i h + b_i (D values)
  Uniform,  // alpha = 1/W, no gate parameters
};

struct AttnConfig {
  AttnKind kind = AttnKind::Full;

  // shared by every kind
  int d_model = 64;    // d
  int n_heads = 4;     // H
  int n_kv_heads = 1;  // Hkv (DeepSeek kinds: must be 1, the latent is shared by all heads)
  int head_dim = 16;   // D (DeepSeek kinds: the latent width, 512 in V4)
  double rope_theta = 10000.0;
  // YaRN (DeepSeek-V4's compressed layers: factor 16, original length 65536, beta 32 / 1). Off when
  // yarn_original_len = 0. On, the rotary pairs i whose wavelength exceeds the original length run
  // at inv_freq_i / yarn_factor, the fast ones unchanged, a linear ramp between (attn_rope_inv_freq).
  double yarn_factor = 1.0;
  int yarn_original_len = 0;
  double yarn_beta_fast = 32.0;
  double yarn_beta_slow = 1.0;
  int rope_dims = -1;   // RoPE on the LAST rope_dims dims of a head, interleaved pairs; -1 = all D, 0 = none
  bool qk_norm = true;  // RMSNorm (learned weight) on q and k per head; full/window/chunked only
  bool sink = false;    // learned per-head logit s_h: adds exp(s_h) to the softmax denominator only
  int window = 16;      // w: exact local window of raw tokens incl. the current one; 0 = none
  double norm_eps = 1e-6;

  // chunked (the paper's W/S compressor)
  int W = 8;  // tokens per entry
  int S = 8;  // stride between entry starts (W >= S; W > S overlaps)
  GateKind gate = GateKind::Scalar;
  bool gate_bias = true;           // b_i (off = the paper's "no gate bias" ablation)
  bool per_offset_payload = true;  // C_i per offset; false = one shared payload map
  bool tied_kv = false;            // compressed values reuse the normalized, rotated compressed keys
  int comp_rope_dims = -1;         // RoPE dims on compressed keys; -1 = same as rope_dims; 0 = none
  bool uncompressed_tail = false;  // raw tokens only after the last visible entry (replaces `window`)
  // staggered grid: entry starts at o + j*S, 0 <= o < S; the phase of offset i is
  // (o + i) % S. Layers (or models) with different o put their chunk boundaries on different phases
  // at the same memory. Written to JSON only when non-zero (configs without one keep their JSON and hashes).
  int grid_offset = 0;

  // DeepSeek family (DsCsa, DsHca, DsCsa2)
  int ratio = 4;             // m
  bool overlap = true;       // kappa = 2: entry j also pools block j-1 through the "P half"
  bool offset_bias = true;   // learned bias per in-block offset on the gate logits ("ape")
  int q_rank = 32;           // q_lora_rank: x -> W_qa -> RMSNorm -> W_qb
  bool q_head_norm = true;   // V4 RMS-normalizes each query head (no weight); V4.1 does not
  int index_topk = 0;        // indexer keeps the top-k visible entries per query; 0 = no indexer (dense)
  int index_heads = 4;       // indexer heads
  int index_dim = 16;        // indexer head dim (and its compressor's width)
  int index_rope_dims = -1;  // RoPE dims (last ones) of indexer q/k; -1 = rope_dims (V4: rope_head_dim)
  // output: 0 = one matrix wo [d, H*D]; > 0 = V4's grouped low-rank output: the H heads in
  // o_groups contiguous groups, wo_a [o_groups*o_rank, H*D/o_groups] maps each group to o_rank
  // dims, wo_b [d, o_groups*o_rank] maps their concatenation back
  int o_groups = 0;
  int o_rank = 0;
};

// Defaults for a kind at toy scale (every field set; callers then override).
AttnConfig attn_config_default(AttnKind kind);

// Throws phasescope::Error naming `where` and the field when the config is inconsistent.
void attn_config_validate(const AttnConfig& cfg, const std::string& where);

// Names used in JSON, presets and the CLI: "full", "window", "chunked", "dsv4-csa", "hca", "v41-csa2",
// "dsv4-window".
std::string attn_kind_name(AttnKind kind);
AttnKind attn_kind_parse(const std::string& name, const std::string& where);
std::string gate_kind_name(GateKind kind);
GateKind gate_kind_parse(const std::string& name, const std::string& where);
std::vector<AttnKind> attn_all_kinds();

// JSON round trip. Parsing starts from attn_config_default(kind) and applies only the fields
// present; an unknown field or a wrong type is an error naming `where` and the field.
std::string attn_config_to_json(const AttnConfig& cfg);
AttnConfig attn_config_from_json(const std::string& json_text, const std::string& where);

// Derived quantities (used by both implementations and by reports).
int attn_rope_dims(const AttnConfig& cfg);        // rope_dims with -1 resolved
int attn_comp_rope_dims(const AttnConfig& cfg);   // comp_rope_dims with -1 resolved
int attn_index_rope_dims(const AttnConfig& cfg);  // index_rope_dims with -1 resolved
// Inverse frequencies of the rotary pairs i = 0 .. dims/2 - 1 on `dims` dims: theta^(-2i/dims), with
// YaRN (yarn_original_len > 0) blended as DeepSeek's precompute_freqs_cis does: pairs below the
// beta_fast correction dim keep their frequency, pairs above the beta_slow one run at 1/yarn_factor,
// a linear ramp between. The one formula both implementations use.
std::vector<double> attn_rope_inv_freq(const AttnConfig& cfg, int dims);
int attn_stride(const AttnConfig& cfg);  // S for chunked, m for DeepSeek kinds, 0 otherwise

// Chunked entry geometry (the rule in the header comment), shared by the reference, the batched
// module, decode and the memory count. A sequence holds the tokens at positions [pos0, pos0 + T).
int64_t chunk_entry_start(const AttnConfig& cfg, int64_t j);     // o + j*S (negative for the partial block)
int64_t chunk_entry_rope_pos(const AttnConfig& cfg, int64_t j);  // its first token: max(o + j*S, 0)
int64_t chunk_first_entry(const AttnConfig& cfg, int64_t pos0);  // the smallest j that exists
int64_t chunk_entry_count(const AttnConfig& cfg, int64_t pos0, int64_t T);  // finished entries from it
bool attn_is_compressed(const AttnConfig& cfg);
bool attn_is_ds(const AttnConfig& cfg);  // DsCsa, DsHca, DsCsa2 or DsWindow

// ---------------------------------------------------------------------------------------------
// Parameter inventory. Linear weights are [out, in] (y = W x). Both implementations look
// parameters up by these names; the reference never sees an init rule.
enum class InitKind { Normal, Ones, Zeros };
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  InitKind init = InitKind::Normal;
  double std = 0.02;  // for Normal
};
std::vector<ParamSpec> attn_param_specs(const AttnConfig& cfg);

}  // namespace phasescope
