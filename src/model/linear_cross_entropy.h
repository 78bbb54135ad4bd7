// linear_cross_entropy.h — mean cross-entropy of logits = h W^T without keeping the logits: the
// training loss of a language model whose [N, V] logits dwarf everything else the step holds (docs/lm:
// N = 8192 rows, V = 16384, 537 MB of logits, the same again for their log-softmax and for their
// gradient, against 140 MB of parameters, gradients and AdamW state).
// The forward pass walks the rows in chunks; per chunk it forms the logits, their log-sum-exp and the
// loss, and, when a gradient is wanted, dlogits = (softmax - onehot) / N and from it the gradients of h
// and W. Those two (N x d and V x d) are all it keeps; backward scales them by the incoming gradient.
// No extra matrix products: the same three as logits + cross_entropy + autograd.
// Shapes: h [N, d] fp32 (rows with a target only), weight [V, d], targets [N] int64 in [0, V).
// Under NoGradGuard, or for an input that needs no gradient, that gradient is not formed.
// Reference: cross_entropy(h.matmul(weight.t()), targets), equal up to float summation order (tested,
// values and gradients). Not here: ignored targets (callers select scored rows first), other reductions,
// second derivatives (backward only scales what the forward formed: first order only).
#pragma once
#include <torch/torch.h>

#include <cstdint>

namespace phasescope {

// The mean over rows of -log softmax(h W^T)[row, target]; differentiable in h and weight.
// chunk_rows: rows per chunk (its logits are chunk_rows x V floats at a time).
torch::Tensor linear_cross_entropy(const torch::Tensor& h, const torch::Tensor& weight,
                                   const torch::Tensor& targets, int64_t chunk_rows = 512);

// Whether lm_loss_scored takes this path: when the dense logits would pass 2^24 floats (64 MB). Below
// that, the plain product and cross_entropy run (every task model of docs/study: N x V ~ 3e5), so their
// numbers, pinned in the tests, do not move.
bool linear_cross_entropy_pays(int64_t rows, int64_t vocab);

}  // namespace phasescope
