// v4_gates.cpp — see v4_gates.h.
#include "explain/v4_gates.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/io.h"
#include "model/checkpoint.h"
#include "report/gnuplot.h"

namespace phasescope {

using json = nlohmann::json;

namespace {

double exp_entropy(const std::vector<double>& p) {
  double h = 0.0;
  for (double v : p)
    if (v > 0) h -= v * std::log(v);
  return std::exp(h);
}

}  // namespace

V4GateProfile v4_gate_profile(const std::vector<double>& ape, int m, int kappa) {
  PS_ASSERT(m > 0 && (kappa == 1 || kappa == 2) && ape.size() % size_t(m * kappa) == 0,
            "v4_gate_profile: ape shape");
  const int d = int(ape.size()) / (m * kappa), W = kappa * m;
  V4GateProfile r;
  r.ratio = m;
  r.slots = W;
  r.channels = d;
  r.alpha.assign(W, 0.0);
  r.argmax_share.assign(W, 0.0);
  // the static logit of slot k, channel c: ape[offset][half * d + c]; overlap: slots < m are the
  // previous block (first half), slots >= m the current block (second half); else slot = offset
  auto logit = [&](int k, int c) {
    const int offset = k % m, half = kappa == 2 ? k / m : 0;
    return ape[size_t(offset) * (kappa * d) + size_t(half) * d + c];
  };
  double conc = 0.0;
  std::vector<double> p(W);
  for (int c = 0; c < d; ++c) {
    double mx = -INFINITY;
    int arg = 0;
    for (int k = 0; k < W; ++k)
      if (logit(k, c) > mx) mx = logit(k, c), arg = k;
    double den = 0.0;
    for (int k = 0; k < W; ++k) den += (p[k] = std::exp(logit(k, c) - mx));
    for (int k = 0; k < W; ++k) r.alpha[k] += p[k] / den / d;
    for (double& v : p) v /= den;
    conc += exp_entropy(p) / d;
    r.argmax_share[arg] += 1.0 / d;
  }
  r.channel_concentration = conc;
  r.static_concentration = exp_entropy(r.alpha);
  for (double a : r.alpha) r.g.push_back(a * W);
  std::vector<int> order(W);
  for (int k = 0; k < W; ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return r.g[a] > r.g[b]; });
  for (int k : order)
    if (r.g[k] > 1.0 && r.favoured.size() < 3) r.favoured.push_back(k);
  return r;
}

std::vector<V4GateProfile> v4_gates(V4Checkpoint& ck) {
  std::vector<V4GateProfile> rows;
  for (int layer = 0; layer < ck.args.n_layers; ++layer) {
    const int m = ck.args.compress_ratios[size_t(layer)];
    if (m == 0) continue;
    const int kappa = m == 4 ? 2 : 1;  // the official Compressor overlaps exactly when m == 4
    const std::string p = "layers." + std::to_string(layer) + ".attn.";
    std::vector<std::pair<std::string, std::string>> branches = {{"kv", p + "compressor.ape"}};
    if (m == 4) branches.push_back({"indexer", p + "indexer.compressor.ape"});
    for (const auto& [branch, name] : branches) {
      torch::Tensor ape = v4_read(ck, name, torch::kFloat64).contiguous();
      if (ape.dim() != 2 || ape.size(0) != m || ape.size(1) % kappa != 0)
        fail(ck.file_of.at(name) + " tensor '" + name + "'",
             fmt::format("must be [{}, {} * width] for compress ratio {}", m, kappa, m),
             "check that config.json's compress_ratios belong to these weights");
      std::vector<double> v(ape.data_ptr<double>(), ape.data_ptr<double>() + ape.numel());
      V4GateProfile r = v4_gate_profile(v, m, kappa);
      r.layer = layer;
      r.branch = branch;
      rows.push_back(r);
    }
  }
  return rows;
}

