// idealized.cpp — see idealized.h. Forward and backward of the §1.7 model, one context at a time.
#include "theory/idealized.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/check.h"
#include "theory/rng.h"

namespace phasescope {

const char* theory_gate_name(TheoryGate gate) {
  switch (gate) {
    case TheoryGate::LogLinear:
      return "loglinear";
    case TheoryGate::Static:
      return "static";
  }
  return "?";
}

TheoryGate theory_gate_parse(const std::string& name) {
  if (name == "loglinear") return TheoryGate::LogLinear;
  if (name == "static") return TheoryGate::Static;
  fail("theory --gates", "unknown gate kind '" + name + "'", "use loglinear or static");
}

void theory_validate(const TheoryConfig& c) {
  auto need = [](bool ok, const std::string& field, const std::string& what, const std::string& fix) {
    if (!ok) fail("theory --" + field, what, fix);
  };
  need(c.S >= 2, "S", "S = " + std::to_string(c.S) + " leaves no non-final offset", "use S >= 2");
  need(c.L >= 1, "L", "L = " + std::to_string(c.L) + " chunks", "use L >= 1");
  need(c.heads >= 1 && c.heads < c.S, "heads",
       "m = " + std::to_string(c.heads) + " heads with S = " + std::to_string(c.S) +
           " (the model needs 1 <= m < S)",
       "use between 1 and " + std::to_string(c.S - 1) + " heads");
  need(c.L * c.S <= c.N, "N",
       "N = " + std::to_string(c.N) + " embeddings cannot fill L*S = " + std::to_string(c.L * c.S) +
           " distinct tokens",
       "raise --N to at least L*S or lower --L / --S");
  need(c.kappa >= 0.0 && c.kappa < 1.0, "kappa", "kappa must lie in [0, 1)", "use e.g. --kappa 0.5");
  need(c.epsilon >= 0.0 && c.epsilon < 1.0, "epsilon", "epsilon must lie in [0, 1)",
       "use e.g. --epsilon 0.05");
  need(c.gamma > 0.0, "gamma", "gamma must be > 0", "use e.g. --gamma 8");
  need(c.beta > 0.0, "beta", "beta must be > 0", "use e.g. --beta 8");
  need(c.rho >= 0.0, "rho", "rho must be >= 0", "use e.g. --rho 0.1");
  need(c.lr > 0.0, "lr", "lr must be > 0", "use e.g. --lr 1");
  need(c.steps >= 0, "steps", "steps must be >= 0", "use e.g. --steps 3000");
  need(c.batch >= 1, "batch", "batch must be >= 1", "use e.g. --batch 64");
  need(c.eval_contexts >= 1, "eval-contexts", "eval_contexts must be >= 1", "use e.g. 2048");
  need(c.onehot > 0.5 && c.onehot <= 1.0, "onehot", "the one-hot threshold must lie in (0.5, 1]", "use 0.9");
  need(c.stop_mass >= 0.0 && c.stop_mass <= 1.0, "stop-mass", "stop_mass must lie in [0, 1]", "use 0.99");
  need(c.record_every >= 0, "record-every", "record_every must be >= 0", "use e.g. 25");
  need(c.coverage >= 0.0, "coverage", "the coverage weight must be >= 0", "use 0 (off) or e.g. 0.5");
}

bool theory_loss_is_exact(const TheoryConfig& cfg) {
  return cfg.gate == TheoryGate::Static && cfg.epsilon == 0.0;
}

// ----------------------------------------------------------------------------------------------
// embeddings

TheoryEmbeddings theory_make_embeddings(int N, double kappa, double epsilon, uint64_t seed) {
  const int P = kTheoryPerturbDims;
  TheoryEmbeddings e;
  e.N = N;
  e.D = 1 + N + P;
  e.X.assign(static_cast<size_t>(N) * e.D, 0.0);
  Rng rng(seed);
  std::vector<double> dir(P);
  for (int i = 0; i < N; ++i) {
    double* x = &e.X[static_cast<size_t>(i) * e.D];
    x[0] = std::sqrt(kappa);  // shared direction u0
    x[1 + i] = 1.0;           // own direction e_i
    // eta_i: random direction, random length in [0, sqrt(epsilon))
    double norm2 = 0.0;
    for (int p = 0; p < P; ++p) {
      dir[p] = rng.normal();
      norm2 += dir[p] * dir[p];
    }
    const double len = std::sqrt(epsilon) * rng.uniform() / std::sqrt(norm2);
    for (int p = 0; p < P; ++p) x[1 + N + p] = len * dir[p];
  }
  e.nz_row.push_back(0);
  for (size_t i = 0; i < static_cast<size_t>(N); ++i) {
    for (int k = 0; k < e.D; ++k)
      if (e.X[i * e.D + k] != 0.0) {
        e.nz_col.push_back(k);
        e.nz_val.push_back(e.X[i * e.D + k]);
      }
    e.nz_row.push_back(static_cast<int>(e.nz_col.size()));
  }
  e.G.assign(static_cast<size_t>(N) * N, 0.0);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0.0;
      for (int k = 0; k < e.D; ++k)
        s += e.X[static_cast<size_t>(i) * e.D + k] * e.X[static_cast<size_t>(j) * e.D + k];
      e.G[static_cast<size_t>(i) * N + j] = s;
      e.max_deviation = std::max(e.max_deviation, std::fabs(s - kappa - (i == j ? 1.0 : 0.0)));
    }
  PS_ASSERT(e.max_deviation <= epsilon + 1e-12, "near-equiangular bound violated");
  return e;
}

