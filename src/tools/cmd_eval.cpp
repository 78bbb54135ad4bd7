// cmd_eval.cpp — `phasescope eval --checkpoint DIR --task lookup --protocol prefix|in-sequence
// --samples N --out DIR`: the phase-stratified evaluation of one checkpoint, in process; or, with
// `--base-url URL --model NAME` (and --checkpoint DIR or --preset NAME for the task's design), the same
// layout scored over HTTP by a served model (e.g. `phasescope serve`), with identical journal and report.
#include <fmt/format.h>

#include <iostream>

#include "core/check.h"
#include "core/runtime.h"
#include "eval/model_backend.h"
#include "eval/runner.h"
#include "model/config.h"
#include "tools/commands.h"
#include "tools/http_flags.h"

namespace phasescope {

void add_eval_command(CLI::App& app) {
  struct Args {
    std::string checkpoint, preset, task = "lookup", protocol = "prefix", out;
    HttpArgs http;
    int64_t samples = 1152;
    int R = 24, bootstrap = 2000;
    uint64_t seed = 1;
    bool fresh = false;
    int pad = 0, copies = 2;
    std::string align_card, align_mode = "align", align_to = "strongest";
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("eval", "accuracy per phase of a checkpoint, with intervals and tests");
  cmd->add_option("--checkpoint", a->checkpoint, "checkpoint directory (or .safetensors file)");
  cmd->add_option("--preset", a->preset,
                  "with --base-url: the preset whose task the served model was trained on");
  add_http_flags(cmd, a->http, false);
  cmd->add_option("--task", a->task, "evaluation task (lookup)")->check(CLI::IsMember({"lookup"}));
  cmd->add_option("--protocol", a->protocol, "prefix | in-sequence")
      ->check(CLI::IsMember({"prefix", "in-sequence"}));
  cmd->add_option("--samples", a->samples,
                  "about this many prompts, in [1, 2^24] (rounded up to whole paired blocks)")
      ->check(in_range(int64_t(1), int64_t(1) << 24))
      ->capture_default_str();
  cmd->add_option("--R,--residues", a->R, "residues: r = target position mod R, in [2, 512]")
      ->check(in_range(2, 512))
      ->capture_default_str();
  cmd->add_option("--bootstrap", a->bootstrap, "cluster-bootstrap replicates");
  cmd->add_option("--seed", a->seed, "seed of the evaluation prompts");
  cmd->add_option("--out", a->out, "output directory (journal, results.json, CSV, plots, report.html)")
      ->required();
  cmd->add_flag("--fresh", a->fresh,
                "start the journal in --out over (default: resume it, if it is this run's)");
  cmd->add_option("--pad", a->pad,
                  "filler tokens per prompt (default 2R - 1 = 47 at R = 24); give every row of a comparison "
                  "the same pad so prompts have the same length")
      ->check(in_range(0, 1 << 20));
  cmd->add_option(
      "--align-card", a->align_card,
      "align each prompt's target record with this card.json (from other prompts: another --seed)");
  cmd->add_option("--align-mode", a->align_mode, "align | repeat | both (with --align-card)")
      ->check(CLI::IsMember({"align", "repeat", "both"}));
  cmd->add_option("--align-to", a->align_to,
                  "strongest (the remedy) | weakest (the control: the same padding, on the weakest phases)")
      ->check(CLI::IsMember({"strongest", "weakest"}));
  cmd->add_option("--copies", a->copies, "repeat / both: positions per record, the original included")
      ->check(in_range(2, 512));
  cmd->callback([a] {
    fmt::print("runtime: {}\n", runtime_describe(runtime_init()));
    if (!a->http.base_urls.empty()) {
      // over HTTP: the design from the preset, the answers from the server (token-id prompts)
      if (a->checkpoint.empty() == a->preset.empty())
        fail("eval --base-url", "the design needs exactly one of --checkpoint (its preset) or --preset",
             "pass --preset NAME (the served model's preset)");
      const Preset p = a->preset.empty() ? model_load(a->checkpoint).preset : preset_load(a->preset);
      EvalOptions opt =
          eval_options_for(p, pad_protocol_parse(a->protocol, "--protocol"), a->samples, a->R, a->seed);
      opt.bootstrap = a->bootstrap;
      opt.fresh = a->fresh;
      eval_set_pad_and_align(&opt, a->pad, a->align_card, a->align_mode, a->copies, a->align_to == "weakest");
      fmt::print("{}", eval_samples_note(a->samples, opt));
      ProbeConnectOptions co = http_connect_options(a->http);
      co.tokens = false;  // phasescope's own vocabulary: ids in, ids out
      co.api.bos_id = opt.layout.task.vocab.bos();
      ProbeConnection c = probe_connect(co);
      fmt::print("model: {}\n", c.backend->describe());
      const EvalResults r = run_eval(*c.backend, opt, a->out);
      const bool card = eval_write_card(r, opt, a->out + "/card.json");
      fmt::print("{}\n", results_format_table(r));
      fmt::print("wrote {}/results.json, {}per_residue.csv, report.html\n", a->out,
                 card ? "card.json, " : "");
      return;
    }
    if (a->checkpoint.empty())
      fail("eval", "--checkpoint is required (or --base-url for a served model)", "pass --checkpoint DIR");

    // the model and the design
    LoadedModel m = model_load(a->checkpoint);
    EvalOptions opt =
        eval_options_for(m.preset, pad_protocol_parse(a->protocol, "--protocol"), a->samples, a->R, a->seed);
    opt.bootstrap = a->bootstrap;
    opt.fresh = a->fresh;
    eval_set_pad_and_align(&opt, a->pad, a->align_card, a->align_mode, a->copies, a->align_to == "weakest");
    fmt::print("{}", eval_samples_note(a->samples, opt));
    ModelBackend backend(std::move(m), opt.model);
    fmt::print("model: {}\n", backend.describe());

    // score (or resume), then the statistics and the report
    const EvalResults r = run_eval(backend, opt, a->out);
    const bool card = eval_write_card(r, opt, a->out + "/card.json");
    fmt::print("{}\n", results_format_table(r));
    fmt::print("wrote {}/results.json, {}per_residue.csv, report.html\n", a->out, card ? "card.json, " : "");
  });
}

}  // namespace phasescope
