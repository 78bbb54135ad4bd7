// cmd_study.cpp — `phasescope study [--grid paper|quick|mitigations|FILE.json] [--seeds 42,43,44,45] [--shard
// K/N]
// [--out DIR] [--merge DIR...]`: the paper's grid across seeds, resumable and shardable, with the findings
// judged by code.
#include <fmt/format.h>

#include <iostream>

#include "core/check.h"
#include "core/runtime.h"
#include "jobs/study.h"
#include "tools/commands.h"

namespace phasescope {

void add_study_command(CLI::App& app) {
  auto opt = std::make_shared<StudyOptions>();
  auto shard = std::make_shared<std::string>("1/1");
  auto report_only = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "study",
      "the paper's grid of runs across seeds (train, evaluate, explain each), the paper's findings judged "
      "from the data; resumable and shardable");
  cmd->add_option("--grid", opt->grid,
                  "a built-in grid of grids/ (paper, quick: toy size in minutes, mitigations, ...) or a grid "
                  "file (JSON)")
      ->capture_default_str();
  cmd->add_option(
         "--seeds", opt->seeds,
         "seeds of the reference W8/S8 · 1 KV (other compressed families take the first two, baselines "
         "the first)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option(
         "--shard", *shard,
         "K/N: run the runs i with i % N == K - 1 (N machines or sittings split the grid); every shard "
         "aggregates the rows that exist")
      ->capture_default_str();
  cmd->add_option(
         "--runs", opt->runs,
         "only these runs of the grid, by id (e.g. lm-full-8kv@42,lm-w8s8-8kv@42; with --shard, those "
         "of the shard); every invocation still aggregates the rows that exist")
      ->delimiter(',');
  cmd->add_option("--out", opt->out,
                  "output directory (runs/<id>/, study.json, runs.csv, report.html); default "
                  "runs/study-<grid>");
  cmd->add_option("--samples", opt->samples,
                  "evaluation prompts per run and protocol (default 4608: 192 per residue; toy grids 48 per "
                  "residue); a row scored on fewer is evaluated again, its trained model reused");
  cmd->add_option("--merge", opt->merge,
                  "other study output folders (shards run elsewhere): copy their rows into --out, run "
                  "nothing, and aggregate")
      ->expected(1, -1);
  cmd->add_flag("--fresh", opt->fresh,
                "redo this shard's runs from scratch (default: resume; a run with a row is done)");
  cmd->add_flag("--report-only", *report_only, "run nothing: aggregate the rows that exist");
  cmd->add_flag("!--no-train", opt->train,
                "train nothing: only finish the rows whose trained model is here (a probe a row lacks, more "
                "prompts), e.g. beside another invocation that is training");
  cmd->add_flag("!--no-report", opt->report, "skip the plots and report.html");
  cmd->callback([opt, shard, report_only] {
    study_shard_parse(*shard, opt.get());
    opt->run = !*report_only && opt->merge.empty();
    opt->command = "phasescope study --grid " + opt->grid + " --shard " + *shard;
    if (!opt->runs.empty()) opt->command += " --runs " + fmt::format("{}", fmt::join(opt->runs, ","));
    for (const std::string& m : opt->merge) opt->command += " --merge " + m;
    opt->log = &std::cout;
    fmt::print("runtime: {}\n", runtime_describe(runtime_init()));
    const StudyResult r = study_run(*opt);
    fmt::print("wrote {}/study.json, runs.csv, phases.csv{}\n", r.out, opt->report ? ", report.html" : "");
    if (!r.failed.empty())  // a scheduler retries an index only when it exits non-zero (docs/cluster.md)
      fail("study",
           fmt::format("{} of this invocation's runs failed (first: {}: {})", r.failed.size(),
                       r.failed[0].first, r.failed[0].second),
           "fix the cause and run the same command again: finished runs keep their rows, the rest resume");
  });
}

}  // namespace phasescope
