// linear_cross_entropy.cpp — the chunked loss of linear_cross_entropy.h as an autograd function whose
// forward also computes the gradients (the softmax of a chunk is at hand only then).
#include "model/linear_cross_entropy.h"

#include <algorithm>

#include "core/check.h"

namespace phasescope {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

struct LinearCrossEntropy : torch::autograd::Function<LinearCrossEntropy> {
  // want_h / want_w: whether a gradient of h / weight is wanted (grad mode on and the input requires it;
  // grad mode is always off in here, so the caller decides)
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& h, const torch::Tensor& weight,
                               const torch::Tensor& targets, int64_t chunk_rows, bool want_h, bool want_w) {
    const int64_t N = h.size(0);
    torch::Tensor grad_h = want_h ? torch::empty_like(h) : torch::Tensor();       // [N, d]
    torch::Tensor grad_w = want_w ? torch::zeros_like(weight) : torch::Tensor();  // [V, d]
    double total = 0;
    for (int64_t r0 = 0; r0 < N; r0 += chunk_rows) {
      const int64_t n = std::min(chunk_rows, N - r0);
      const auto hc = h.narrow(0, r0, n);                              // [n, d]
      const auto tc = targets.narrow(0, r0, n).unsqueeze(1);           // [n, 1]
      auto logits = torch::matmul(hc, weight.t());                     // [n, V]
      const auto lse = torch::logsumexp(logits, 1, /*keepdim=*/true);  // [n, 1]
      total += (lse - logits.gather(1, tc)).sum().item<double>();
      if (!want_h && !want_w) continue;
      logits.sub_(lse).exp_();                                                   // softmax, in place
      logits.scatter_add_(1, tc, torch::full_like(tc, -1, logits.options()));    // - onehot
      logits.div_(double(N));                                                    // d(mean loss) / d logits
      if (want_h) grad_h.narrow(0, r0, n).copy_(torch::matmul(logits, weight));  // [n, d]
      if (want_w) grad_w.addmm_(logits.t(), hc);                                 // [V, d] += [V, n] [n, d]
    }
    ctx->save_for_backward({grad_h, grad_w});
    return torch::scalar_tensor(total / double(N), h.options());
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const auto g = grad_out[0];  // scalar
    return {saved[0].defined() ? saved[0] * g : torch::Tensor(),
            saved[1].defined() ? saved[1] * g : torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor linear_cross_entropy(const torch::Tensor& h, const torch::Tensor& weight,
                                   const torch::Tensor& targets, int64_t chunk_rows) {
  PS_ASSERT(h.dim() == 2 && weight.dim() == 2 && h.size(1) == weight.size(1),
            "linear_cross_entropy: h [N, d], weight [V, d]");
  PS_ASSERT(targets.dim() == 1 && targets.size(0) == h.size(0) && h.size(0) > 0,
            "linear_cross_entropy: targets [N] for N > 0 rows");
  PS_ASSERT(chunk_rows > 0, "linear_cross_entropy: chunk_rows > 0");
  const bool grad_mode = torch::GradMode::is_enabled();
  return LinearCrossEntropy::apply(h, weight, targets, chunk_rows, grad_mode && h.requires_grad(),
                                   grad_mode && weight.requires_grad());
}

bool linear_cross_entropy_pays(int64_t rows, int64_t vocab) { return rows * vocab >= (int64_t(1) << 24); }

}  // namespace phasescope
