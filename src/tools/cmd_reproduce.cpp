// cmd_reproduce.cpp — `phasescope reproduce [--quick] [--retrain] [--out DIR]`: the main job.
#include <fmt/format.h>

#include "core/runtime.h"
#include "jobs/reproduce.h"
#include "tools/commands.h"

namespace phasescope {

void add_reproduce_command(CLI::App& app) {
  auto opt = std::make_shared<ReproduceOptions>();
  auto* cmd = app.add_subcommand(
      "reproduce",
      "train full-1kv, w8s8-1kv, w8s4-1kv, the DeepSeek-style kernel and a full-attention control matched to "
      "its mean; evaluate per phase; compare with the paper; judge its headline");
  cmd->add_option(
      "--out", opt->out,
      "output directory (models/, eval/, explain/, report.html); default runs/reproduce, with --quick "
      "runs/reproduce-quick");
  cmd->add_flag("--quick", opt->quick, "tiny models and few samples: the whole pipeline in a few minutes");
  cmd->add_flag("--retrain,--train,--fresh", opt->retrain,
                "train from scratch even where checkpoints exist, and score every evaluation again");
  cmd->add_option("--models", opt->models, "presets to run")->delimiter(',');
  cmd->add_option("--matched-to", opt->matched_to,
                  "the model (of --models) whose prefix mean the full-attention control is stopped at; \"\" "
                  "for no control")
      ->capture_default_str();
  cmd->add_option("--samples", opt->samples, "prompts per model and protocol");
  cmd->add_option("--steps", opt->steps, "training steps per model");
  auto no_explain = std::make_shared<bool>(false);
  cmd->add_flag("--no-explain", *no_explain, "skip the knockout / gate / cycling analysis of each model");
  cmd->callback([opt, no_explain] {
    if (*no_explain) opt->explain = false;
    fmt::print("runtime: {}\n", runtime_describe(runtime_init()));
    reproduce_run(*opt);
  });
}

}  // namespace phasescope
