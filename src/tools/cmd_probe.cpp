// cmd_probe.cpp — `phasescope probe needle|flip --base-url URL --model NAME --out DIR ...`: the
// phase-sensitivity probes of a served model over its OpenAI-compatible API (vLLM, llama-server,
// phasescope serve). Same journal, resume, statistics and report as `eval`.
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "core/check.h"
#include "core/io.h"
#include "probe/flip.h"
#include "probe/needle.h"
#include "tools/commands.h"
#include "tools/http_flags.h"

namespace phasescope {

void add_probe_command(CLI::App& app) {
  auto* probe =
      app.add_subcommand("probe", "phase-sensitivity probes of a served model over HTTP (needle, flip)");
  probe->require_subcommand(1);

  // ---- needle: the position-matched needle test (design doc 1.4)
  struct NeedleArgs {
    HttpArgs http;
    NeedleSpec spec;
    std::string out, label, keys_file, values_file;
    int S = 4, bootstrap = 2000;
    bool no_verify = false, no_report = false, fresh = false;
  };
  auto n = std::make_shared<NeedleArgs>();
  auto* needle = probe->add_subcommand(
      "needle", "key-value needle retrieval, accuracy per residue of the target position");
  add_http_flags(needle, n->http, true);
  needle->add_option("--context", n->spec.context, "tokens per prompt (1K to 128K+)");
  needle->add_option("--samples-per-group", n->spec.samples_per_group,
                     "prompts per residue (paired base examples)");
  needle->add_option("--residues", n->spec.R, "R: residue r = target position mod R");
  needle->add_option("--stride", n->S,
                     "fold accuracy to r mod S for display (the model's compression stride)");
  needle->add_option("--key-tokens", n->spec.key_tokens, "tokens per key");
  needle->add_option("--value-tokens", n->spec.value_tokens, "tokens per value (exact match of all of them)");
  needle->add_option("--separator", n->spec.separator, "between key and value");
  needle->add_option("--filler", n->spec.filler,
                     "one filler token, repeated to shift the records (default: chosen)");
  needle->add_option("--keys-file", n->keys_file, "candidate keys, one per line (default: built-in nouns)");
  needle->add_option("--values-file", n->values_file,
                     "candidate values, one per line, with their leading space");
  needle->add_option("--seed", n->spec.seed, "seed of the records and shifts");
  needle->add_option("--tol-mean", n->spec.tol_mean,
                     "refuse a design whose groups' mean target positions differ by more (tokens)");
  needle->add_option("--tol-sd", n->spec.tol_sd,
                     "refuse a design whose groups' SDs of the target position differ by more (tokens)");
  needle->add_flag("--no-verify", n->no_verify,
                   "skip the decode/re-encode stability check of every base example");
  needle->add_option("--bootstrap", n->bootstrap, "cluster-bootstrap replicates");
  needle->add_flag("--no-report", n->no_report, "skip the plots and report.html");
  needle->add_flag("--fresh", n->fresh,
                   "start the journal in --out over (default: resume it, if it is this run's)");
  needle->add_option("--label", n->label, "model label in the journal and results (default: --model)");
  needle->add_option("--out", n->out, "output directory (journal, results.json, CSV, report.html)")
      ->required();
  needle->callback([n, needle] {
    // connect: endpoints, tokenizer, backend
    ProbeConnectOptions co = http_connect_options(n->http);
    co.echo_on_phasescope = true;
    ProbeConnection c = probe_connect(co);
    fmt::print("backend: {}\ntokens: {}\n", c.backend->describe(), c.tokens->describe());
    // the design, in the model's tokens (positions counted from the server's first token)
    NeedleSpec spec = needle_spec_for(
        c, n->spec,
        {needle->count("--context") > 0, needle->count("--filler") > 0, needle->count("--separator") > 0},
        &std::cout);
    spec.verify = !n->no_verify;
    if (!n->keys_file.empty()) spec.keys = io_read_lines(n->keys_file);
    if (!n->values_file.empty()) spec.values = io_read_lines(n->values_file);
    const NeedleDesign d = needle_build(spec, *c.tokens, &std::cout);
    std::cout << needle_format_design(d);

    // score (or resume), then statistics and report
    NeedleRunOptions ro;
    ro.model = n->label.empty() ? c.model.id : n->label;
    ro.S = n->S;
    ro.bootstrap = n->bootstrap;
    ro.report = !n->no_report;
    ro.fresh = n->fresh;
    ro.log = &std::cout;
    const EvalResults r = needle_run(*c.backend, d, ro, n->out);
    fmt::print("{}\nwrote {}/results.json, per_residue.csv, logprob_per_residue.csv, table.txt{}\n",
               results_format_table(r), n->out, ro.report ? ", report.html" : "");
  });

  // ---- flip: the padding-flip probe (design doc 1.3, generalized)
  struct FlipArgs {
    HttpArgs http;
    std::string template_file, out, label;
    std::vector<std::string> fillers, candidates;
    int L_min = -1, L_max = -1, P_max = 0;
    bool fresh = false;
  };
  auto f = std::make_shared<FlipArgs>();
  auto* flip = probe->add_subcommand(
      "flip", "which candidate wins as a filler grows one token at a time, and its period");
  add_http_flags(flip, f->http, true);
  flip->add_option("--template", f->template_file,
                   "template file with one {filler} slot (default: the FP8 example)");
  flip->add_option("--filler", f->fillers,
                   "filler unit, repeated (repeat the flag for several families; default \" =\")");
  flip->add_option("--candidate", f->candidates, "a candidate continuation (at least two; default 8 and 32)");
  flip->add_option("--L-min,--l-min", f->L_min,
                   "shortest L (tokens up to the end of the filler; default 24)");
  flip->add_option("--L-max,--l-max", f->L_max, "longest L (default 39)");
  flip->add_option("--period-max", f->P_max, "longest period tried (default: half the lengths)");
  flip->add_option("--label", f->label, "model label in the journal (default: --model)");
  flip->add_option("--out", f->out, "output directory (journal, flip.json, flip.csv, flip.txt)")->required();
  flip->add_flag("--fresh", f->fresh,
                 "start the journal in --out over (default: resume it, if it is this run's)");
  flip->callback([f] {
    // connect
    ProbeConnectOptions co = http_connect_options(f->http);
    co.echo_on_phasescope = true;
    ProbeConnection c = probe_connect(co);
    fmt::print("backend: {}\ntokens: {}\n", c.backend->describe(), c.tokens->describe());

    // the sweep: the built-in FP8 example (on a phasescope server: its token-space example) unless told
    // otherwise
    const ServedTokenSpace& space = c.model.token_space;
    FlipSpec spec =
        space.present ? flip_token_space_example(space.fillers, space.keys, space.names) : flip_fp8_example();
    if (!f->template_file.empty()) spec.template_text = io_read_text(f->template_file);
    if (!f->fillers.empty()) {
      spec.families.clear();
      for (size_t i = 0; i < f->fillers.size(); ++i)
        spec.families.push_back({fmt::format("filler{}", i + 1), f->fillers[i]});
    }
    if (!f->candidates.empty()) spec.candidates = f->candidates;
    if (f->L_min >= 0) spec.L_min = f->L_min;
    if (f->L_max >= 0) spec.L_max = f->L_max;
    spec.P_max = f->P_max;
    const FlipDesign d = flip_build(spec, *c.tokens, &std::cout);

    // score (or resume) and analyze
    FlipRunOptions ro;
    ro.model = f->label.empty() ? c.model.id : f->label;
    ro.fresh = f->fresh;
    ro.log = &std::cout;
    const FlipResult r = flip_run(*c.backend, d, ro, f->out);
    fmt::print("{}wrote {}/flip.json, flip.csv, flip.txt\n", flip_format(r), f->out);
  });
}

}  // namespace phasescope
