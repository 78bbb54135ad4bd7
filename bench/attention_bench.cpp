// attention_bench.cpp — time and peak tensor memory of one fp32 forward+backward of every attention kind
// (bench_configs.h: d = 128, 4 x 32 heads, window 16) at T = 1K, 4K, 8K, against full attention in the
// same run and against each kind's ideal. Robust by construction: every length runs R rounds, each round
// times every kind once in a rotated order (a change in the machine's load hits all kinds alike), and the
// table reports medians; the sgemm rate measured in the same run shows what this CPU does at best.
//
// The ideal (forward FLOPs; the backward is about twice the forward for every kind):
//   projections and compressors: 2 x (weights a token passes through) per token: every 2-D weight once;
//     the chunked per-offset maps [Hkv, W, R, d] and gate weights [Hkv, W, d] W/S times per token over W
//     offsets, i.e. numel / S;
//   attention: 4 x H x D x (keys a query reads): full T; window w; chunked and HCA / CSA2 w + T/S; CSA
//     w + top-k, plus the indexer's 2 x HI x DI x T/m scores.
// "ideal ratio" = ideal FLOPs / full attention's ideal FLOPs; "over ideal" = (time / full time) / ideal
// ratio. The (w + T/S) / T counts keys only; it is below the projections every kind must run (at
// T = 8K a window layer's projections alone are ~2% of full attention's FLOPs), so this table counts
// them. Run by scripts/bench.sh. Not a test: nothing here asserts a speed.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "bench_common.h"
#include "bench_configs.h"
#include "core/runtime.h"
#include "memory_tracker.h"

using namespace phasescope;
using bench::bench_config;
using bench::Clock;
using bench::median;

namespace {

// Forward FLOPs of one layer at T tokens by the ideal above.
double ideal_flops(AttentionImpl& m, int T) {
  const AttnConfig& c = m.config();
  double per_token = 0;
  for (const auto& p : m.named_parameters()) {
    const auto& t = p.value();
    const std::string& n = p.key();
    if (t.dim() < 2) continue;  // norms, biases, sinks, offset biases: no matmul
    const bool per_offset = c.kind == AttnKind::Chunked &&
                            (n.find("payload") != std::string::npos || n.find("gate_w") != std::string::npos);
    per_token += 2.0 * double(t.numel()) / (per_offset ? c.S : 1);
    if (n.find("ape") != std::string::npos) per_token -= 2.0 * double(t.numel());  // an added table
  }
  const double HD = double(c.n_heads) * c.head_dim;
  double keys = 0, extra = 0;
  switch (c.kind) {
    case AttnKind::Full:
      keys = T;
      break;
    case AttnKind::Window:
    case AttnKind::DsWindow:
      keys = c.window;
      break;
    case AttnKind::DsCsa:
      keys = c.window +
             (c.index_topk > 0 ? std::min<double>(c.index_topk, double(T) / c.ratio) : double(T) / c.ratio);
      if (c.index_topk > 0) extra = 2.0 * c.index_heads * c.index_dim * double(T) / c.ratio;
      break;
    default:
      keys = c.window + double(T) / attn_stride(c);
  }
  return double(T) * (per_token + 4.0 * HD * keys + extra);
}

struct Cell {
  std::vector<double> ms;
  double peak_mb = 0;
  double flops = 0;  // ideal forward FLOPs
};

}  // namespace

