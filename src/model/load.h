// load.h — the one place that loads a phasescope model: DIR/checkpoint.safetensors (or a .safetensors
// path) -> the preset it was trained with, the decoder with its weights, its step, and its identity:
// a content hash of the weights and the architecture, the same for two files that hold the same
// model whatever their training history. Checkpoints record the hash when written; a load recomputes
// it and refuses a file whose tensors no longer match it (swapped, edited). Journals bind to it
// (eval/scoring.h), so no sample scored by one model is ever counted for another.
// Not here: the checkpoint file format (checkpoint.h), training state (train/trainer.h).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/model.h"

namespace phasescope {

struct LoadedModel {
  Preset preset;
  Decoder model{nullptr};
  int64_t step = 0;
  std::string hash;  // model_content_hash of the loaded weights
};

// Load DIR/checkpoint.safetensors (or a .safetensors path); clear errors for anything damaged.
LoadedModel model_load(const std::string& dir_or_file);

// DIR -> DIR/checkpoint.safetensors; a path ending in .safetensors stays as it is.
std::string checkpoint_path(const std::string& dir_or_file);

// 16 hex digits: FNV-1a over the architecture (the preset's model and attention fields) and every
// parameter's name, shape and fp32 bytes, in the model's parameter order.
std::string model_content_hash(DecoderImpl& model, const Preset& preset);

// A checkpoint's phasescope header (JSON) and tensors, checked for the fields every checkpoint has.
struct CheckpointContents {
  nlohmann::json header;
  TensorMap tensors;
};
CheckpointContents checkpoint_read(const std::string& path);

// Copy the checkpoint's "model.*" tensors into the model's parameters (names and shapes must match).
void checkpoint_load_weights(DecoderImpl& model, const TensorMap& tensors, const std::string& path);

// Warm start (a dense warm-up, as DeepSeek-V3.2 trained its sparse attention from a dense checkpoint):
// every parameter of `model` whose name exists in the source checkpoint takes the source's weights (the
// model is loaded and hash-checked through model_load); a parameter the source lacks keeps the model's own
// seeded initialization (a compressed layer's gates and payload maps, when the source is full attention).
// A name present in both with different shapes, or a source that shares no parameter with the model, is
// refused, and so is a source with a parameter the model lacks (another depth, another attention family):
// that is the wrong source, not a partial match.
struct WarmStart {
  std::string source;               // the checkpoint file
  std::string source_hash;          // its model_content_hash
  std::string source_preset;        // its preset's name
  int64_t source_step = 0;          // its training step
  std::vector<std::string> copied;  // parameters taken from the source
  std::vector<std::string> kept;    // parameters the source lacks (left at their initialization)
};
WarmStart model_warm_start(DecoderImpl& model, const std::string& dir_or_file);

}  // namespace phasescope
