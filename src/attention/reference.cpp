// reference.cpp — the loop reference of every attention kind (see reference.h).
// Written for reading, not speed: every quantity is computed per token, per head, per channel,
// exactly as the formulas in config.h and ../shared/design/deepseek-v4-attention.md state them.
#include "attention/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/check.h"

namespace phasescope {

namespace {

using Vec = std::vector<double>;

const RefTensor& param(const RefParams& P, const std::string& name) {
  auto it = P.find(name);
  PS_ASSERT(it != P.end(), "reference: missing parameter " + name);
  return it->second;
}

// y = W[row0 : row0+rows, :] x, for a row-major tensor whose last dim is the input width.
Vec matvec(const RefTensor& w, int64_t row0, int64_t rows, const double* x) {
  const int64_t in = w.shape.back();
  Vec y(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double* wr = &w.data[(row0 + r) * in];
    double acc = 0.0;
    for (int64_t k = 0; k < in; ++k) acc += wr[k] * x[k];
    y[r] = acc;
  }
  return y;
}

// RMSNorm in place; weight may be null (V4's per-head query norm has no learned scale).
void rmsnorm(Vec& v, const RefTensor* weight, double eps) {
  double ms = 0.0;
  for (double e : v) ms += e * e;
  ms /= double(v.size());
  const double inv = 1.0 / std::sqrt(ms + eps);
  for (size_t i = 0; i < v.size(); ++i) v[i] *= inv * (weight ? weight->data[i] : 1.0);
}

// Empty per-query, per-head lists of what each query attends to.
void trace_init(RefTrace& trace, int T, int H) {
  trace.entries.assign(T, std::vector<std::vector<int64_t>>(H));
  trace.raw.assign(T, std::vector<std::vector<int64_t>>(H));
}

// RoPE on the last 2 * inv_freq.size() entries of v, interleaved pairs (2i, 2i+1), angle = pos *
// inv_freq[i] (attn_rope_inv_freq: theta^(-2i/dims), YaRN-blended when configured). pos may be
// negative (inverse rotation).
void rope(Vec& v, const std::vector<double>& inv_freq, double pos) {
  const int dims = 2 * int(inv_freq.size());
  const int start = int(v.size()) - dims;
  for (int i = 0; i < dims / 2; ++i) {
    const double freq = inv_freq[i];
    const double c = std::cos(pos * freq), s = std::sin(pos * freq);
    double& a = v[start + 2 * i];
    double& b = v[start + 2 * i + 1];
    const double a0 = a, b0 = b;
    a = a0 * c - b0 * s;
    b = a0 * s + b0 * c;
  }
}

double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// One softmax over the given keys plus the optional sink (denominator only); output = sum p v.
// With no key and no sink the output is zero.
Vec attend(const Vec& q, const std::vector<const Vec*>& keys, const std::vector<const Vec*>& vals,
           double scale, bool has_sink, double sink) {
  Vec out(q.size(), 0.0);
  if (keys.empty()) return out;
  Vec logits(keys.size());
  double mx = has_sink ? sink : -std::numeric_limits<double>::infinity();
  for (size_t k = 0; k < keys.size(); ++k) {
    logits[k] = scale * dot(q, *keys[k]);
    mx = std::max(mx, logits[k]);
  }
  double den = has_sink ? std::exp(sink - mx) : 0.0;
  for (double l : logits) den += std::exp(l - mx);
  for (size_t k = 0; k < keys.size(); ++k) {
    const double p = std::exp(logits[k] - mx) / den;
    for (size_t i = 0; i < out.size(); ++i) out[i] += p * (*vals[k])[i];
  }
  return out;
}

// One compressed entry: its first-token position, key and value (value may equal key).
struct Entry {
  int64_t start = 0;  // absolute position of the entry's first token (RoPE position)
  int64_t last = 0;   // absolute position of its last token (visibility)
  Vec key, val;
};

// ---------------------------------------------------------------------------------------------
// full / window / chunked

// Chunked compressor, one branch ("ck" or "cv"), one KV head g, one entry starting at s = o + j*S:
// returns sum_i alpha_i (.) C_i x_{s+i} before any norm or RoPE. Offsets whose token is absent (the
// partial block of a staggered grid: s + i < pos0) take no part: the softmax runs over the others.
Vec chunk_pool(const AttnConfig& c, const RefParams& P, const std::string& branch, int g, int64_t s,
               const std::vector<double>& x, int64_t pos0) {
  const int W = c.W, D = c.head_dim, d = c.d_model;
  const double absent = -std::numeric_limits<double>::infinity();
  std::vector<Vec> payload(W, Vec(D, 0.0)), logits(W, Vec(D, 0.0));
  for (int i = 0; i < W; ++i) {
    const int64_t t = s + i - pos0;  // index of the token at offset i inside this sequence
    if (t < 0) {
      std::fill(logits[i].begin(), logits[i].end(), absent);
      continue;
    }
    const double* xt = &x[t * d];
    const RefTensor& C = param(P, branch + "_payload");
    payload[i] = matvec(C, c.per_offset_payload ? (int64_t(g) * W + i) * D : int64_t(g) * D, D, xt);
    if (c.gate == GateKind::Scalar) {
      double s = matvec(param(P, branch + "_gate_w"), int64_t(g) * W + i, 1, xt)[0];
      if (c.gate_bias) s += param(P, branch + "_gate_b").data[g * W + i];
      std::fill(logits[i].begin(), logits[i].end(), s);
    } else if (c.gate == GateKind::Vector) {
      logits[i] = matvec(param(P, branch + "_gate_w"), (int64_t(g) * W + i) * D, D, xt);
      if (c.gate_bias)
        for (int ch = 0; ch < D; ++ch)
          logits[i][ch] += param(P, branch + "_gate_b").data[(g * W + i) * D + ch];
    }
  }
  Vec pooled(D, 0.0);
  for (int ch = 0; ch < D; ++ch) {
    // softmax over the W offsets for this channel (uniform: all logits equal -> 1/W)
    double mx = -std::numeric_limits<double>::infinity();
    for (int i = 0; i < W; ++i) mx = std::max(mx, logits[i][ch]);
    double den = 0.0;
    for (int i = 0; i < W; ++i) den += std::exp(logits[i][ch] - mx);
    for (int i = 0; i < W; ++i)
      if (logits[i][ch] != absent) pooled[ch] += std::exp(logits[i][ch] - mx) / den * payload[i][ch];
  }
  return pooled;
}

std::vector<double> reference_mha(const AttnConfig& c, const RefParams& P, const std::vector<double>& x,
                                  int T, int64_t pos0, RefTrace* trace) {
  const int d = c.d_model, H = c.n_heads, Hkv = c.n_kv_heads, D = c.head_dim, G = H / Hkv;
  const int rd = attn_rope_dims(c);
  const RefTensor* qn = c.qk_norm ? &param(P, "q_norm") : nullptr;
  const RefTensor* kn = c.qk_norm ? &param(P, "k_norm") : nullptr;

  // per-token projections: q[t][h], k[t][g], v[t][g], each D wide; RoPE at p = pos0 + t
  std::vector<std::vector<Vec>> q(T, std::vector<Vec>(H)), k(T, std::vector<Vec>(Hkv)),
      v(T, std::vector<Vec>(Hkv));
  for (int t = 0; t < T; ++t) {
    const double* xt = &x[int64_t(t) * d];
    const double p = double(pos0 + t);
    for (int h = 0; h < H; ++h) {
      q[t][h] = matvec(param(P, "wq"), int64_t(h) * D, D, xt);
      if (qn) rmsnorm(q[t][h], qn, c.norm_eps);
      rope(q[t][h], attn_rope_inv_freq(c, rd), p);
    }
    for (int g = 0; g < Hkv; ++g) {
      k[t][g] = matvec(param(P, "wk"), int64_t(g) * D, D, xt);
      if (kn) rmsnorm(k[t][g], kn, c.norm_eps);
      rope(k[t][g], attn_rope_inv_freq(c, rd), p);
      v[t][g] = matvec(param(P, "wv"), int64_t(g) * D, D, xt);
    }
  }

  // compressed entries per KV head: entry j covers [o + jS, o + jS + W); it exists iff o + jS >= pos0
  // (or it is the partial block [0, o) of a staggered grid at pos0 = 0) and it is complete
  std::vector<std::vector<Entry>> entries(Hkv);
  if (c.kind == AttnKind::Chunked) {
    const int64_t first = (pos0 == 0 && c.grid_offset > 0) ? -1 : 0;
    for (int64_t j = first; c.grid_offset + j * c.S + c.W - 1 <= pos0 + T - 1; ++j) {
      const int64_t s = c.grid_offset + j * c.S;
      if (s < pos0 && j != -1) continue;  // would need tokens before the sequence
      for (int g = 0; g < Hkv; ++g) {
        Entry e;
        e.start = std::max<int64_t>(s, 0);  // its first token: RoPE position
        e.last = s + c.W - 1;
        e.key = chunk_pool(c, P, "ck", g, s, x, pos0);
        if (kn) rmsnorm(e.key, kn, c.norm_eps);
        rope(e.key, attn_rope_inv_freq(c, attn_comp_rope_dims(c)), double(e.start));
        e.val = c.tied_kv ? e.key : chunk_pool(c, P, "cv", g, s, x, pos0);
        entries[g].push_back(e);
      }
    }
  }

  const double scale = 1.0 / std::sqrt(double(D));
  const bool has_sink = c.sink;
  std::vector<double> out(int64_t(T) * d, 0.0);
  if (trace) trace_init(*trace, T, H);
  for (int t = 0; t < T; ++t) {
    const int64_t p = pos0 + t;
    Vec concat;
    for (int h = 0; h < H; ++h) {
      const int g = h / G;
      std::vector<const Vec*> keys, vals;
      std::vector<int64_t> raw_pos, entry_pos;
      // compressed entries visible to p: the entry's last token is <= p
      int64_t cover_end = pos0 - 1;  // last token covered by a visible entry
      for (const Entry& e : entries[g]) {
        if (e.last > p) continue;
        keys.push_back(&e.key);
        vals.push_back(&e.val);
        entry_pos.push_back(e.start);
        cover_end = std::max(cover_end, e.last);
      }
      // raw tokens: all earlier (full), the last w (window / chunked), or the uncompressed tail
      int64_t first_raw = pos0;
      if (c.kind == AttnKind::Window || (c.kind == AttnKind::Chunked && !c.uncompressed_tail))
        first_raw = std::max<int64_t>(pos0, p - c.window + 1);
      if (c.kind == AttnKind::Chunked && c.uncompressed_tail) first_raw = cover_end + 1;
      for (int64_t pr = first_raw; pr <= p; ++pr) {
        keys.push_back(&k[pr - pos0][g]);
        vals.push_back(&v[pr - pos0][g]);
        raw_pos.push_back(pr);
      }
      double sink = has_sink ? param(P, "sink").data[h] : 0.0;
      Vec o = attend(q[t][h], keys, vals, scale, has_sink, sink);
      concat.insert(concat.end(), o.begin(), o.end());
      if (trace) {
        trace->entries[t][h] = entry_pos;
        trace->raw[t][h] = raw_pos;
      }
    }
    Vec y = matvec(param(P, "wo"), 0, d, concat.data());
    std::copy(y.begin(), y.end(), out.begin() + int64_t(t) * d);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// DeepSeek family

// The V4 Compressor (prefix "comp_" or "idx_comp_"), width = output dims per entry.
// Per token p: a_p = Wkv x_p, z_p = Wgate x_p + ape[p mod m]. Entry j pools, per channel, block j
// through the C half (the second `width` dims when overlapping) and, when overlapping, block j-1
// through the P half (the first `width` dims); then RMSNorm and RoPE at j*m.
std::vector<Entry> ds_compress(const AttnConfig& c, const RefParams& P, const std::string& pre, int width,
                               int rope_dims, const std::vector<double>& x, int T, int64_t pos0) {
  const int d = c.d_model, m = c.ratio, kappa = c.overlap ? 2 : 1;
  std::vector<Vec> a(T), z(T);
  for (int t = 0; t < T; ++t) {
    const double* xt = &x[int64_t(t) * d];
    a[t] = matvec(param(P, pre + "wkv"), 0, int64_t(kappa) * width, xt);
    z[t] = matvec(param(P, pre + "wgate"), 0, int64_t(kappa) * width, xt);
    if (c.offset_bias) {
      const RefTensor& ape = param(P, pre + "ape");
      const int64_t i = (pos0 + t) % m;
      for (int ch = 0; ch < kappa * width; ++ch) z[t][ch] += ape.data[i * kappa * width + ch];
    }
  }
  const int cur_half = c.overlap ? width : 0;  // offset of the C half inside a_p / z_p
  std::vector<Entry> entries;
  for (int64_t j = (pos0 + m - 1) / m; (j + 1) * m - 1 <= pos0 + T - 1; ++j) {
    Entry e;
    e.start = j * m;
    e.last = (j + 1) * m - 1;
    e.key.assign(width, 0.0);
    for (int ch = 0; ch < width; ++ch) {
      std::vector<double> logit, feat;
      for (int i = 0; i < m; ++i) {  // current block, C half
        const int64_t t = j * m + i - pos0;
        logit.push_back(z[t][cur_half + ch]);
        feat.push_back(a[t][cur_half + ch]);
      }
      if (c.overlap) {
        for (int i = 0; i < m; ++i) {  // previous block, P half; tokens before the sequence are absent
          const int64_t t = (j - 1) * m + i - pos0;
          if (t < 0) continue;
          logit.push_back(z[t][ch]);
          feat.push_back(a[t][ch]);
        }
      }
      const double mx = *std::max_element(logit.begin(), logit.end());
      double den = 0.0;
      for (double l : logit) den += std::exp(l - mx);
      for (size_t n = 0; n < logit.size(); ++n) e.key[ch] += std::exp(logit[n] - mx) / den * feat[n];
    }
    rmsnorm(e.key, &param(P, pre + "norm"), c.norm_eps);
    rope(e.key, attn_rope_inv_freq(c, rope_dims), double(e.start));
    e.val = e.key;  // K = V
    entries.push_back(e);
  }
  return entries;
}

// The output of one query position from its heads' outputs concat [H*D]: wo, or V4's grouped
// low-rank output: group g = heads g*H/G .. (g+1)*H/G - 1 (entries g*H*D/G .., contiguous) maps
// through rows g*R .. (g+1)*R - 1 of wo_a to R dims; wo_b maps the G*R concatenation to d.
Vec ds_output(const AttnConfig& c, const RefParams& P, const Vec& concat) {
  if (c.o_groups == 0) return matvec(param(P, "wo"), 0, c.d_model, concat.data());
  const int G = c.o_groups, R = c.o_rank, HDg = c.n_heads * c.head_dim / G;
  Vec r;
  for (int g = 0; g < G; ++g) {
    Vec rg = matvec(param(P, "wo_a"), int64_t(g) * R, R, &concat[int64_t(g) * HDg]);
    r.insert(r.end(), rg.begin(), rg.end());
  }
  return matvec(param(P, "wo_b"), 0, c.d_model, r.data());
}

std::vector<double> reference_ds(const AttnConfig& c, const RefParams& P, const std::vector<double>& x, int T,
                                 int64_t pos0, RefTrace* trace) {
  const int d = c.d_model, H = c.n_heads, D = c.head_dim, rd = attn_rope_dims(c);
  const int HI = c.index_heads, DI = c.index_dim;
  const bool indexed = c.index_topk > 0;

  // per token: query heads, the K = V latent, and the indexer's query and head weights
  std::vector<std::vector<Vec>> q(T, std::vector<Vec>(H)), qi(T, std::vector<Vec>(indexed ? HI : 0));
  std::vector<Vec> lat(T), wi(T);
  for (int t = 0; t < T; ++t) {
    const double* xt = &x[int64_t(t) * d];
    const double p = double(pos0 + t);
    Vec qa = matvec(param(P, "wq_a"), 0, c.q_rank, xt);
    rmsnorm(qa, &param(P, "q_a_norm"), c.norm_eps);
    for (int h = 0; h < H; ++h) {
      q[t][h] = matvec(param(P, "wq_b"), int64_t(h) * D, D, qa.data());
      if (c.q_head_norm) rmsnorm(q[t][h], nullptr, c.norm_eps);
      rope(q[t][h], attn_rope_inv_freq(c, rd), p);
    }
    lat[t] = matvec(param(P, "wkv"), 0, D, xt);
    rmsnorm(lat[t], &param(P, "kv_norm"), c.norm_eps);
    rope(lat[t], attn_rope_inv_freq(c, rd), p);
    if (indexed) {
      for (int h = 0; h < HI; ++h) {
        qi[t][h] = matvec(param(P, "idx_wq_b"), int64_t(h) * DI, DI, qa.data());
        rope(qi[t][h], attn_rope_inv_freq(c, attn_index_rope_dims(c)), p);
      }
      wi[t] = matvec(param(P, "idx_ww"), 0, HI, xt);
      for (double& w : wi[t]) w *= 1.0 / std::sqrt(double(DI)) / std::sqrt(double(HI));
    }
  }

  std::vector<Entry> entries;  // a window-only layer (DsWindow) compresses nothing
  if (c.kind != AttnKind::DsWindow) entries = ds_compress(c, P, "comp_", D, rd, x, T, pos0);
  std::vector<Entry> index_keys;
  if (indexed) index_keys = ds_compress(c, P, "idx_comp_", DI, attn_index_rope_dims(c), x, T, pos0);

  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<double> out(int64_t(T) * d, 0.0);
  if (trace) trace_init(*trace, T, H);
  for (int t = 0; t < T; ++t) {
    const int64_t p = pos0 + t;
    // visible entries: j < floor((p+1)/m), i.e. last token <= p
    std::vector<size_t> visible;
    for (size_t n = 0; n < entries.size(); ++n)
      if (entries[n].last <= p) visible.push_back(n);
    // indexer: I(t, j) = sum_h w_h ReLU(qI_h . kI_j); keep the top min(k, visible) (ties: earlier entry)
    std::vector<size_t> chosen = visible;
    if (indexed && int(visible.size()) > c.index_topk) {
      std::vector<double> score(entries.size(), 0.0);
      for (size_t n : visible)
        for (int h = 0; h < HI; ++h) score[n] += wi[t][h] * std::max(0.0, dot(qi[t][h], index_keys[n].key));
      std::stable_sort(chosen.begin(), chosen.end(), [&](size_t a, size_t b) { return score[a] > score[b]; });
      chosen.resize(c.index_topk);
      std::sort(chosen.begin(), chosen.end());
    }
    Vec concat;
    for (int h = 0; h < H; ++h) {
      std::vector<const Vec*> keys, vals;
      std::vector<int64_t> raw_pos, entry_pos;
      for (size_t n : chosen) {
        keys.push_back(&entries[n].key);
        vals.push_back(&entries[n].val);
        entry_pos.push_back(entries[n].start);
      }
      for (int64_t pr = std::max<int64_t>(pos0, p - c.window + 1); pr <= p; ++pr) {
        keys.push_back(&lat[pr - pos0]);
        vals.push_back(&lat[pr - pos0]);
        raw_pos.push_back(pr);
      }
      const double sink = c.sink ? param(P, "sink").data[h] : 0.0;
      Vec o = attend(q[t][h], keys, vals, scale, c.sink, sink);
      rope(o, attn_rope_inv_freq(c, rd),
           -double(p));  // de-rotate the output's rotary dims at the query position
      concat.insert(concat.end(), o.begin(), o.end());
      if (trace) {
        trace->entries[t][h] = entry_pos;
        trace->raw[t][h] = raw_pos;
      }
    }
    Vec y = ds_output(c, P, concat);
    std::copy(y.begin(), y.end(), out.begin() + int64_t(t) * d);
  }
  return out;
}

}  // namespace

std::vector<double> reference_attention(const AttnConfig& cfg, const RefParams& params,
                                        const std::vector<double>& x, int T, int64_t pos0, RefTrace* trace) {
  PS_ASSERT(int64_t(x.size()) == int64_t(T) * cfg.d_model, "reference: x must be [T, d]");
  PS_ASSERT(pos0 >= 0, "reference: pos0 must be >= 0");
  if (attn_is_ds(cfg)) return reference_ds(cfg, params, x, T, pos0, trace);
  return reference_mha(cfg, params, x, T, pos0, trace);
}

}  // namespace phasescope
