// config.cpp — defaults, validation, names, JSON and the parameter inventory of attention configs.
// See config.h for the conventions. No tensor code here.
#include "attention/config.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/json_fields.h"

namespace phasescope {

using json = nlohmann::json;

AttnConfig attn_config_default(AttnKind kind) {
  AttnConfig c;
  c.kind = kind;
  switch (kind) {
    case AttnKind::Full:
    case AttnKind::Window:
    case AttnKind::Chunked:
      break;
    case AttnKind::DsCsa:  // V4 CSA: m = 4 with the overlapping half, indexer on, V4 query head norm
      c.n_kv_heads = 1;
      c.ratio = 4;
      c.overlap = true;
      c.offset_bias = true;
      c.q_head_norm = true;
      c.index_topk = 8;
      c.sink = true;
      c.rope_dims = 8;
      break;
    case AttnKind::DsHca:  // V4 HCA: ratio 128 in V4; 16 at toy scale, dense over visible entries
      c.n_kv_heads = 1;
      c.ratio = 16;
      c.overlap = false;
      c.offset_bias = true;
      c.q_head_norm = true;
      c.index_topk = 0;
      c.sink = true;
      c.rope_dims = 8;
      break;
    case AttnKind::DsCsa2:  // V4.1 CSA2: ratio 2, no overlap, no ape, no query head norm
      c.n_kv_heads = 1;
      c.ratio = 2;
      c.overlap = false;
      c.offset_bias = false;
      c.q_head_norm = false;
      c.index_topk = 0;
      c.sink = true;
      c.rope_dims = 8;
      break;
    case AttnKind::DsWindow:  // V4 window-only layer: the latent over the exact window, nothing compressed
      c.n_kv_heads = 1;
      c.ratio = 0;
      c.overlap = false;
      c.offset_bias = false;
      c.q_head_norm = true;
      c.index_topk = 0;
      c.sink = true;
      c.rope_dims = 8;
      break;
  }
  return c;
}

std::string attn_kind_name(AttnKind kind) {
  switch (kind) {
    case AttnKind::Full:
      return "full";
    case AttnKind::Window:
      return "window";
    case AttnKind::Chunked:
      return "chunked";
    case AttnKind::DsCsa:
      return "dsv4-csa";
    case AttnKind::DsHca:
      return "hca";
    case AttnKind::DsCsa2:
      return "v41-csa2";
    case AttnKind::DsWindow:
      return "dsv4-window";
  }
  return "?";
}

std::vector<AttnKind> attn_all_kinds() {
  return {AttnKind::Full,  AttnKind::Window, AttnKind::Chunked, AttnKind::DsCsa,
          AttnKind::DsHca, AttnKind::DsCsa2, AttnKind::DsWindow};
}

AttnKind attn_kind_parse(const std::string& name, const std::string& where) {
  for (AttnKind k : attn_all_kinds())
    if (attn_kind_name(k) == name) return k;
  fail(where, "unknown attention kind '" + name + "'",
       "use one of full, window, chunked, dsv4-csa, hca, v41-csa2, dsv4-window");
}

std::string gate_kind_name(GateKind kind) {
  switch (kind) {
    case GateKind::Scalar:
      return "scalar";
    case GateKind::Vector:
      return "vector";
    case GateKind::Uniform:
      return "uniform";
  }
  return "?";
}

GateKind gate_kind_parse(const std::string& name, const std::string& where) {
  for (GateKind k : {GateKind::Scalar, GateKind::Vector, GateKind::Uniform})
    if (gate_kind_name(k) == name) return k;
  fail(where, "unknown gate kind '" + name + "'", "use one of scalar, vector, uniform");
}

bool attn_is_ds(const AttnConfig& c) {
  return c.kind == AttnKind::DsCsa || c.kind == AttnKind::DsHca || c.kind == AttnKind::DsCsa2 ||
         c.kind == AttnKind::DsWindow;
}

int attn_rope_dims(const AttnConfig& c) { return c.rope_dims < 0 ? c.head_dim : c.rope_dims; }

int attn_comp_rope_dims(const AttnConfig& c) {
  return c.comp_rope_dims < 0 ? attn_rope_dims(c) : c.comp_rope_dims;
}

int attn_index_rope_dims(const AttnConfig& c) {
  return c.index_rope_dims < 0 ? attn_rope_dims(c) : c.index_rope_dims;
}

std::vector<double> attn_rope_inv_freq(const AttnConfig& c, int dims) {
  const int half = dims / 2;
  std::vector<double> f(half);
  for (int i = 0; i < half; ++i) f[i] = std::pow(c.rope_theta, -2.0 * i / dims);
  if (c.yarn_original_len <= 0) return f;
  // correction dim: the pair index whose wavelength fits `rotations` times into the original length
  auto correction_dim = [&](double rotations) {
    return dims * std::log(c.yarn_original_len / (rotations * 2.0 * std::acos(-1.0))) /
           (2.0 * std::log(c.rope_theta));
  };
  const double low = std::max(std::floor(correction_dim(c.yarn_beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(c.yarn_beta_slow)), double(dims - 1));
  if (low == high) high += 0.001;
  for (int i = 0; i < half; ++i) {
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);  // 0 = keep, 1 = interpolate
    f[i] = f[i] / c.yarn_factor * ramp + f[i] * (1.0 - ramp);
  }
  return f;
}

int attn_stride(const AttnConfig& c) {
  if (c.kind == AttnKind::Chunked) return c.S;
  if (attn_is_ds(c)) return c.ratio;
  return 0;
}

bool attn_is_compressed(const AttnConfig& c) { return attn_stride(c) > 0; }

int64_t chunk_entry_start(const AttnConfig& c, int64_t j) { return c.grid_offset + j * c.S; }

int64_t chunk_entry_rope_pos(const AttnConfig& c, int64_t j) {
  return std::max<int64_t>(0, chunk_entry_start(c, j));
}

int64_t chunk_first_entry(const AttnConfig& c, int64_t pos0) {
  if (pos0 == 0 && c.grid_offset > 0) return -1;  // the partial block [0, o)
  // the smallest j with o + j*S >= pos0 (ceiling division of a possibly negative number)
  const int64_t num = pos0 - c.grid_offset, S = c.S;
  return num >= 0 ? (num + S - 1) / S : -((-num) / S);
}

int64_t chunk_entry_count(const AttnConfig& c, int64_t pos0, int64_t T) {
  // finished: o + j*S + W - 1 <= pos0 + T - 1, i.e. j <= floor((pos0 + T - W - o) / S)
  const int64_t num = pos0 + T - c.W - c.grid_offset, S = c.S;
  const int64_t last = num >= 0 ? num / S : -((-num + S - 1) / S);
  return std::max<int64_t>(0, last - chunk_first_entry(c, pos0) + 1);
}

void attn_config_validate(const AttnConfig& c, const std::string& where) {
  auto need = [&](bool ok, const std::string& field, const std::string& what, const std::string& fix) {
    if (!ok) fail(where + " field '" + field + "'", what, fix);
  };
  need(c.d_model > 0, "d_model", "must be positive", "set d_model to e.g. 64");
  need(c.n_heads > 0, "n_heads", "must be positive", "set n_heads to e.g. 4");
  need(c.n_kv_heads > 0 && c.n_heads % c.n_kv_heads == 0, "n_kv_heads",
       "must be positive and divide n_heads (" + std::to_string(c.n_heads) + ")",
       "use 1 (MQA) or a divisor of n_heads");
  need(c.head_dim > 0 && c.head_dim % 2 == 0, "head_dim", "must be positive and even",
       "set head_dim to e.g. 16");
  int rd = attn_rope_dims(c);
  need(rd >= 0 && rd <= c.head_dim && rd % 2 == 0, "rope_dims",
       "must be -1 (all), 0 (none) or an even number <= head_dim", "e.g. rope_dims = 16");
  need(c.rope_theta > 0, "rope_theta", "must be positive", "e.g. 10000");
  need(c.yarn_original_len >= 0, "yarn_original_len", "must be >= 0", "0 = no YaRN; DeepSeek-V4 uses 65536");
  if (c.yarn_original_len > 0) {
    need(c.yarn_factor >= 1, "yarn_factor", "must be >= 1", "DeepSeek-V4 uses 16");
    need(c.yarn_beta_fast > c.yarn_beta_slow && c.yarn_beta_slow > 0, "yarn_beta_fast",
         "needs yarn_beta_fast > yarn_beta_slow > 0", "DeepSeek-V4 uses 32 and 1");
  }
  need(c.o_groups >= 0, "o_groups", "must be >= 0", "0 = one output matrix wo");
  if (c.o_groups > 0) {
    need(attn_is_ds(c), "o_groups", "the grouped low-rank output exists for the DeepSeek kinds only",
         "set o_groups = 0");
    need(c.n_heads % c.o_groups == 0, "o_groups", "must divide n_heads (" + std::to_string(c.n_heads) + ")",
         "e.g. o_groups = 1");
    need(c.o_rank > 0, "o_rank", "must be positive with o_groups > 0", "e.g. o_rank = 32");
  }
  need(c.window >= 0, "window", "must be >= 0", "e.g. window = 16");
  need(c.norm_eps > 0, "norm_eps", "must be positive", "e.g. 1e-6");

  if (c.kind == AttnKind::Window)
    need(c.window >= 1, "window", "window attention needs window >= 1", "e.g. window = 16");
  if (c.kind == AttnKind::Chunked) {
    need(c.S >= 1, "S", "stride must be >= 1", "e.g. S = 8");
    need(c.W >= c.S, "W", "window W must be >= stride S (W > S overlaps)", "e.g. W = S = 8");
    need(c.grid_offset >= 0 && c.grid_offset < c.S, "grid_offset", "must be in [0, S)",
         "e.g. grid_offset = S / 2 for the second of two staggered layers");
    int crd = attn_comp_rope_dims(c);
    need(crd >= 0 && crd <= c.head_dim && crd % 2 == 0, "comp_rope_dims",
         "must be -1 (as rope_dims), 0 or an even number <= head_dim", "e.g. comp_rope_dims = 16");
  } else {
    need(c.grid_offset == 0, "grid_offset", "a staggered grid exists for the chunked kind only",
         "set grid_offset = 0 or kind = chunked");
  }
  if (attn_is_ds(c)) {
    need(c.n_kv_heads == 1, "n_kv_heads", "DeepSeek kinds share one latent (MQA)", "set n_kv_heads = 1");
    if (c.kind == AttnKind::DsWindow)
      need(c.ratio == 0 && c.index_topk == 0, "ratio", "a window-only layer compresses nothing",
           "set ratio = 0 and index_topk = 0, or use kind dsv4-csa / hca");
    else
      need(c.ratio >= 1, "ratio", "must be >= 1", "e.g. ratio = 4");
    if (c.kind == AttnKind::DsWindow)
      need(c.window >= 1, "window", "a window-only layer needs window >= 1", "e.g. window = 16");
    need(c.window >= c.ratio - 1, "window",
         "must be >= ratio - 1, or tokens of the open block are reachable by nothing",
         "raise window to at least " + std::to_string(c.ratio - 1));
    need(c.q_rank > 0, "q_rank", "must be positive", "e.g. q_rank = 32");
    need(c.index_topk >= 0, "index_topk", "must be >= 0", "0 = dense, k > 0 = indexer keeps top-k");
    if (c.index_topk > 0) {
      need(c.index_heads > 0, "index_heads", "must be positive", "e.g. index_heads = 4");
      need(c.index_dim > 0 && c.index_dim % 2 == 0, "index_dim", "must be positive and even", "e.g. 16");
      const int ird = attn_index_rope_dims(c);
      need(ird >= 0 && ird <= c.index_dim && ird % 2 == 0, "index_rope_dims",
           "must be -1 (as rope_dims) or an even number <= index_dim", "e.g. index_rope_dims = -1");
    }
    if (c.kind == AttnKind::DsHca) {
      need(!c.overlap, "overlap", "HCA does not overlap blocks", "set overlap = false or kind = dsv4-csa");
      need(c.index_topk == 0, "index_topk", "HCA is dense over visible entries (no indexer)",
           "set index_topk = 0");
    }
    if (c.kind == AttnKind::DsCsa2) {
      need(!c.overlap, "overlap", "V4.1 CSA2 has no overlap", "set overlap = false");
      need(!c.offset_bias, "offset_bias", "V4.1 CSA2 has no offset bias (ape)", "set offset_bias = false");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// JSON: one table of fields, used by both directions so they cannot drift apart.

namespace {

const JsonTable<AttnConfig>& field_table() {
  static const JsonTable<AttnConfig> table = [] {
    JsonTable<AttnConfig> t;
    t["d_model"] = json_field(&AttnConfig::d_model);
    t["n_heads"] = json_field(&AttnConfig::n_heads);
    t["n_kv_heads"] = json_field(&AttnConfig::n_kv_heads);
    t["head_dim"] = json_field(&AttnConfig::head_dim);
    t["rope_theta"] = json_field(&AttnConfig::rope_theta);
    t["rope_dims"] = json_field(&AttnConfig::rope_dims);
    t["yarn_factor"] = json_field(&AttnConfig::yarn_factor);
    t["yarn_original_len"] = json_field(&AttnConfig::yarn_original_len);
    t["yarn_beta_fast"] = json_field(&AttnConfig::yarn_beta_fast);
    t["yarn_beta_slow"] = json_field(&AttnConfig::yarn_beta_slow);
    t["o_groups"] = json_field(&AttnConfig::o_groups);
    t["o_rank"] = json_field(&AttnConfig::o_rank);
    t["qk_norm"] = json_field(&AttnConfig::qk_norm);
    t["sink"] = json_field(&AttnConfig::sink);
    t["window"] = json_field(&AttnConfig::window);
    t["norm_eps"] = json_field(&AttnConfig::norm_eps);
    t["W"] = json_field(&AttnConfig::W);
    t["S"] = json_field(&AttnConfig::S);
    t["gate_bias"] = json_field(&AttnConfig::gate_bias);
    t["per_offset_payload"] = json_field(&AttnConfig::per_offset_payload);
    t["tied_kv"] = json_field(&AttnConfig::tied_kv);
    t["comp_rope_dims"] = json_field(&AttnConfig::comp_rope_dims);
    t["uncompressed_tail"] = json_field(&AttnConfig::uncompressed_tail);
    t["grid_offset"] = json_field(&AttnConfig::grid_offset);
    t["ratio"] = json_field(&AttnConfig::ratio);
    t["overlap"] = json_field(&AttnConfig::overlap);
    t["offset_bias"] = json_field(&AttnConfig::offset_bias);
    t["q_rank"] = json_field(&AttnConfig::q_rank);
    t["q_head_norm"] = json_field(&AttnConfig::q_head_norm);
    t["index_topk"] = json_field(&AttnConfig::index_topk);
    t["index_heads"] = json_field(&AttnConfig::index_heads);
    t["index_dim"] = json_field(&AttnConfig::index_dim);
    t["index_rope_dims"] = json_field(&AttnConfig::index_rope_dims);
    return t;
  }();
  return table;
}

}  // namespace

std::string attn_config_to_json(const AttnConfig& c) {
  json j = json_dump(c, field_table());
  j["kind"] = attn_kind_name(c.kind);
  j["gate"] = gate_kind_name(c.gate);
  if (c.grid_offset == 0) j.erase("grid_offset");  // unstaggered configs keep the JSON (and hash) they had
  return j.dump();
}

AttnConfig attn_config_from_json(const std::string& text, const std::string& where) {
  json j = json_parse_or_fail(text, where, "check the attention config's syntax");
  if (!j.is_object())
    fail(where, "attention config must be a JSON object", "write {\"kind\": \"chunked\", ...}");
  if (!j.contains("kind") || !j["kind"].is_string())
    fail(where + " field 'kind'", "missing or not a string",
         "add \"kind\": \"full\" (or window, chunked, dsv4-csa, hca, v41-csa2)");
  AttnConfig c = attn_config_default(attn_kind_parse(j["kind"].get<std::string>(), where + " field 'kind'"));
  if (j.contains("gate")) {
    if (!j["gate"].is_string())
      fail(where + " field 'gate'", "expected a string", "use scalar, vector or uniform");
    c.gate = gate_kind_parse(j["gate"].get<std::string>(), where + " field 'gate'");
  }
  json_apply(c, j, field_table(), where, {"kind", "gate"});
  attn_config_validate(c, where);
  return c;
}

// ---------------------------------------------------------------------------------------------
// Parameter inventory.

std::vector<ParamSpec> attn_param_specs(const AttnConfig& c) {
  const int64_t d = c.d_model, H = c.n_heads, Hkv = c.n_kv_heads, D = c.head_dim;
  auto lin = [](const std::string& name, int64_t out, int64_t in) {
    return ParamSpec{name, {out, in}, InitKind::Normal, 1.0 / std::sqrt(double(in))};
  };
  std::vector<ParamSpec> p;

  if (!attn_is_ds(c)) {
    p.push_back(lin("wq", H * D, d));
    p.push_back(lin("wk", Hkv * D, d));
    p.push_back(lin("wv", Hkv * D, d));
    p.push_back(lin("wo", d, H * D));
    if (c.qk_norm) {
      p.push_back({"q_norm", {D}, InitKind::Ones});
      p.push_back({"k_norm", {D}, InitKind::Ones});
    }
    if (c.sink) p.push_back({"sink", {H}, InitKind::Zeros});
    if (c.kind == AttnKind::Chunked) {
      const int64_t W = c.W;
      const double s_in = 1.0 / std::sqrt(double(d));
      std::vector<std::string> branches = {"ck"};
      if (!c.tied_kv) branches.push_back("cv");
      for (const auto& b : branches) {
        if (c.gate == GateKind::Scalar) {
          p.push_back({b + "_gate_w", {Hkv, W, d}, InitKind::Normal, s_in});
          if (c.gate_bias) p.push_back({b + "_gate_b", {Hkv, W}, InitKind::Zeros});
        } else if (c.gate == GateKind::Vector) {
          p.push_back({b + "_gate_w", {Hkv, W, D, d}, InitKind::Normal, s_in});
          if (c.gate_bias) p.push_back({b + "_gate_b", {Hkv, W, D}, InitKind::Zeros});
        }
        if (c.per_offset_payload)
          p.push_back({b + "_payload", {Hkv, W, D, d}, InitKind::Normal, s_in});
        else
          p.push_back({b + "_payload", {Hkv, D, d}, InitKind::Normal, s_in});
      }
    }
    return p;
  }

  // DeepSeek family: low-rank query, one K = V latent, compressor (+ indexer with its own compressor).
  const int64_t kappa = c.overlap ? 2 : 1, m = c.ratio;
  p.push_back(lin("wq_a", c.q_rank, d));
  p.push_back({"q_a_norm", {c.q_rank}, InitKind::Ones});
  p.push_back(lin("wq_b", H * D, c.q_rank));
  p.push_back(lin("wkv", D, d));
  p.push_back({"kv_norm", {D}, InitKind::Ones});
  if (c.o_groups > 0) {
    p.push_back(lin("wo_a", int64_t(c.o_groups) * c.o_rank, H * D / c.o_groups));
    p.push_back(lin("wo_b", d, int64_t(c.o_groups) * c.o_rank));
  } else {
    p.push_back(lin("wo", d, H * D));
  }
  if (c.sink) p.push_back({"sink", {H}, InitKind::Zeros});
  auto compressor = [&](const std::string& pre, int64_t width) {
    p.push_back(lin(pre + "wkv", kappa * width, d));
    p.push_back(lin(pre + "wgate", kappa * width, d));
    if (c.offset_bias) p.push_back({pre + "ape", {m, kappa * width}, InitKind::Zeros});
    p.push_back({pre + "norm", {width}, InitKind::Ones});
  };
  if (c.kind == AttnKind::DsWindow) return p;
  compressor("comp_", D);
  if (c.index_topk > 0) {
    p.push_back(lin("idx_wq_b", int64_t(c.index_heads) * c.index_dim, c.q_rank));
    p.push_back(lin("idx_ww", c.index_heads, d));
    compressor("idx_comp_", c.index_dim);
  }
  return p;
}

}  // namespace phasescope
