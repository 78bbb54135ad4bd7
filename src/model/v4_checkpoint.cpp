// v4_checkpoint.cpp — see v4_checkpoint.h.
#include "model/v4_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "core/check.h"
#include "core/io.h"
#include "core/json_fields.h"

namespace phasescope {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Every config field is read with json_get_or: absent or null keeps V4Args' default, a wrong type is an
// error naming the file and the field, with this fix.
constexpr const char* kConfigFix =
    "write it as the official config does (an integer, a number or a list of integers)";

// The official ModelArgs keys.
V4Args args_from_model_args(const json& j, const std::string& where) {
  V4Args a;
  a.dim = json_get_or(j, "dim", a.dim, where, kConfigFix);
  a.n_layers = json_get_or(j, "n_layers", a.n_layers, where, kConfigFix);
  a.n_heads = json_get_or(j, "n_heads", a.n_heads, where, kConfigFix);
  a.q_lora_rank = json_get_or(j, "q_lora_rank", a.q_lora_rank, where, kConfigFix);
  a.head_dim = json_get_or(j, "head_dim", a.head_dim, where, kConfigFix);
  a.rope_head_dim = json_get_or(j, "rope_head_dim", a.rope_head_dim, where, kConfigFix);
  a.norm_eps = json_get_or(j, "norm_eps", a.norm_eps, where, kConfigFix);
  a.o_groups = json_get_or(j, "o_groups", a.o_groups, where, kConfigFix);
  a.o_lora_rank = json_get_or(j, "o_lora_rank", a.o_lora_rank, where, kConfigFix);
  a.window_size = json_get_or(j, "window_size", a.window_size, where, kConfigFix);
  a.compress_ratios = json_get_or(j, "compress_ratios", a.compress_ratios, where, kConfigFix);
  a.compress_rope_theta = json_get_or(j, "compress_rope_theta", a.compress_rope_theta, where, kConfigFix);
  a.original_seq_len = json_get_or(j, "original_seq_len", a.original_seq_len, where, kConfigFix);
  a.rope_theta = json_get_or(j, "rope_theta", a.rope_theta, where, kConfigFix);
  a.rope_factor = json_get_or(j, "rope_factor", a.rope_factor, where, kConfigFix);
  a.beta_fast = json_get_or(j, "beta_fast", a.beta_fast, where, kConfigFix);
  a.beta_slow = json_get_or(j, "beta_slow", a.beta_slow, where, kConfigFix);
  a.index_n_heads = json_get_or(j, "index_n_heads", a.index_n_heads, where, kConfigFix);
  a.index_head_dim = json_get_or(j, "index_head_dim", a.index_head_dim, where, kConfigFix);
  a.index_topk = json_get_or(j, "index_topk", a.index_topk, where, kConfigFix);
  return a;
}

// The Hugging Face config.json keys (model_type deepseek_v4), mapped onto ModelArgs.
V4Args args_from_hf(const json& j, const std::string& where) {
  V4Args a;
  a.dim = json_get_or(j, "hidden_size", a.dim, where, kConfigFix);
  a.n_layers = json_get_or(j, "num_hidden_layers", a.n_layers, where, kConfigFix);
  a.n_heads = json_get_or(j, "num_attention_heads", a.n_heads, where, kConfigFix);
  a.q_lora_rank = json_get_or(j, "q_lora_rank", a.q_lora_rank, where, kConfigFix);
  a.head_dim = json_get_or(j, "head_dim", a.head_dim, where, kConfigFix);
  a.rope_head_dim = json_get_or(j, "qk_rope_head_dim", a.rope_head_dim, where, kConfigFix);
  a.norm_eps = json_get_or(j, "rms_norm_eps", a.norm_eps, where, kConfigFix);
  a.o_groups = json_get_or(j, "o_groups", a.o_groups, where, kConfigFix);
  a.o_lora_rank = json_get_or(j, "o_lora_rank", a.o_lora_rank, where, kConfigFix);
  a.window_size = json_get_or(j, "sliding_window", a.window_size, where, kConfigFix);
  a.compress_ratios = json_get_or(j, "compress_ratios", a.compress_ratios, where, kConfigFix);
  a.compress_rope_theta = json_get_or(j, "compress_rope_theta", a.compress_rope_theta, where, kConfigFix);
  a.rope_theta = json_get_or(j, "rope_theta", a.rope_theta, where, kConfigFix);
  a.index_n_heads = json_get_or(j, "index_n_heads", a.index_n_heads, where, kConfigFix);
  a.index_head_dim = json_get_or(j, "index_head_dim", a.index_head_dim, where, kConfigFix);
  a.index_topk = json_get_or(j, "index_topk", a.index_topk, where, kConfigFix);
  a.original_seq_len = 0;  // no rope_scaling = no YaRN
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    const json& rs = j["rope_scaling"];
    const std::string w = where + " field 'rope_scaling'";
    a.rope_factor = json_get_or(rs, "factor", a.rope_factor, w, kConfigFix);
    a.original_seq_len =
        json_get_or(rs, "original_max_position_embeddings", a.original_seq_len, w, kConfigFix);
    a.beta_fast = json_get_or(rs, "beta_fast", a.beta_fast, w, kConfigFix);
    a.beta_slow = json_get_or(rs, "beta_slow", a.beta_slow, w, kConfigFix);
  }
  if (j.contains("quantization_config") && j["quantization_config"].is_object()) {
    const json& q = j["quantization_config"];
    if (q.contains("weight_block_size")) {
      const json& b = q["weight_block_size"];
      if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || b[0] != b[1] || b[0].get<int>() <= 0)
        fail(where + " field 'quantization_config.weight_block_size'", "must be [b, b] with b > 0",
             "DeepSeek-V4 uses [128, 128]");
      a.fp8_block = b[0].get<int>();
    }
  }
  return a;
}