int main(int argc, char** argv) {
  // flags: a subset of kinds and lengths; full attention, the reference of every ratio, always runs, first
  bench::Run run("attention_bench",
                 "time and peak memory of one attention layer's forward+backward, every kind");
  int rounds = 5;
  std::vector<int> lengths = {1024, 4096, 8192};
  std::vector<std::string> kind_names;
  run.cli.add_option("--rounds", rounds, "rounds per length (at T >= 8192: 2 fewer, at least 3)")
      ->check(CLI::PositiveNumber);
  run.cli.add_option("--lengths", lengths, "sequence lengths T, e.g. 1024,4096")->delimiter(',');
  run.cli
      .add_option("--kinds", kind_names, "attention kinds besides full, e.g. chunked,dsv4-csa (default: all)")
      ->delimiter(',');
  if (const int rc = run.parse(argc, argv); rc >= 0) return rc;
  run.info("runtime", runtime_describe(runtime_init()));
  std::vector<AttnKind> kinds = attn_all_kinds();
  if (!kind_names.empty()) {
    kinds = {AttnKind::Full};
    for (const std::string& n : kind_names)
      if (n != "full") kinds.push_back(attn_kind_parse(n, "--kinds"));
  }

  // every length: R rounds, each timing every kind once in a rotated order
  auto& tracker = bench::TrackingAllocator::install();
  const double sgemm_before = bench::sgemm_gflops();
  std::map<std::pair<int, int>, Cell> cells;  // (T, kind index)
  for (int T : lengths) {
    std::vector<Attention> mods;
    std::vector<torch::Tensor> xs;
    for (size_t k = 0; k < kinds.size(); ++k) {
      torch::manual_seed(1);
      mods.push_back(Attention(bench_config(kinds[k])));
      xs.push_back(torch::randn({1, T, mods.back()->config().d_model}).requires_grad_(true));
      mods.back()->forward(xs.back()).sum().backward();  // warm-up
      cells[{T, int(k)}].flops = ideal_flops(*mods.back(), T);
    }
    const int R = T >= 8192 ? std::max(3, rounds - 2) : rounds;
    for (int r = 0; r < R; ++r)
      for (size_t i = 0; i < kinds.size(); ++i) {
        const size_t k = (i + size_t(r)) % kinds.size();  // rotated order
        Attention& m = mods[k];
        m->zero_grad();
        xs[k].mutable_grad() = torch::Tensor();
        tracker.reset_peak();
        const int64_t base = tracker.live();
        const auto t0 = Clock::now();
        m->forward(xs[k]).sum().backward();
        Cell& c = cells[{T, int(k)}];
        c.ms.push_back(bench::ms_since(t0));
        c.peak_mb = std::max(c.peak_mb, double(tracker.peak() - base) / (1 << 20));
      }
    fmt::print(stderr, "T {}: {} rounds done\n", T, R);
  }
  const double sgemm_after = bench::sgemm_gflops();

  // the table: medians over the rounds, each kind against full attention at the same T
  run.info("sgemm 1024^3 GFLOP/s before", sgemm_before);
  run.info("sgemm 1024^3 GFLOP/s after", sgemm_after);
  bench::Table table(run, "scaling",
                     {bench::Col("kind", 12).left(), bench::Col("T", 6), bench::Col("median ms", 11, 1),
                      bench::Col("spread", 8), bench::Col("time/full", 10, 3), bench::Col("ideal", 9, 4),
                      bench::Col("over ideal", 11, 2, "x"), bench::Col("GFLOP/s", 12, 1),
                      bench::Col("peak MB", 11, 1), bench::Col("mem/full", 10, 3)});
  for (int T : lengths) {
    const Cell& full = cells[{T, 0}];
    const double full_ms = median(full.ms);
    for (size_t k = 0; k < kinds.size(); ++k) {
      const Cell& c = cells[{T, int(k)}];
      const double ms = median(c.ms), ratio = ms / full_ms, ideal = c.flops / full.flops;
      const auto [lo, hi] = std::minmax_element(c.ms.begin(), c.ms.end());
      table.row({attn_kind_name(kinds[k]), T, ms, fmt::format("{:.0f}-{:.0f}", *lo, *hi), ratio, ideal,
                 ratio / ideal, 3 * c.flops / (ms * 1e6), c.peak_mb, c.peak_mb / full.peak_mb});
    }
  }
  return 0;
}
