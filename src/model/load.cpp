// load.cpp — see load.h.
#include "model/load.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/check.h"
#include "core/hash.h"
#include "core/json_fields.h"

namespace phasescope {

using json = nlohmann::json;

std::string checkpoint_path(const std::string& dir_or_file) {
  if (dir_or_file.size() > 12 && dir_or_file.substr(dir_or_file.size() - 12) == ".safetensors")
    return dir_or_file;
  return (std::filesystem::path(dir_or_file) / "checkpoint.safetensors").string();
}

std::string model_content_hash(DecoderImpl& model, const Preset& preset) {
  json arch = preset_to_json(preset);
  for (const char* k : {"name", "description", "task", "train"}) arch.erase(k);
  uint64_t h = fnv1a(arch.dump());
  for (const auto& item : model.named_parameters()) {
    const torch::Tensor t = item.value().detach().to(torch::kCPU, torch::kFloat32).contiguous();
    h = fnv1a(item.key(), h);
    for (int64_t d : t.sizes()) h = fnv1a(&d, sizeof d, h);
    h = fnv1a(t.data_ptr(), size_t(t.numel()) * sizeof(float), h);
  }
  return hash_hex(h);
}

CheckpointContents checkpoint_read(const std::string& path) {
  CheckpointContents r;
  std::string h;
  r.tensors = safetensors_load(path, &h);
  r.header = json_parse_or_fail(h, path + " phasescope header", "the checkpoint is damaged; retrain");
  for (const char* k : {"version", "preset", "step", "data_state"})
    if (!r.header.contains(k))
      fail(path, std::string("phasescope header lacks '") + k + "'", "the checkpoint is damaged; retrain");
  return r;
}

void checkpoint_load_weights(DecoderImpl& model, const TensorMap& tensors, const std::string& path) {
  torch::NoGradGuard g;
  for (auto& item : model.named_parameters()) {
    auto it = tensors.find("model." + item.key());
    if (it == tensors.end())
      fail(path, "missing tensor model." + item.key(),
           "the checkpoint does not match its own config; retrain");
    if (it->second.sizes() != item.value().sizes())
      fail(path, "tensor model." + item.key() + " has the wrong shape",
           "the checkpoint does not match its own config; retrain");
    item.value().copy_(it->second);
  }
}

WarmStart model_warm_start(DecoderImpl& model, const std::string& dir_or_file) {
  LoadedModel src = model_load(dir_or_file);
  WarmStart w;
  w.source = checkpoint_path(dir_or_file);
  w.source_hash = src.hash;
  w.source_preset = src.preset.name;
  w.source_step = src.step;
  std::map<std::string, torch::Tensor> from;
  for (const auto& item : src.model->named_parameters()) from[item.key()] = item.value();
  torch::NoGradGuard g;
  for (auto& item : model.named_parameters()) {
    auto it = from.find(item.key());
    if (it == from.end()) {
      w.kept.push_back(item.key());
      continue;
    }
    if (it->second.sizes() != item.value().sizes())
      fail(w.source,
           "parameter " + item.key() + " has shape " + c10::str(it->second.sizes()) + " there but " +
               c10::str(item.value().sizes()) + " in the model to train",
           "warm-start from a checkpoint of the same widths, heads, KV heads and vocabulary (only the "
           "attention kind may differ)");
    item.value().copy_(it->second);
    w.copied.push_back(item.key());
    from.erase(it);
  }
  std::vector<std::string> unused;  // source parameters the model lacks
  for (const auto& [name, t] : from) unused.push_back(name);
  if (!unused.empty())
    fail(w.source,
         fmt::format("has {} parameters the model to train lacks ({}{})", unused.size(), unused.front(),
                     unused.size() > 1 ? ", ..." : ""),
         "warm-start from a model whose every parameter the new one has: the same depth, and full attention "
         "for the W/S kinds or the window-only layer for the DeepSeek kinds (train.dense_warmup_steps makes "
         "one)");
  return w;
}

LoadedModel model_load(const std::string& dir_or_file) {
  const std::string path = checkpoint_path(dir_or_file);
  CheckpointContents r = checkpoint_read(path);
  LoadedModel out;
  out.preset = preset_from_json(r.header["preset"], path + " (embedded preset)");
  out.step = r.header["step"].get<int64_t>();
  out.model = Decoder(out.preset.model);
  checkpoint_load_weights(*out.model, r.tensors, path);
  out.model->eval();
  out.hash = model_content_hash(*out.model, out.preset);
  // a checkpoint that records its model's hash must still hold that model (older ones record none)
  if (r.header.contains("model_hash") && r.header["model_hash"].is_string() &&
      r.header["model_hash"].get<std::string>() != out.hash)
    fail(path,
         "its tensors do not hash to the model_hash it was written with (" +
             r.header["model_hash"].get<std::string>() + " vs " + out.hash +
             "): tensors were swapped or edited",
         "restore the checkpoint from a copy, or retrain");
  return out;
}

}  // namespace phasescope
