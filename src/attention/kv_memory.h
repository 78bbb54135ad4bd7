// kv_memory.h — what a decoder's KV cache holds per layer and sequence after T tokens, from the config
// alone: the memory side of a compression design, printed beside its per-phase accuracy (study,
// mitigations, zoo). Counts are values (multiply by the bytes of the cache dtype). Per kind:
//   full:      K and V of every token: T x Hkv x D x 2.
//   window:    K and V of the last min(T, w) tokens.
//   chunked:   finished entries N = floor((T - W) / S) + 1 (0 while T < W; entry j covers tokens
//              [j*S, j*S + W) and is finished once token j*S + W - 1 arrived), each a key (Hkv x D) and,
//              unless tied_kv, a value; the exact window's raw K and V (min(T, w) tokens), or with
//              uncompressed_tail the raw tokens after the last finished entry's end; and the hidden states
//              (d values each) of the tokens an unfinished entry still needs: those after the last
//              finished entry's start + S, at most W - 1.
//   DeepSeek:  finished entries N = floor(T / m), each the latent (D) plus, with an indexer, its key
//              (index_dim); the window's raw latents (min(T, w) x D, K = V); and the compressors' open
//              state as the official inference code keeps it: kv and score buffers of coff*m rows and
//              coff*D columns (coff = 2 with overlap, else 1), and the same for the indexer's compressor
//              at index_dim. DsWindow: the window only.
// Not here: the decode path that allocates this (its tests check the allocation equals these figures).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attention/config.h"

namespace phasescope {

struct KvMemory {
  int64_t entries = 0;       // finished compressed entries (0 for full / window)
  int64_t entry_values = 0;  // their keys and values (and indexer keys)
  int64_t raw_tokens = 0;    // exact tokens kept (full: all; window/tail: the last few)
  int64_t raw_values = 0;    // their K and V
  int64_t state_values = 0;  // what unfinished entries still need (hidden states or compressor buffers)
  int64_t total() const { return entry_values + raw_values + state_values; }
};

// One layer, one sequence, after T tokens (T >= 0).
KvMemory attn_kv_memory(const AttnConfig& cfg, int64_t T);

// Every layer of a model: bytes of one sequence's cache after T tokens, and per token (bytes / T).
int64_t model_kv_bytes(const std::vector<AttnConfig>& layers, int64_t T, int bytes_per_value);
double model_kv_bytes_per_token(const std::vector<AttnConfig>& layers, int64_t T, int bytes_per_value);

// One model's line of the `phasescope kv-memory` table: its cache after T tokens, per token, and
// against full attention with the same layers, KV heads and head dim (the memory a design saves).
struct KvMemoryRow {
  std::string name;     // preset name
  std::string design;   // "chunked W8/S8 w16 x2" ...
  int64_t context = 0;  // T
  int bytes_per_value = 2;
  int64_t entries = 0;   // compressed entries over all layers
  int64_t bytes = 0;     // the whole cache of one sequence
  double per_token = 0;  // bytes / T
  double vs_full = 0;    // bytes / the same model's cache under full attention
};
KvMemoryRow kv_memory_row(const std::string& name, const std::vector<AttnConfig>& layers, int64_t T,
                          int bytes_per_value);
std::string kv_memory_table(const std::vector<KvMemoryRow>& rows);

}  // namespace phasescope
