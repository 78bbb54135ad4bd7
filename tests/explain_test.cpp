// explain_test.cpp — the explain instruments (explain/explain.h) on exact cases:
// concentration is 1 on one-hot and W on uniform gates; the profile puts all mass on the gate's phase;
// knocking out a layer the model does not use changes nothing (and one it uses changes the logits);
// gate cycling by delta and back by -delta restores weights and accuracies exactly; the token shift
// of the laptop presets is a causal, position-invariant convolution.
#include "explain/explain.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>

#include "attention/attention.h"
#include "core/check.h"
#include "data/tasks.h"
#include "eval/model_backend.h"
#include "model/load.h"
#include "model/model.h"
#include "testing.h"

using namespace phasescope;
namespace fs = std::filesystem;

namespace {

// testutil::tiny_preset with 12 records per prompt (small() balances its layout for that), and the
// vocabulary set, since the tests build a Decoder from p.model directly.
Preset tiny(const std::string& name) {
  Preset p = testutil::tiny_preset(name);
  p.task.n_records = 12;
  p.model.vocab_size = task_vocab(p.task).size();
  return preset_from_json(preset_to_json(p), "tiny " + name);
}

ExplainOptions small() {
  ExplainOptions o;
  o.samples = 256;  // n_base 32: balanced within the layout's tolerances for this small task
  o.calib_samples = 32;
  o.R = 8;
  o.deltas = {-1, 2};
  o.report = false;
  o.fresh = true;  // every condition scored anew (the resume test turns this off)
  return o;
}

std::vector<std::vector<double>> one_hot(int W, std::vector<int> at) {
  std::vector<std::vector<double>> w;
  for (int a : at) {
    w.push_back(std::vector<double>(size_t(W), 0.0));
    w.back()[size_t(a)] = 1.0;
  }
  return w;
}

}  // namespace

TEST(GateMeasures, OneHotAndUniformAreTheExtremes) {
  const int W = 8;
  auto hot = one_hot(W, {3, 3, 3, 3});
  EXPECT_DOUBLE_EQ(gate_static_concentration(hot), 1.0);
  EXPECT_DOUBLE_EQ(gate_window_concentration(hot), 1.0);
  std::vector<std::vector<double>> uni(5, std::vector<double>(size_t(W), 1.0 / W));
  EXPECT_NEAR(gate_static_concentration(uni), W, 1e-12);
  EXPECT_NEAR(gate_window_concentration(uni), W, 1e-12);
  // one-hot per window but at two offsets equally often: static 2, per window 1
  auto two = one_hot(W, {1, 5, 1, 5});
  EXPECT_NEAR(gate_static_concentration(two), 2.0, 1e-12);
  EXPECT_DOUBLE_EQ(gate_window_concentration(two), 1.0);
}

TEST(GateMeasures, ProfileIsMassOverUniformShare) {
  auto p = gate_profile(one_hot(8, {3, 3}), 8);
  for (int r = 0; r < 8; ++r) EXPECT_DOUBLE_EQ(p[size_t(r)], r == 3 ? 8.0 : 0.0);
  std::vector<std::vector<double>> uni(3, std::vector<double>(16, 1.0 / 16));
  for (double g : gate_profile(uni, 8))
    EXPECT_NEAR(g, 1.0, 1e-12);  // W = 2S: offsets i and i + S share phase i
  auto q = gate_profile(one_hot(16, {11}), 8);
  EXPECT_DOUBLE_EQ(q[3], 8.0);
}

TEST(GateMeasures, RSquared) {
  EXPECT_DOUBLE_EQ(r_squared({0.1, 0.5, 0.9}, {0.1, 0.5, 0.9}), 1.0);
  EXPECT_NEAR(r_squared({0.0, 1.0, 0.0, 1.0}, {0.5, 0.5, 0.5, 0.5}), 0.0, 1e-12);
  EXPECT_DOUBLE_EQ(r_squared({0.0, 1.0, 0.0, 9.0}, {0.0, 1.0, 0.0, -5.0}, {3}), 1.0);  // index 3 skipped
}

TEST(Explain, GateStatisticsOfForcedGates) {
  // scalar gates forced one-hot at offset 3 (key branch) and uniform (value branch)
  Preset p = tiny("w8s8-1kv");
  torch::manual_seed(1);
  Decoder m(p.model);
  {
    torch::NoGradGuard g;
    for (int l = 0; l < p.model.n_layers; ++l) {
      auto& a = *m->attention(l);
      a.param("ck_gate_w").zero_();
      a.param("ck_gate_b").zero_();
      a.param("ck_gate_b").select(1, 3).fill_(60.0);
      a.param("cv_gate_w").zero_();
      a.param("cv_gate_b").zero_();
    }
  }
  ExplainResults r = explain_run(m, p, small(), testutil::tmp_dir("explain_gates"));
  ASSERT_EQ(r.gates.size(), size_t(2 * p.model.n_layers));
  for (const auto& g : r.gates) {
    if (g.branch == "k") {
      EXPECT_NEAR(g.static_conc, 1.0, 1e-9);
      EXPECT_NEAR(g.window_conc, 1.0, 1e-9);
      EXPECT_EQ(g.peak, 3);
      EXPECT_NEAR(g.profile[3], 8.0, 1e-9);
    } else {
      EXPECT_NEAR(g.static_conc, 8.0, 1e-9);
      EXPECT_NEAR(g.window_conc, 8.0, 1e-9);
      for (double v : g.profile) EXPECT_NEAR(v, 1.0, 1e-9);
    }
  }
}

