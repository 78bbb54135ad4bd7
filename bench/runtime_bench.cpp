// runtime_bench.cpp — the effect of runtime_init()'s two settings on a training-like step
// (two chunked-attention layers with MLPs, AdamW, fp32): allocator tuning on vs off, and all
// cores vs one intra-op thread. Each setting runs in its own child process (the settings are
// process-wide and applied at start), side by side in one invocation; prints ms/step and ratios.
// Run by scripts/bench.sh. Not a test.
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "attention/attention.h"
#include "attention/zoo.h"
#include "core/runtime.h"

using namespace phasescope;

namespace {

// Child: run the steps and print "ms_per_step page_faults".
int child(int steps) {
  runtime_init();
  torch::manual_seed(0);
  AttnConfig c = zoo_config(AttnKind::Chunked);
  c.d_model = 128;
  c.head_dim = 32;
  std::vector<Attention> attn = {Attention(c), Attention(c)};
  std::vector<torch::nn::Linear> up, down;
  std::vector<torch::Tensor> params;
  for (int l = 0; l < 2; ++l) {
    up.emplace_back(c.d_model, 4 * c.d_model);
    down.emplace_back(4 * c.d_model, c.d_model);
    for (auto& p : attn[l]->parameters()) params.push_back(p);
    for (auto& p : up[l]->parameters()) params.push_back(p);
    for (auto& p : down[l]->parameters()) params.push_back(p);
  }
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(1e-3));
  std::vector<double> ms;
  rusage before{};
  for (int s = 0; s < steps + 2; ++s) {
    if (s == 2) getrusage(RUSAGE_SELF, &before);
    auto t0 = std::chrono::steady_clock::now();
    auto h = torch::randn({16, 256, c.d_model});
    for (int l = 0; l < 2; ++l) {
      h = h + attn[l]->forward(h);
      h = h + down[l]->forward(torch::gelu(up[l]->forward(h)));
    }
    opt.zero_grad();
    h.pow(2).mean().backward();
    opt.step();
    if (s >= 2)
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  std::sort(ms.begin(), ms.end());
  fmt::print("{} {}\n", ms[ms.size() / 2], (after.ru_minflt - before.ru_minflt) / steps);
  return 0;
}

struct Measured {
  double ms = 0;
  long faults = 0;
};

Measured run_child(const std::string& self, const std::string& env, int steps) {
  std::string cmd = env + " " + self + " --child " + std::to_string(steps);
  FILE* f = popen(cmd.c_str(), "r");
  Measured m;
  if (!f || std::fscanf(f, "%lf %ld", &m.ms, &m.faults) != 2) {
    std::fprintf(stderr, "runtime_bench: child failed: %s\n", cmd.c_str());
    std::exit(1);
  }
  pclose(f);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--child") return child(std::stoi(argv[2]));
  const int steps = 8;
  const std::string self = argv[0];
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());

  // the four settings, each in a fresh process
  struct Row {
    std::string name, env;
    Measured m;
  };
  std::vector<Row> rows = {
      {fmt::format("tuned malloc, {} threads (default)", cores), "", {}},
      {fmt::format("glibc default malloc, {} threads", cores), "PHASESCOPE_NO_MALLOC_TUNING=1", {}},
      {"tuned malloc, 1 thread", "PHASESCOPE_THREADS=1", {}},
      {"glibc default malloc, 1 thread", "PHASESCOPE_NO_MALLOC_TUNING=1 PHASESCOPE_THREADS=1", {}},
  };
  for (auto& r : rows) r.m = run_child(self, r.env, steps);

  fmt::print(
      "training-like step: 2 chunked-attention layers + MLP, d=128, B=16, T=256, AdamW, fp32; median of {} "
      "steps\n",
      steps);
  fmt::print("{:<42} {:>10} {:>14} {:>12}\n", "setting", "ms/step", "page faults", "vs default");
  for (const auto& r : rows)
    fmt::print("{:<42} {:>10.1f} {:>14} {:>12.2f}\n", r.name, r.m.ms, r.m.faults, r.m.ms / rows[0].m.ms);
  return 0;
}
