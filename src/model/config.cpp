// config.cpp — presets: JSON <-> ModelConfig / TaskConfig / TrainConfig (see config.h).
// A preset file:
//   {"name": "w8s8-1kv", "description": "...",
//    "model": {...ModelConfig fields...},
//    "attention": {...AttnConfig fields, the default of every layer...},
//    "layers": [{...override...}, ...]   (optional; merged onto "attention", repeated cyclically)
//    "task": {...}, "train": {...}}
#include "model/config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "core/io.h"
#include "core/json_fields.h"

#ifndef PHASESCOPE_PRESET_DIR
#define PHASESCOPE_PRESET_DIR "presets"
#endif

namespace phasescope {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const JsonTable<ModelConfig>& model_table() {
  static const JsonTable<ModelConfig> t = {
      {"d_model", json_field(&ModelConfig::d_model)},
      {"n_layers", json_field(&ModelConfig::n_layers)},
      {"n_heads", json_field(&ModelConfig::n_heads)},
      {"n_kv_heads", json_field(&ModelConfig::n_kv_heads)},
      {"head_dim", json_field(&ModelConfig::head_dim)},
      {"mlp_hidden", json_field(&ModelConfig::mlp_hidden)},
      {"tied_embeddings", json_field(&ModelConfig::tied_embeddings)},
      {"token_shift", json_field(&ModelConfig::token_shift)},
      {"norm_eps", json_field(&ModelConfig::norm_eps)},
      {"init_std", json_field(&ModelConfig::init_std)},
      {"vocab_size", json_field(&ModelConfig::vocab_size)},
  };
  return t;
}

const JsonTable<TaskConfig>& task_table() {
  static const JsonTable<TaskConfig> t = {
      {"task", json_field(&TaskConfig::task)},
      {"seq_len", json_field(&TaskConfig::seq_len)},
      {"n_records", json_field(&TaskConfig::n_records)},
      {"n_demos", json_field(&TaskConfig::n_demos)},
      {"curriculum_steps", json_field(&TaskConfig::curriculum_steps)},
      {"min_records", json_field(&TaskConfig::min_records)},
      {"curriculum_length", json_field(&TaskConfig::curriculum_length)},
      {"mqar_pairs", json_field(&TaskConfig::mqar_pairs)},
      {"mqar_queries", json_field(&TaskConfig::mqar_queries)},
      {"n_keys", json_field(&TaskConfig::n_keys)},
      {"n_names", json_field(&TaskConfig::n_names)},
      {"n_fillers", json_field(&TaskConfig::n_fillers)},
      {"text_file", json_field(&TaskConfig::text_file)},
      {"text_ratio", json_field(&TaskConfig::text_ratio)},
      {"corpus", json_field(&TaskConfig::corpus)},
      {"lookup_ratio", json_field(&TaskConfig::lookup_ratio)},
      {"repeat_ratio", json_field(&TaskConfig::repeat_ratio)},
      {"repeat_steps", json_field(&TaskConfig::repeat_steps)},
  };
  return t;
}

const JsonTable<TrainConfig>& train_table() {
  static const JsonTable<TrainConfig> t = {
      {"steps", json_field(&TrainConfig::steps)},
      {"batch", json_field(&TrainConfig::batch)},
      {"lr", json_field(&TrainConfig::lr)},
      {"min_lr_ratio", json_field(&TrainConfig::min_lr_ratio)},
      {"warmup", json_field(&TrainConfig::warmup)},
      {"weight_decay", json_field(&TrainConfig::weight_decay)},
      {"beta1", json_field(&TrainConfig::beta1)},
      {"beta2", json_field(&TrainConfig::beta2)},
      {"clip", json_field(&TrainConfig::clip)},
      {"log_every", json_field(&TrainConfig::log_every)},
      {"eval_every", json_field(&TrainConfig::eval_every)},
      {"eval_examples", json_field(&TrainConfig::eval_examples)},
      {"ckpt_every", json_field(&TrainConfig::ckpt_every)},
      {"seed", json_field(&TrainConfig::seed)},
      {"gate_entropy_bonus", json_field(&TrainConfig::gate_entropy_bonus)},
      {"gate_coverage_bonus", json_field(&TrainConfig::gate_coverage_bonus)},
      {"init_from", json_field(&TrainConfig::init_from)},
      {"dense_warmup_steps", json_field(&TrainConfig::dense_warmup_steps)},
  };
  return t;
}

void need(bool ok, const std::string& where, const std::string& field, const std::string& what,
          const std::string& fix) {
  if (!ok) fail(where + " field '" + field + "'", what, fix);
}

void validate(const Preset& p, const std::string& where) {
  const auto& t = p.task;
  const auto& r = p.train;
  need(p.model.n_layers >= 1 && p.model.n_layers <= 256, where, "model.n_layers", "must be in [1, 256]",
       "e.g. 2");
  // sizes a machine can hold: a refusal here, not an allocation failure deep in torch
  const double d = p.model.d_model, hd = double(p.model.n_heads) * p.model.head_dim;
  const double per_layer = 4.0 * d * hd + 3.0 * d * p.model.mlp_hidden;
  need(p.model.d_model <= 65536 && p.model.head_dim <= 4096 && p.model.n_heads <= 1024 &&
           p.model.mlp_hidden <= 262144 && per_layer * p.model.n_layers <= 4e9,
       where, "model",
       "is too large (d_model <= 65536, head_dim <= 4096, n_heads <= 1024, at most 4e9 weights)",
       "phasescope trains small models: e.g. d_model 128, head_dim 32, n_heads 4");
  need(p.model.mlp_hidden >= 0, where, "model.mlp_hidden", "must be >= 0", "0 = attention-only");
  need(p.model.token_shift >= 0 && p.model.token_shift <= 16, where, "model.token_shift",
       "must be in [0, 16]",
       "0 = off (the paper's decoder), 1-4 = a short causal convolution before each attention");
  need(t.task == "lookup" || t.task == "mqar" || t.task == "text" || t.task == "mix" || t.task == "corpus",
       where, "task.task", "unknown task '" + t.task + "'", "use lookup, mqar, text, mix or corpus");
  need(t.task != "corpus" || !t.corpus.empty(), where, "task.corpus", "task 'corpus' needs a corpus folder",
       "build one with `phasescope corpus build --out runs/corpus` and set task.corpus (or --corpus DIR)");
  need(t.lookup_ratio >= 0 && t.lookup_ratio <= 1, where, "task.lookup_ratio", "must be in [0, 1]",
       "0 = a pure language model");
  need(t.seq_len >= 16 && t.seq_len <= (1 << 20), where, "task.seq_len", "must be in [16, 1048576]",
       "e.g. 256");
  need(t.n_keys >= 2 && t.n_keys <= 65536 && t.n_names >= 2 && t.n_names <= 65536 && t.n_fillers <= 65536,
       where, "task.n_keys/n_names/n_fillers", "must be in [2, 65536] (n_fillers [1, 65536]): the vocabulary",
       "e.g. 128 / 128 / 16");
  need(t.n_records >= 2 && t.n_records <= std::min(t.n_keys, t.n_names), where, "task.n_records",
       "must be in [2, min(n_keys, n_names)]", "lower n_records or raise n_keys / n_names");
  need(t.n_demos >= 0 && t.n_demos < t.n_records, where, "task.n_demos", "must be in [0, n_records)",
       "e.g. 8");
  need(t.min_records >= 2 && t.min_records <= t.n_records, where, "task.min_records",
       "must be in [2, n_records] (demonstrations shrink to records - 1 while it is smaller)", "e.g. 8");
  need(t.mqar_pairs >= 1 && t.mqar_pairs <= std::min(t.n_keys, t.n_names), where, "task.mqar_pairs",
       "must be in [1, min(n_keys, n_names)]", "lower mqar_pairs");
  need(t.mqar_queries >= 1 && t.mqar_queries <= (1 << 20), where, "task.mqar_queries",
       "must be in [1, 1048576]", "e.g. 16");
  need(r.eval_examples >= 1 && r.eval_examples <= (1 << 20), where, "train.eval_examples",
       "must be in [1, 1048576]", "e.g. 256");
  need(t.n_fillers >= 1, where, "task.n_fillers", "must be >= 1", "e.g. 16");
  need(t.text_ratio >= 0 && t.text_ratio <= 1, where, "task.text_ratio", "must be in [0, 1]", "e.g. 0.25");
  need(t.repeat_ratio >= 0 && t.repeat_ratio <= 1, where, "task.repeat_ratio", "must be in [0, 1]",
       "e.g. 0.5; 0 = off");
  need(t.repeat_steps >= 0, where, "task.repeat_steps", "must be >= 0", "0 = repeated rows at every step");
  need((t.task != "text" && t.task != "mix") || !t.text_file.empty(), where, "task.text_file",
       "task '" + t.task + "' needs a text file", "set task.text_file (or --text FILE)");
  need(r.steps >= 0, where, "train.steps", "must be >= 0", "e.g. 1000");
  need(r.batch >= 1 && r.batch <= 65536, where, "train.batch", "must be in [1, 65536]", "e.g. 32");
  need(double(r.batch) * t.seq_len <= double(1 << 24), where, "train.batch",
       "batch x task.seq_len is more than 16M tokens per step", "lower train.batch or task.seq_len");
  need(r.lr >= 1e-8 && r.lr <= 10, where, "train.lr", "must be in [1e-8, 10]", "e.g. 1e-3");
  need(r.min_lr_ratio >= 0 && r.min_lr_ratio <= 1, where, "train.min_lr_ratio", "must be in [0, 1]",
       "e.g. 0.1");
  need(t.curriculum_steps >= 0, where, "task.curriculum_steps", "must be >= 0", "0 = no curriculum");
  need(r.eval_every >= 0, where, "train.eval_every", "must be >= 0", "0 = no periodic evaluation");
  need(r.warmup >= 0, where, "train.warmup", "must be >= 0", "e.g. 100");
  need(r.clip >= 0, where, "train.clip", "must be >= 0 (0 = off)", "e.g. 1.0");
  need(r.gate_entropy_bonus >= 0 && r.gate_coverage_bonus >= 0, where,
       "train.gate_entropy_bonus/gate_coverage_bonus", "must be >= 0 (0 = off)", "e.g. 0.5");
  need(r.dense_warmup_steps >= 0 && r.dense_warmup_steps <= r.steps, where, "train.dense_warmup_steps",
       "must be in [0, train.steps]", "0 = off, e.g. 500");
  need(r.dense_warmup_steps == 0 || r.init_from.empty(), where, "train.dense_warmup_steps",
       "cannot be combined with train.init_from (both say where the weights start)",
       "set one of them: dense_warmup_steps = 0 or init_from = \"\"");
  need(r.log_every >= 1 && r.ckpt_every >= 1, where, "train.log_every/ckpt_every", "must be >= 1",
       "e.g. 10 / 200");
}

std::string read_text(const std::string& path) {
  return io_read_text(path, "check the path, or list presets with `phasescope presets`");
}

}  // namespace

