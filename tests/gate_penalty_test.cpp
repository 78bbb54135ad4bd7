// gate_penalty_test.cpp — the static-gate entropy bonus: its concentration is
// explain's static concentration (one measure, two forms), its gradient matches finite differences in
// the gate parameters (fp64), the collector sees every chunked gate of a forward and lets go after, and
// training with the bonus ends with less static concentration than without it, same seed and steps. The
// head-coverage term: its overlaps, its gradient, and the DeepSeek compressors' gates.
#include "train/gate_penalty.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "explain/measures.h"
#include "model/config.h"
#include "model/load.h"
#include "model/model.h"
#include "testing.h"
#include "train/trainer.h"

namespace phasescope {
namespace {

// The largest gap between the autograd gradient `grad` of w and f's central difference (eps 1e-6) at the
// flat indices given; w is restored after each.
double fd_worst(const std::function<torch::Tensor()>& f, torch::Tensor& w, const torch::Tensor& grad,
                const std::vector<int64_t>& flats) {
  torch::NoGradGuard ng;
  auto v = w.view({-1});
  double worst = 0;
  for (int64_t flat : flats) {
    const double x0 = v[flat].item<double>(), eps = 1e-6;
    v[flat] = x0 + eps;
    const double up = f().item<double>();
    v[flat] = x0 - eps;
    const double down = f().item<double>();
    v[flat] = x0;
    worst = std::max(worst, std::fabs((up - down) / (2 * eps) - grad.view({-1})[flat].item<double>()));
  }
  return worst;
}

TEST(GatePenalty, ConcentrationIsExplainsStaticConcentration) {
  torch::manual_seed(1);
  auto alpha = torch::softmax(torch::randn({3, 5, 8, 2, 1}, torch::kFloat64) * 2, 2);  // [B, N, W, Hkv, 1]
  const auto conc = gate_static_concentration_t(alpha);                                // [Hkv]
  for (int64_t h = 0; h < 2; ++h) {
    std::vector<std::vector<double>> windows;
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t n = 0; n < 5; ++n) {
        std::vector<double> w;
        for (int64_t i = 0; i < 8; ++i) w.push_back(alpha[b][n][i][h][0].item<double>());
        windows.push_back(w);
      }
    EXPECT_NEAR(conc[h].item<double>(), gate_static_concentration(windows), 1e-12) << h;
  }
  // uniform gates: no penalty; one-hot on the same offset everywhere: the most
  EXPECT_NEAR(gate_entropy_penalty({torch::full({2, 3, 8, 1, 1}, 1.0 / 8, torch::kFloat64)}).item<double>(),
              0.0, 1e-12);
  auto onehot = torch::zeros({2, 3, 8, 1, 1}, torch::kFloat64);
  onehot.select(2, 5).fill_(1.0);
  EXPECT_NEAR(gate_entropy_penalty({onehot}).item<double>(), 1.0 - 1.0 / 8, 1e-9);
}

Preset tiny_chunked(const std::string& gate) {
  Preset p = preset_load("w8s8-1kv");
  nlohmann::json j = preset_to_json(p);
  j["model"]["d_model"] = 16;
  j["model"]["head_dim"] = 4;
  for (nlohmann::json* a : {&j["attention"], &j["layers"][0], &j["layers"][1]}) (*a)["gate"] = gate;
  p = preset_from_json(j, "test");
  p.model.vocab_size = 40;
  model_config_sync(p.model, "test");
  return p;
}

TEST(GatePenalty, GradientMatchesFiniteDifferences) {
  for (const char* gate : {"scalar", "vector"}) {
    const Preset p = tiny_chunked(gate);
    torch::manual_seed(2);
    Decoder m(p.model);
    m->to(torch::kFloat64);
    auto tokens = torch::randint(0, 40, {2, 32}, torch::kInt64);
    auto penalty = [&] {
      GateCollector g(*m);
      m->hidden(tokens);
      EXPECT_EQ(g.alphas().size(), 4u);  // two layers, key and value gates
      return gate_entropy_penalty(g.alphas());
    };
    torch::Tensor& w = m->attention(1)->param("ck_gate_w");
    penalty().backward();
    const auto grad = w.grad().clone();
    std::vector<int64_t> flats;
    for (int64_t i = 0; i < 6; ++i) flats.push_back((i * 37) % w.numel());
    EXPECT_LE(fd_worst(penalty, w, grad, flats), 1e-7) << gate;
    torch::NoGradGuard ng;
    // the hooks are gone once the collector is: a forward reports nothing
    m->attention(0)->param("ck_gate_w");
    m->hidden(tokens);
  }
}

TEST(GatePenalty, TrainingWithTheBonusConcentratesLess) {
  auto concentration_after = [](double lambda) {
    Preset p = preset_load("w8s8-1kv");
    p.model.d_model = 32;
    p.model.head_dim = 8;
    p.task.seq_len = 64;
    p.task.n_records = 8;
    p.task.n_demos = 4;
    p.task.min_records = 4;
    p.task.curriculum_steps = 0;
    p.task.curriculum_length = false;
    p.task.repeat_steps = 0;
    p.train.steps = 60;
    p.train.batch = 8;
    p.train.warmup = 5;
    p.train.eval_every = 0;
    p.train.ckpt_every = 60;
    p.train.lr = 1e-2;
    p.train.gate_entropy_bonus = lambda;
    TrainOptions o;
    o.out_dir = testutil::tmp_dir("gate_bonus");
    o.fresh = true;
    o.log = [](const std::string&) {};
    train_run(p, o);
    LoadedModel m = model_load(o.out_dir);
    torch::NoGradGuard ng;
    GateCollector g(*m.model);
    m.model->hidden(torch::randint(0, m.model->config().vocab_size, {8, 64}, torch::kInt64));
    return gate_entropy_penalty(g.alphas()).item<double>();
  };
  torch::manual_seed(3);
  const double without = concentration_after(0.0);
  torch::manual_seed(3);
  const double with = concentration_after(10.0);
  std::printf("  static-gate penalty after 60 steps: %.4f without the bonus, %.4f with lambda = 10\n",
              without, with);
  EXPECT_LT(with, without);
}

// The coverage repulsion: overlap of static phase profiles, read through each layer's grid
// offset; 1/S for uniform gates, 1 for two gates on one phase, 0 on different phases.
TEST(GateCoverage, OverlapOfPhaseProfilesThroughTheGridOffset) {
  auto onehot = [](int i) {
    auto a = torch::zeros({2, 3, 8, 1, 1}, torch::kFloat64);
    a.select(2, i).fill_(1.0);
    return a;
  };
  const auto uniform = torch::full({2, 3, 8, 1, 1}, 1.0 / 8, torch::kFloat64);
  EXPECT_NEAR(gate_coverage_penalty({{0, "ck", 8, 0, uniform}, {1, "ck", 8, 0, uniform}}).item<double>(),
              1.0 / 8, 1e-12);
  EXPECT_NEAR(gate_coverage_penalty({{0, "ck", 8, 0, onehot(3)}, {1, "ck", 8, 0, onehot(3)}}).item<double>(),
              1.0, 1e-12);
  EXPECT_NEAR(gate_coverage_penalty({{0, "ck", 8, 0, onehot(3)}, {1, "ck", 8, 0, onehot(5)}}).item<double>(),
              0.0, 1e-12);
  // the same offset on grids staggered by 4 is two phases (3 and 7): no overlap; offset 7 on the
  // staggered grid is phase 3 again
  EXPECT_NEAR(gate_coverage_penalty({{0, "ck", 8, 0, onehot(3)}, {1, "ck", 8, 4, onehot(3)}}).item<double>(),
              0.0, 1e-12);
  EXPECT_NEAR(gate_coverage_penalty({{0, "ck", 8, 0, onehot(3)}, {1, "ck", 8, 4, onehot(7)}}).item<double>(),
              1.0, 1e-12);
  // pairs form within a branch only, and KV heads of one layer pair with each other
  EXPECT_EQ(gate_coverage_penalty({{0, "ck", 8, 0, onehot(3)}, {1, "cv", 8, 0, onehot(3)}}).numel(), 1);
  EXPECT_NEAR(gate_coverage_penalty({{0, "ck", 8, 0, onehot(3)}, {1, "cv", 8, 0, onehot(3)}}).item<double>(),
              0.0, 1e-12);
  auto two_heads = torch::zeros({1, 2, 8, 2, 1}, torch::kFloat64);
  two_heads.select(2, 1).select(2, 0).fill_(1.0);  // offset 1, KV head 0
  two_heads.select(2, 1).select(2, 1).fill_(1.0);  // offset 1, KV head 1
  EXPECT_NEAR(gate_coverage_penalty({{0, "ck", 8, 0, two_heads}}).item<double>(), 1.0, 1e-12);
  // W = 2S folds two offsets onto each phase
  auto w16 = torch::zeros({1, 1, 16, 1, 1}, torch::kFloat64);
  w16.select(2, 2).fill_(0.5);
  w16.select(2, 10).fill_(0.5);
  EXPECT_NEAR(gate_phase_profiles({0, "ck", 8, 0, w16})[0][2].item<double>(), 1.0, 1e-12);
}

TEST(GateCoverage, GradientMatchesFiniteDifferencesAndTheCollectorKnowsEachGatesLayer) {
  Preset p = tiny_chunked("scalar");
  p.model.layers[1].grid_offset = 4;
  torch::manual_seed(4);
  Decoder m(p.model);
  m->to(torch::kFloat64);
  auto tokens = torch::randint(0, 40, {2, 32}, torch::kInt64);
  auto penalty = [&] {
    GateCollector g(*m);
    m->hidden(tokens);
    EXPECT_EQ(g.gates().size(), 4u);
    for (const CollectedGate& c : g.gates()) EXPECT_EQ(c.offset, c.layer == 1 ? 4 : 0) << c.layer;
    return gate_coverage_penalty(g.gates());
  };
  torch::Tensor& w = m->attention(0)->param("cv_gate_b");
  penalty().backward();
  const auto grad = w.grad().clone();
  EXPECT_GT(grad.abs().max().item<double>(), 1e-6);
  std::vector<int64_t> flats(size_t(w.numel()));
  std::iota(flats.begin(), flats.end(), 0);
  EXPECT_LE(fd_worst(penalty, w, grad, flats), 1e-7);
}

// The DeepSeek compressors report their gates too, so the coverage term carries to the V4 CSA preset:
// every compressor of a forward, with stride m (CSA 4, HCA 16) and W = kappa*m offsets, whose
// phase is i % m; the coverage pairs the two CSA layers' compressors (equal stride) and not the HCA's, and
// its gradient in a CSA layer's gate weights matches finite differences (fp64).
TEST(GateCoverage, DeepSeekCompressorsReportTheirGatesAndTheGradientMatches) {
  Preset p = preset_load("dsv4-csa");
  p.model.vocab_size = 40;
  model_config_sync(p.model, "test");
  torch::manual_seed(5);
  Decoder m(p.model);
  m->to(torch::kFloat64);
  auto tokens = torch::randint(0, 40, {2, 64}, torch::kInt64);
  auto penalty = [&] {
    GateCollector g(*m);
    m->hidden(tokens);
    std::map<std::string, int> seen;  // "layer branch" -> count
    for (const CollectedGate& c : g.gates()) {
      seen[std::to_string(c.layer) + " " + c.branch]++;
      const int S = c.layer == 2 ? 16 : 4;
      EXPECT_EQ(c.S, S) << c.layer;
      EXPECT_EQ(c.alpha.size(2), c.layer == 2 ? S : 2 * S) << c.layer;  // CSA overlaps, HCA does not
      EXPECT_EQ(c.alpha.size(3), 1);
    }
    EXPECT_EQ(seen, (std::map<std::string, int>{
                        {"1 comp", 1}, {"1 idx_comp", 1}, {"2 comp", 1}, {"3 comp", 1}, {"3 idx_comp", 1}}));
    return gate_coverage_penalty(g.gates());
  };
  // two same-stride pairs (comp 1-3, idx_comp 1-3), each overlap in [0, 1]
  torch::Tensor& w = m->attention(1)->param("comp_wgate");
  auto pen = penalty();
  EXPECT_GT(pen.item<double>(), 0.0);
  EXPECT_LE(pen.item<double>(), 1.0);
  pen.backward();
  const auto grad = w.grad().clone();
  EXPECT_GT(grad.abs().max().item<double>(), 1e-8);
  {  // the HCA compressor has no same-stride partner: leaving it out changes nothing (its weights still get
     // a gradient, through layer 3's input)
    torch::NoGradGuard ng;
    GateCollector g(*m);
    m->hidden(tokens);
    std::vector<CollectedGate> csa_only;
    for (const CollectedGate& c : g.gates())
      if (c.layer != 2) csa_only.push_back(c);
    EXPECT_EQ(csa_only.size(), 4u);
    EXPECT_DOUBLE_EQ(gate_coverage_penalty(csa_only).item<double>(),
                     gate_coverage_penalty(g.gates()).item<double>());
  }
  std::vector<int64_t> flats;
  double scale = 0;
  for (int64_t flat = 0; flat < w.numel(); flat += w.numel() / 7) {
    flats.push_back(flat);
    scale = std::max(scale, std::fabs(grad.view({-1})[flat].item<double>()));
  }
  EXPECT_LE(fd_worst(penalty, w, grad, flats), 1e-7 + 1e-5 * scale);
}

}  // namespace
}  // namespace phasescope
