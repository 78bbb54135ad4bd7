// reference.h — the oracle: a plain, loop-based fp64 implementation of every attention kind.
// Readable in one sitting, slow on purpose, and sharing no code with the batched libtorch module
// (attention.h): the two meet only through the parameter names of attn_param_specs().
// One sequence at a time (no batch), no autograd; tests differentiate it by finite differences.
// Not for production use: O(T^2 * d) loops.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "attention/config.h"

namespace phasescope {

// A row-major fp64 array with its shape, e.g. a linear weight [out, in].
struct RefTensor {
  std::vector<int64_t> shape;
  std::vector<double> data;
};
using RefParams = std::map<std::string, RefTensor>;

// What the reference can report besides the output (for visibility and interp tests).
struct RefTrace {
  // For each query t (0..T-1) and head h: the absolute first-token positions of the compressed
  // entries it attended to (in increasing order), and the raw-token positions of its local set.
  std::vector<std::vector<std::vector<int64_t>>> entries;  // [T][H] -> entry start positions
  std::vector<std::vector<std::vector<int64_t>>> raw;      // [T][H] -> raw token positions
};

// x: [T, d] row-major, positions pos0 .. pos0+T-1. Returns [T, d].
std::vector<double> reference_attention(const AttnConfig& cfg, const RefParams& params,
                                        const std::vector<double>& x, int T, int64_t pos0 = 0,
                                        RefTrace* trace = nullptr);

}  // namespace phasescope
