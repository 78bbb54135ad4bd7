// v4_checkpoint_test.cpp — real DeepSeek-V4 layers against an independent reference.
//
// tests/v4/ holds a synthetic 3-layer V4 checkpoint (layer 0 window-only, layer 1 CSA m = 4 with
// overlap and indexer, layer 2 HCA m = 16; YaRN on; grouped low-rank output; FP8 E4M3 weights with
// E8M0 block scales, BF16 norms and compressors) in the official and the Hugging Face layout (two
// shards, one layer split across them), hidden states x, and each layer's outputs computed by
// tests/v4/make_vectors.py: a plain fp64 Python reference of the official inference math written
// apart from phasescope (see tests/v4/README.md). Here phasescope loads each layer from each layout
// and must match: out within 1e-10 (fp64) / 1e-5 (fp32), kv_compressed likewise, index_topk equal
// up to exact score ties. Also: every FP8 code, the bytes a one-layer load reads, the gate profile,
// and the errors a user meets.
#include "model/v4_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "explain/v4_gates.h"
#include "model/safetensors_file.h"
#include "testing.h"

namespace phasescope {
namespace {

namespace fs = std::filesystem;
const std::string kDir = std::string(PHASESCOPE_SOURCE_DIR) + "/tests/v4";

torch::Tensor read_tensor(const std::string& file, const std::string& name, torch::Dtype dtype) {
  SafetensorsFile f = safetensors_open(kDir + "/" + file);
  return safetensors_read(f, name, dtype);
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

// ---------------------------------------------------------------------------------------------
// FP8 decoding

TEST(V4Fp8, AllE4M3CodesMatchTheReferenceTable) {
  std::ifstream f(kDir + "/fp8_e4m3_table.json");
  nlohmann::json table = nlohmann::json::parse(f);
  ASSERT_EQ(table.size(), 256u);
  for (int code = 0; code < 256; ++code) {
    const double ours = fp8_e4m3_value(uint8_t(code));
    if (table[size_t(code)].is_null()) {
      EXPECT_TRUE(std::isnan(ours)) << "code " << code;
    } else {
      EXPECT_EQ(ours, table[size_t(code)].get<double>()) << "code " << code;
    }
  }
  // known bit patterns (OCP e4m3fn)
  EXPECT_EQ(fp8_e4m3_value(0x38), 1.0);
  EXPECT_EQ(fp8_e4m3_value(0xB8), -1.0);
  EXPECT_EQ(fp8_e4m3_value(0x7E), 448.0);
  EXPECT_EQ(fp8_e4m3_value(0x01), std::ldexp(1.0, -9));
  EXPECT_EQ(fp8_e4m3_value(0x08), std::ldexp(1.0, -6));
  EXPECT_TRUE(std::signbit(fp8_e4m3_value(0x80)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_value(0x7F)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_value(0xFF)));
}

TEST(V4Fp8, E8M0ScalesArePowersOfTwo) {
  EXPECT_EQ(fp8_e8m0_value(127), 1.0);
  EXPECT_EQ(fp8_e8m0_value(0), std::ldexp(1.0, -127));
  EXPECT_EQ(fp8_e8m0_value(118), std::ldexp(1.0, -9));
  EXPECT_EQ(fp8_e8m0_value(254), std::ldexp(1.0, 127));
  EXPECT_TRUE(std::isnan(fp8_e8m0_value(255)));
}

// A weight stored FP8 is the code's value times its 128 x 128 block's scale; the synthetic
// checkpoint's scales differ between blocks of one tensor (e.g. layer 0's wq_b has two row blocks).
TEST(V4Fp8, BlockScalesApplyPerBlock) {
  V4Checkpoint ck = v4_open(kDir + "/official");
  SafetensorsFile f = safetensors_open(kDir + "/official/model0-mp1.safetensors");
  auto codes = safetensors_read(f, "layers.0.attn.wq_b.weight", torch::kFloat64);  // decoded codes [256, 48]
  auto scale = safetensors_read(f, "layers.0.attn.wq_b.scale", torch::kFloat64);   // [2, 1]
  ASSERT_EQ(scale.size(0), 2);
  auto w = v4_read(ck, "layers.0.attn.wq_b.weight", torch::kFloat64);
  EXPECT_EQ(max_abs_diff(w.narrow(0, 0, 128), codes.narrow(0, 0, 128) * scale[0][0]), 0.0);
  EXPECT_EQ(max_abs_diff(w.narrow(0, 128, 128), codes.narrow(0, 128, 128) * scale[1][0]), 0.0);
}

// ---------------------------------------------------------------------------------------------
// Conformance with the independent reference, both layouts, both dtypes, every layer

struct Case {
  std::string layout;
  torch::Dtype dtype;
  double tol;
};

class V4Conformance : public ::testing::TestWithParam<Case> {};

// Every selected entry of ours has the score of the reference's pick in the same rank: the two
// selections differ at most by entries of exactly equal score (zeros are common: every head's ReLU
// can be 0). Picks are in selection order (score descending, ties to the smaller index), -1 padded.
void expect_topk_tie_equal(const torch::Tensor& ours, const torch::Tensor& ref, const torch::Tensor& score,
                           double tol, int* exact_rows, int* tie_rows) {
  ASSERT_EQ(ours.sizes(), ref.sizes());
  auto o = ours.accessor<int64_t, 3>();
  auto r = ref.accessor<int64_t, 3>();
  auto s = score.accessor<double, 3>();
  for (int64_t b = 0; b < ours.size(0); ++b)
    for (int64_t t = 0; t < ours.size(1); ++t) {
      bool same = true;
      for (int64_t i = 0; i < ours.size(2); ++i) {
        if (o[b][t][i] == r[b][t][i]) continue;
        same = false;
        ASSERT_TRUE(o[b][t][i] >= 0 && r[b][t][i] >= 0)
            << "b " << b << " t " << t << ": different pick counts";
        EXPECT_NEAR(s[b][t][o[b][t][i]], s[b][t][r[b][t][i]], tol)
            << "b " << b << " t " << t << " rank " << i;
      }
      (same ? *exact_rows : *tie_rows) += 1;
    }
}

TEST_P(V4Conformance, EveryLayerMatchesTheReference) {
  const Case c = GetParam();
  V4Checkpoint ck = v4_open(kDir + "/" + c.layout);
  EXPECT_EQ(v4_layout_name(ck.layout), c.layout == "official" ? "official" : "huggingface");
  auto x = read_tensor("input.safetensors", "x", c.dtype);
  for (int layer = 0; layer < 3; ++layer) {
    SCOPED_TRACE("layer " + std::to_string(layer));
    const std::string expected = "expected_layer" + std::to_string(layer) + ".safetensors";
    Attention attn = v4_attention_load(ck, layer, c.dtype);
    V4LayerOutput r = v4_layer_run(attn, x);
    const double out_err = max_abs_diff(r.out, read_tensor(expected, "out", torch::kFloat64));
    EXPECT_LE(out_err, c.tol);
    std::printf("  %-9s %s layer %d: max |out - ref| = %.3g", c.layout.c_str(),
                c.dtype == torch::kFloat64 ? "fp64" : "fp32", layer, out_err);
    if (layer == 0) {
      EXPECT_FALSE(r.kv_compressed.defined());
    } else {
      auto ref_kv = read_tensor(expected, "kv_compressed", torch::kFloat64);
      ASSERT_EQ(r.kv_compressed.sizes(), ref_kv.sizes());
      const double kv_err = max_abs_diff(r.kv_compressed, ref_kv);
      EXPECT_LE(kv_err, c.tol * 10);  // entries are O(5), outputs O(1)
      std::printf(", kv_compressed %.3g", kv_err);
    }
    if (layer == 1) {
      int exact = 0, ties = 0;
      expect_topk_tie_equal(r.index_topk, read_tensor(expected, "index_topk", torch::kInt64),
                            read_tensor(expected, "index_score", torch::kFloat64), c.tol * 10, &exact, &ties);
      std::printf(", index_topk rows equal %d, equal up to ties %d", exact, ties);
      if (c.dtype == torch::kFloat64) EXPECT_EQ(ties, 0);  // same tie rule, same scores: identical picks
    } else {
      EXPECT_FALSE(r.index_topk.defined());
    }
    std::printf("\n");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, V4Conformance,
    ::testing::Values(Case{"official", torch::kFloat64, 1e-10}, Case{"official", torch::kFloat32, 1e-5},
                      Case{"hf", torch::kFloat64, 1e-10}, Case{"hf", torch::kFloat32, 1e-5}),
    [](const auto& info) {
      return info.param.layout + (info.param.dtype == torch::kFloat64 ? "_fp64" : "_fp32");
    });

// The config of each layer: kinds, YaRN only on compressed layers, indexer RoPE on rope_head_dim.
TEST(V4Config, LayersMapOntoTheZoo) {
  V4Checkpoint ck = v4_open(kDir + "/hf");
  EXPECT_EQ(ck.config_style, "Hugging Face");
  const AttnConfig l0 = v4_attn_config(ck.args, 0), l1 = v4_attn_config(ck.args, 1),
                   l2 = v4_attn_config(ck.args, 2);
  EXPECT_EQ(l0.kind, AttnKind::DsWindow);
  EXPECT_EQ(l0.yarn_original_len, 0);
  EXPECT_EQ(l0.rope_theta, 10000.0);
  EXPECT_EQ(l1.kind, AttnKind::DsCsa);
  EXPECT_TRUE(l1.overlap);
  EXPECT_EQ(l1.index_topk, 3);
  EXPECT_EQ(attn_index_rope_dims(l1), 16);
  EXPECT_EQ(l1.rope_theta, 160000.0);
  EXPECT_EQ(l1.yarn_original_len, 65536);
  EXPECT_EQ(l2.kind, AttnKind::DsHca);
  EXPECT_EQ(l2.ratio, 16);
  EXPECT_FALSE(l2.overlap);
  // both config styles describe the same model
  V4Checkpoint off = v4_open(kDir + "/official");
  EXPECT_EQ(off.config_style, "ModelArgs");
  EXPECT_EQ(attn_config_to_json(v4_attn_config(off.args, 1)), attn_config_to_json(l1));
  EXPECT_EQ(attn_config_to_json(v4_attn_config(off.args, 2)), attn_config_to_json(l2));
}

// YaRN as DeepSeek's precompute_freqs_cis: with V4's settings on 16 rotary dims (theta 160000,
// factor 16, original 65536, beta 32 / 1) the correction range is [3, 7]: pairs 0-3 keep theta's
// frequency, pairs 4-7 run at 1/16 of it... minus the ramp: pair i gets ramp (i - 3) / 4.
TEST(V4Config, YarnFrequencies) {
  AttnConfig c = attn_config_default(AttnKind::DsCsa);
  c.rope_theta = 160000.0;
  const std::vector<double> plain = attn_rope_inv_freq(c, 16);
  c.yarn_original_len = 65536;
  c.yarn_factor = 16.0;
  const std::vector<double> yarn = attn_rope_inv_freq(c, 16);
  ASSERT_EQ(yarn.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    const double ramp = std::clamp((i - 3.0) / 4.0, 0.0, 1.0);
    EXPECT_NEAR(yarn[i], plain[i] * (1 - ramp) + plain[i] / 16.0 * ramp, 1e-18) << "pair " << i;
    EXPECT_NEAR(plain[i], std::pow(160000.0, -2.0 * i / 16), 1e-18);
  }
  EXPECT_EQ(yarn[3], plain[3]);
  EXPECT_NEAR(yarn[7], plain[7] / 16.0, 1e-18);
}

// ---------------------------------------------------------------------------------------------
// Reading only what a layer needs

// Layer 2 lives in shard 2: loading it reads config, index, shard 2's header and exactly the
// layer's tensors (weights and their scales); shard 1 is never opened.
TEST(V4Read, OneLayerReadsOnlyItsByteRanges) {
  V4Checkpoint ck = v4_open(kDir + "/hf");
  const uint64_t before = v4_bytes_read(ck);
  EXPECT_EQ(before, ck.index_bytes);  // nothing but config.json and the index so far
  Attention attn = v4_attention_load(ck, 2, torch::kFloat64);
  const std::string shard1 = kDir + "/hf/model-00001-of-00002.safetensors";
  const std::string shard2 = kDir + "/hf/model-00002-of-00002.safetensors";
  EXPECT_EQ(ck.open.count(shard1), 0u);
  ASSERT_EQ(ck.open.count(shard2), 1u);
  const SafetensorsFile& f = ck.open.at(shard2);
  uint64_t want = ck.index_bytes + f.header_bytes;
  for (const auto& [ours, name] : v4_attn_tensor_names(attn->config(), 2)) {
    want += f.tensors.at(name).end - f.tensors.at(name).begin;
    const std::string scale = name.substr(0, name.size() - 7) + ".scale";
    if (f.tensors.count(scale)) want += f.tensors.at(scale).end - f.tensors.at(scale).begin;
  }
  EXPECT_EQ(v4_bytes_read(ck), want);
  EXPECT_LT(v4_bytes_read(ck), v4_total_bytes(ck) / 2);
  std::printf("  layer 2 from the two-shard checkpoint: read %llu of %llu bytes\n",
              (unsigned long long)v4_bytes_read(ck), (unsigned long long)v4_total_bytes(ck));
}

// ---------------------------------------------------------------------------------------------
// Static gate profiles

TEST(V4Gates, ProfileOfHandMadeBiases) {
  // m = 4, no overlap, 3 channels: a large bias at offset 2 on every channel -> one-hot at slot 2
  std::vector<double> ape(4 * 3, 0.0);
  for (int c = 0; c < 3; ++c) ape[2 * 3 + c] = 50.0;
  V4GateProfile p = v4_gate_profile(ape, 4, 1);
  EXPECT_NEAR(p.g[2], 4.0, 1e-12);
  EXPECT_NEAR(p.static_concentration, 1.0, 1e-12);
  EXPECT_EQ(p.favoured, std::vector<int>({2}));
  EXPECT_NEAR(p.argmax_share[2], 1.0, 1e-12);
  // zero biases: uniform, concentration = slots, nothing favoured
  V4GateProfile u = v4_gate_profile(std::vector<double>(4 * 2 * 5, 0.0), 4, 2);
  EXPECT_EQ(u.slots, 8);
  for (double g : u.g) EXPECT_NEAR(g, 1.0, 1e-12);
  EXPECT_NEAR(u.static_concentration, 8.0, 1e-12);
  EXPECT_NEAR(u.channel_concentration, 8.0, 1e-12);
  EXPECT_TRUE(u.favoured.empty());
  // overlap: the first half's bias at offset 1 is slot 1 (previous block), the second half's slot 5
  std::vector<double> ov(4 * 2 * 1, 0.0);
  ov[1 * 2 + 0] = 50.0;
  EXPECT_EQ(v4_gate_profile(ov, 4, 2).favoured, std::vector<int>({1}));
  ov[1 * 2 + 0] = 0.0;
  ov[1 * 2 + 1] = 50.0;
  EXPECT_EQ(v4_gate_profile(ov, 4, 2).favoured, std::vector<int>({5}));
}

// make_vectors.py plants a bias bump at offset 1 (layer 1's compressor, current block), offset 2
// (its indexer's compressor) and offset 11 (layer 2) on half the channels; the profile finds them.
TEST(V4Gates, SyntheticCheckpointShowsItsPlantedPreferences) {
  V4Checkpoint ck = v4_open(kDir + "/official");
  auto rows = v4_gates(ck);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].branch, "kv");
  EXPECT_EQ(rows[0].slots, 8);
  EXPECT_EQ(rows[0].favoured.at(0) % 4, 1);
  EXPECT_EQ(rows[1].branch, "indexer");
  EXPECT_EQ(rows[1].favoured.at(0) % 4, 2);
  EXPECT_EQ(rows[2].slots, 16);
  EXPECT_EQ(rows[2].favoured.at(0), 11);
  for (const auto& r : rows) {
    double sum = 0;
    for (double a : r.alpha) sum += a;
    EXPECT_NEAR(sum, 1.0, 1e-12);
    EXPECT_GE(r.static_concentration, 1.0);
    EXPECT_LE(r.static_concentration, r.slots + 1e-9);
  }
  // only the ape tensors were read
  uint64_t ape_bytes = 0;
  for (const auto& [path, f] : ck.open)
    for (const auto& [name, e] : f.tensors)
      if (name.find(".ape") != std::string::npos) ape_bytes += e.end - e.begin;
  uint64_t headers = 0;
  for (const auto& [path, f] : ck.open) headers += f.header_bytes;
  EXPECT_EQ(v4_bytes_read(ck), ck.index_bytes + headers + ape_bytes);
}

// ---------------------------------------------------------------------------------------------
// What a user gets wrong

using testutil::error_of;

TEST(V4Errors, ClearMessages) {
  EXPECT_NE(error_of([] { v4_open("/nonexistent/dir"); }).find("is not a directory"), std::string::npos);
  V4Checkpoint ck = v4_open(kDir + "/official");
  EXPECT_NE(error_of([&] { v4_attention_load(ck, 3, torch::kFloat32); }).find("layers 0..2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { v4_read(ck, "layers.9.attn.wq_a.weight", torch::kFloat32); }).find("no tensor"),
            std::string::npos);

  // a V4.1 config, a config of another model, and an FP8 weight without its scale
  const fs::path tmp = testutil::tmp_dir("v4_errors");
  std::ofstream(tmp / "config.json") << R"({"hidden_size": 64, "kv_source_layer_ids": [2]})";
  EXPECT_NE(error_of([&] { v4_open(tmp.string()); }).find("V4.1"), std::string::npos);
  std::ofstream(tmp / "config.json") << R"({"d_model": 64})";
  EXPECT_NE(error_of([&] { v4_open(tmp.string()); }).find("neither 'hidden_size'"), std::string::npos);
  std::ofstream(tmp / "config.json") << R"({"hidden_size": "64"})";
  EXPECT_NE(error_of([&] { v4_open(tmp.string()); }).find("field 'hidden_size'"), std::string::npos);
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace phasescope
