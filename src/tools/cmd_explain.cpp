// cmd_explain.cpp — `phasescope explain --checkpoint DIR --out DIR`: knockouts by mean replacement,
// gate concentration and profiles, gate cycling (explain/explain.h), with a report section.
#include <fmt/format.h>

#include <iostream>

#include "core/runtime.h"
#include "eval/model_backend.h"
#include "explain/explain.h"
#include "explain/explain_report.h"
#include "model/model.h"
#include "tools/commands.h"

namespace phasescope {

void add_explain_command(CLI::App& app) {
  struct Args {
    std::string checkpoint, out, protocol = "prefix";
    ExplainOptions opt;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "explain", "why a checkpoint is weak at some phases: knockouts, gate profiles, gate cycling");
  cmd->add_option("--checkpoint", a->checkpoint, "checkpoint directory (or .safetensors file)")->required();
  cmd->add_option("--out", a->out, "output directory (explain.json, CSVs, PNGs, report.html)")->required();
  cmd->add_option("--samples", a->opt.samples, "evaluation prompts (rounded up to whole paired blocks)");
  cmd->add_option("--calib-samples", a->opt.calib_samples,
                  "calibration prompts (head means, gate statistics)");
  cmd->add_option("--protocol", a->protocol, "prefix | in-sequence")
      ->check(CLI::IsMember({"prefix", "in-sequence"}));
  cmd->add_option("--R,--residues", a->opt.R, "layout residues (a multiple of the model's stride)");
  cmd->add_option("--seed", a->opt.seed, "seed of the evaluation prompts (calibration: seed + 7919)");
  cmd->add_option("--deltas", a->opt.deltas, "gate-cycling shifts");
  cmd->add_flag("--fresh", a->opt.fresh,
                "score every condition again (default: resume the journals in --out/journals)");
  cmd->callback([a] {
    fmt::print("runtime: {}\n", runtime_describe(runtime_init()));

    // the model
    LoadedModel m = model_load(a->checkpoint);
    fmt::print("model: {} (step {}): {}\n", m.preset.name, m.step, model_describe(*m.model));

    // the three instruments, then the summary
    a->opt.protocol = pad_protocol_parse(a->protocol, "--protocol");
    a->opt.log = &std::cout;
    ExplainResults r = explain_run(m.model, m.preset, a->opt, a->out);
    fmt::print("{}", explain_summary(r));
    fmt::print("wrote {}/explain.json, knockout.csv, gates.csv, cycling.csv, report.html\n", a->out);
  });
}

}  // namespace phasescope