// ----------------------------------------------------------------------------------------------
// contexts

TheoryContextSampler::TheoryContextSampler(int N, int S, int L, uint64_t seed)
    : N_(N), S_(S), L_(L), perm_(N), seed_(seed) {
  for (int i = 0; i < N; ++i) perm_[i] = i;
}

std::vector<TheoryContext> TheoryContextSampler::draw(int count) {
  Rng rng(theory_stream(seed_, drawn_++));
  std::vector<TheoryContext> out(count);
  const int T = L_ * S_;
  for (auto& c : out) {
    // partial Fisher-Yates: the first T entries of perm_ become a uniform ordered draw without repeats
    for (int i = 0; i < T; ++i) std::swap(perm_[i], perm_[i + rng.below(N_ - i)]);
    c.tok.assign(perm_.begin(), perm_.begin() + T);
    c.query_chunk = rng.below(L_);
    c.query_offset = next_offset_;
    next_offset_ = (next_offset_ + 1) % (S_ - 1);
  }
  return out;
}

std::vector<TheoryContext> theory_canonical_contexts(const TheoryConfig& cfg) {
  std::vector<TheoryContext> out(cfg.S - 1);
  for (int r = 0; r < cfg.S - 1; ++r) {
    out[r].tok.resize(cfg.L * cfg.S);
    for (int t = 0; t < cfg.L * cfg.S; ++t) out[r].tok[t] = t;
    out[r].query_chunk = 0;
    out[r].query_offset = r;
  }
  return out;
}

// ----------------------------------------------------------------------------------------------
// gates

TheoryGates theory_gates_zero(TheoryGate kind, int M, int S, int D) {
  TheoryGates g;
  g.kind = kind;
  g.M = M;
  g.S = S;
  g.K = kind == TheoryGate::LogLinear ? D : 1;
  g.key.assign(static_cast<size_t>(M) * S * g.K, 0.0);
  g.value.assign(static_cast<size_t>(M) * S * g.K, 0.0);
  return g;
}

// Fill v (n numbers) uniformly in the ball of radius rho: Gaussian direction, radius rho * U^(1/n).
static void fill_ball(double* v, size_t n, double rho, Rng& rng) {
  double norm2 = 0.0;
  for (size_t i = 0; i < n; ++i) {
    v[i] = rng.normal();
    norm2 += v[i] * v[i];
  }
  const double radius = rho * std::pow(rng.uniform(), 1.0 / static_cast<double>(n));
  const double scale = norm2 > 0.0 ? radius / std::sqrt(norm2) : 0.0;
  for (size_t i = 0; i < n; ++i) v[i] *= scale;
}

