// attention_testing.h — shared fixtures for the attention tests: the list of configurations every
// property is checked on, and small helpers to run the batched module and the loop reference on
// the same weights. Test-only; not part of the library.
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "attention/attention.h"
#include "attention/reference.h"
#include "attention/zoo.h"

namespace phasescope::testing {

struct Variant {
  std::string name;
  AttnConfig cfg;
};

// Every kind at its zoo size, plus the options of the chunked and DeepSeek kinds one at a time.
inline std::vector<Variant> attention_variants() {
  std::vector<Variant> v;
  for (AttnKind k : attn_all_kinds()) v.push_back({attn_kind_name(k), zoo_config(k)});
  auto chunked = [&](const std::string& name, auto edit) {
    AttnConfig c = zoo_config(AttnKind::Chunked);
    edit(c);
    v.push_back({"chunked_" + name, c});
  };
  chunked("w8s4_overlap", [](AttnConfig& c) {
    c.W = 8;
    c.S = 4;
  });
  chunked("w12s12_mqa", [](AttnConfig& c) {
    c.W = 12;
    c.S = 12;
    c.n_kv_heads = 1;
  });
  chunked("w8s6", [](AttnConfig& c) {
    c.W = 8;
    c.S = 6;
  });
  chunked("vector_gates", [](AttnConfig& c) { c.gate = GateKind::Vector; });
  chunked("uniform", [](AttnConfig& c) { c.gate = GateKind::Uniform; });
  chunked("tied_kv", [](AttnConfig& c) { c.tied_kv = true; });
  chunked("shared_payload", [](AttnConfig& c) { c.per_offset_payload = false; });
  chunked("no_gate_bias", [](AttnConfig& c) { c.gate_bias = false; });
  chunked("no_qk_norm", [](AttnConfig& c) { c.qk_norm = false; });
  chunked("no_rope", [](AttnConfig& c) { c.rope_dims = 0; });
  chunked("rope_partial", [](AttnConfig& c) { c.rope_dims = 8; });
  chunked("comp_rope_mismatch", [](AttnConfig& c) {
    c.rope_dims = 8;
    c.comp_rope_dims = 4;
  });
  chunked("tied_kv_no_comp_rope", [](AttnConfig& c) {
    c.tied_kv = true;
    c.comp_rope_dims = 0;
    c.rope_dims = 0;
  });
  chunked("uncompressed_tail", [](AttnConfig& c) { c.uncompressed_tail = true; });
  chunked("tail_overlap", [](AttnConfig& c) {
    c.uncompressed_tail = true;
    c.W = 8;
    c.S = 4;
  });
  chunked("sink", [](AttnConfig& c) { c.sink = true; });
  // staggered grids: the partial first block, with and without overlap, tail, uniform gates
  chunked("staggered", [](AttnConfig& c) { c.grid_offset = c.S / 2; });
  chunked("staggered_w8s6_overlap", [](AttnConfig& c) {
    c.W = 8;
    c.S = 6;
    c.grid_offset = 5;
  });
  chunked("staggered_tail_vector", [](AttnConfig& c) {
    c.uncompressed_tail = true;
    c.gate = GateKind::Vector;
    c.grid_offset = 1;
  });
  chunked("staggered_uniform_tied", [](AttnConfig& c) {
    c.gate = GateKind::Uniform;
    c.tied_kv = true;
    c.grid_offset = 3;
  });
  chunked("deepseek_style", [](AttnConfig& c) {
    c.W = 8;
    c.S = 4;
    c.gate = GateKind::Vector;
    c.tied_kv = true;
    c.rope_dims = 8;
  });
  auto ds = [&](const std::string& name, AttnKind kind, auto edit) {
    AttnConfig c = zoo_config(kind);
    edit(c);
    v.push_back({name, c});
  };
  ds("dsv4_csa_dense", AttnKind::DsCsa, [](AttnConfig& c) { c.index_topk = 0; });
  ds("dsv4_csa_top1_nosink", AttnKind::DsCsa, [](AttnConfig& c) {
    c.index_topk = 1;
    c.sink = false;
  });
  ds("dsv4_csa_no_bias", AttnKind::DsCsa, [](AttnConfig& c) { c.offset_bias = false; });
  ds("hca_m4_w3", AttnKind::DsHca, [](AttnConfig& c) {
    c.ratio = 4;
    c.window = 3;
  });
  ds("v41_csa2_indexed", AttnKind::DsCsa2, [](AttnConfig& c) { c.index_topk = 3; });
  auto v4_real = [](AttnConfig& c) {  // DeepSeek-V4's RoPE and output: YaRN, grouped low-rank wo
    c.rope_theta = 160000.0;
    c.yarn_original_len = 64;
    c.yarn_factor = 16.0;
    c.o_groups = 2;
    c.o_rank = 8;
  };
  ds("dsv4_csa_yarn_grouped", AttnKind::DsCsa, v4_real);
  ds("hca_yarn_grouped", AttnKind::DsHca, v4_real);
  ds("dsv4_window_yarn_grouped", AttnKind::DsWindow, v4_real);
  chunked("yarn", [](AttnConfig& c) {
    c.yarn_original_len = 64;
    c.yarn_factor = 8.0;
  });
  ds("window_sink_gqa", AttnKind::Window, [](AttnConfig& c) {
    c.sink = true;
    c.n_kv_heads = 2;
    c.window = 5;
  });
  ds("full_mha_no_norm", AttnKind::Full, [](AttnConfig& c) {
    c.n_kv_heads = 4;
    c.qk_norm = false;
    c.rope_dims = 6;
  });
  return v;
}

inline void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

// gtest names allow only [A-Za-z0-9_]
inline std::string variant_name(const ::testing::TestParamInfo<Variant>& info) {
  std::string s = info.param.name;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

// A module with random weights (every parameter non-trivial), in fp64 unless asked otherwise.
inline Attention make_module(const AttnConfig& cfg, uint64_t seed, torch::Dtype dtype = torch::kFloat64) {
  torch::manual_seed(seed);
  Attention m(cfg);
  attention_randomize(*m);
  m->to(dtype);
  return m;
}

inline std::vector<double> to_vec(const torch::Tensor& t) {
  auto c = t.detach().to(torch::kFloat64).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

// max |a - b| / max |b|
inline double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / std::max(scale, 1e-300);
}

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

}  // namespace phasescope::testing