void model_config_sync(ModelConfig& m, const std::string& where) {
  need(m.d_model > 0 && m.n_heads > 0 && m.head_dim > 0, where, "model",
       "d_model, n_heads, head_dim must be positive", "e.g. 128 / 4 / 32");
  need(int(m.layers.size()) == m.n_layers, where, "layers", "one attention config per layer is needed",
       "give 'attention' (all layers) or a 'layers' list");
  for (size_t l = 0; l < m.layers.size(); ++l) {
    AttnConfig& a = m.layers[l];
    a.d_model = m.d_model;
    a.n_heads = m.n_heads;
    a.head_dim = m.head_dim;
    a.norm_eps = m.norm_eps;
    a.n_kv_heads = attn_is_ds(a) ? 1 : m.n_kv_heads;
    if (a.rope_dims > a.head_dim) a.rope_dims = a.head_dim;
    attn_config_validate(a, where + " layer " + std::to_string(l));
  }
}

std::string preset_dir() {
  if (const char* env = std::getenv("PHASESCOPE_PRESETS")) return env;
  return PHASESCOPE_PRESET_DIR;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(preset_dir(), ec))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

Preset preset_load(const std::string& name_or_path) {
  std::string path = name_or_path;
  if (path.find('/') == std::string::npos && path.find(".json") == std::string::npos) {
    path = preset_dir() + "/" + name_or_path + ".json";
    if (!fs::exists(path)) {
      std::string all;
      for (const auto& n : preset_names()) all += (all.empty() ? "" : ", ") + n;
      fail("preset '" + name_or_path + "'", "not found in " + preset_dir(), "use one of: " + all);
    }
  }
  return preset_parse(read_text(path), path);
}

