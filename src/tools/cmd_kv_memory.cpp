// cmd_kv_memory.cpp — `phasescope kv-memory [--preset NAME ...] [--context T] [--dtype bf16|fp16|fp32]`:
// the KV cache each design holds after T tokens (attention/kv_memory.h), per token and against full
// attention with the same heads. Every preset when none is named.
#include <fmt/format.h>

#include "attention/kv_memory.h"
#include "model/config.h"
#include "tools/commands.h"

namespace phasescope {

void add_kv_memory_command(CLI::App& app) {
  struct Args {
    std::vector<std::string> presets;
    int64_t context = 131072;
    std::string dtype = "bf16";
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "kv-memory", "KV-cache bytes per token of each design at a context length, from the config");
  cmd->add_option("--preset", a->presets, "preset names or files (repeat; default: every preset)");
  cmd->add_option("--context", a->context, "tokens in the sequence, in [1, 2^40]")
      ->check(in_range<int64_t>(1, int64_t(1) << 40))
      ->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "cache dtype: bf16 | fp16 | fp32 | fp64")
      ->check(CLI::IsMember({"bf16", "fp16", "fp32", "fp64"}))
      ->capture_default_str();
  cmd->callback([a] {
    const int bytes = a->dtype == "fp32" ? 4 : a->dtype == "fp64" ? 8 : 2;
    const std::vector<std::string> names = a->presets.empty() ? preset_names() : a->presets;
    std::vector<KvMemoryRow> rows;
    for (const std::string& n : names) {
      Preset p = preset_load(n);
      rows.push_back(kv_memory_row(p.name, p.model.layers, a->context, bytes));
    }
    fmt::print("{}", kv_memory_table(rows));
    fmt::print(
        "{} cache, one sequence; 'vs full' = the same layers under full attention (same KV heads and head "
        "dim)\n",
        a->dtype);
  });
}

}  // namespace phasescope