TheoryGates theory_gates_init(const TheoryConfig& cfg, int D, uint64_t seed) {
  TheoryGates g = theory_gates_zero(cfg.gate, cfg.heads, cfg.S, D);
  Rng rng(seed);
  const size_t block = static_cast<size_t>(g.S) * g.K;
  for (int h = 0; h < g.M; ++h) {
    fill_ball(&g.key[h * block], block, cfg.rho, rng);
    fill_ball(&g.value[h * block], block, cfg.rho, rng);
  }
  return g;
}

// Gate logits for every (head, offset, token): lam[(h*S + r)*N + i] = <c_{h,r}, x_i> or theta_{h,r}.
static void gate_logits(const TheoryGates& g, const TheoryEmbeddings& emb, const std::vector<double>& params,
                        std::vector<double>& lam) {
  const int N = emb.N;
  lam.assign(static_cast<size_t>(g.M) * g.S * N, 0.0);
  for (int hr = 0; hr < g.M * g.S; ++hr) {
    const double* c = &params[static_cast<size_t>(hr) * g.K];
    double* out = &lam[static_cast<size_t>(hr) * N];
    if (g.kind == TheoryGate::Static) {
      for (int i = 0; i < N; ++i) out[i] = c[0];
      continue;
    }
    for (int i = 0; i < N; ++i) {
      double s = 0.0;  // <c, x_i> over the nonzeros of x_i
      for (int k = emb.nz_row[i]; k < emb.nz_row[i + 1]; ++k) s += c[emb.nz_col[k]] * emb.nz_val[k];
      out[i] = s;
    }
  }
}

// Parameter gradient from the gradient of the gate logits (the transpose of gate_logits).
static void gate_logits_backward(const TheoryGates& g, const TheoryEmbeddings& emb,
                                 const std::vector<double>& dlam, std::vector<double>& dparams) {
  const int N = emb.N;
  dparams.assign(static_cast<size_t>(g.M) * g.S * g.K, 0.0);
  for (int hr = 0; hr < g.M * g.S; ++hr) {
    const double* d = &dlam[static_cast<size_t>(hr) * N];
    double* out = &dparams[static_cast<size_t>(hr) * g.K];
    for (int i = 0; i < N; ++i) {
      if (d[i] == 0.0) continue;  // tokens absent from the batch
      if (g.kind == TheoryGate::Static) {
        out[0] += d[i];
        continue;
      }
      for (int k = emb.nz_row[i]; k < emb.nz_row[i + 1]; ++k) out[emb.nz_col[k]] += d[i] * emb.nz_val[k];
    }
  }
}

// In-place softmax of v[0..n).
static void softmax_inplace(double* v, int n) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int i = 0; i < n; ++i) mx = std::max(mx, v[i]);
  double sum = 0.0;
  for (int i = 0; i < n; ++i) {
    v[i] = std::exp(v[i] - mx);
    sum += v[i];
  }
  for (int i = 0; i < n; ++i) v[i] /= sum;
}

// ----------------------------------------------------------------------------------------------
// loss

