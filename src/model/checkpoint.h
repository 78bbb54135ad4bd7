// checkpoint.h — safetensors files: an 8-byte little-endian header length, a JSON header naming
// every tensor (dtype, shape, byte offsets) with a "__metadata__" object, then the raw bytes.
// phasescope keeps its own header (config, preset, step, RNG and data state, ...) as one JSON
// string under __metadata__.phasescope, and a checksum under __metadata__.phasescope_checksum
// ("v2-" + 16 hex) that binds every tensor's bytes to its name, dtype and shape and to that header, so a
// damaged, truncated, edited or tensor-swapped file is refused, never half-loaded.
// Writes are atomic (core/io.h: a temp file in the same directory, fsync, rename, fsync the folder).
// Not here: what a training run puts in the header (train/trainer.cpp).
#pragma once
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

namespace phasescope {

using TensorMap = std::map<std::string, torch::Tensor>;

// One tensor as the checksum sees it: name, safetensors dtype ("F32"...), shape, and its bytes.
struct TensorRecord {
  std::string name, dtype;
  std::vector<int64_t> shape;
  const void* data;
  size_t bytes;
};
// FNV-1a over the records (in the order given: name order) and then header_json.
uint64_t checkpoint_digest(const std::vector<TensorRecord>& tensors, const std::string& header_json);

// Tensors must be CPU and of dtype float32, float64, int64 or uint8.
void safetensors_save(const std::string& path, const TensorMap& tensors, const std::string& header_json);

// Throws an Error naming the file and what is wrong (truncated, bad JSON, offsets, checksum...).
TensorMap safetensors_load(const std::string& path, std::string* header_json);

}  // namespace phasescope
