// gathered.cpp — see gathered.h. Three kernels serve both products and their gradients:
//   dots(a, e, idx)       [B, T, H, K]: a[b, t, h, :] . e[b, idx[b, t, k], :]
//   combine(w, e, idx)    [B, T, H, D]: sum_k w[b, t, h, k] e[b, idx[b, t, k], :]
//   scatter(w, a, idx, N) [B, N, D]:    de[b, idx[b, t, k], :] += sum_h w[b, t, h, k] a[b, t, h, :]
// scores = dots(q, e): dq = combine(g, e), de = scatter(g, q). mix = combine(p, e): dp = dots(g, e),
// de = scatter(p, g). Rows (b, t) run in parallel; scatter runs in parallel over b only (rows of one
// sequence may pick the same entry).
#include "attention/gathered.h"

#include <ATen/Parallel.h>

#include "core/check.h"

namespace phasescope {

namespace {

struct Dims {
  int64_t B, T, H, K, D, N;
};

Dims dims_of(const torch::Tensor& a_or_w, const torch::Tensor& e, const torch::Tensor& idx) {
  return {idx.size(0), idx.size(1), a_or_w.size(2), idx.size(2), e.size(2), e.size(1)};
}

// a . b over n values in four interleaved partial sums: independent lanes the compiler turns into one
// vector accumulator (a single running sum is a serial chain it may not reorder)
template <typename T>
inline T dot(const T* a, const T* b, int64_t n) {
  T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t d = 0;
  for (; d + 4 <= n; d += 4) {
    s0 += a[d] * b[d];
    s1 += a[d + 1] * b[d + 1];
    s2 += a[d + 2] * b[d + 2];
    s3 += a[d + 3] * b[d + 3];
  }
  for (; d < n; ++d) s0 += a[d] * b[d];
  return (s0 + s1) + (s2 + s3);
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
  return a.device().is_cpu() && e.device().is_cpu() && a.scalar_type() == e.scalar_type() &&
         (a.scalar_type() == torch::kFloat || a.scalar_type() == torch::kDouble);
}

// rows of e picked by idx: [B, T, K, D]
torch::Tensor gather_rows(const torch::Tensor& e, const torch::Tensor& idx) {
  const int64_t B = idx.size(0), T = idx.size(1), K = idx.size(2), D = e.size(2);
  return e.gather(1, idx.reshape({B, T * K, 1}).expand({B, T * K, D})).view({B, T, K, D});
}

}  // namespace

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
