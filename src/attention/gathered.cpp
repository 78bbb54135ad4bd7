// gathered.cpp — see gathered.h. Three kernels serve both products and their gradients:
//   dots(a, e, idx)       [B, T, H, K]: a[b, t, h, :] . e[b, idx[b, t, k], :]
//   combine(w, e, idx)    [B, T, H, D]: sum_k w[b, t, h, k] e[b, idx[b, t, k], :]
//   scatter(w, a, idx, N) [B, N, D]:    de[b, idx[b, t, k], :] += sum_h w[b, t, h, k] a[b, t, h, :]
// scores = dots(q, e): dq = combine(g, e), de = scatter(g, q). mix = combine(p, e): dp = dots(g, e),
// de = scatter(p, g). Rows (b, t) run in parallel; scatter runs in parallel over b only (rows of one
// sequence may pick the same entry).
#include "attention/gathered.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "attention/cpu_loops.h"
#include "core/check.h"

namespace phasescope {

namespace {

struct Dims {
  int64_t B, T, H, K, D, N;
};

Dims dims_of(const torch::Tensor& a_or_w, const torch::Tensor& e, const torch::Tensor& idx) {
  return {idx.size(0), idx.size(1), a_or_w.size(2), idx.size(2), e.size(2), e.size(1)};
}

// body(r, h, k, er) for every row r = b * T + t (rows in parallel), pick k and head h; er is the picked
// entry's row of e [D]
template <typename scalar_t, typename Body>
void for_each_pick(const Dims& s, const scalar_t* pe, const int64_t* pi, const Body& body) {
  at::parallel_for(0, s.B * s.T, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const scalar_t* eb = pe + (r / s.T) * s.N * s.D;
      for (int64_t k = 0; k < s.K; ++k) {
        const scalar_t* er = eb + pi[r * s.K + k] * s.D;
        for (int64_t h = 0; h < s.H; ++h) body(r, h, k, er);
      }
    }
  });
}

torch::Tensor dots(const torch::Tensor& a, const torch::Tensor& e, const torch::Tensor& idx) {
  const Dims s = dims_of(a, e, idx);
  auto out = torch::empty({s.B, s.T, s.H, s.K}, a.options());
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "gathered_dots", [&] {
    const scalar_t* pa = a.data_ptr<scalar_t>();
    scalar_t* po = out.data_ptr<scalar_t>();
    for_each_pick(s, e.data_ptr<scalar_t>(), idx.data_ptr<int64_t>(),
                  [&](int64_t r, int64_t h, int64_t k, const scalar_t* er) {
                    po[(r * s.H + h) * s.K + k] = dot(pa + (r * s.H + h) * s.D, er, s.D);
                  });
  });
  return out;
}

torch::Tensor combine(const torch::Tensor& w, const torch::Tensor& e, const torch::Tensor& idx) {
  const Dims s = dims_of(w, e, idx);
  auto out = torch::zeros({s.B, s.T, s.H, s.D}, w.options());
  AT_DISPATCH_FLOATING_TYPES(w.scalar_type(), "gathered_combine", [&] {
    const scalar_t* pw = w.data_ptr<scalar_t>();
    scalar_t* po = out.data_ptr<scalar_t>();
    for_each_pick(s, e.data_ptr<scalar_t>(), idx.data_ptr<int64_t>(),
                  [&](int64_t r, int64_t h, int64_t k, const scalar_t* er) {
                    const scalar_t wk = pw[(r * s.H + h) * s.K + k];
                    scalar_t* orow = po + (r * s.H + h) * s.D;
                    for (int64_t d = 0; d < s.D; ++d) orow[d] += wk * er[d];
                  });
  });
  return out;
}

torch::Tensor scatter(const torch::Tensor& w, const torch::Tensor& a, const torch::Tensor& idx, int64_t N) {
  const int64_t B = idx.size(0), T = idx.size(1), K = idx.size(2), H = w.size(2), D = a.size(3);
  auto out = torch::zeros({B, N, D}, a.options());
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "gathered_scatter", [&] {
    const scalar_t *pw = w.data_ptr<scalar_t>(), *pa = a.data_ptr<scalar_t>();
    const int64_t* pi = idx.data_ptr<int64_t>();
    scalar_t* po = out.data_ptr<scalar_t>();
    at::parallel_for(0, B, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b)
        for (int64_t t = 0; t < T; ++t) {
          const int64_t r = b * T + t;
          for (int64_t k = 0; k < K; ++k) {
            scalar_t* orow = po + (b * N + pi[r * K + k]) * D;
            for (int64_t h = 0; h < H; ++h) {
              const scalar_t wk = pw[(r * H + h) * K + k];
              if (wk == scalar_t(0)) continue;  // masked columns (unpicked slots) carry nothing
              const scalar_t* ar = pa + (r * H + h) * D;
              for (int64_t d = 0; d < D; ++d) orow[d] += wk * ar[d];
            }
          }
        }
    });
  });
  return out;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct ScoresFn : torch::autograd::Function<ScoresFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& e,
                               const torch::Tensor& idx) {
    ctx->save_for_backward({q, e, idx});
    return dots(q, e, idx);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &e = saved[1], &idx = saved[2];
    auto go = g[0].contiguous();
    return {combine(go, e, idx), scatter(go, q, idx, e.size(1)), torch::Tensor()};
  }
};

