// decode_bench.cpp — what decoding with the compressed KV cache costs, per attention kind, side by side in
// one run (issue 17): for one layer (bench_configs.h: d = 128, 4 x 32 heads, window 16) and a batch of one
// sequence at T = 1K, 4K, 16K tokens of context:
//   - the cache's bytes per token (fp32, what AttnCache holds after prefill) relative to full attention,
//     next to the design's ratio from attn_kv_memory (they must be equal: "same" is printed when they are);
//   - decode time per token: the median of 32 cached decode steps after a prefill of T tokens (flat in T
//     for the compressed kinds, growing with T for full attention);
//   - at T = 1K and 4K, re-running the forward over the T + 1 tokens (what generation without the cache
//     pays per token), and its ratio to the cached step.
// Run by scripts/bench.sh. Not a test: nothing here asserts a speed. Timings on a loaded machine are
// noisy; the ratios within one run are the result.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "attention/attention.h"
#include "attention/kv_memory.h"
#include "bench_configs.h"
#include "core/runtime.h"

using namespace phasescope;
using bench::bench_config;

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Row {
  std::string kind;
  int T = 0;
  double bytes_per_token = 0, design_bytes_per_token = 0;
  double decode_ms = 0, forward_ms = -1;
};

Row measure(AttnKind kind, int T, bool with_forward) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(1);
  const AttnConfig c = bench_config(kind);
  Attention m(c);
  attention_randomize(*m);
  const int steps = 32;
  auto x = torch::randn({1, T + steps, c.d_model});  // [1, T + steps, d]
  Row r;
  r.kind = attn_kind_name(kind);
  r.T = T;
  AttnCache cache;
  m->prefill(x.narrow(1, 0, T), &cache);
  r.bytes_per_token = double(cache.values()) * 4 / T;
  r.design_bytes_per_token = double(attn_kv_memory(c, T).total()) * 4 / T;
  std::vector<double> step_ms;
  for (int s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    m->decode(x.narrow(1, T + s, 1), &cache);
    step_ms.push_back(ms_since(t0));
  }
  r.decode_ms = median(step_ms);
  if (with_forward) {
    std::vector<double> fwd;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      m->forward(x.narrow(1, 0, T + 1), 0);
      fwd.push_back(ms_since(t0));
    }
    r.forward_ms = median(fwd);
  }
  return r;
}

}  // namespace

int main() {
  fmt::print("runtime: {}\n", runtime_describe(runtime_init()));
  const std::vector<AttnKind> kinds = attn_all_kinds();
  std::vector<Row> rows;
  for (int T : {1024, 4096, 16384})
    for (AttnKind k : kinds) {
      if (k == AttnKind::Full && T > 4096) continue;  // its prefill's T x T scores: 4 GB at 16K
      rows.push_back(measure(k, T, T <= 4096));
      const Row& r = rows.back();
      fmt::print("  {:<10} T {:>6}: {:.4f} ms per cached step{}\n", r.kind, r.T, r.decode_ms,
                 r.forward_ms >= 0 ? fmt::format(", {:.2f} ms per whole forward", r.forward_ms) : "");
    }

  auto full_at = [&](int T) -> const Row* {
    for (const Row& r : rows)
      if (r.kind == "full" && r.T == T) return &r;
    return nullptr;
  };
  fmt::print("\n{:<10} {:>6} {:>12} {:>10} {:>13} {:>6} {:>12} {:>14} {:>10}\n", "kind", "T", "cache B/tok",
             "vs full", "design ratio", "", "decode ms", "forward ms", "speed-up");
  for (const Row& r : rows) {
    // full attention's bytes per token do not depend on T: the 1K row serves every length
    const Row* f = full_at(std::min(r.T, 4096));
    const double full_bpt = f ? f->bytes_per_token : 0;
    const double ratio = full_bpt > 0 ? r.bytes_per_token / full_bpt : 0;
    const double design = full_bpt > 0 ? r.design_bytes_per_token / full_bpt : 0;
    fmt::print("{:<10} {:>6} {:>12.2f} {:>10.4f} {:>13.4f} {:>6} {:>12.4f} {:>14} {:>10}\n", r.kind, r.T,
               r.bytes_per_token, ratio, design,
               r.bytes_per_token == r.design_bytes_per_token ? "same" : "DIFFER", r.decode_ms,
               r.forward_ms >= 0 ? fmt::format("{:.2f}", r.forward_ms) : "-",
               r.forward_ms >= 0 ? fmt::format("{:.1f}x", r.forward_ms / r.decode_ms) : "-");
  }
  return 0;
}
