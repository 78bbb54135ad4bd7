// cmd_v4.cpp — `phasescope v4 layer|gates`: one attention layer of a real DeepSeek-V4 checkpoint on
// given hidden states, and the static phase preferences of its compressors (model/v4_checkpoint.h,
// explain/v4_gates.h).
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "explain/v4_gates.h"
#include "model/checkpoint.h"
#include "model/v4_checkpoint.h"
#include "tools/commands.h"

namespace phasescope {

namespace {

struct V4LayerOptions {
  std::string checkpoint, input, out, dtype = "float32";
  int layer = 0;
};

struct V4GatesOptions {
  std::string checkpoint, out = "runs/v4-gates";
};

std::string mib(uint64_t bytes) {
  if (bytes < (uint64_t(1) << 20)) return fmt::format("{} bytes", bytes);
  return fmt::format("{:.1f} MiB", double(bytes) / (1024.0 * 1024.0));
}

}  // namespace

void add_v4_command(CLI::App& app) {
  auto* v4 =
      app.add_subcommand("v4",
                         "real DeepSeek-V4 checkpoints (official or Hugging Face layout): one attention "
                         "layer, or its compressors' static gate preferences");
  v4->require_subcommand(1);

  auto lo = std::make_shared<V4LayerOptions>();
  auto* layer =
      v4->add_subcommand("layer",
                         "run attention layer I on hidden states x [B, T, dim] (positions 0..T-1) and "
                         "write out, kv_compressed and (CSA) index_topk");
  layer->add_option("--checkpoint", lo->checkpoint, "checkpoint directory (config.json + safetensors)")
      ->required();
  layer->add_option("--layer", lo->layer, "layer index")->required();
  layer->add_option("--input", lo->input, "safetensors file holding x [B, T, dim] (any float dtype)")
      ->required();
  layer->add_option("--out", lo->out, "safetensors file to write")->required();
  layer->add_option("--dtype", lo->dtype, "compute dtype")
      ->check(CLI::IsMember({"float32", "float64"}))
      ->capture_default_str();
  layer->callback([lo] {
    // open the checkpoint (config and index only) and load the one layer
    V4Checkpoint ck = v4_open(lo->checkpoint);
    const torch::Dtype dtype = lo->dtype == "float64" ? torch::kFloat64 : torch::kFloat32;
    Attention attn = v4_attention_load(ck, lo->layer, dtype);
    const AttnConfig& c = attn->config();
    fmt::print(
        "checkpoint {} ({} layout, {} config): layer {} is {} (ratio {}, window {}, {} heads x {}, rope {} "
        "theta {} yarn {}x from {}, o_groups {})\n",
        ck.dir, v4_layout_name(ck.layout), ck.config_style, lo->layer, attn_kind_name(c.kind), c.ratio,
        c.window, c.n_heads, c.head_dim, c.rope_dims, c.rope_theta,
        c.yarn_original_len > 0 ? c.yarn_factor : 1.0, c.yarn_original_len, c.o_groups);
    fmt::print("read {} of {} in the checkpoint's files\n", mib(v4_bytes_read(ck)), mib(v4_total_bytes(ck)));

    // the hidden states, the layer, the outputs
    SafetensorsFile in = safetensors_open(lo->input);
    if (!in.tensors.count("x"))
      fail(lo->input, "holds no tensor named 'x'", "write the hidden states as 'x' [B, T, dim]");
    torch::Tensor x = safetensors_read(in, "x", dtype);
    V4LayerOutput r = v4_layer_run(attn, x);
    TensorMap outs = {{"out", r.out}};
    if (r.kv_compressed.defined()) outs["kv_compressed"] = r.kv_compressed;
    if (r.index_topk.defined()) outs["index_topk"] = r.index_topk;
    nlohmann::json meta = {{"checkpoint", ck.dir},
                           {"layer", lo->layer},
                           {"kind", attn_kind_name(c.kind)},
                           {"dtype", lo->dtype},
                           {"input", lo->input},
                           {"config", nlohmann::json::parse(attn_config_to_json(c))}};
    safetensors_save(lo->out, outs, meta.dump());
    std::string shapes;
    for (const auto& [name, t] : outs) {
      std::ostringstream dims;
      dims << t.sizes();
      shapes += fmt::format(" {} {}", name, dims.str());
    }
    fmt::print("wrote {}:{}\n", lo->out, shapes);
  });

  auto go = std::make_shared<V4GatesOptions>();
  auto* gates =
      v4->add_subcommand("gates",
                         "per compressed layer (and indexer): the static gate profile its offset biases "
                         "(ape) induce, its concentration and favoured slots; table, JSON, CSV, heatmap");
  gates->add_option("--checkpoint", go->checkpoint, "checkpoint directory (config.json + safetensors)")
      ->required();
  gates->add_option("--out", go->out, "output directory")->capture_default_str();
  gates->callback([go] {
    V4Checkpoint ck = v4_open(go->checkpoint);
    auto rows = v4_gates(ck);
    if (rows.empty())
      fail(go->checkpoint, "has no compressed layer (every compress ratio is 0)",
           "pass a DeepSeek-V4 checkpoint");
    fmt::print("{}", v4_gates_report(ck, rows, go->out));
    fmt::print("read {} of {} in the checkpoint's files; wrote {}/gates.json and gates.csv\n",
               mib(v4_bytes_read(ck)), mib(v4_total_bytes(ck)), go->out);
  });
}

}  // namespace phasescope
