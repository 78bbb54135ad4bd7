// rowwise.cpp — see rowwise.h. Rows are the last dim (RMSNorm) or one head's Dh channels at one position
// (RoPE); rows run in parallel. Shapes next to each loop.
#include "attention/rowwise.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <mutex>

#include "attention/cpu_loops.h"
#include "core/check.h"

namespace phasescope {

namespace {

// the angles sign * pos[t] * inv_freq[i] in double, [T, half], on `device`: the one place the rotation's
// angles are made (the reference and the fast path's tables)
torch::Tensor rope_angles(const torch::Tensor& pos, const std::vector<double>& inv_freq, int sign,
                          torch::Device device) {
  auto dopt = torch::TensorOptions().dtype(torch::kFloat64).device(device);
  return pos.to(dopt).unsqueeze(1) * torch::tensor(inv_freq, dopt).unsqueeze(0) * double(sign);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// References

torch::Tensor rms_norm_reference(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  auto y = x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight.defined() ? y * weight : y;
}

torch::Tensor rope_apply_reference(const torch::Tensor& x, const torch::Tensor& pos,
                                   const std::vector<double>& inv_freq_v, int sign) {
  const int64_t half = int64_t(inv_freq_v.size()), dims = 2 * half, Dh = x.size(-1);
  if (dims == 0) return x;
  auto ang = rope_angles(pos, inv_freq_v, sign, x.device());  // [T, half]
  auto cos = ang.cos().to(x.dtype()).view({1, -1, 1, half});
  auto sin = ang.sin().to(x.dtype()).view({1, -1, 1, half});
  auto rot = x.narrow(-1, Dh - dims, dims).unflatten(-1, {half, 2});  // [B, T, h, half, 2]
  auto a = rot.select(-1, 0), b = rot.select(-1, 1);
  auto out = torch::stack({a * cos - b * sin, a * sin + b * cos}, -1).flatten(-2);  // [B, T, h, dims]
  if (dims == Dh) return out;
  return torch::cat({x.narrow(-1, 0, Dh - dims), out}, -1);
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---------------------------------------------------------------------------------------------
// RoPE

// cos and sin of the angles sign * pos[t] * inv_freq[i], computed in double (libtorch's vectorized cos /
// sin, as the reference) and stored in x's dtype: [T, half] each
std::pair<torch::Tensor, torch::Tensor> rope_tables(const torch::Tensor& pos,
                                                    const std::vector<double>& inv_freq, int sign,
                                                    torch::ScalarType dtype) {
  auto ang = rope_angles(pos, inv_freq, sign, torch::kCPU);  // [T, half]
  return {ang.cos().to(dtype).contiguous(), ang.sin().to(dtype).contiguous()};
}

// y = x with each row's last 2*half channels rotated: x, y [B, T, h, Dh] contiguous, cs / sn [T, half];
// backward = true rotates by the negated angles (the transpose)
torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& cs, const torch::Tensor& sn,
                     bool backward) {
  const int64_t T = x.size(1), rows_per_t = x.size(2), Dh = x.size(3), half = cs.size(1),
                keep = Dh - 2 * half;
  auto y = torch::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "rope_rotate", [&] {
    const scalar_t *px = x.data_ptr<scalar_t>(), *pc = cs.data_ptr<scalar_t>(), *ps = sn.data_ptr<scalar_t>();
    scalar_t* py = y.data_ptr<scalar_t>();
    const scalar_t flip = backward ? scalar_t(-1) : scalar_t(1);
    at::parallel_for(0, x.numel() / Dh, 256, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {  // row r: position t = (r / rows_per_t) % T
        const scalar_t* xr = px + r * Dh;
        scalar_t* yr = py + r * Dh;
        const int64_t t = (r / rows_per_t) % T;
        for (int64_t d = 0; d < keep; ++d) yr[d] = xr[d];
        for (int64_t i = 0; i < half; ++i) {
          const scalar_t a = xr[keep + 2 * i], b = xr[keep + 2 * i + 1];
          const scalar_t c = pc[t * half + i], s = flip * ps[t * half + i];
          yr[keep + 2 * i] = a * c - b * s;
          yr[keep + 2 * i + 1] = a * s + b * c;
        }
      }
    });
  });
  return y;
}

struct RopeFn : torch::autograd::Function<RopeFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cs,
                               const torch::Tensor& sn) {
    ctx->save_for_backward({cs, sn});
    return rotate(x, cs, sn, /*backward=*/false);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    return {rotate(g[0].contiguous(), saved[0], saved[1], /*backward=*/true), torch::Tensor(),
            torch::Tensor()};
  }
};

// ---------------------------------------------------------------------------------------------
// RMSNorm

