// zoo.cpp — see zoo.h.
#include "attention/zoo.h"

#include <fmt/format.h>

#include <chrono>

#include "attention/attention.h"
#include "attention/reference.h"

namespace phasescope {

AttnConfig zoo_config(AttnKind kind) {
  AttnConfig c = attn_config_default(kind);
  c.d_model = 64;
  c.n_heads = 4;
  c.head_dim = 16;
  c.window = 16;
  if (kind == AttnKind::Chunked) {
    c.n_kv_heads = 2;
    c.W = 8;
    c.S = 8;
  }
  if (kind == AttnKind::DsCsa) c.index_topk = 4;
  if (kind == AttnKind::DsHca) c.ratio = 8;
  return c;
}

namespace {

std::string shape_of(const AttnConfig& c) {
  switch (c.kind) {
    case AttnKind::Full:
      return "causal";
    case AttnKind::Window:
      return fmt::format("w{}", c.window);
    case AttnKind::Chunked:
      return fmt::format("W{}/S{} w{} {}", c.W, c.S, c.window, gate_kind_name(c.gate));
    default:
      return fmt::format("m{}{}{} w{}", c.ratio, c.overlap ? " overlap" : "",
                         c.index_topk > 0 ? fmt::format(" top{}", c.index_topk) : std::string(""), c.window);
  }
}

}  // namespace

std::vector<ZooRow> zoo_run(const ZooOptions& opt) {
  std::vector<ZooRow> rows;
  for (AttnKind kind : attn_all_kinds()) {
    torch::manual_seed(opt.seed);
    AttnConfig c = zoo_config(kind);
    ZooRow row;
    row.kind = attn_kind_name(kind);
    row.shape = shape_of(c);

    // correctness: fp64 batched vs the loop reference on one sequence
    Attention m(c);
    attention_randomize(*m);
    m->to(torch::kFloat64);
    const int T = opt.check_tokens;
    auto x = torch::randn({1, T, c.d_model}, torch::kFloat64);
    auto y = m->forward(x).contiguous();
    std::vector<double> xv(x.data_ptr<double>(), x.data_ptr<double>() + x.numel());
    RefTrace trace;
    auto ref = reference_attention(c, attention_export(*m), xv, T, 0, &trace);
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      max_diff = std::max(max_diff, std::abs(ref[i] - y.data_ptr<double>()[i]));
      max_ref = std::max(max_ref, std::abs(ref[i]));
    }
    row.max_rel_err = max_diff / std::max(max_ref, 1e-300);
    double keys = 0;
    for (int t = 0; t < T; ++t) keys += double(trace.raw[t][0].size() + trace.entries[t][0].size());
    row.keys_per_query = keys / T;

    // speed: fp32 forward + backward
    m->to(torch::kFloat32);
    auto xt = torch::randn({opt.batch, opt.time_tokens, c.d_model}).requires_grad_(true);
    m->forward(xt).pow(2).mean().backward();  // warm-up: first calls pay for allocation and dispatch set-up
    auto t0 = std::chrono::steady_clock::now();
    m->forward(xt).pow(2).mean().backward();
    row.fwd_bwd_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    rows.push_back(row);
  }
  return rows;
}

std::string zoo_table(const std::vector<ZooRow>& rows) {
  std::string s = fmt::format("{:<10} {:<26} {:>14} {:>14} {:>14}\n", "kind", "shape", "rel.err(ref)",
                              "keys/query", "fwd+bwd ms");
  for (const auto& r : rows)
    s += fmt::format("{:<10} {:<26} {:>14.2e} {:>14.1f} {:>14.1f}\n", r.kind, r.shape, r.max_rel_err,
                     r.keys_per_query, r.fwd_bwd_ms);
  return s;
}

}  // namespace phasescope