double theory_context_loss(const TheoryConfig& cfg, const TheoryEmbeddings& emb, const TheoryContext& ctx,
                           const double* pk, const double* pv, double* dpk, double* dpv) {
  const int N = emb.N, S = cfg.S, L = cfg.L, M = cfg.heads;
  const int q = ctx.tok[ctx.query_chunk * S + ctx.query_offset];           // the repeated token
  const int target = ctx.tok[ctx.query_chunk * S + ctx.query_offset + 1];  // its successor
  const double* Gq = &emb.G[static_cast<size_t>(q) * N];                   // (N) q . x_j

  // scratch, reused across calls on this thread
  thread_local std::vector<double> a, w, o, z, dw, dout, da;
  a.assign(static_cast<size_t>(M) * L, 0.0);  // (M, L) attention of head h on chunk l
  w.assign(static_cast<size_t>(L) * S, 0.0);  // (L, S) summed weight of token (l, r) in the output
  o.assign(emb.D, 0.0);                       // (D) summed head output
  z.assign(N, 0.0);                           // (N) logits

  // attention: a_{h,l} = softmax_l( gamma * q . k_{h,l} ), k_{h,l} = sum_r pk(r) x_{l,r}
  for (int h = 0; h < M; ++h) {
    double* ah = &a[static_cast<size_t>(h) * L];
    for (int l = 0; l < L; ++l) {
      const double* p = &pk[(static_cast<size_t>(h) * L + l) * S];
      double s = 0.0;
      for (int r = 0; r < S; ++r) s += p[r] * Gq[ctx.tok[l * S + r]];
      ah[l] = cfg.gamma * s;
    }
    softmax_inplace(ah, L);
  }

  // output o = sum_h sum_l a_{h,l} v_{h,l} = sum_{l,r} w_{l,r} x_{l,r}, v_{h,l} = sum_r pv(r) x_{l,r}
  for (int h = 0; h < M; ++h)
    for (int l = 0; l < L; ++l) {
      const double* p = &pv[(static_cast<size_t>(h) * L + l) * S];
      for (int r = 0; r < S; ++r) w[l * S + r] += a[static_cast<size_t>(h) * L + l] * p[r];
    }
  for (int t = 0; t < L * S; ++t) {
    const int i = ctx.tok[t];
    for (int k = emb.nz_row[i]; k < emb.nz_row[i + 1]; ++k) o[emb.nz_col[k]] += w[t] * emb.nz_val[k];
  }

  // logits z_j = beta * x_j . o, loss = logsumexp(z) - z_target
  double mx = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < N; ++j) {
    double s = 0.0;
    for (int k = emb.nz_row[j]; k < emb.nz_row[j + 1]; ++k) s += emb.nz_val[k] * o[emb.nz_col[k]];
    z[j] = cfg.beta * s;
    mx = std::max(mx, z[j]);
  }
  double sum = 0.0;
  for (int j = 0; j < N; ++j) sum += std::exp(z[j] - mx);
  const double loss = mx + std::log(sum) - z[target];
  if (dpk == nullptr && dpv == nullptr) return loss;

  // dz_j = softmax(z)_j - 1{j = target} (in z); dout = beta * X^T dz (D); dw_{l,r} = x_{l,r} . dout
  for (int j = 0; j < N; ++j) z[j] = std::exp(z[j] - mx) / sum;
  z[target] -= 1.0;
  dout.assign(emb.D, 0.0);
  for (int j = 0; j < N; ++j)
    for (int k = emb.nz_row[j]; k < emb.nz_row[j + 1]; ++k)
      dout[emb.nz_col[k]] += cfg.beta * z[j] * emb.nz_val[k];
  dw.assign(static_cast<size_t>(L) * S, 0.0);
  for (int t = 0; t < L * S; ++t) {
    const int i = ctx.tok[t];
    double s = 0.0;
    for (int k = emb.nz_row[i]; k < emb.nz_row[i + 1]; ++k) s += emb.nz_val[k] * dout[emb.nz_col[k]];
    dw[t] = s;
  }

  // dpv = a * dw; da_{h,l} = sum_r pv dw; through the chunk softmax to ds; dpk = gamma * ds * G(q, tok)
  da.assign(static_cast<size_t>(L), 0.0);
  for (int h = 0; h < M; ++h) {
    const double* ah = &a[static_cast<size_t>(h) * L];
    double mean_da = 0.0;
    for (int l = 0; l < L; ++l) {
      const size_t base = (static_cast<size_t>(h) * L + l) * S;
      double s = 0.0;
      for (int r = 0; r < S; ++r) {
        if (dpv) dpv[base + r] = ah[l] * dw[l * S + r];
        s += pv[base + r] * dw[l * S + r];
      }
      da[l] = s;
      mean_da += ah[l] * s;
    }
    for (int l = 0; l < L; ++l) {
      const double ds = ah[l] * (da[l] - mean_da);
      const size_t base = (static_cast<size_t>(h) * L + l) * S;
      if (dpk)
        for (int r = 0; r < S; ++r) dpk[base + r] = cfg.gamma * ds * Gq[ctx.tok[l * S + r]];
    }
  }
  return loss;
}