// y = x r w with r = 1 / sqrt(mean(x^2) + eps) per row: x, y [R, D], w [D] or undefined; *r_out [R]
torch::Tensor norm_forward(const torch::Tensor& x, const torch::Tensor& w, double eps, torch::Tensor* r_out) {
  const int64_t D = x.size(-1), R = x.numel() / D;
  auto y = torch::empty_like(x);
  *r_out = torch::empty({R}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "rms_norm_forward", [&] {
    const scalar_t* px = x.data_ptr<scalar_t>();
    const scalar_t* pw = w.defined() ? w.data_ptr<scalar_t>() : nullptr;
    scalar_t *py = y.data_ptr<scalar_t>(), *pr = r_out->data_ptr<scalar_t>();
    at::parallel_for(0, R, 64, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const scalar_t* xr = px + r * D;
        scalar_t* yr = py + r * D;
        const scalar_t rr = scalar_t(1.0 / std::sqrt(double(dot(xr, xr, D)) / double(D) + eps));
        pr[r] = rr;
        if (pw)
          for (int64_t d = 0; d < D; ++d) yr[d] = xr[d] * rr * pw[d];
        else
          for (int64_t d = 0; d < D; ++d) yr[d] = xr[d] * rr;
      }
    });
  });
  return y;
}

// with n = x r and u = g w (g without a weight): dx = r (u - n mean(u n)), dw = sum over rows of g n
// (*dw_out left undefined without a weight)
torch::Tensor norm_backward(const torch::Tensor& g, const torch::Tensor& x, const torch::Tensor& w,
                            const torch::Tensor& rinv, torch::Tensor* dw_out) {
  const int64_t D = x.size(-1), R = x.numel() / D;
  auto dx = torch::empty_like(x);
  if (w.defined()) *dw_out = torch::zeros({D}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "rms_norm_backward", [&] {
    const scalar_t *pg = g.data_ptr<scalar_t>(), *px = x.data_ptr<scalar_t>(),
                   *pr = rinv.data_ptr<scalar_t>();
    const scalar_t* pw = w.defined() ? w.data_ptr<scalar_t>() : nullptr;
    scalar_t* pdx = dx.data_ptr<scalar_t>();
    std::mutex merge;
    at::parallel_for(0, R, 64, [&](int64_t r0, int64_t r1) {
      std::vector<scalar_t> dw(pw ? size_t(D) : 0, scalar_t(0));  // this chunk's share of dw
      std::vector<scalar_t> u(static_cast<size_t>(D));            // g w of one row
      for (int64_t r = r0; r < r1; ++r) {
        const scalar_t *gr = pg + r * D, *xr = px + r * D;
        scalar_t* dr = pdx + r * D;
        const scalar_t rr = pr[r];
        if (pw) {
          for (int64_t d = 0; d < D; ++d) {
            u[size_t(d)] = gr[d] * pw[d];
            dw[size_t(d)] += gr[d] * xr[d] * rr;
          }
        } else {
          for (int64_t d = 0; d < D; ++d) u[size_t(d)] = gr[d];
        }
        const scalar_t m = dot(u.data(), xr, D) * rr / scalar_t(D);  // mean(u n)
        for (int64_t d = 0; d < D; ++d) dr[d] = rr * (u[size_t(d)] - xr[d] * rr * m);
      }
      if (pw) {
        std::lock_guard<std::mutex> lock(merge);
        scalar_t* pdw = dw_out->data_ptr<scalar_t>();
        for (int64_t d = 0; d < D; ++d) pdw[d] += dw[size_t(d)];
      }
    });
  });
  return dx;
}

// with a weight: inputs x and w; without one (libtorch's custom functions take no undefined input):
// NormNoWeightFn
struct NormFn : torch::autograd::Function<NormFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               double eps) {
    torch::Tensor rinv;
    auto y = norm_forward(x, w, eps, &rinv);
    ctx->save_for_backward({x, w, rinv});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    torch::Tensor dw;
    auto dx = norm_backward(g[0].contiguous(), saved[0], saved[1], saved[2], &dw);
    return {dx, dw, torch::Tensor()};
  }
};

struct NormNoWeightFn : torch::autograd::Function<NormNoWeightFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, double eps) {
    torch::Tensor rinv;
    auto y = norm_forward(x, torch::Tensor(), eps, &rinv);
    ctx->save_for_backward({x, rinv});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto saved = ctx->get_saved_variables();
    torch::Tensor dw;
    return {norm_backward(g[0].contiguous(), saved[0], torch::Tensor(), saved[1], &dw), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const bool fast =
      cpu_float_or_double(x) && x.numel() > 0 &&
      (!weight.defined() || (weight.device().is_cpu() && weight.scalar_type() == x.scalar_type() &&
                             weight.dim() == 1 && weight.size(0) == x.size(-1)));
  if (!fast) return rms_norm_reference(x, weight, eps);
  if (!weight.defined()) return NormNoWeightFn::apply(x.contiguous(), eps);
  return NormFn::apply(x.contiguous(), weight.contiguous(), eps);
}

torch::Tensor rope_apply(const torch::Tensor& x, const torch::Tensor& pos,
                         const std::vector<double>& inv_freq, int sign) {
  const int64_t half = int64_t(inv_freq.size());
  if (half == 0) return x;
  PS_ASSERT(2 * half <= x.size(-1), "rope_apply: more rotary dims than the head dim holds");
  if (!cpu_float_or_double(x) || x.dim() != 4 || pos.numel() != x.size(1) || x.numel() == 0)
    return rope_apply_reference(x, pos, inv_freq, sign);
  auto [cs, sn] = rope_tables(pos, inv_freq, sign, x.scalar_type());
  return RopeFn::apply(x.contiguous(), cs, sn);
}

}  // namespace phasescope
