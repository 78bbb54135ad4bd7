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
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "bench_configs.h"
#include "core/runtime.h"
#include "memory_tracker.h"

using namespace phasescope;
using bench::bench_config;

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

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

double sgemm_gflops() {
  auto a = torch::randn({1024, 1024}), b = torch::randn({1024, 1024});
  torch::mm(a, b);  // warm-up
  std::vector<double> ms;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = Clock::now();
    auto c = torch::mm(a, b);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return 2.0 * 1024 * 1024 * 1024 / (median(ms) * 1e6);
}

struct Cell {
  std::vector<double> ms;
  double peak_mb = 0;
  double flops = 0;  // ideal forward FLOPs
};

}  // namespace

int main(int argc, char** argv) {
  fmt::print("runtime: {}\n", runtime_describe(runtime_init()));
  // --rounds R; --lengths 8192,... and --kinds dsv4-csa,... to time a subset (full attention, the
  // reference of every ratio, always runs, first)
  int rounds = 5;
  std::vector<AttnKind> kinds = attn_all_kinds();
  std::vector<int> lengths = {1024, 4096, 8192};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--rounds") rounds = std::max(1, std::atoi(value.c_str()));
    if (flag == "--lengths") {
      lengths.clear();
      for (const auto& t : bench::split_list(value)) lengths.push_back(std::stoi(t));
    }
    if (flag == "--kinds") {
      kinds = {AttnKind::Full};
      for (const auto& n : bench::split_list(value))
        if (n != "full") kinds.push_back(attn_kind_parse(n, "--kinds"));
    }
  }
  auto& tracker = bench::TrackingAllocator::install();
  const double sgemm_before = sgemm_gflops();
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
        c.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        c.peak_mb = std::max(c.peak_mb, double(tracker.peak() - base) / (1 << 20));
      }
    fmt::print("T {}: {} rounds done\n", T, R);
  }
  const double sgemm_after = sgemm_gflops();

  fmt::print("\nsgemm 1024^3: {:.1f} GFLOP/s before, {:.1f} after (this run, this thread count)\n",
             sgemm_before, sgemm_after);
  fmt::print("{:<12} {:>6} {:>11} {:>8} {:>10} {:>9} {:>11} {:>12} {:>11} {:>10}\n", "kind", "T", "median ms",
             "spread", "time/full", "ideal", "over ideal", "GFLOP/s", "peak MB", "mem/full");
  for (int T : lengths) {
    const Cell& full = cells[{T, 0}];
    const double full_ms = median(full.ms);
    for (size_t k = 0; k < kinds.size(); ++k) {
      const Cell& c = cells[{T, int(k)}];
      const double ms = median(c.ms), ratio = ms / full_ms, ideal = c.flops / full.flops;
      const auto [lo, hi] = std::minmax_element(c.ms.begin(), c.ms.end());
      fmt::print("{:<12} {:>6} {:>11.1f} {:>8} {:>10.3f} {:>9.4f} {:>10.2f}x {:>12.1f} {:>11.1f} {:>10.3f}\n",
                 attn_kind_name(kinds[k]), T, ms, fmt::format("{:.0f}-{:.0f}", *lo, *hi), ratio, ideal,
                 ratio / ideal, 3 * c.flops / (ms * 1e6), c.peak_mb, c.peak_mb / full.peak_mb);
    }
  }
  return 0;
}