TEST(Explain, KnockoutOfAnUnusedLayerChangesNothing) {
  Preset p = tiny("w8s8-1kv");
  torch::manual_seed(2);
  Decoder m(p.model);
  {
    torch::NoGradGuard g;
    m->attention(1)->param("wo").zero_();  // layer 1 writes nothing to the residual stream
  }
  ExplainResults r = explain_run(m, p, small(), testutil::tmp_dir("explain_ko"));
  ASSERT_EQ(r.knockouts.size(), 2u);
  const KnockoutRow& unused = r.knockouts[1];
  EXPECT_EQ(unused.label, "L1");
  EXPECT_EQ(unused.acc.acc, r.clean.acc);
  EXPECT_EQ(unused.acc.mean, r.clean.mean);
  for (size_t i = 0; i < unused.rel.size(); ++i)
    if (std::isfinite(unused.rel[i])) EXPECT_EQ(unused.rel[i], 0.0);

  // and the hook really replaces: with layer 0 knocked out the final logits move, earlier ones do not
  torch::NoGradGuard g;
  auto tokens = torch::randint(1, 40, {2, 24}, torch::kInt64);
  auto clean = m->forward(tokens);
  auto mean = torch::zeros({p.model.n_heads, p.model.head_dim});
  m->attention(0)->set_head_hook([&](const torch::Tensor& o) {
    auto q = o.clone();
    q.index_put_({torch::indexing::Slice(), q.size(1) - 1}, mean);
    return q;
  });
  auto ko = m->forward(tokens);
  m->attention(0)->set_head_hook(nullptr);
  EXPECT_TRUE(torch::equal(clean.narrow(1, 0, 23), ko.narrow(1, 0, 23)));
  EXPECT_GT((clean.select(1, 23) - ko.select(1, 23)).abs().max().item<double>(), 1e-4);
}

TEST(Explain, KnockoutRowsPerKvHead) {
  Preset p = tiny("w8s8-8kv");
  p.model.n_kv_heads = 2;
  p = preset_from_json(preset_to_json(p), "tiny 2kv");
  torch::manual_seed(3);
  Decoder m(p.model);
  ExplainOptions o = small();
  o.deltas = {};
  ExplainResults r = explain_run(m, p, o, testutil::tmp_dir("explain_kv"));
  ASSERT_EQ(r.knockouts.size(), size_t(p.model.n_layers * 3));  // the layer, then each of its 2 KV heads
  EXPECT_EQ(r.knockouts[1].label, "L0.kv0");
  const int G = p.model.n_heads / 2;
  ASSERT_EQ(r.knockouts[2].heads.size(), size_t(G));
  EXPECT_EQ(r.knockouts[2].heads.front(), G);
  EXPECT_EQ(r.knockouts[2].heads.back(), 2 * G - 1);
}

TEST(Explain, GateCyclingRoundTripIsExact) {
  Preset p = tiny("w8s8-1kv");
  torch::manual_seed(4);
  Decoder m(p.model);
  std::vector<torch::Tensor> before;
  for (const auto& t : m->parameters()) before.push_back(t.clone());
  EvalOptions eo = eval_options_for(p, PadProtocol::Prefix, 256, 8, 1);
  const LayoutDesign d = layout_build(eo.layout);
  std::vector<int> c0, c1;
  LoadedModel lm;
  lm.preset = p;
  lm.model = m;
  lm.hash = model_content_hash(*m, p);
  ModelBackend backend(lm, p.name, 5, 16);
  const std::string jdir = testutil::tmp_dir("explain_cyc_journals");
  PhaseAccuracy a0 = explain_accuracy(backend, d, 8, p.name, "clean", jdir + "/a0.jsonl", true, &c0);

  EXPECT_EQ(gate_cycle(*m, 3), (std::vector<int>{0, 1}));
  bool moved = false;
  size_t i = 0;
  for (const auto& t : m->parameters()) moved |= !torch::equal(t, before[i++]);
  EXPECT_TRUE(moved);
  // the payload maps stay where they were
  {
    size_t j = 0;
    for (const auto& item : m->named_parameters()) {
      if (item.key().find("payload") != std::string::npos)
        EXPECT_TRUE(torch::equal(item.value(), before[j])) << item.key();
      ++j;
    }
  }
  gate_cycle(*m, -3);
  i = 0;
  for (const auto& t : m->parameters()) EXPECT_TRUE(torch::equal(t, before[i++]));
  PhaseAccuracy a1 = explain_accuracy(backend, d, 8, p.name, "clean", jdir + "/a1.jsonl", true, &c1);
  EXPECT_EQ(c0, c1);
  EXPECT_EQ(a0.acc, a1.acc);

  // explain_run restores the weights itself after its cycling sweep
  explain_run(m, p, small(), testutil::tmp_dir("explain_cyc"));
  i = 0;
  for (const auto& t : m->parameters()) EXPECT_TRUE(torch::equal(t, before[i++]));
}

