// grad_sync.h — sum every parameter's gradient over a DistGroup's ranks, bucketed and overlapped with the
// backward pass (what PyTorch's DDP Reducer does; Debian's libtorch ships c10d but not the Reducer's
// headers, so this is ours, on c10d's asynchronous all-reduce).
// Buckets: parameters in reverse registration order (the order their gradients are ready in a decoder's
// backward), cut at `bucket_bytes`. A hook on each parameter copies its gradient into its bucket's flat
// buffer; a full bucket starts its all-reduce at once, while the backward goes on. Buckets start in index
// order on every rank (a bucket that fills early waits for the ones before it), so every rank issues the
// same collectives in the same order. finish() starts what is left (a parameter that got no gradient
// contributes zeros), waits, and writes the sums into each parameter's .grad.
// The scalar reference is grad_sync_reference: one blocking all-reduce per parameter after the backward.
// Both give the same sums (tests/dist_test.cpp); neither averages: the caller scales its loss.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "dist/dist.h"

namespace phasescope {

class GradSync {
 public:
  GradSync(std::vector<torch::Tensor> params, std::shared_ptr<DistGroup> group,
           int64_t bucket_bytes = 1 << 20);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Before each backward: `what` names the step in an error ("gradient all-reduce at step 12").
  void begin(const std::string& what);
  // After the backward: every parameter's .grad holds the sum over ranks.
  void finish();

  size_t n_buckets() const { return buckets_.size(); }

 private:
  struct Bucket {
    std::vector<size_t> params;   // indices into params_
    std::vector<int64_t> offset;  // each one's start in flat
    torch::Tensor flat;           // [sum of numel] of the parameters' dtype
    size_t ready = 0;
    std::shared_ptr<DistWork> work;
  };
  void on_grad(size_t param, const torch::Tensor& grad);
  void launch_ready();

  std::vector<torch::Tensor> params_;
  std::shared_ptr<DistGroup> group_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<size_t, size_t>> where_;  // param -> (bucket, slot)
  std::vector<unsigned> hooks_;
  std::vector<bool> got_;
  size_t next_launch_ = 0;
  std::string what_;
};

// The reference: after the backward, each parameter's .grad (zeros when it has none) summed over the ranks
// by one blocking all-reduce per parameter, in registration order.
void grad_sync_reference(const std::vector<torch::Tensor>& params, DistGroup& group, const std::string& what);

}  // namespace phasescope
