// cmd_train.cpp — `phasescope train --preset NAME [--task ...] [--steps N] [--out DIR] [overrides]`
// and `phasescope presets` (list the named presets). With WORLD_SIZE > 1 in the environment (torchrun,
// Slurm, `phasescope launch`) or --world-size, the run is data-parallel over a c10d Gloo group.
#include <fmt/format.h>

#include <cstdlib>
#include <optional>

#include "core/check.h"
#include "core/runtime.h"
#include "dist/dist.h"
#include "model/config.h"
#include "model/load.h"
#include "tools/commands.h"
#include "train/trainer.h"

namespace phasescope {

namespace {

// Command-line overrides of a preset; unset ones leave the preset's value.
struct Overrides {
  std::optional<std::string> task, text, init_from, corpus;
  std::optional<int> steps, d_model, layers, heads, kv_heads, head_dim, mlp, token_shift, seq, batch, records,
      warmup, curriculum;
  std::optional<int> eval_every, repeat_steps, dense_warmup;
  std::optional<double> lr, text_ratio, repeat_ratio, lookup_ratio;
  std::optional<uint64_t> seed;
};

void add_override_options(CLI::App* cmd, Overrides& o) {
  cmd->add_option("--task", o.task, "lookup | mqar | text | mix | corpus");
  cmd->add_option("--corpus", o.corpus, "a corpus folder (phasescope corpus build) for the corpus task");
  cmd->add_option(
      "--lookup-ratio", o.lookup_ratio,
      "corpus: fraction of rows that are lookup rows (a declared deviation from pure pretraining)");
  cmd->add_option("--text", o.text, "UTF-8 text file for the text / mix tasks");
  cmd->add_option("--text-ratio", o.text_ratio, "mix: fraction of text rows");
  cmd->add_option("--steps", o.steps, "training steps");
  cmd->add_option("--d-model", o.d_model, "model width");
  cmd->add_option("--layers", o.layers, "depth (the preset's layer pattern repeats)");
  cmd->add_option("--heads", o.heads, "query heads");
  cmd->add_option("--kv-heads", o.kv_heads, "KV heads (1 = MQA)");
  cmd->add_option("--head-dim", o.head_dim, "head dimension");
  cmd->add_option("--mlp", o.mlp, "SwiGLU hidden width (0 = attention-only)");
  cmd->add_option("--token-shift", o.token_shift,
                  "causal token-shift width before each attention (0 = off, the paper's decoder)");
  cmd->add_option("--seq", o.seq, "context length of training sequences");
  cmd->add_option("--batch", o.batch, "sequences per step");
  cmd->add_option("--records", o.records, "lookup records per prompt");
  cmd->add_option("--lr", o.lr, "peak learning rate");
  cmd->add_option("--warmup", o.warmup, "warmup steps");
  cmd->add_option("--curriculum", o.curriculum, "steps over which lookup records grow from min_records");
  cmd->add_option(
      "--repeat-ratio", o.repeat_ratio,
      "lookup/mqar: fraction of rows that are repeated segments (induction warm-up); corpus: rows "
      "that repeat a span of their own text (a declared deviation)");
  cmd->add_option("--repeat-steps", o.repeat_steps,
                  "repeated-segment rows only before this step (0 = always)");
  cmd->add_option("--eval-every", o.eval_every, "held-out evaluation period in steps (0 = off)");
  cmd->add_option("--seed", o.seed, "seed of initialization and data");
  cmd->add_option("--init-from", o.init_from,
                  "warm start: a checkpoint (DIR or .safetensors) whose weights start every parameter of the "
                  "same name, e.g. a full-attention run of the same widths (train.init_from)");
  cmd->add_option("--dense-warmup", o.dense_warmup,
                  "first train the preset's dense twin for N steps (OUT/dense-warmup), then start from it "
                  "(train.dense_warmup_steps; 0 = off)");
}

void apply(Preset& p, const Overrides& o) {
  if (o.task) p.task.task = *o.task;
  if (o.text) p.task.text_file = *o.text;
  if (o.text_ratio) p.task.text_ratio = *o.text_ratio;
  if (o.corpus) p.task.corpus = *o.corpus;
  if (o.lookup_ratio) p.task.lookup_ratio = *o.lookup_ratio;
  if (o.steps) p.train.steps = *o.steps;
  if (o.d_model) p.model.d_model = *o.d_model;
  if (o.heads) p.model.n_heads = *o.heads;
  if (o.kv_heads) p.model.n_kv_heads = *o.kv_heads;
  if (o.head_dim) p.model.head_dim = *o.head_dim;
  if (o.mlp) p.model.mlp_hidden = *o.mlp;
  if (o.token_shift) p.model.token_shift = *o.token_shift;
  if (o.seq) p.task.seq_len = *o.seq;
  if (o.batch) p.train.batch = *o.batch;
  if (o.records) p.task.n_records = *o.records;
  if (o.lr) p.train.lr = *o.lr;
  if (o.warmup) p.train.warmup = *o.warmup;
  if (o.curriculum) p.task.curriculum_steps = *o.curriculum;
  if (o.repeat_ratio) p.task.repeat_ratio = *o.repeat_ratio;
  if (o.repeat_steps) p.task.repeat_steps = *o.repeat_steps;
  if (o.eval_every) p.train.eval_every = *o.eval_every;
  if (o.seed) p.train.seed = *o.seed;
  if (o.init_from) p.train.init_from = *o.init_from;
  if (o.dense_warmup) p.train.dense_warmup_steps = *o.dense_warmup;
  if (o.layers) {  // repeat the preset's layer pattern to the new depth
    std::vector<AttnConfig> pattern = p.model.layers;
    p.model.layers.clear();
    for (int l = 0; l < *o.layers; ++l) p.model.layers.push_back(pattern[size_t(l) % pattern.size()]);
    p.model.n_layers = *o.layers;
  }
  // re-validate the whole preset after the changes
  p = preset_from_json(preset_to_json(p), "preset " + p.name + " with command-line overrides");
}

}  // namespace

void add_train_command(CLI::App& app) {
  struct Args {
    std::string preset, out;
    bool fresh = false;
    Overrides o;
    DistFlags dist;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "train",
      "train a preset from scratch (resumes if --out holds its checkpoint); every option below --fresh "
      "overrides the preset, whose value is the default (`phasescope presets` lists them)");
  cmd->add_option("--preset", a->preset, "preset name (see `phasescope presets`) or a preset .json file")
      ->required();
  cmd->add_option("--out", a->out, "output directory (checkpoint, config, metrics); default runs/<preset>");
  cmd->add_flag("--fresh", a->fresh, "start over even if --out holds a checkpoint");
  add_override_options(cmd, a->o);
  cmd->add_option("--world-size", a->dist.world_size, "data-parallel ranks (default: $WORLD_SIZE, else 1)");
  cmd->add_option("--rank", a->dist.rank, "this rank, 0 .. world size - 1 (default: $RANK)");
  cmd->add_option("--local-rank", a->dist.local_rank,
                  "this rank's index on its machine (default: $LOCAL_RANK)");
  cmd->add_option("--master-addr", a->dist.master_addr, "rank 0's host (default: $MASTER_ADDR)");
  cmd->add_option("--master-port", a->dist.master_port, "rank 0's rendezvous port (default: $MASTER_PORT)");
  cmd->callback([a] {
    // the run's configuration
    Preset p = preset_load(a->preset);
    apply(p, a->o);
    TrainOptions opt;
    opt.out_dir = a->out.empty() ? "runs/" + p.name : a->out;
    opt.fresh = a->fresh;
    opt.handle_signals = true;  // Ctrl-C / SIGTERM: save a checkpoint after the step, then stop
    const DistEnv denv = dist_env_from_environment(a->dist);
    if (denv.rank == 0) fmt::print("runtime: {}\n", runtime_describe(runtime_init()));
    opt.dist = dist_join(denv);  // one rank: no group

    // train
    TrainResult r = train_run(p, opt);

    // outcome
    if (r.nan_stop)
      fail("train", r.message, "lower --lr or raise warmup; the run can resume from its last checkpoint");
    if (r.interrupted) std::exit(130);             // the message (step, checkpoint) is already printed
    if (r.trained == 0 || denv.rank != 0) return;  // nothing to do (the message says why), or not rank 0
    fmt::print("done: {} steps in {:.1f} s, last loss {:.4f}{}, checkpoint {}\n", r.step, r.seconds, r.loss,
               r.eval_acc >= 0 ? fmt::format(", held-out accuracy {:.3f}", r.eval_acc) : std::string(),
               checkpoint_path(opt.out_dir));
  });

  auto* list = app.add_subcommand("presets", "list the named presets");
  list->callback([] {
    for (const auto& n : preset_names()) {
      Preset p = preset_load(n);
      fmt::print("{:<20} {}\n", n, p.description);
    }
  });
}

}  // namespace phasescope
