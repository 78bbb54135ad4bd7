// rowwise.h — RMSNorm and RoPE, the two per-row maps every layer runs on its [B, T, heads, D] tensors.
//   rms_norm(x, w, eps):             y = x / sqrt(mean(x^2 over the last dim) + eps) * w (w optional)
//   rope_apply(x, pos, inv_freq, s): the last 2 * inv_freq.size() channels of x [B, T, heads, Dh] as
//                                    interleaved pairs (2i, 2i+1), each rotated by the angle
//                                    s * pos[t] * inv_freq[i] (pos [T] absolute, int64; s = -1 rotates
//                                    back); the other channels pass through
// The readable references (*_reference) are a few tensor ops each; libtorch's autograd records every one,
// so at T = 8K a partial RoPE ran ~9 ms forward and backward and an RMSNorm ~4 ms, most of a
// window layer's step. The fast paths are one loop per row with their own backward (RoPE's is the
// rotation back; RMSNorm's dx = r (g w - n mean(g w n)), dw = sum g n with n = x r), for CPU float /
// double; other devices and dtypes take the reference. Tests: RowwiseKernels.* check values and
// gradients against the references in fp64 and fp32.
#pragma once
#include <torch/torch.h>

#include <vector>

namespace phasescope {

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
torch::Tensor rope_apply(const torch::Tensor& x, const torch::Tensor& pos,
                         const std::vector<double>& inv_freq, int sign = 1);

torch::Tensor rms_norm_reference(const torch::Tensor& x, const torch::Tensor& weight, double eps);
torch::Tensor rope_apply_reference(const torch::Tensor& x, const torch::Tensor& pos,
                                   const std::vector<double>& inv_freq, int sign = 1);

}  // namespace phasescope