Preset preset_parse(const std::string& text, const std::string& where) {
  return preset_from_json(json_parse_or_fail(text, where, "fix the preset's syntax"), where);
}

Preset preset_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) fail(where, "a preset must be a JSON object", "see presets/w8s8-1kv.json");
  for (auto it = j.begin(); it != j.end(); ++it) {
    static const std::set<std::string> known = {"name",   "description", "model", "attention",
                                                "layers", "task",        "train"};
    if (!known.count(it.key()))
      fail(where + " field '" + it.key() + "'", "unknown field",
           "use name, description, model, attention, layers, task, train");
  }
  Preset p;
  for (const char* k : {"name", "description"})
    if (j.contains(k) && !j[k].is_string())
      fail(where + " field '" + k + "'", std::string("expected a string, got ") + j[k].type_name(),
           "write it in quotes, e.g. \"name\": \"my-run\"");
  p.name = j.value("name", std::string());
  p.description = j.value("description", std::string());
  if (p.name.empty()) fail(where + " field 'name'", "missing", "add \"name\": \"my-run\"");
  if (j.contains("model")) json_apply(p.model, j["model"], model_table(), where + " model");
  if (j.contains("task")) json_apply(p.task, j["task"], task_table(), where + " task");
  if (j.contains("train")) json_apply(p.train, j["train"], train_table(), where + " train");

  // attention per layer: the "attention" default, merged with "layers" overrides (cyclic)
  json base = j.contains("attention") ? j["attention"] : json{{"kind", "full"}};
  if (!base.is_object())
    fail(where + " field 'attention'", "expected an object", "write {\"kind\": \"chunked\", ...}");
  json overrides = j.contains("layers") ? j["layers"] : json::array({json::object()});
  if (!overrides.is_array() || overrides.empty())
    fail(where + " field 'layers'", "expected a non-empty list of objects",
         "e.g. [{\"kind\": \"window\"}, {}]");
  // bounded before one attention config per layer is built (a billion layers took minutes to refuse)
  need(p.model.n_layers >= 1 && p.model.n_layers <= 256, where, "model.n_layers", "must be in [1, 256]",
       "e.g. 2");
  p.model.layers.clear();
  for (int l = 0; l < p.model.n_layers; ++l) {
    json merged = base;
    const json& o = overrides[size_t(l) % overrides.size()];
    if (!o.is_object())
      fail(where + " layers[" + std::to_string(l) + "]", "expected an object", "e.g. {\"kind\": \"hca\"}");
    // a layer that switches kind starts from that kind's defaults, not from the other kind's fields
    if (o.contains("kind") && o["kind"] != base.value("kind", json("full"))) merged = json::object();
    for (auto it = o.begin(); it != o.end(); ++it) merged[it.key()] = it.value();
    if (!merged.contains("kind")) merged["kind"] = "full";
    // the model-wide dims, so the layer validates at its real size
    const bool ds = merged["kind"] == "dsv4-csa" || merged["kind"] == "hca" || merged["kind"] == "v41-csa2";
    merged["d_model"] = p.model.d_model;
    merged["n_heads"] = p.model.n_heads;
    merged["head_dim"] = p.model.head_dim;
    merged["n_kv_heads"] = ds ? 1 : p.model.n_kv_heads;
    merged["norm_eps"] = p.model.norm_eps;
    // RoPE dims are capped at the head dim, so a preset scales down (e.g. "RoPE on 16 dims" at head_dim 8 =
    // all)
    for (const char* k : {"rope_dims", "comp_rope_dims"})
      if (merged.contains(k) && merged[k].is_number_integer() && merged[k].get<int>() > p.model.head_dim)
        merged[k] = p.model.head_dim;
    p.model.layers.push_back(attn_config_from_json(merged.dump(), where + " layer " + std::to_string(l)));
  }
  model_config_sync(p.model, where);
  validate(p, where);
  return p;
}

json preset_to_json(const Preset& p) {
  json j;
  j["name"] = p.name;
  j["description"] = p.description;
  j["model"] = json_dump(p.model, model_table());
  j["task"] = json_dump(p.task, task_table());
  j["train"] = json_dump(p.train, train_table());
  j["layers"] = json::array();
  for (const auto& a : p.model.layers) j["layers"].push_back(json::parse(attn_config_to_json(a)));
  j["attention"] = j["layers"][0];
  return j;
}

}  // namespace phasescope