struct MixFn : torch::autograd::Function<MixFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& p, const torch::Tensor& e,
                               const torch::Tensor& idx) {
    ctx->save_for_backward({p, e, idx});
    return combine(p, e, idx);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    const auto &p = saved[0], &e = saved[1], &idx = saved[2];
    auto go = g[0].contiguous();
    return {dots(go, e, idx), scatter(p, go, idx, e.size(1)), torch::Tensor()};
  }
};

void check_shapes(const char* what, const torch::Tensor& a, const torch::Tensor& e,
                  const torch::Tensor& idx) {
  PS_ASSERT(a.dim() == 4 && e.dim() == 3 && idx.dim() == 3 && a.size(0) == idx.size(0) &&
                a.size(1) == idx.size(1) && e.size(0) == idx.size(0),
            std::string(what) + ": expects [B, T, H, X], entries [B, N, D] and picks [B, T, K]");
  PS_ASSERT(idx.scalar_type() == torch::kInt64, std::string(what) + ": picks must be int64");
}

bool fast_path(const torch::Tensor& a, const torch::Tensor& e) {
  return cpu_float_or_double(a) && cpu_float_or_double(e) && a.scalar_type() == e.scalar_type();
}

// rows of e picked by idx: [B, T, K, D]
torch::Tensor gather_rows(const torch::Tensor& e, const torch::Tensor& idx) {
  const int64_t B = idx.size(0), T = idx.size(1), K = idx.size(2), D = e.size(2);
  return e.gather(1, idx.reshape({B, T * K, 1}).expand({B, T * K, D})).view({B, T, K, D});
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The indexer's selection

torch::Tensor index_scores(const torch::Tensor& q, const torch::Tensor& w, const torch::Tensor& k) {
  torch::NoGradGuard no_grad;  // a selection score, never differentiated: the in-place steps below are safe
  const int64_t B = q.size(0), T = q.size(1), HI = q.size(2), DI = q.size(3);
  // all heads in one product: [B, T*HI, DI] x [B, DI, N], then ReLU and the heads' weighted sum in place
  auto s = torch::matmul(q.reshape({B, T * HI, DI}), k.transpose(1, 2)).view({B, T, HI, k.size(1)});
  return s.relu_().mul_(w.unsqueeze(-1)).sum(2);  // [B, T, N]
}

torch::Tensor topk_earliest_ties(const torch::Tensor& score, const torch::Tensor& vis, int64_t k) {
  const int64_t N = score.size(-1), kk = std::min<int64_t>(k, N);
  auto iopt = torch::TensorOptions().dtype(torch::kInt64).device(score.device());
  auto [top, idx] = score.topk(kk, -1, /*largest=*/true, /*sorted=*/false);  // [B, T, kk]
  auto thr = top.amin(-1, true);                                             // the k-th score, [B, T, 1]
  auto above = (score > thr) & vis;
  auto ties = (score == thr) & vis;
  auto n_above = above.sum(-1, true), n_ties = ties.sum(-1, true);
  auto out = idx.masked_fill(vis.expand_as(score).gather(-1, idx).logical_not(), -1);  // [B, T, kk]
  auto straddle = (n_above + n_ties > kk).flatten();  // rows where ties straddle the k-th place, [B*T]
  if (!straddle.any().item<bool>()) return out;       // everywhere else top-k's set is the answer
  // in those rows only, the earliest ties fill the places left
  auto rows = straddle.nonzero().squeeze(1);  // [R]
  auto pick_rows = [&](const torch::Tensor& t) { return t.reshape({-1, t.size(-1)}).index_select(0, rows); };
  auto tr = pick_rows(ties), left = pick_rows(kk - n_above);  // [R, N], [R, 1]
  auto mask = pick_rows(above) | (tr & (tr.cumsum(-1, torch::kInt32) <= left));
  auto rank = torch::where(mask, (N - torch::arange(N, iopt)).to(torch::kInt32), 0);  // picked: N - j > 0
  auto picks = std::get<1>(rank.topk(kk, -1));                                        // [R, kk]
  picks = picks.masked_fill(mask.gather(-1, picks).logical_not(), -1);
  return out.view({-1, kk}).index_copy(0, rows, picks).view_as(out);
}

torch::Tensor index_select_topk_reference(const torch::Tensor& q, const torch::Tensor& w,
                                          const torch::Tensor& k, const torch::Tensor& n_vis, int64_t topk) {
  torch::NoGradGuard no_grad;
  const int64_t T = q.size(1), N = k.size(1);
  auto iopt = torch::TensorOptions().dtype(torch::kInt64).device(q.device());
  auto vis = torch::arange(N, iopt).view({1, N}) < n_vis.to(q.device()).view({T, 1});  // [T, N]
  auto score = index_scores(q, w, k).masked_fill(vis.logical_not().unsqueeze(0),
                                                 -std::numeric_limits<double>::infinity());  // [B, T, N]
  return topk_earliest_ties(score, vis.unsqueeze(0), topk);
}

namespace {

constexpr int64_t kIndexBlock = 32;  // entries scored together, their dot products in registers
constexpr int64_t kIndexGroup = 8;   // entries per group whose maximum bounds the k-th score

// Scratch of one thread's rows.
template <typename T>
struct IndexScratch {
  std::vector<T> score, gmax;                     // [Np], [Np / kIndexGroup]
  std::vector<std::pair<T, int64_t>> candidates;  // (score, entry)
};

// One query row of index_select_topk with n > kk visible entries: q [HI, DI], w [HI], kt [DI, Np] (the
// keys transposed, zero-padded to whole blocks); the picks go to out [kk].
//  1. scores, kIndexBlock entries at a time; entries from n on get -inf;
//  2. a lower bound L on the k-th score: the kk-th largest of the groups' maxima (kk of the entries reach
//     it), or -inf when there are fewer than kk groups;
//  3. the entries scoring >= L (every entry of the answer, ties at the k-th score included, in entry
//     order), of which the kk best by (score, earlier entry).
template <typename T>
[[gnu::always_inline]] inline void index_row_impl(const T* q, const T* w, const T* kt, int64_t Np, int64_t HI,
                                                  int64_t DI, int64_t n, int64_t kk, IndexScratch<T>& s,
                                                  int64_t* out) {
  const int64_t nb = (n + kIndexBlock - 1) / kIndexBlock * kIndexBlock;
  for (int64_t j0 = 0; j0 < nb; j0 += kIndexBlock) {
    T sc[kIndexBlock] = {};
    for (int64_t h = 0; h < HI; ++h) {
      T a[kIndexBlock] = {};
      for (int64_t d = 0; d < DI; ++d) {  // a[jj] = q_h . k[j0 + jj]
        const T c = q[h * DI + d];
        const T* kd = kt + d * Np + j0;
        for (int64_t jj = 0; jj < kIndexBlock; ++jj) a[jj] += c * kd[jj];
      }
      const T wh = w[h];
      for (int64_t jj = 0; jj < kIndexBlock; ++jj) sc[jj] += wh * std::max(a[jj], T(0));
    }
    std::copy(sc, sc + kIndexBlock, s.score.begin() + j0);
  }
  const T ninf = -std::numeric_limits<T>::infinity();
  std::fill(s.score.begin() + n, s.score.begin() + nb, ninf);
  const int64_t ng = nb / kIndexGroup;
  T bound = ninf;
  if (ng >= kk) {
    for (int64_t g = 0; g < ng; ++g)
      s.gmax[size_t(g)] =
          *std::max_element(s.score.begin() + g * kIndexGroup, s.score.begin() + (g + 1) * kIndexGroup);
    std::nth_element(s.gmax.begin(), s.gmax.begin() + (kk - 1), s.gmax.begin() + ng, std::greater<T>());
    bound = s.gmax[size_t(kk - 1)];
  }
  s.candidates.clear();
  for (int64_t j = 0; j < n; ++j)
    if (s.score[size_t(j)] >= bound) s.candidates.emplace_back(s.score[size_t(j)], j);
  const auto better = [](const std::pair<T, int64_t>& a, const std::pair<T, int64_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::nth_element(s.candidates.begin(), s.candidates.begin() + (kk - 1), s.candidates.end(), better);
  for (int64_t i = 0; i < kk; ++i) out[i] = s.candidates[size_t(i)].second;
}

// compiled for AVX-512, AVX2 + FMA and the baseline; the loader picks what this CPU runs
[[gnu::target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")]] void index_row(
    const float* q, const float* w, const float* kt, int64_t Np, int64_t HI, int64_t DI, int64_t n,
    int64_t kk, IndexScratch<float>& s, int64_t* out) {
  index_row_impl(q, w, kt, Np, HI, DI, n, kk, s, out);
}
[[gnu::target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")]] void index_row(
    const double* q, const double* w, const double* kt, int64_t Np, int64_t HI, int64_t DI, int64_t n,
    int64_t kk, IndexScratch<double>& s, int64_t* out) {
  index_row_impl(q, w, kt, Np, HI, DI, n, kk, s, out);
}

}  // namespace

torch::Tensor index_select_topk(const torch::Tensor& q, const torch::Tensor& w, const torch::Tensor& k,
                                const torch::Tensor& n_vis, int64_t topk) {
  const int64_t B = q.size(0), T = q.size(1), HI = q.size(2), DI = q.size(3), N = k.size(1);
  PS_ASSERT(q.dim() == 4 && w.dim() == 3 && k.dim() == 3 && w.size(0) == B && w.size(1) == T &&
                w.size(2) == HI && k.size(0) == B && k.size(2) == DI && n_vis.numel() == T,
            "index_select_topk: expects q [B, T, HI, DI], w [B, T, HI], k [B, N, DI] and n_vis [T]");
  if (!fast_path(q, k) || w.scalar_type() != q.scalar_type() || !w.device().is_cpu())
    return index_select_topk_reference(q, w, k, n_vis, topk);
  torch::NoGradGuard no_grad;
  const int64_t kk = std::min<int64_t>(topk, N);
  auto out = torch::full({B, T, kk}, -1, torch::TensorOptions().dtype(torch::kInt64));
  if (kk == 0) return out;
  const int64_t Np = (N + kIndexBlock - 1) / kIndexBlock * kIndexBlock;
  auto qc = q.contiguous(), wc = w.contiguous();
  auto kt = torch::constant_pad_nd(k.transpose(1, 2), {0, Np - N}).contiguous();  // [B, DI, Np]
  auto nv = n_vis.to(torch::kCPU, torch::kInt64).contiguous();
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "index_select_topk", [&] {
    const scalar_t *pq = qc.data_ptr<scalar_t>(), *pw = wc.data_ptr<scalar_t>(),
                   *pk = kt.data_ptr<scalar_t>();
    const int64_t* pn = nv.data_ptr<int64_t>();
    int64_t* po = out.data_ptr<int64_t>();
    at::parallel_for(0, B * T, 16, [&](int64_t r0, int64_t r1) {
      IndexScratch<scalar_t> s;
      s.score.resize(size_t(Np));
      s.gmax.resize(size_t(Np / kIndexGroup));
      for (int64_t r = r0; r < r1; ++r) {  // row r = b * T + t
        const int64_t b = r / T, t = r % T, n = std::min(pn[t], N);
        int64_t* o = po + r * kk;
        if (n <= kk) {  // every visible entry
          for (int64_t j = 0; j < n; ++j) o[j] = j;
          continue;
        }
        index_row(pq + r * HI * DI, pw + r * HI, pk + b * DI * Np, Np, HI, DI, n, kk, s, o);
      }
    });
  });
  return out.to(q.device());
}

torch::Tensor gathered_scores_reference(const torch::Tensor& q, const torch::Tensor& e,
                                        const torch::Tensor& idx) {
  return torch::matmul(q, gather_rows(e, idx).transpose(-1, -2));  // [B, T, H, D] x [B, T, D, K]
}

torch::Tensor gathered_mix_reference(const torch::Tensor& p, const torch::Tensor& e,
                                     const torch::Tensor& idx) {
  return torch::matmul(p, gather_rows(e, idx));  // [B, T, H, K] x [B, T, K, D]
}

torch::Tensor gathered_scores(const torch::Tensor& q, const torch::Tensor& e, const torch::Tensor& idx) {
  check_shapes("gathered_scores", q, e, idx);
  PS_ASSERT(q.size(3) == e.size(2), "gathered_scores: queries and entries must share the head dim");
  if (!fast_path(q, e)) return gathered_scores_reference(q, e, idx);
  return ScoresFn::apply(q.contiguous(), e.contiguous(), idx.contiguous());
}

torch::Tensor gathered_mix(const torch::Tensor& p, const torch::Tensor& e, const torch::Tensor& idx) {
  check_shapes("gathered_mix", p, e, idx);
  PS_ASSERT(p.size(3) == idx.size(2), "gathered_mix: one weight per picked entry");
  if (!fast_path(p, e)) return gathered_mix_reference(p, e, idx);
  return MixFn::apply(p.contiguous(), e.contiguous(), idx.contiguous());
}

}  // namespace phasescope
