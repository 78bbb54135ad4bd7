// cpu_loops.h — what the plain-C++ attention kernels (gathered.cpp, rowwise.cpp) share: which tensors
// they take, and the one dot product their inner loops use.
#pragma once
#include <torch/torch.h>

#include <cstdint>

namespace phasescope {

// the kernels run on CPU float / double tensors; anything else takes the tensor-op reference
inline bool cpu_float_or_double(const torch::Tensor& t) {
  return t.device().is_cpu() && (t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kDouble);
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

}  // namespace phasescope