double theory_batch_loss(const TheoryConfig& cfg, const TheoryEmbeddings& emb, const TheoryGates& gates,
                         const std::vector<TheoryContext>& contexts, TheoryGates* grad,
                         TheoryGateStats* stats, std::vector<double>* per_context) {
  const int N = emb.N, S = cfg.S, L = cfg.L, M = cfg.heads;
  PS_ASSERT(gates.M == M && gates.S == S, "gate shapes do not match the config");
  PS_ASSERT(!contexts.empty(), "empty batch");
  const size_t MLS = static_cast<size_t>(M) * L * S;

  // gate logits for every token, once per batch: (M, S, N) per branch
  std::vector<double> lam_k, lam_v;
  gate_logits(gates, emb, gates.key, lam_k);
  gate_logits(gates, emb, gates.value, lam_v);
  std::vector<double> dlam_k, dlam_v;
  if (grad) {
    dlam_k.assign(lam_k.size(), 0.0);
    dlam_v.assign(lam_v.size(), 0.0);
  }
  if (stats) {
    stats->key_mean.assign(static_cast<size_t>(M) * S, 0.0);
    stats->value_mean.assign(static_cast<size_t>(M) * S, 0.0);
    stats->key_min.assign(static_cast<size_t>(M) * S, 1.0);
    stats->value_min.assign(static_cast<size_t>(M) * S, 1.0);
  }
  if (per_context) per_context->assign(contexts.size(), 0.0);

  std::vector<double> pk(MLS), pv(MLS), dpk(MLS), dpv(MLS);  // (M, L, S)
  const double inv_b = 1.0 / static_cast<double>(contexts.size());
  // per-chunk distributions p_{h,l}(r) = softmax_r lam[h, r, tok_{l,r}] of one context into pk, pv
  auto distributions = [&](const TheoryContext& ctx) {
    for (int h = 0; h < M; ++h)
      for (int l = 0; l < L; ++l) {
        const size_t base = (static_cast<size_t>(h) * L + l) * S;
        for (int r = 0; r < S; ++r) {
          const size_t li = (static_cast<size_t>(h) * S + r) * N + ctx.tok[l * S + r];
          pk[base + r] = lam_k[li];
          pv[base + r] = lam_v[li];
        }
        softmax_inplace(&pk[base], S);
        softmax_inplace(&pv[base], S);
      }
  };

  // coverage term: pbar (M, S) per branch over the batch's contexts and chunks, a first pass
  std::vector<double> bar_k, bar_v;
  double total = 0.0;
  if (cfg.coverage > 0) {
    bar_k.assign(static_cast<size_t>(M) * S, 0.0);
    bar_v.assign(static_cast<size_t>(M) * S, 0.0);
    for (const TheoryContext& ctx : contexts) {
      distributions(ctx);
      for (int h = 0; h < M; ++h)
        for (int l = 0; l < L; ++l)
          for (int r = 0; r < S; ++r) {
            bar_k[size_t(h) * S + r] += pk[(size_t(h) * L + l) * S + r] * inv_b / L;
            bar_v[size_t(h) * S + r] += pv[(size_t(h) * L + l) * S + r] * inv_b / L;
          }
    }
    double overlap = 0.0;
    for (int h = 0; h < M; ++h)
      for (int h2 = h + 1; h2 < M; ++h2)
        for (int r = 0; r < S; ++r)
          overlap += bar_k[size_t(h) * S + r] * bar_k[size_t(h2) * S + r] +
                     bar_v[size_t(h) * S + r] * bar_v[size_t(h2) * S + r];
    total += cfg.coverage * overlap * static_cast<double>(contexts.size());  // total is divided by B below
  }

  for (size_t b = 0; b < contexts.size(); ++b) {
    const TheoryContext& ctx = contexts[b];
    distributions(ctx);

    const double loss = theory_context_loss(cfg, emb, ctx, pk.data(), pv.data(), grad ? dpk.data() : nullptr,
                                            grad ? dpv.data() : nullptr);
    total += loss;
    if (per_context) (*per_context)[b] = loss;
    // d(coverage term)/dp_{b,h,l}(r) = coverage x sum_{h' != h} pbar_{h'}(r) / (B L); the 1/B comes below
    if (grad && cfg.coverage > 0)
      for (int h = 0; h < M; ++h)
        for (int r = 0; r < S; ++r) {
          double others_k = 0.0, others_v = 0.0;
          for (int h2 = 0; h2 < M; ++h2)
            if (h2 != h) {
              others_k += bar_k[size_t(h2) * S + r];
              others_v += bar_v[size_t(h2) * S + r];
            }
          for (int l = 0; l < L; ++l) {
            dpk[(size_t(h) * L + l) * S + r] += cfg.coverage * others_k / L;
            dpv[(size_t(h) * L + l) * S + r] += cfg.coverage * others_v / L;
          }
        }

    // through the offset softmax to the logit table: dlam = p * (dp - <p, dp>) / B
    if (grad)
      for (int h = 0; h < M; ++h)
        for (int l = 0; l < L; ++l) {
          const size_t base = (static_cast<size_t>(h) * L + l) * S;
          double gk = 0.0, gv = 0.0;
          for (int r = 0; r < S; ++r) {
            gk += pk[base + r] * dpk[base + r];
            gv += pv[base + r] * dpv[base + r];
          }
          for (int r = 0; r < S; ++r) {
            const size_t li = (static_cast<size_t>(h) * S + r) * N + ctx.tok[l * S + r];
            dlam_k[li] += pk[base + r] * (dpk[base + r] - gk) * inv_b;
            dlam_v[li] += pv[base + r] * (dpv[base + r] - gv) * inv_b;
          }
        }

    if (stats)
      for (int h = 0; h < M; ++h)
        for (int l = 0; l < L; ++l)
          for (int r = 0; r < S; ++r) {
            const size_t pi = (static_cast<size_t>(h) * L + l) * S + r, si = static_cast<size_t>(h) * S + r;
            stats->key_mean[si] += pk[pi] * inv_b / L;
            stats->value_mean[si] += pv[pi] * inv_b / L;
            stats->key_min[si] = std::min(stats->key_min[si], pk[pi]);
            stats->value_min[si] = std::min(stats->value_min[si], pv[pi]);
          }
  }

  if (grad) {
    *grad = theory_gates_zero(gates.kind, M, S, emb.D);
    gate_logits_backward(gates, emb, dlam_k, grad->key);
    gate_logits_backward(gates, emb, dlam_v, grad->value);
  }
  return total * inv_b;
}

double theory_assignment_loss(const TheoryConfig& cfg, const TheoryEmbeddings& emb, const TheoryAssignment& a,
                              const std::vector<TheoryContext>& contexts) {
  const int S = cfg.S, L = cfg.L, M = cfg.heads;
  PS_ASSERT(a.M == M && a.S == S, "assignment shape does not match the config");
  // the same distribution on every chunk: (M, L, S)
  std::vector<double> pk(static_cast<size_t>(M) * L * S), pv(pk.size());
  for (int h = 0; h < M; ++h)
    for (int l = 0; l < L; ++l)
      for (int r = 0; r < S; ++r) {
        pk[(static_cast<size_t>(h) * L + l) * S + r] = a.key[static_cast<size_t>(h) * S + r];
        pv[(static_cast<size_t>(h) * L + l) * S + r] = a.value[static_cast<size_t>(h) * S + r];
      }
  double total = 0.0;
  for (const auto& ctx : contexts)
    total += theory_context_loss(cfg, emb, ctx, pk.data(), pv.data(), nullptr, nullptr);
  return total / static_cast<double>(contexts.size());
}

}  // namespace phasescope