void check_args(const V4Args& a, const std::string& where) {
  auto need = [&](bool ok, const std::string& f, const std::string& what) {
    if (!ok)
      fail(where + " field '" + f + "'", what, "check the checkpoint's config.json against its model card");
  };
  need(a.dim > 0 && a.n_heads > 0 && a.head_dim > 0 && a.q_lora_rank > 0, "dim", "dims must be positive");
  need(a.rope_head_dim > 0 && a.rope_head_dim % 2 == 0 && a.rope_head_dim <= a.head_dim, "rope_head_dim",
       "must be even, positive and <= head_dim");
  need(a.o_groups > 0 && a.n_heads % a.o_groups == 0, "o_groups", "must divide n_heads");
  need(a.window_size > 0, "window_size", "must be positive");
  need(int(a.compress_ratios.size()) >= a.n_layers, "compress_ratios",
       "must list a ratio for each of the " + std::to_string(a.n_layers) + " layers");
  for (int r : a.compress_ratios) need(r >= 0, "compress_ratios", "ratios must be >= 0");
}

// Which files hold which tensors: HF from the index (or one model.safetensors), official from the
// headers of model*-mp*.safetensors.
void find_tensors(V4Checkpoint& ck) {
  const fs::path dir(ck.dir);
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    ck.layout = V4Layout::HuggingFace;
    const std::string text = io_read_text(index.string(), "check the checkpoint directory");
    ck.index_bytes += text.size();
    json j = json_parse_or_fail(text, index.string(), "the index is damaged: download it again");
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      fail(index.string(), "no weight_map object", "download model.safetensors.index.json again");
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string())
        fail(index.string() + " weight_map '" + name + "'", "not a file name", "download it again");
      ck.file_of[name] = (dir / file.get<std::string>()).string();
    }
    return;
  }
  std::vector<std::string> official, single;
  const std::regex mp(R"(model(\d+)-mp(\d+)\.safetensors)");
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    std::smatch m;
    if (std::regex_match(name, m, mp)) {
      if (m[2] != "1")
        fail(e.path().string(), "is one rank of a " + m[2].str() + "-way model-parallel conversion",
             "convert the checkpoint with --model-parallel 1, or pass the Hugging Face download");
      official.push_back(e.path().string());
    } else if (name == "model.safetensors") {
      single.push_back(e.path().string());
    }
  }
  if (!official.empty())
    ck.layout = V4Layout::Official;
  else if (!single.empty())
    ck.layout = V4Layout::HuggingFace;
  else
    fail(ck.dir, "holds neither model.safetensors.index.json, model.safetensors nor model0-mp1.safetensors",
         "pass the directory of a DeepSeek-V4 download (Hugging Face layout) or of its official conversion");
  for (const auto& path : official.empty() ? single : official) {
    SafetensorsFile f = safetensors_open(path);
    for (const auto& [name, e] : f.tensors) ck.file_of[name] = path;
    ck.open[path] = std::move(f);
  }
}

SafetensorsFile& file_for(V4Checkpoint& ck, const std::string& name) {
  auto it = ck.file_of.find(name);
  if (it == ck.file_of.end())
    fail(ck.dir, "the checkpoint has no tensor '" + name + "'",
         "check that the layer exists and that this is a DeepSeek-V4 checkpoint (official tensor names)");
  auto f = ck.open.find(it->second);
  if (f == ck.open.end()) f = ck.open.emplace(it->second, safetensors_open(it->second)).first;
  if (!f->second.tensors.count(name))
    fail(it->second, "the index says it holds '" + name + "' but its header does not",
         "download the shard again");
  return f->second;
}

}  // namespace

