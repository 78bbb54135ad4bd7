// attention_bench.cpp — time and peak tensor memory of one fp32 forward+backward of every
// attention kind at T = 1K, 4K, 8K, side by side with full attention in the same run, and
// against the ideal ratio (w + T/S) / T of keys a compressed query reads (w / T for window).
// Run by scripts/bench.sh. Not a test: nothing here asserts a speed.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <map>

#include "attention/attention.h"
#include "attention/zoo.h"
#include "bench_configs.h"
#include "core/runtime.h"
#include "memory_tracker.h"

using namespace phasescope;

namespace {

struct Result {
  double ms = 0;
  double peak_mb = 0;
};
std::map<std::pair<std::string, int>, Result> g_results;

using bench::bench_config;

double ideal_ratio(const AttnConfig& c, int T) {
  switch (c.kind) {
    case AttnKind::Full:
      return 1.0;
    case AttnKind::Window:
      return double(c.window) / T;
    default:
      return (double(c.window) + double(T) / attn_stride(c)) / T;
  }
}

void run_one(benchmark::State& state, AttnKind kind, int T) {
  auto& tracker = bench::TrackingAllocator::install();
  torch::manual_seed(1);
  AttnConfig c = bench_config(kind);
  Attention m(c);
  auto x = torch::randn({1, T, c.d_model}).requires_grad_(true);
  m->forward(x).sum().backward();  // warm-up
  double peak = 0;
  for (auto _ : state) {
    m->zero_grad();
    x.mutable_grad() = torch::Tensor();
    tracker.reset_peak();
    const int64_t base = tracker.live();
    m->forward(x).sum().backward();
    peak = std::max(peak, double(tracker.peak() - base));
  }
  state.counters["peak_MB"] = peak / (1 << 20);
  // store the mean time per iteration for the summary
  g_results[{attn_kind_name(kind), T}] = {0, peak / (1 << 20)};
}

class Collector : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs) {
      const std::string name = r.benchmark_name();  // "attn/<kind>/T:<T>"
      auto a = name.find('/'), b = name.find("/T:");
      std::string kind = name.substr(a + 1, b - a - 1);
      int T = std::stoi(name.substr(b + 3));
      g_results[{kind, T}].ms = r.GetAdjustedRealTime();
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

int main(int argc, char** argv) {
  // set-up as every phasescope binary does
  fmt::print("runtime: {}\n", runtime_describe(runtime_init()));
  const std::vector<int> lengths = {1024, 4096, 8192};

  // register: every kind at every length (full first, so ratios are side by side)
  for (int T : lengths)
    for (AttnKind k : attn_all_kinds())
      benchmark::RegisterBenchmark(fmt::format("attn/{}/T:{}", attn_kind_name(k), T).c_str(),
                                   [k, T](benchmark::State& s) { run_one(s, k, T); })
          ->Unit(benchmark::kMillisecond)
          ->Iterations(T >= 8192 ? 1 : 3)
          ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  Collector reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);

  // the side-by-side table
  fmt::print("\n{:<10} {:>6} {:>10} {:>10} {:>10} {:>10} {:>12}\n", "kind", "T", "fwd+bwd ms", "time/full",
             "peak MB", "mem/full", "ideal ratio");
  for (int T : lengths) {
    auto full = g_results.find({"full", T});
    for (AttnKind k : attn_all_kinds()) {
      auto it = g_results.find({attn_kind_name(k), T});
      if (it == g_results.end() || full == g_results.end()) continue;
      fmt::print("{:<10} {:>6} {:>10.1f} {:>10.3f} {:>10.1f} {:>10.3f} {:>12.3f}\n", attn_kind_name(k), T,
                 it->second.ms, it->second.ms / full->second.ms, it->second.peak_mb,
                 it->second.peak_mb / full->second.peak_mb, ideal_ratio(bench_config(k), T));
    }
  }
  benchmark::Shutdown();
  return 0;
}
