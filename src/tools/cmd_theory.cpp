// cmd_theory.cpp — `phasescope theory`: gradient flow on the idealized retrieval model (paper §1.7).
// One config: every seed's heads, their selected offsets, collisions, uncovered phases and loss.
// --sweep with lists (--N 32,64,128 --S 4,8 --heads 2,3 --rho ... --epsilon ...): every combination,
// and the fraction of seeds that end fully covered. --out DIR: JSON, CSV, gnuplot PNGs, report.html.
// Not a place for logic: the options fill library structs and the library does the rest.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "core/check.h"
#include "core/io.h"
#include "theory/flow.h"
#include "theory/report.h"
#include "tools/commands.h"

namespace phasescope {

namespace {

struct TheoryOptions {
  TheoryConfig base;  // everything that is not a list
  TheoryAxes axes;    // the values of --N --S --heads --rho --epsilon
  std::string gates = "loglinear";
  int seeds = 10;
  uint64_t first_seed = 1;
  int threads = 1;
  bool sweep = false;
  std::string out;  // "" = print only
};

void run_theory(const TheoryOptions& o) {
  TheoryConfig base = o.base;
  base.gate = theory_gate_parse(o.gates);
  if (!o.out.empty()) io_make_dirs(o.out);  // a bad --out fails now, not after the simulation

  if (!o.sweep) {
    // one configuration, every seed with its trajectory
    const std::vector<TheoryConfig> plan = theory_plan(base, o.axes, false, nullptr);
    const TheoryRun run = theory_run_seeds(plan.front(), o.seeds, o.first_seed, true, o.threads);
    std::cout << theory_format_run(run);

    // the files
    if (!o.out.empty()) {
      theory_write_run(o.out, run);
      std::cout << "wrote " << o.out << "/{results.json,trajectories.csv,*.png,report.html}\n";
    }
    return;
  }

  // every combination of the listed values, with progress on stderr
  const TheorySweep sweep = theory_run_sweep(
      base, o.axes, o.seeds, o.first_seed, o.threads, [](const TheoryRun& r, int done, int total) {
        std::fprintf(stderr, "[%d/%d] N=%d S=%d m=%d: fully covered %.2f\n", done, total, r.cfg.N, r.cfg.S,
                     r.cfg.heads, r.frac_distinct);
      });
  std::cout << theory_format_sweep(sweep);

  // the files
  if (!o.out.empty()) {
    theory_write_sweep(o.out, sweep);
    std::cout << "wrote " << o.out << "/{results.json,sweep.csv,*.png,report.html}\n";
  }
}

}  // namespace

void add_theory_command(CLI::App& app) {
  auto o = std::make_shared<TheoryOptions>();
  CLI::App* cmd = app.add_subcommand("theory",
                                     "gradient flow on the idealized retrieval model (paper §1.7): where do "
                                     "the heads go, what is left uncovered");
  cmd->add_option("--N,--vocab", o->axes.N, "vocabulary size; a list with --sweep (default 64)")
      ->delimiter(',');
  cmd->add_option("--S", o->axes.S, "tokens per chunk; a list with --sweep (default 4)")->delimiter(',');
  cmd->add_option("--heads,-m", o->axes.heads, "heads m < S; a list with --sweep (default 2)")
      ->delimiter(',');
  cmd->add_option("--rho", o->axes.rho, "init radius; a list with --sweep (default 0.1)")->delimiter(',');
  cmd->add_option("--epsilon", o->axes.epsilon, "equiangularity slack; a list with --sweep (default 0)")
      ->delimiter(',');
  cmd->add_option("--L", o->base.L, "chunks per context (L*S <= N)")->capture_default_str();
  cmd->add_option("--kappa", o->base.kappa, "overlap of distinct embeddings")->capture_default_str();
  cmd->add_option("--gamma", o->base.gamma, "attention scale over chunks")->capture_default_str();
  cmd->add_option("--beta", o->base.beta, "unembedding scale")->capture_default_str();
  cmd->add_option("--lr", o->base.lr, "gradient-descent step")->capture_default_str();
  cmd->add_option("--steps", o->base.steps, "maximum steps")->capture_default_str();
  cmd->add_option("--batch", o->base.batch, "contexts per step when the loss is sampled")
      ->capture_default_str();
  cmd->add_option("--eval-contexts", o->base.eval_contexts, "contexts for the final sampled loss")
      ->capture_default_str();
  cmd->add_option("--onehot", o->base.onehot, "mass at which a distribution counts as one-hot")
      ->capture_default_str();
  cmd->add_option("--stop-mass", o->base.stop_mass, "stop once every head has this mass (0: run all steps)")
      ->capture_default_str();
  cmd->add_option("--record-every", o->base.record_every, "trajectory point every this many steps")
      ->capture_default_str();
  cmd->add_option("--coverage", o->base.coverage,
                  "weight of the head-coverage term (repulsion between heads' mean distributions; 0 = the "
                  "paper's model)")
      ->capture_default_str();
  cmd->add_option("--gates", o->gates,
                  "loglinear (Theorem 2, sampled loss) or static (exact loss at epsilon=0)")
      ->capture_default_str();
  cmd->add_option("--seeds", o->seeds, "simulations per config")->capture_default_str();
  cmd->add_option("--seed", o->first_seed, "first seed")->capture_default_str();
  cmd->add_option("--threads", o->threads, "threads over seeds (results do not depend on it)")
      ->capture_default_str();
  cmd->add_flag("--sweep", o->sweep, "run every combination of the listed values");
  cmd->add_option("--out", o->out, "folder for results.json, CSV, PNG plots and report.html");
  cmd->callback([o]() { run_theory(*o); });
}

}  // namespace phasescope
