// train_bench.cpp — training speed of the laptop presets, side by side in one run:
//   phasescope (this binary's libtorch decoder, AdamW, clipping, fp32) tokens/s;
//   the same model written the usual research way in PyTorch-Python (bench/torch_reference.py,
//   Debian's python3-torch), as a user would run it and with phasescope's allocator tuning;
//   the achieved FLOP rate as a fraction of a 1024^3 sgemm timed in the same run.
// Two workloads, both implementations fed the same batches (written to a file the script reads):
//   "task"  — the preset's own training rows at full length (lookup: 17 scored positions of 256,
//             no repeated rows after step 900); phasescope runs the last layer's query side and the
//             unembedding on the scored rows only (lm_loss_scored), the research script computes
//             every logit and masks with ignore_index, as such scripts do;
//   "dense" — random tokens with a target at every position (no row to skip: the kernels alone).
// A third table, "lm", times the language models of docs/lm (lm-* presets: 6 SwiGLU blocks, d 256,
// T 512, batch 16) on dense random tokens over the corpus tokenizer's vocabulary (--lm-vocab; no corpus
// needed), and prints the peak memory of one training step against what the step holds: parameters,
// their gradients, AdamW's two moments, and the activations the autograd graph keeps at the end of the
// forward pass (measured: live bytes after the forward minus before it).
// All runs use the same thread count. Usage: train_bench [--steps 20] [--presets w8s8-1kv,full-1kv]
// [--lm-steps 5] [--lm-presets lm-full-8kv,lm-w8s8-1kv] [--json FILE]. Run by scripts/bench.sh. Not a test.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench_common.h"
#include "core/runtime.h"
#include "data/tasks.h"
#include "memory_tracker.h"
#include "model/model.h"
#include "train/trainer.h"

using namespace phasescope;