std::string v4_gates_report(const V4Checkpoint& ck, const std::vector<V4GateProfile>& rows,
                            const std::string& out_dir) {
  io_make_dirs(out_dir);
  json j;
  j["checkpoint"] = ck.dir;
  j["layout"] = v4_layout_name(ck.layout);
  j["what"] =
      "static gate preferences from the compressors' offset biases (ape): per channel softmax over "
      "the entry's slots, averaged; g = W * alpha (1 = uniform); slot k covers phase k mod ratio";
  j["layers"] = json::array();
  std::string csv = "layer,branch,ratio,slot,phase,alpha,g,argmax_share\n";
  std::string out =
      fmt::format("{:<6} {:<8} {:>5} {:>5} {:>8} {:>8}  {:<22} {}\n", "layer", "branch", "ratio", "slots",
                  "static", "channel", "favoured slot (g)", "g per slot (phase = slot mod ratio)");
  for (const auto& r : rows) {
    j["layers"].push_back({{"layer", r.layer},
                           {"branch", r.branch},
                           {"ratio", r.ratio},
                           {"slots", r.slots},
                           {"channels", r.channels},
                           {"alpha", r.alpha},
                           {"g", r.g},
                           {"argmax_share", r.argmax_share},
                           {"static_concentration", r.static_concentration},
                           {"channel_concentration", r.channel_concentration},
                           {"favoured", r.favoured}});
    for (int k = 0; k < r.slots; ++k)
      csv += fmt::format("{},{},{},{},{},{:.6g},{:.6g},{:.6g}\n", r.layer, r.branch, r.ratio, k, k % r.ratio,
                         r.alpha[k], r.g[k], r.argmax_share[k]);
    std::string fav;
    for (int k : r.favoured) fav += fmt::format("{}({:.2f}) ", k, r.g[k]);
    if (fav.empty()) fav = "none";
    std::string gs;
    const int shown = std::min(r.slots, 16);
    for (int k = 0; k < shown; ++k) gs += fmt::format("{:5.2f}", r.g[k]);
    if (shown < r.slots) gs += fmt::format(" ... ({} slots in gates.csv)", r.slots);
    out += fmt::format("{:<6} {:<8} {:>5} {:>5} {:>8.2f} {:>8.2f}  {:<22} {}\n", r.layer, r.branch, r.ratio,
                       r.slots, r.static_concentration, r.channel_concentration, fav, gs);
  }
  out += "static = exp(H(mean alpha)), channel = mean exp(H(alpha_c)); 1 = one slot .. slots = uniform\n";
  io_write_atomic(out_dir + "/gates.json", j.dump(2) + "\n");
  io_write_atomic(out_dir + "/gates.csv", csv);

  // one heatmap per slot count (CSA's 8 and HCA's 128 do not share columns)
  std::map<int, PlotPanel> panels;
  for (const auto& r : rows) {
    PlotPanel& p = panels[r.slots];
    p.style = PlotStyle::Heatmap;
    p.title = fmt::format("static gate profile g (1 = uniform), {} slots", r.slots);
    p.xlabel = "slot in the entry's window";
    p.heat_diverging = false;
    p.heat_label_format = r.slots <= 16 ? "%.2f" : "";  // 128 HCA slots: colours only
    p.heat.push_back(r.g);
    p.heat_rows.push_back(fmt::format("L{} {}", r.layer, r.branch));
    if (p.heat_cols.empty())
      for (int k = 0; k < r.slots; ++k) p.heat_cols.push_back(std::to_string(k));
  }
  for (auto& [slots, p] : panels) {
    const std::string png = fmt::format("{}/gates_w{}.png", out_dir, slots);
    const int width = std::max(600, std::min(2400, 80 + 40 * slots)),
              height = std::max(300, 60 + 28 * int(p.heat.size()));
    plot_render(p, png, width, height);
    out += "heatmap: " + png + "\n";
  }
  return out;
}

}  // namespace phasescope
