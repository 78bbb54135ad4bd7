// config.h — what a run is: the decoder's shape (ModelConfig), its task (TaskConfig) and its
// training schedule (TrainConfig), bundled as a named Preset read from presets/NAME.json.
// Torch-free. JSON round trip is strict: an unknown field or wrong type names the file and field.
// Not here: the modules themselves (model.h) or the training loop (train/trainer.h).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attention/config.h"

namespace phasescope {

struct ModelConfig {
  int vocab_size = 0;  // set from the task's Vocab
  int d_model = 128;   // d
  int n_layers = 2;
  int n_heads = 4;              // H (query heads)
  int n_kv_heads = 1;           // Hkv (1 = MQA); ignored by DeepSeek layers (always 1)
  int head_dim = 32;            // D
  int mlp_hidden = 0;           // SwiGLU hidden width; 0 = attention-only blocks
  bool tied_embeddings = true;  // unembedding = embedding^T
  int token_shift = 0;  // K > 0: each attention input becomes x_t + sum_k c_k * x_{t-k}, k = 1..K, with
                        // learned per-channel c_k [K, d] starting at 0 (a causal depthwise convolution,
                        // "Canon"/RWKV-style token shift; position-invariant, so no phase of its own).
                        // Not in the paper's models; an option that did not shorten the plateau here
                        // (README, "What training shows"); 0 = the paper's decoder
  double norm_eps = 1e-6;
  double init_std = 0.02;  // normal init of every matrix; residual outputs scaled by 1/sqrt(2 n_layers)
  std::vector<AttnConfig>
      layers;  // [n_layers] attention of each layer; shared dims synced by model_config_sync
};

struct TaskConfig {
  std::string task = "lookup";  // lookup | mqar | text | mix (lookup + text) | corpus (a language model)
  int seq_len = 256;            // T of training sequences (lookup/mqar fill it exactly)
  int n_records = 64;           // lookup: records per prompt (the paper's 64)
  int n_demos = 8;              // lookup: demonstrations
  int curriculum_steps = 0;     // lookup/mqar: grow records linearly from min_records over these steps
                                // (mqar: pairs grow in the same proportion, records / n_records)
  int min_records = 8;
  bool curriculum_length = false;  // under the curriculum, rows are also shorter: seq_len x records /
                                   // n_records (at least what the records need, and 32), so filler density
                                   // stays that of the full task and attention is not diluted over a mostly
                                   // empty context (text rows of that step are as short)
  int mqar_pairs = 32;             // mqar: key-value pairs per sequence
  int mqar_queries = 16;           // mqar: queries per sequence
  int n_keys = 128;                // vocabulary of single-token keys
  int n_names = 128;               // vocabulary of single-token names / values
  int n_fillers = 16;
  std::string text_file;    // text / mix: UTF-8 file, byte-level tokens
  double text_ratio = 0.0;  // mix: fraction of rows drawn from the text file
  double repeat_ratio =
      0.0;  // lookup/mqar/mix (not text): fraction of the task rows that are repeated segments (a random
            // run of distinct key/name tokens, filler, the same run again; loss on every
            // token of the second copy): a dense induction signal; 0 = off. corpus: fraction of rows
            // in which a span of the row's own text occurs again later (a declared deviation)
  int repeat_steps = 0;       // repeated-segment rows only before this step; 0 = at every step
  std::string corpus;         // corpus: a corpus folder (data/corpus.h): packed rows of its BPE tokens, the
                              // document-boundary token between documents, next-token loss on every token
  double lookup_ratio = 0.0;  // corpus: fraction of rows that are lookup rows in the corpus's vocabulary
                              // (a declared deviation from pure pretraining); 0 = a pure language model
};

struct TrainConfig {
  int steps = 1000;
  int batch = 32;
  double lr = 3e-3;
  double min_lr_ratio = 0.1;  // cosine decays to lr * min_lr_ratio
  int warmup = 100;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95;
  double clip = 1.0;  // global gradient-norm clip; 0 = off
  int log_every = 10;
  int eval_every = 200;  // 0 = no periodic evaluation
  int eval_examples = 256;
  int ckpt_every = 200;
  uint64_t seed = 42;
  // lambda >= 0 of the static-gate entropy bonus (train/gate_penalty.h): the loss gains lambda x
  // the mean over chunked layers, branches and KV heads of 1 - exp(H(E[alpha])) / W, where E[alpha] is the
  // gate distribution averaged over the batch's windows. Per-window, content-driven gating stays free.
  double gate_entropy_bonus = 0;
  // lambda >= 0 of the head-coverage repulsion (train/gate_penalty.h): the loss
  // gains lambda x the mean over pairs of chunked gates (layer, KV head) of one branch of the overlap
  // <g_a, g_b> of their static phase profiles (E[alpha] folded onto phases, each summing to 1).
  double gate_coverage_bonus = 0;
  // Warm start (model/load.h model_warm_start): a checkpoint (DIR or .safetensors) whose weights start
  // every parameter of the same name, e.g. a full-attention model of the same widths, before a compressed
  // one trains from it ("dense warm-up"). "" = from the seeded initialization. A relative path is taken
  // from the working directory. The optimizer, schedule and data stream start from step 0 either way.
  std::string init_from;
  // Dense warm-up: > 0 first trains the preset's dense twin (train/trainer.h dense_warmup_preset: every
  // layer exact over the whole row, same widths) on this recipe for this many steps, in OUT/dense-warmup,
  // then warm-starts the preset from it. 0 = off. Exclusive with init_from; at most steps.
  int dense_warmup_steps = 0;
};

struct Preset {
  std::string name;
  std::string description;
  ModelConfig model;
  TaskConfig task;
  TrainConfig train;
};

// Copy the model-wide dims (d_model, heads, head_dim, kv heads, norm eps) into every layer and
// validate; `where` names the source in errors.
void model_config_sync(ModelConfig& m, const std::string& where);

// presets/ directory: $PHASESCOPE_PRESETS if set, else the source tree's presets/.
std::string preset_dir();
std::vector<std::string> preset_names();
// NAME (looked up in preset_dir()) or a path to a .json file.
Preset preset_load(const std::string& name_or_path);
// A preset from its JSON (an object: anything else is refused, naming `where`), or from JSON text.
Preset preset_from_json(const nlohmann::json& j, const std::string& where);
Preset preset_parse(const std::string& text, const std::string& where);
// Full and explicit (every field, every layer under "layers"), loadable again by preset_from_json.
nlohmann::json preset_to_json(const Preset& p);

}  // namespace phasescope
