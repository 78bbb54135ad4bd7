// trainer.h — train a Preset from scratch (or resume it) on CPU in fp32: AdamW, linear warmup +
// cosine decay, global-norm clipping, seeded and deterministic for a fixed thread count. Writes
// DIR/checkpoint.safetensors (atomically, every ckpt_every steps and at the end), DIR/config.json
// and DIR/metrics.jsonl (one line per log/eval step). A NaN/Inf loss stops the run before the
// optimizer step; the last good checkpoint stays. Resuming restores weights, optimizer moments,
// RNG and data-stream state: N steps + resume + M steps == N + M steps straight, bit for bit.
// Data-parallel (TrainOptions::dist, a c10d group of WORLD_SIZE ranks): every rank draws the same global
// batch of train.batch rows from the same stream and trains on its own contiguous slice of it (rank r:
// rows r*B/N .. (r+1)*B/N - 1), so the data position and the global batch do not depend on the world size.
// Each rank's loss is weighted by its share of the batch's scored tokens and the gradients are summed
// (dist/grad_sync.h), which gives the one-rank gradient up to fp32 summation order. Rank 0 alone writes
// the checkpoint (it records the world size), config.json and metrics.jsonl, and runs the periodic
// evaluation; a checkpoint resumes at any world size that divides train.batch.
// Not here: phase-stratified evaluation (eval/), which reads the checkpoint this writes.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/tasks.h"
#include "dist/dist.h"
#include "model/config.h"
#include "model/model.h"

namespace phasescope {

// Rows of equal length -> tokens and targets [B, T] int64 (-1 = no loss); unequal rows are refused.
struct Batch {
  torch::Tensor tokens;   // [B, T]
  torch::Tensor targets;  // [B, T]
};
Batch make_batch(const std::vector<Example>& rows);

struct TrainOptions {
  std::string out_dir;
  bool fresh = false;  // ignore (and overwrite) an existing checkpoint in out_dir
  bool handle_signals =
      false;                // SIGINT / SIGTERM: finish the step, save a checkpoint, return (a second: exit)
  int64_t stop_after = -1;  // stop early after this many total steps (tests, staged runs)
  std::function<void(const std::string&)> log;  // progress lines; default prints to stdout
  // called with the model before each step's forward (instrumentation; tests inject faults with it)
  std::function<void(DecoderImpl& model, int64_t step)> before_step;
  // called after every step with the model in eval mode: true stops the run there with a checkpoint, the
  // model then being what train.steps = that step would give (a control stopped where its held-out
  // accuracy reaches a target). A later train_run on the folder would go on training: callers record
  // that they stopped.
  std::function<bool(DecoderImpl& model, int64_t step)> stop_when;
  // data-parallel training over this group (null or one rank: a single process); every rank calls
  // train_run with the same preset and options, which a start-up check enforces
  std::shared_ptr<DistGroup> dist;
};

struct TrainResult {
  int64_t step = 0;      // steps completed (as in the last checkpoint)
  double loss = 0;       // last training loss
  double eval_acc = -1;  // last periodic evaluation accuracy (-1 = none)
  bool nan_stop = false;
  bool resumed = false;
  bool interrupted = false;    // SIGINT / SIGTERM: stopped after a step, checkpoint saved
  bool stopped_early = false;  // TrainOptions::stop_when said stop: checkpoint saved at `step`
  int64_t trained = 0;         // steps this call ran (0: nothing to do, `message` says why)
  double seconds = 0;
  std::string message;
};

// With train.dense_warmup_steps = N > 0, train_run first trains dense_warmup_preset(preset) for N steps
// of the same schedule in OUT/dense-warmup (resumable like any run; skipped once OUT holds the preset's
// own checkpoint), then warm-starts the preset from it and trains it from step 0. The result's seconds
// include both stages.
TrainResult train_run(const Preset& preset, const TrainOptions& opt);

// The dense twin of a preset, for a dense warm-up: every layer attends exactly over the whole row with the
// same parameter names, so its weights start the compressed model. W/S kinds (window, chunked, full)
// become full attention; DeepSeek kinds become the V4 window-only layer with the window widened to the
// row (task.seq_len), whose parameters are a subset of CSA's, HCA's and CSA2's. Name "<name>-dense-warmup",
// dense_warmup_steps 0, init_from "".
Preset dense_warmup_preset(const Preset& preset);

// Write `preset`'s seeded random initialization (torch::manual_seed(preset.train.seed), as train_run
// starts) as a step-0 checkpoint plus config.json in out_dir: a model that loads and serves like a
// trained one, for tests and benchmarks where exactness or speed matter and accuracy does not.
void train_write_init(const Preset& preset, const std::string& out_dir);

// Accuracy of the model's top-1 at every scored query of `n` held-out examples of the preset's
// task (lookup: the final answer only; a language model: the lookup in its corpus's vocabulary, never
// trained on unless task.lookup_ratio mixes it in), drawn from seed `seed`. Used by the periodic evaluation.
double heldout_accuracy(DecoderImpl& model, const Preset& preset, int n, uint64_t seed);

// Mean cross-entropy (nats per scored token) of `n` held-out rows of the preset's task at full size
// (lookup / mqar; text and mix use lookup; a language model: seq_len-token windows of its corpus's
// validation split, every token scored), drawn from `seed`: the validation loss of a run.
double heldout_loss(DecoderImpl& model, const Preset& preset, int n, uint64_t seed);

// The learning rate at `step` (0-based) under warmup + cosine.
double lr_at(const TrainConfig& t, int64_t step);

}  // namespace phasescope
