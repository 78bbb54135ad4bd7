// train_bench.cpp — training speed of the laptop presets, side by side in one run:
//   phasescope (this binary's libtorch decoder, AdamW, clipping, fp32) tokens/s;
//   the same model written the usual research way in PyTorch-Python (bench/torch_reference.py,
//   Debian's python3-torch), as a user would run it and with phasescope's allocator tuning;
//   the achieved FLOP rate as a fraction of a 1024^3 sgemm timed in the same run.
// All runs use the same thread count. Run by scripts/bench.sh. Not a test.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "core/runtime.h"
#include "data/tasks.h"
#include "model/model.h"

using namespace phasescope;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// sgemm FLOP/s of a 1024 x 1024 x 1024 product (best of 5 after a warm-up).
double sgemm_rate() {
  auto a = torch::randn({1024, 1024}), b = torch::randn({1024, 1024});
  torch::mm(a, b);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto c = torch::mm(a, b);
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * 1024 * 1024 * 1024 / best;
}

// Useful FLOPs of one training step (forward + backward = 3 x forward): every matrix product with
// a weight, plus attention scores and weighted sums over the keys a query reads (causal full
// attention: T/2 on average; compressed: w raw tokens + T/(2S) entries on average).
double step_flops(const Preset& p, int64_t n_params_matmul) {
  const double B = p.train.batch, T = p.task.seq_len, V = p.model.vocab_size, d = p.model.d_model;
  double fwd = 2.0 * B * T * (double(n_params_matmul) + V * d);
  for (const auto& a : p.model.layers) {
    double keys = T / 2;
    if (a.kind == AttnKind::Chunked) keys = a.window + T / (2.0 * a.S);
    fwd += 2.0 * 2.0 * B * T * a.n_heads * a.head_dim * keys;
  }
  return 3.0 * fwd;
}

struct Speed {
  double tok_s = 0, step_s = 0, flops = 0;
  double fwd_s = 0, bwd_s = 0, opt_s = 0;  // per step: forward + loss, backward, clip + AdamW
};

Speed phasescope_speed(const Preset& p, int steps) {
  torch::manual_seed(0);
  Decoder m(p.model);
  torch::optim::AdamW opt(m->parameters(), torch::optim::AdamWOptions(1e-3));
  auto tok = torch::randint(0, p.model.vocab_size, {p.train.batch, p.task.seq_len}, torch::kInt64);
  auto tgt = torch::randint(0, p.model.vocab_size, {p.train.batch, p.task.seq_len}, torch::kInt64);
  std::chrono::steady_clock::time_point t0;
  Speed out;
  for (int s = 0; s < steps + 2; ++s) {
    if (s == 2) t0 = std::chrono::steady_clock::now();
    auto ta = std::chrono::steady_clock::now();
    opt.zero_grad();
    auto loss = lm_loss(m->forward(tok), tgt);
    auto tb = std::chrono::steady_clock::now();
    loss.backward();
    auto tc = std::chrono::steady_clock::now();
    torch::nn::utils::clip_grad_norm_(m->parameters(), 1.0);
    opt.step();
    if (s >= 2) {
      out.fwd_s += std::chrono::duration<double>(tb - ta).count() / steps;
      out.bwd_s += std::chrono::duration<double>(tc - tb).count() / steps;
      out.opt_s += seconds_since(tc) / steps;
    }
  }
  out.step_s = seconds_since(t0) / steps;
  out.tok_s = double(p.train.batch) * p.task.seq_len / out.step_s;
  int64_t matmul_params = 0;
  for (const auto& item : m->named_parameters())
    if (item.value().dim() >= 2 && item.key() != "embed") matmul_params += item.value().numel();
  out.flops = step_flops(p, matmul_params) / out.step_s;
  return out;
}

// Runs Debian's interpreter explicitly: python3-torch lives there, and a pyenv python3 may come first on PATH.
double python_speed(const Preset& p, bool tune, int steps, int threads) {
  const AttnConfig& a = p.model.layers[0];
  std::string cmd = fmt::format(
      "/usr/bin/python3 {}/bench/torch_reference.py --kind {} --d {} --layers {} --heads {} --head-dim {} --seq {} "
      "--batch {} --steps {} --vocab {} --mlp {} --W {} --S {} --window {} --threads {}{}",
      PHASESCOPE_SOURCE_DIR, a.kind == AttnKind::Chunked ? "chunked" : "full", p.model.d_model, p.model.n_layers,
      p.model.n_heads, p.model.head_dim, p.task.seq_len, p.train.batch, steps, p.model.vocab_size, p.model.mlp_hidden,
      a.W, a.S, a.window, threads, tune ? " --tune-malloc" : "");
  FILE* f = popen(cmd.c_str(), "r");
  double v = 0;
  if (!f || std::fscanf(f, "tokens_per_s %lf", &v) != 1) {
    std::fprintf(stderr, "train_bench: the PyTorch-Python reference failed (is python3-torch installed? "
                         "scripts/bench.sh installs it): %s\n", cmd.c_str());
    if (f) pclose(f);
    return 0;
  }
  pclose(f);
  return v;
}

}  // namespace

int main() {
  // same set-up as every phasescope binary; the Python runs get the same thread count
  RuntimeInfo rt = runtime_init();
  fmt::print("runtime: {}\n", runtime_describe(rt));
  const double peak = sgemm_rate();
  fmt::print("sgemm 1024^3: {:.1f} GFLOP/s\n\n", peak / 1e9);
  const int steps = 10;

  fmt::print("{:<10} {:>14} {:>16} {:>16} {:>10} {:>10} {:>12}\n", "preset", "phasescope", "pytorch-py", "pytorch-py",
             "vs py", "vs py", "FLOP rate");
  fmt::print("{:<10} {:>14} {:>16} {:>16} {:>10} {:>10} {:>12}\n", "", "tok/s", "default tok/s", "tuned tok/s",
             "default", "tuned", "/ sgemm");
  for (const std::string name : {"w8s8-1kv", "full-1kv"}) {
    Preset p = preset_load(name);
    p.model.vocab_size = task_vocab(p.task).size();
    model_config_sync(p.model, name);
    Speed ours = phasescope_speed(p, steps);
    const double py = python_speed(p, false, steps, rt.threads), py_tuned = python_speed(p, true, steps, rt.threads);
    fmt::print("{:<10} {:>14.0f} {:>16.0f} {:>16.0f} {:>10.2f} {:>10.2f} {:>11.1f}%\n", name, ours.tok_s, py, py_tuned,
               py > 0 ? ours.tok_s / py : 0.0, py_tuned > 0 ? ours.tok_s / py_tuned : 0.0, 100 * ours.flops / peak);
    fmt::print("{:<10} phasescope step {:.0f} ms = forward {:.0f}% + backward {:.0f}% + clip/AdamW {:.0f}%\n", "",
               1e3 * ours.step_s, 100 * ours.fwd_s / ours.step_s, 100 * ours.bwd_s / ours.step_s,
               100 * ours.opt_s / ours.step_s);
  }
  return 0;
}
