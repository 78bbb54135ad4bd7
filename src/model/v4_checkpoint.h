// v4_checkpoint.h — real DeepSeek-V4 checkpoints, read one layer at a time.
//
// Two layouts hold the same tensors (the mapping is written down in docs/deepseek-v4-checkpoints.md):
//   official:     DIR/config.json with the official inference code's ModelArgs fields (dim, n_heads,
//                 compress_ratios, compress_rope_theta, original_seq_len, rope_factor, ...) and
//                 DIR/model0-mp1.safetensors (its convert script's output for one rank);
//   Hugging Face: DIR/config.json with HF fields (hidden_size, num_attention_heads, qk_rope_head_dim,
//                 sliding_window, rope_scaling {factor, original_max_position_embeddings, beta_fast,
//                 beta_slow}, quantization_config {weight_block_size}, ...), DIR/model.safetensors.index.json
//                 (weight_map: tensor -> shard) and the shards.
// Tensor names are the official ones in both (the published V4 shards use them): layers.{i}.attn.
// {wq_a, q_norm, wq_b, wkv, kv_norm, wo_a, wo_b}.weight, .attn_sink, .compressor.{wkv, wgate, norm}
// .weight, .compressor.ape, .indexer.{wq_b, weights_proj}.weight, .indexer.compressor.*. FP8 E4M3
// weights come with `<name minus .weight>.scale` (E8M0 or F32, one per 128 x 128 block) or HF's
// `.weight_scale_inv`, and are dequantized on load; BF16 / F16 / F32 are widened.
// Only the headers of the files that hold a requested tensor and that tensor's bytes are read.
// Not here: the attention math (attention/), the gate analysis (explain/v4_gates.h).
#pragma once
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "model/safetensors_file.h"

namespace phasescope {

// The ModelArgs fields a V4 attention layer needs (defaults: the official ModelArgs' own).
struct V4Args {
  int dim = 4096;
  int n_layers = 7;
  int n_heads = 64;
  int q_lora_rank = 1024;
  int head_dim = 512;
  int rope_head_dim = 64;
  double norm_eps = 1e-6;
  int o_groups = 8;
  int o_lora_rank = 1024;
  int window_size = 128;
  std::vector<int> compress_ratios = {0, 0, 4, 128, 4, 128, 4, 0};
  double compress_rope_theta = 40000.0;
  int original_seq_len = 0;  // > 0 turns YaRN on in compressed layers
  double rope_theta = 10000.0;
  double rope_factor = 40.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  int index_n_heads = 64;
  int index_head_dim = 128;
  int index_topk = 512;
  int fp8_block = 128;  // FP8 weight scale block (HF quantization_config.weight_block_size)
};

enum class V4Layout { Official, HuggingFace };
std::string v4_layout_name(V4Layout layout);  // "official" / "huggingface"

struct V4Checkpoint {
  std::string dir;
  V4Layout layout = V4Layout::Official;
  std::string config_style;  // "ModelArgs" or "Hugging Face" (the config's keys)
  V4Args args;
  std::map<std::string, std::string> file_of;   // tensor name -> file path
  std::map<std::string, SafetensorsFile> open;  // files whose header has been read
  uint64_t index_bytes = 0;                     // config.json + index.json bytes
};

// Reads config.json and the index (or, for the official layout, the headers of model*-mp*.safetensors).
// Errors name the file, the field and the fix.
V4Checkpoint v4_open(const std::string& dir);

// Bytes read so far: config, index, headers of the opened files, tensor bytes.
uint64_t v4_bytes_read(const V4Checkpoint& ck);
// Total size of the checkpoint's tensor files (what loading everything would read).
uint64_t v4_total_bytes(const V4Checkpoint& ck);

bool v4_has(const V4Checkpoint& ck, const std::string& name);
// One tensor as `dtype`; an FP8 weight is multiplied by its block scales.
torch::Tensor v4_read(V4Checkpoint& ck, const std::string& name, torch::Dtype dtype);

// Layer i as a phasescope attention config: ratio 0 -> dsv4-window, 4 -> dsv4-csa (overlap,
// indexer), any other m -> hca; compressed layers use compress_rope_theta with YaRN, window-only
// layers rope_theta without; grouped low-rank output; indexer RoPE on rope_head_dim dims.
AttnConfig v4_attn_config(const V4Args& args, int layer);

// phasescope parameter name -> official tensor name, for layer i with config c.
std::vector<std::pair<std::string, std::string>> v4_attn_tensor_names(const AttnConfig& c, int layer);

// Layer i's attention module with the checkpoint's weights, in `dtype` (reads only its tensors).
Attention v4_attention_load(V4Checkpoint& ck, int layer, torch::Dtype dtype);

// What `phasescope v4 layer` writes: attention layer i on hidden states x [B, T, dim] at positions
// 0..T-1 (the attention's input, i.e. after attn_norm).
struct V4LayerOutput {
  torch::Tensor out;            // [B, T, dim]
  torch::Tensor kv_compressed;  // [B, N, head_dim] after norm and RoPE (N = T / ratio); undefined if ratio 0
  torch::Tensor index_topk;     // [B, T, index_topk] int64, -1 = none (CSA only)
};
V4LayerOutput v4_layer_run(Attention& attn, const torch::Tensor& x);

}  // namespace phasescope