namespace {

using bench::Clock;
using bench::seconds_since;

// Useful FLOPs of one training step (forward + backward = 3 x forward): every matrix product with
// a weight, plus attention scores and weighted sums over the keys a query reads (causal full
// attention: T/2 on average; compressed: w raw tokens + T/(2S) entries on average). Counted for the
// rows the step must compute: `rows_last` rows in the last layer's query side (W_q, attention, W_o,
// MLP) and in the unembedding, every row elsewhere (keys and values need all positions).
double step_flops(const Preset& p, DecoderImpl& m, double rows_last, double scored) {
  const double BT = double(p.train.batch) * p.task.seq_len, T = p.task.seq_len;
  const int L = p.model.n_layers;
  double fwd = 2.0 * scored * p.model.vocab_size * p.model.d_model;
  for (const auto& item : m.named_parameters()) {
    const std::string& n = item.key();
    if (item.value().dim() < 2 || n == "embed" || n == "lm_head") continue;
    const std::string s = std::to_string(L - 1);  // the last layer's row-wise matrices, by their exact names
    const bool row_wise = n == "attn" + s + ".wq" || n == "attn" + s + ".wo" || n == "mlp_gate" + s ||
                          n == "mlp_up" + s || n == "mlp_down" + s;
    fwd += 2.0 * (row_wise ? rows_last : BT) * double(item.value().numel());
  }
  for (int l = 0; l < L; ++l) {
    const AttnConfig& a = p.model.layers[size_t(l)];
    double keys = T / 2;
    if (a.kind == AttnKind::Chunked) keys = a.window + T / (2.0 * a.S);
    fwd += 2.0 * 2.0 * (l == L - 1 ? rows_last : BT) * a.n_heads * a.head_dim * keys;
  }
  return 3.0 * fwd;
}

struct Speed {
  double tok_s = 0, step_s = 0, flops = 0;
  double fwd_s = 0, bwd_s = 0, opt_s = 0;  // per step: forward + loss, backward, clip + AdamW
};

// `steps + 2` batches of [B, T] tokens and targets (-1 = no loss); the first two are warm-up.
struct Batches {
  std::vector<torch::Tensor> tokens, targets;
  double scored = 0;  // mean scored positions per batch
};

Batches task_batches(const Preset& p, int n) {
  TaskStream stream(p.task, 1);
  const int64_t last = std::max(0, p.train.steps - 1);
  Batches out;
  for (int s = 0; s < n; ++s) {
    std::vector<Example> rows;
    for (int b = 0; b < p.train.batch; ++b)
      rows.push_back(stream.next(last));  // the task after any curriculum
    Batch batch = make_batch(rows);
    out.scored += batch.targets.ge(0).sum().item<double>() / n;
    out.tokens.push_back(batch.tokens);
    out.targets.push_back(batch.targets);
  }
  return out;
}

Batches dense_batches(const Preset& p, int n) {
  Batches out;
  for (int s = 0; s < n; ++s) {
    out.tokens.push_back(
        torch::randint(0, p.model.vocab_size, {p.train.batch, p.task.seq_len}, torch::kInt64));
    out.targets.push_back(
        torch::randint(0, p.model.vocab_size, {p.train.batch, p.task.seq_len}, torch::kInt64));
  }
  out.scored = double(p.train.batch) * p.task.seq_len;
  return out;
}

// Raw little-endian int64, batch after batch: tokens [B, T] then targets [B, T].
void write_batches(const Batches& b, const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  for (size_t i = 0; i < b.tokens.size(); ++i)
    for (const auto& t : {b.tokens[i], b.targets[i]})
      f.write(reinterpret_cast<const char*>(t.contiguous().data_ptr<int64_t>()),
              std::streamsize(t.numel() * 8));
}

Speed phasescope_speed(const Preset& p, int steps, const Batches& data) {
  torch::manual_seed(0);
  Decoder m(p.model);
  torch::optim::AdamW opt(m->parameters(), torch::optim::AdamWOptions(1e-3));
  Speed out;
  std::vector<double> times;  // per timed step; the median is reported (single steps vary by ~20% here)
  for (int s = 0; s < steps + 2; ++s) {
    auto ta = Clock::now();
    opt.zero_grad();
    auto loss = lm_loss_scored(*m, data.tokens[size_t(s)], data.targets[size_t(s)]);
    auto tb = Clock::now();
    loss.backward();
    auto tc = Clock::now();
    torch::nn::utils::clip_grad_norm_(m->parameters(), 1.0);
    opt.step();
    if (s >= 2) {
      out.fwd_s += std::chrono::duration<double>(tb - ta).count() / steps;
      out.bwd_s += std::chrono::duration<double>(tc - tb).count() / steps;
      out.opt_s += seconds_since(tc) / steps;
      times.push_back(seconds_since(ta));
    }
  }
  out.step_s = bench::median(times);
  const double mean_s = out.fwd_s + out.bwd_s + out.opt_s;  // shares below are of the mean step
  out.fwd_s /= mean_s / out.step_s, out.bwd_s /= mean_s / out.step_s, out.opt_s /= mean_s / out.step_s;
  out.tok_s = double(p.train.batch) * p.task.seq_len / out.step_s;
  // the last layer runs on the scored rows only when they are few (AttentionImpl::forward_rows)
  const double BT = double(p.train.batch) * p.task.seq_len;
  const double rows_last = 4 * data.scored <= BT ? data.scored : BT;
  out.flops = step_flops(p, *m, rows_last, data.scored) / out.step_s;
  return out;
}

// Runs Debian's interpreter explicitly: python3-torch lives there, and a pyenv python3 may come first on
// PATH.
double python_speed(const Preset& p, bool tune, int steps, int threads, const std::string& data) {
  const AttnConfig& a = p.model.layers[0];
  std::string cmd = fmt::format(
      "/usr/bin/python3 {}/bench/torch_reference.py --kind {} --d {} --layers {} --heads {} --head-dim {} "
      "--seq {} "
      "--batch {} --steps {} --vocab {} --kv-heads {} --mlp {} --W {} --S {} --window {} --threads {} --data "
      "{}{}",
      PHASESCOPE_SOURCE_DIR, a.kind == AttnKind::Chunked ? "chunked" : "full", p.model.d_model,
      p.model.n_layers, p.model.n_heads, p.model.head_dim, p.task.seq_len, p.train.batch, steps,
      p.model.vocab_size, a.n_kv_heads, p.model.mlp_hidden, a.W, a.S, a.window, threads, data,
      tune ? " --tune-malloc" : "");
  FILE* f = popen(cmd.c_str(), "r");
  double v = 0;
  if (!f || std::fscanf(f, "tokens_per_s %lf", &v) != 1) {
    std::fprintf(stderr,
                 "train_bench: the PyTorch-Python reference failed (is python3-torch installed? "
                 "scripts/bench.sh installs it): %s\n",
                 cmd.c_str());
    if (f) pclose(f);
    return 0;
  }
  pclose(f);
  return v;
}

// Bytes of one training step (fp32), from the tracking allocator: the step is run twice first so the
// gradients and AdamW's moments exist, as in every later step of a run.
struct StepMemory {
  double params = 0, grads = 0, adam = 0;  // what lives across steps
  double activations = 0;                  // live after the forward minus live before it
  double peak = 0;                         // the most live at any moment of the step
  double held() const { return params + grads + adam + activations; }
};

StepMemory step_memory(const Preset& p, const Batches& data) {
  auto& tracker = bench::TrackingAllocator::install();
  torch::manual_seed(0);
  Decoder m(p.model);
  torch::optim::AdamW opt(m->parameters(), torch::optim::AdamWOptions(1e-3));
  StepMemory out;
  for (const auto& w : m->parameters()) out.params += 4.0 * double(w.numel());
  for (int s = 0; s < 3; ++s) {
    opt.zero_grad();
    tracker.reset_peak();
    const double before = double(tracker.live());
    auto loss = lm_loss_scored(*m, data.tokens[size_t(s)], data.targets[size_t(s)]);
    out.activations = double(tracker.live()) - before;
    loss.backward();
    torch::nn::utils::clip_grad_norm_(m->parameters(), 1.0);
    opt.step();
    out.peak = double(tracker.peak());
  }
  out.grads = out.params;     // one fp32 gradient per parameter (zero_grad zeroes, it does not free)
  out.adam = 2 * out.params;  // exp_avg and exp_avg_sq
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Run run("train_bench",
                 "training speed of the laptop presets: phasescope vs the same model in PyTorch-Python");
  int steps = 20;
  std::vector<std::string> presets = {"w8s8-1kv", "full-1kv"};
  run.cli.add_option("--steps", steps, "timed steps per run (after 2 warm-up steps)")
      ->check(CLI::PositiveNumber);
  run.cli.add_option("--presets", presets, "presets to train, e.g. w8s8-1kv,full-1kv")->delimiter(',');
  int lm_steps = 5;
  int64_t lm_vocab = 16384;
  std::vector<std::string> lm_presets = {"lm-full-8kv", "lm-w8s8-1kv"};
  run.cli.add_option("--lm-steps", lm_steps, "timed steps per language-model run (0: no lm table)")
      ->check(CLI::NonNegativeNumber);
  run.cli.add_option("--lm-presets", lm_presets, "language-model presets to time")->delimiter(',');
  run.cli.add_option("--lm-vocab", lm_vocab, "their vocabulary (the corpus tokenizer's, docs/lm/corpus.md)")
      ->check(CLI::PositiveNumber);
  if (const int rc = run.parse(argc, argv); rc >= 0) return rc;

  // same set-up as every phasescope binary; the Python runs get the same thread count
  RuntimeInfo rt = runtime_init();
  run.info("runtime", runtime_describe(rt));
  const double peak_gflops = bench::sgemm_gflops();
  run.info("sgemm 1024^3 GFLOP/s", peak_gflops);
  fmt::print(
      "\nworkload 'task': the preset's training rows; phasescope's last layer and unembedding run on scored "
      "rows only, PyTorch-Python on every row\n"
      "workload 'dense': random tokens, every position scored (no rows to skip)\n"
      "py = PyTorch-Python as is, py tuned = with phasescope's allocator settings; step ms and its shares "
      "(forward, backward, clip + AdamW) are phasescope's\n\n");

  // both workloads, each preset: phasescope, then the research script twice, on the same batches
  const std::string data =
      (std::filesystem::temp_directory_path() / fmt::format("phasescope_train_bench_{}.bin", ::getpid()))
          .string();
  bench::Table table(
      run, "train",
      {bench::Col("workload", 8).left(), bench::Col("preset", 10).left(), bench::Col("scored/step", 11),
       bench::Col("ours tok/s", 10), bench::Col("py tok/s", 9), bench::Col("py tuned tok/s", 14),
       bench::Col("vs py", 6, 2), bench::Col("vs tuned", 8, 2), bench::Col("FLOP/sgemm", 10, 1, "%"),
       bench::Col("step ms", 8), bench::Col("fwd", 4, 0, "%"), bench::Col("bwd", 4, 0, "%"),
       bench::Col("opt", 4, 0, "%")});
  for (const std::string workload : {"task", "dense"})
    for (const std::string& name : presets) {
      Preset p = preset_load(name);
      p.model.vocab_size = task_vocab(p.task).size();
      model_config_sync(p.model, name);
      const Batches b = workload == "task" ? task_batches(p, steps + 2) : dense_batches(p, steps + 2);
      write_batches(b, data);
      const Speed ours = phasescope_speed(p, steps, b);
      const double py = python_speed(p, false, steps, rt.threads, data);
      const double py_tuned = python_speed(p, true, steps, rt.threads, data);
      table.row({workload, name, b.scored, ours.tok_s, bench::if_known(py > 0, py),
                 bench::if_known(py_tuned > 0, py_tuned), bench::if_known(py > 0, ours.tok_s / py),
                 bench::if_known(py_tuned > 0, ours.tok_s / py_tuned), 100 * ours.flops / (peak_gflops * 1e9),
                 1e3 * ours.step_s, 100 * ours.fwd_s / ours.step_s, 100 * ours.bwd_s / ours.step_s,
                 100 * ours.opt_s / ours.step_s});
    }

  // the language models: dense rows of the corpus tokenizer's vocabulary, then one step's memory
  bench::Table lm(
      run, "lm",
      {bench::Col("preset", 12).left(), bench::Col("params M", 8, 2), bench::Col("ours tok/s", 10),
       bench::Col("py tok/s", 9), bench::Col("py tuned tok/s", 14), bench::Col("vs py", 6, 2),
       bench::Col("vs tuned", 8, 2), bench::Col("FLOP/sgemm", 10, 1, "%"), bench::Col("step ms", 8),
       bench::Col("P+G+Adam MB", 11), bench::Col("act MB", 7), bench::Col("peak MB", 8),
       bench::Col("peak/held", 9, 2)});
  for (const std::string& name : lm_steps > 0 ? lm_presets : std::vector<std::string>{}) {
    Preset p = preset_load(name);
    p.model.vocab_size = lm_vocab;
    model_config_sync(p.model, name);
    const Batches b = dense_batches(p, std::max(lm_steps + 2, 3));
    write_batches(b, data);
    const Speed ours = phasescope_speed(p, lm_steps, b);
    const double py = python_speed(p, false, lm_steps, rt.threads, data);
    const double py_tuned = python_speed(p, true, lm_steps, rt.threads, data);
    const StepMemory mem = step_memory(p, b);
    lm.row({name, mem.params / 4e6, ours.tok_s, bench::if_known(py > 0, py),
            bench::if_known(py_tuned > 0, py_tuned), bench::if_known(py > 0, ours.tok_s / py),
            bench::if_known(py_tuned > 0, ours.tok_s / py_tuned), 100 * ours.flops / (peak_gflops * 1e9),
            1e3 * ours.step_s, (mem.params + mem.grads + mem.adam) / 1e6, mem.activations / 1e6,
            mem.peak / 1e6, mem.peak / mem.held()});
  }
  std::filesystem::remove(data);
  return 0;
}
