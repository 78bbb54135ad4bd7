// decode_bench.cpp — what decoding with the compressed KV cache costs, per attention kind, side by side in
// one run (issue 17): for one layer (bench_configs.h: d = 128, 4 x 32 heads, window 16) and a batch of one
// sequence at T = 1K, 4K, 16K tokens of context:
//   - the cache's bytes per token (fp32, what AttnCache holds after prefill) relative to full attention,
//     next to the design's ratio from attn_kv_memory (they must be equal: the agree column says "same" when
//     they are);
//   - decode time per token: the median of 32 cached decode steps after a prefill of T tokens (flat in T
//     for the compressed kinds, growing with T for full attention);
//   - at T = 1K and 4K, re-running the forward over the T + 1 tokens (what generation without the cache
//     pays per token), and its ratio to the cached step.
// Usage: decode_bench [--lengths 1024,4096,16384] [--json FILE]. Run by scripts/bench.sh. Not a test:
// nothing here asserts a speed. Timings on a loaded machine are noisy; the ratios within one run are the
// result.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "attention/kv_memory.h"
#include "bench_common.h"
#include "bench_configs.h"
#include "core/runtime.h"

using namespace phasescope;
using bench::bench_config;
using bench::Clock;
using bench::median;
using bench::ms_since;

namespace {

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
    const auto t0 = Clock::now();
    m->decode(x.narrow(1, T + s, 1), &cache);
    step_ms.push_back(ms_since(t0));
  }
  r.decode_ms = median(step_ms);
  if (with_forward) {
    std::vector<double> fwd;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = Clock::now();
      m->forward(x.narrow(1, 0, T + 1), 0);
      fwd.push_back(ms_since(t0));
    }
    r.forward_ms = median(fwd);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Run run("decode_bench", "KV cache bytes per token and decode time per token, every attention kind");
  std::vector<int> lengths = {1024, 4096, 16384};
  run.cli
      .add_option("--lengths", lengths, "context lengths T, e.g. 1024,4096 (full attention runs up to 4096)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  if (const int rc = run.parse(argc, argv); rc >= 0) return rc;
  run.info("runtime", runtime_describe(runtime_init()));

  // every kind at every length: prefill, then cached steps (and the whole forward up to 4K)
  const std::vector<AttnKind> kinds = attn_all_kinds();
  std::vector<Row> rows;
  for (int T : lengths)
    for (AttnKind k : kinds) {
      if (k == AttnKind::Full && T > 4096) continue;  // its prefill's T x T scores: 4 GB at 16K
      rows.push_back(measure(k, T, T <= 4096));
      const Row& r = rows.back();
      fmt::print(stderr, "  {:<10} T {:>6}: {:.4f} ms per cached step{}\n", r.kind, r.T, r.decode_ms,
                 r.forward_ms >= 0 ? fmt::format(", {:.2f} ms per whole forward", r.forward_ms) : "");
    }

  // full attention's bytes per token do not depend on T: its row at any length serves every length
  const Row* full = nullptr;
  for (const Row& r : rows)
    if (r.kind == "full") full = &r;
  const double full_bpt = full ? full->bytes_per_token : 0;
  bench::Table table(
      run, "decode",
      {bench::Col("kind", 12).left(), bench::Col("T", 6), bench::Col("cache B/tok", 12, 2),
       bench::Col("vs full", 10, 4), bench::Col("design ratio", 13, 4), bench::Col("agree", 6),
       bench::Col("decode ms", 12, 4), bench::Col("forward ms", 14, 2), bench::Col("speed-up", 10, 1, "x")});
  for (const Row& r : rows) {
    const bool fwd = r.forward_ms >= 0;
    table.row({r.kind, r.T, r.bytes_per_token, bench::if_known(full_bpt > 0, r.bytes_per_token / full_bpt),
               bench::if_known(full_bpt > 0, r.design_bytes_per_token / full_bpt),
               r.bytes_per_token == r.design_bytes_per_token ? "same" : "DIFFER", r.decode_ms,
               bench::if_known(fwd, r.forward_ms), bench::if_known(fwd, r.forward_ms / r.decode_ms)});
  }
  return 0;
}