std::string v4_layout_name(V4Layout layout) {
  return layout == V4Layout::Official ? "official" : "huggingface";
}

V4Checkpoint v4_open(const std::string& dir) {
  V4Checkpoint ck;
  ck.dir = dir;
  if (!fs::is_directory(dir))
    fail(dir, "is not a directory", "pass the checkpoint directory (config.json plus safetensors files)");
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  const std::string text = io_read_text(cfg_path, "the checkpoint directory needs its config.json");
  ck.index_bytes += text.size();
  json j = json_parse_or_fail(text, cfg_path, "the config is damaged: download it again");
  if (!j.is_object()) fail(cfg_path, "is not a JSON object", "download it again");
  if (j.contains("text_config") || j.contains("kv_source_layer_ids"))
    fail(cfg_path, "is a DeepSeek-V4.1 config (cross-layer KV sharing, CSA2)",
         "v4 reads DeepSeek-V4 (Flash, Pro) checkpoints; V4.1's shared layers are not supported");
  if (j.contains("hidden_size")) {
    ck.config_style = "Hugging Face";
    ck.args = args_from_hf(j, cfg_path);
  } else if (j.contains("dim")) {
    ck.config_style = "ModelArgs";
    ck.args = args_from_model_args(j, cfg_path);
  } else {
    fail(cfg_path, "has neither 'hidden_size' (Hugging Face) nor 'dim' (official ModelArgs)",
         "pass a DeepSeek-V4 checkpoint's config.json");
  }
  check_args(ck.args, cfg_path);
  find_tensors(ck);
  return ck;
}

uint64_t v4_bytes_read(const V4Checkpoint& ck) {
  uint64_t n = ck.index_bytes;
  for (const auto& [path, f] : ck.open) n += f.bytes_read;
  return n;
}

uint64_t v4_total_bytes(const V4Checkpoint& ck) {
  std::map<std::string, bool> files;
  for (const auto& [name, path] : ck.file_of) files[path] = true;
  uint64_t n = 0;
  for (const auto& [path, _] : files) n += fs::exists(path) ? uint64_t(fs::file_size(path)) : 0;
  return n;
}

bool v4_has(const V4Checkpoint& ck, const std::string& name) { return ck.file_of.count(name) > 0; }

torch::Tensor v4_read(V4Checkpoint& ck, const std::string& name, torch::Dtype dtype) {
  SafetensorsFile& f = file_for(ck, name);
  const std::string dt = f.tensors.at(name).dtype;
  torch::Tensor w = safetensors_read(f, name, torch::kFloat64);
  if (dt == "F8_E4M3") {
    // W[o, i] = e4m3(code[o, i]) * scale[o / b, i / b]
    const std::string stem = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0
                                 ? name.substr(0, name.size() - 7)
                                 : name;
    std::string sname = stem + ".scale";
    if (!v4_has(ck, sname)) sname = stem + ".weight_scale_inv";
    if (!v4_has(ck, sname))
      fail(f.path + " tensor '" + name + "'", "is FP8 but has no block scale (" + stem + ".scale)",
           "the checkpoint is incomplete: download it again");
    torch::Tensor s = v4_read(ck, sname, torch::kFloat64);
    const int64_t b = ck.args.fp8_block;
    if (w.dim() != 2 || s.dim() != 2 || s.size(0) != (w.size(0) + b - 1) / b ||
        s.size(1) != (w.size(1) + b - 1) / b)
      fail(f.path + " tensor '" + sname + "'",
           "has the wrong shape for the " + std::to_string(b) + " x " + std::to_string(b) + " blocks of '" +
               name + "'",
           "check quantization_config.weight_block_size in config.json");
    s = s.repeat_interleave(b, 0).narrow(0, 0, w.size(0)).repeat_interleave(b, 1).narrow(1, 0, w.size(1));
    w = w * s;
  }
  if (!torch::isfinite(w).all().item<bool>())
    fail(f.path + " tensor '" + name + "'", "holds NaN or infinite values",
         "the checkpoint is damaged: download it again");
  return w.to(dtype);
}

