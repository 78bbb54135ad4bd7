// runtime_bench.cpp — the effect of runtime_init()'s two settings on a training-like step
// (two chunked-attention layers with MLPs, AdamW, fp32): allocator tuning on vs off, and all
// cores vs one intra-op thread. Each setting runs in its own child process (the settings are
// process-wide and applied at start), side by side in one invocation; prints ms/step and ratios.
// Usage: runtime_bench [--steps 8] [--json FILE] (--child STEPS is the child's own entry). Run by
// scripts/bench.sh. Not a test.
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "attention/attention.h"
#include "attention/zoo.h"
#include "bench_common.h"
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
    const auto t0 = bench::Clock::now();
    auto h = torch::randn({16, 256, c.d_model});
    for (int l = 0; l < 2; ++l) {
      h = h + attn[l]->forward(h);
      h = h + down[l]->forward(torch::gelu(up[l]->forward(h)));
    }
    opt.zero_grad();
    h.pow(2).mean().backward();
    opt.step();
    if (s >= 2) ms.push_back(bench::ms_since(t0));
  }
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  fmt::print("{} {}\n", bench::median(ms), (after.ru_minflt - before.ru_minflt) / steps);
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
  bench::Run run("runtime_bench",
                 "a training-like step under runtime_init()'s settings, each in its own process");
  int steps = 8, child_steps = 0;
  run.cli.add_option("--steps", steps, "timed steps per setting (after 2 warm-up steps)")
      ->check(CLI::PositiveNumber);
  run.cli.add_option("--child", child_steps,
                     "run STEPS steps in this process and print the result (internal)");
  if (const int rc = run.parse(argc, argv); rc >= 0) return rc;
  if (child_steps > 0) return child(child_steps);
  const std::string self = argv[0];
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());

  // the four settings, each in a fresh process
  struct Setting {
    std::string name, env;
  };
  const std::vector<Setting> settings = {
      {fmt::format("tuned malloc, {} threads (default)", cores), ""},
      {fmt::format("glibc default malloc, {} threads", cores), "PHASESCOPE_NO_MALLOC_TUNING=1"},
      {"tuned malloc, 1 thread", "PHASESCOPE_THREADS=1"},
      {"glibc default malloc, 1 thread", "PHASESCOPE_NO_MALLOC_TUNING=1 PHASESCOPE_THREADS=1"},
  };
  fmt::print(
      "training-like step: 2 chunked-attention layers + MLP, d=128, B=16, T=256, AdamW, fp32; median of {} "
      "steps\n",
      steps);
  bench::Table table(run, "settings",
                     {bench::Col("setting", 42).left(), bench::Col("ms/step", 10, 1),
                      bench::Col("page faults", 14), bench::Col("vs default", 12, 2)});
  double default_ms = 0;
  for (const Setting& st : settings) {
    const Measured m = run_child(self, st.env, steps);
    if (default_ms == 0) default_ms = m.ms;
    table.row({st.name, m.ms, m.faults, m.ms / default_ms});
  }
  return 0;
}
