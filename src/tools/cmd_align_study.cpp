// cmd_align_study.cpp — `phasescope align-study --checkpoints A,B,... [--http A] --out DIR
// [--per-residue 192]`: the measurement of docs/align.md (jobs/align_study.h does the work).
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "core/io.h"
#include "core/runtime.h"
#include "jobs/align_study.h"
#include "tools/commands.h"

namespace phasescope {

void add_align_study_command(CLI::App& app) {
  struct Args {
    std::vector<std::string> checkpoints, http;
    AlignStudyOptions opt;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("align-study",
                                 "measure alignment and repetition per phase on checkpoints (docs/align.md)");
  cmd->add_option("--checkpoints", a->checkpoints, "checkpoint folders")->required()->delimiter(',');
  cmd->add_option("--http", a->http, "checkpoints also measured through serve over HTTP")->delimiter(',');
  cmd->add_option("--out", a->opt.out, "output folder (results.json, results.csv, table.md, runs/)")
      ->required();
  cmd->add_option("--per-residue", a->opt.per_residue, "prompts per residue and evaluation")
      ->check(in_range(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--card-seed", a->opt.card_seed, "seed of the card's prompts")->capture_default_str();
  cmd->add_option("--eval-seed", a->opt.eval_seed, "seed of the judged prompts")->capture_default_str();
  cmd->callback([a] {
    fmt::print("runtime: {}\n", runtime_describe(runtime_init()));
    for (const std::string& c : a->checkpoints) {
      bool http = false;
      for (const std::string& h : a->http) http = http || h == c;
      a->opt.models.push_back({c, http});
    }
    a->opt.log = &std::cout;
    align_study_run(a->opt);
    std::cout << io_read_text(a->opt.out + "/table.md", "") << "wrote " << a->opt.out
              << "/results.json, results.csv, table.md\n";
  });
}

}  // namespace phasescope