AttnConfig v4_attn_config(const V4Args& a, int layer) {
  if (layer < 0 || layer >= a.n_layers)
    fail("--layer " + std::to_string(layer), "the checkpoint has layers 0.." + std::to_string(a.n_layers - 1),
         "pass a layer index in that range");
  const int m = a.compress_ratios[size_t(layer)];
  AttnConfig c = attn_config_default(m == 0   ? AttnKind::DsWindow
                                     : m == 4 ? AttnKind::DsCsa
                                              : AttnKind::DsHca);
  c.d_model = a.dim;
  c.n_heads = a.n_heads;
  c.n_kv_heads = 1;
  c.head_dim = a.head_dim;
  c.rope_dims = a.rope_head_dim;
  c.window = a.window_size;
  c.sink = true;
  c.norm_eps = a.norm_eps;
  c.q_rank = a.q_lora_rank;
  c.q_head_norm = true;
  c.o_groups = a.o_groups;
  c.o_rank = a.o_lora_rank;
  c.ratio = m;
  c.overlap = m == 4;
  c.offset_bias = m > 0;
  if (m > 0) {  // compressed layers: every RoPE of the layer with compress_rope_theta and YaRN
    c.rope_theta = a.compress_rope_theta;
    c.yarn_original_len = a.original_seq_len;
    c.yarn_factor = a.rope_factor;
    c.yarn_beta_fast = a.beta_fast;
    c.yarn_beta_slow = a.beta_slow;
  } else {
    c.rope_theta = a.rope_theta;
  }
  c.index_topk = m == 4 ? a.index_topk : 0;
  c.index_heads = a.index_n_heads;
  c.index_dim = a.index_head_dim;
  c.index_rope_dims = -1;  // = rope_head_dim, as the official indexer
  attn_config_validate(c, "layer " + std::to_string(layer) + " of the DeepSeek-V4 config");
  return c;
}

std::vector<std::pair<std::string, std::string>> v4_attn_tensor_names(const AttnConfig& c, int layer) {
  const std::string p = "layers." + std::to_string(layer) + ".attn.";
  std::vector<std::pair<std::string, std::string>> n = {
      {"wq_a", p + "wq_a.weight"}, {"q_a_norm", p + "q_norm.weight"}, {"wq_b", p + "wq_b.weight"},
      {"wkv", p + "wkv.weight"},   {"kv_norm", p + "kv_norm.weight"}, {"wo_a", p + "wo_a.weight"},
      {"wo_b", p + "wo_b.weight"}, {"sink", p + "attn_sink"},
  };
  auto compressor = [&](const std::string& ours, const std::string& theirs) {
    n.push_back({ours + "wkv", theirs + "wkv.weight"});
    n.push_back({ours + "wgate", theirs + "wgate.weight"});
    n.push_back({ours + "ape", theirs + "ape"});
    n.push_back({ours + "norm", theirs + "norm.weight"});
  };
  if (c.kind != AttnKind::DsWindow) compressor("comp_", p + "compressor.");
  if (c.index_topk > 0) {
    n.push_back({"idx_wq_b", p + "indexer.wq_b.weight"});
    n.push_back({"idx_ww", p + "indexer.weights_proj.weight"});
    compressor("idx_comp_", p + "indexer.compressor.");
  }
  return n;
}

Attention v4_attention_load(V4Checkpoint& ck, int layer, torch::Dtype dtype) {
  const AttnConfig c = v4_attn_config(ck.args, layer);
  Attention attn(c);
  attn->to(dtype);
  torch::NoGradGuard no_grad;
  for (const auto& [ours, theirs] : v4_attn_tensor_names(c, layer)) {
    torch::Tensor w = v4_read(ck, theirs, dtype);
    torch::Tensor& p = attn->param(ours);
    if (w.sizes() != p.sizes()) {
      std::ostringstream got, want;
      got << w.sizes();
      want << p.sizes();
      fail(ck.file_of.at(theirs) + " tensor '" + theirs + "'",
           "has shape " + got.str() + ", the config implies " + want.str(),
           "check that config.json belongs to these weights");
    }
    p.copy_(w);
  }
  return attn;
}

V4LayerOutput v4_layer_run(Attention& attn, const torch::Tensor& x) {
  const AttnConfig& c = attn->config();
  if (x.dim() != 3 || x.size(2) != c.d_model)
    fail("input x", "must be [B, T, " + std::to_string(c.d_model) + "] (the layer's attention input)",
         "write x with the checkpoint's hidden size as its last dim");
  torch::NoGradGuard no_grad;
  AttnTrace trace;
  trace.probs = false;  // no [B, H, T, T] probability maps
  V4LayerOutput r;
  r.out = attn->forward(x.to(attn->param("wkv").scalar_type()), 0, &trace);
  if (c.kind != AttnKind::DsWindow) {
    r.kv_compressed =
        trace.entry_kv.defined() ? trace.entry_kv : torch::zeros({x.size(0), 0, c.head_dim}, r.out.options());
    if (c.index_topk > 0)
      r.index_topk = trace.index_topk.defined()
                         ? trace.index_topk
                         : torch::full({x.size(0), x.size(1), c.index_topk}, -1, torch::kInt64);
  }
  return r;
}

}  // namespace phasescope