TEST(Explain, CyclingMovesAForcedGateByDelta) {
  // a one-hot key gate at offset 2 rolled by +3 sits at offset 5
  Preset p = tiny("w8s8-1kv");
  torch::manual_seed(5);
  Decoder m(p.model);
  {
    torch::NoGradGuard g;
    m->attention(0)->param("ck_gate_b").zero_();
    m->attention(0)->param("ck_gate_b").select(1, 2).fill_(9.0);
  }
  gate_cycle(*m, 3, 0);
  auto b = m->attention(0)->param("ck_gate_b");
  EXPECT_EQ(b.select(1, 5).item<float>(), 9.0f);
  EXPECT_EQ(b.select(1, 2).item<float>(), 0.0f);
}

TEST(TokenShift, CausalConvolutionWithZeroStart) {
  auto x = torch::randn({2, 6, 4}, torch::kFloat64);
  auto c = torch::randn({2, 4}, torch::kFloat64);
  auto y = token_shift_apply(x, c);
  for (int64_t t = 0; t < 6; ++t) {
    auto want = torch::zeros({2, 4}, torch::kFloat64);
    for (int64_t k = 1; k <= 2; ++k)
      if (t - k >= 0) want = want + x.select(1, t - k) * c[k - 1];
    EXPECT_LT((y.select(1, t) - want).abs().max().item<double>(), 1e-15) << t;
  }
  // a model with token_shift trains the same parameters plus the shift, and starts equal to the plain one
  Preset p = tiny("full-1kv");
  Preset q = p;
  q.model.token_shift = 2;
  q = preset_from_json(preset_to_json(q), "tiny shift");
  torch::manual_seed(6);
  Decoder a(p.model);
  torch::manual_seed(6);
  Decoder b(q.model);
  auto tokens = torch::randint(1, 40, {2, 20}, torch::kInt64);
  torch::NoGradGuard g;
  EXPECT_TRUE(torch::allclose(a->forward(tokens), b->forward(tokens)));
}

namespace phasescope {
namespace {

// a layout whose R is not a multiple of the stride is the user's mistake: an Error with the fix, not an
// internal assertion
TEST(Explain, RNotAMultipleOfTheStrideIsAUserError) {
  Preset p = tiny("w8s8-1kv");
  torch::manual_seed(6);
  Decoder m(p.model);
  ExplainOptions o = small();
  o.R = 7;
  try {
    explain_run(m, p, o, testutil::tmp_dir("explain_badr"));
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("explain --R 7"), std::string::npos) << what;
    EXPECT_NE(what.find("multiple of the model's stride 8"), std::string::npos) << what;
    EXPECT_EQ(what.find("internal check"), std::string::npos) << what;
  }
}

// every accuracy explain reports comes from a journal through the scoring engine, with its Wilson
// interval; a rerun resumes those journals and gives the same numbers
TEST(Explain, AccuraciesCarryWilsonIntervalsAndResume) {
  Preset p = tiny("w8s8-1kv");
  torch::manual_seed(7);
  Decoder m(p.model);
  const std::string dir = testutil::tmp_dir("explain_ci");
  ExplainResults r = explain_run(m, p, small(), dir);
  ASSERT_FALSE(r.knockouts.empty());
  for (const PhaseAccuracy* a : {&r.clean, &r.knockouts[0].acc}) {
    ASSERT_EQ(a->lo.size(), size_t(r.S));
    for (int s = 0; s < r.S; ++s) {
      EXPECT_LE(a->lo[size_t(s)], a->acc[size_t(s)]);
      EXPECT_GE(a->hi[size_t(s)], a->acc[size_t(s)]);
      EXPECT_LT(a->hi[size_t(s)] - a->lo[size_t(s)], 1.0);
    }
  }
  EXPECT_TRUE(fs::exists(dir + "/journals/clean.jsonl"));
  EXPECT_TRUE(fs::exists(dir + "/journals/knockout-L0.jsonl"));
  ExplainOptions again = small();
  again.fresh = false;  // resume every condition's journal
  ExplainResults r2 = explain_run(m, p, again, dir);
  EXPECT_EQ(r2.clean.acc, r.clean.acc);
  EXPECT_EQ(r2.knockouts[0].acc.acc, r.knockouts[0].acc.acc);
}

}  // namespace
}  // namespace phasescope
