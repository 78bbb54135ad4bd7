// grad_sync.cpp — see grad_sync.h.
#include "dist/grad_sync.h"

#include "core/check.h"

namespace phasescope {

GradSync::GradSync(std::vector<torch::Tensor> params, std::shared_ptr<DistGroup> group, int64_t bucket_bytes)
    : params_(std::move(params)), group_(std::move(group)) {
  where_.resize(params_.size());
  got_.assign(params_.size(), false);
  // buckets over the parameters in reverse order, each up to bucket_bytes (a larger tensor is its own)
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const torch::Tensor& p = params_[k];
    PS_ASSERT(
        p.device().is_cpu() && (p.scalar_type() == torch::kFloat32 || p.scalar_type() == torch::kFloat64),
        "GradSync: parameters must be fp32 or fp64 on CPU");
    const int64_t nb = p.numel() * int64_t(p.element_size());
    if (buckets_.empty() || bytes + nb > bucket_bytes ||
        params_[buckets_.back().params.front()].scalar_type() != p.scalar_type()) {
      buckets_.emplace_back();
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    const int64_t off = b.offset.empty() ? 0 : b.offset.back() + params_[b.params.back()].numel();
    where_[k] = {buckets_.size() - 1, b.params.size()};
    b.params.push_back(k);
    b.offset.push_back(off);
    bytes += nb;
  }
  for (Bucket& b : buckets_) {
    const int64_t n = b.offset.back() + params_[b.params.back()].numel();
    b.flat = torch::zeros({n}, params_[b.params.front()].options().requires_grad(false));
  }
  for (size_t k = 0; k < params_.size(); ++k)
    hooks_.push_back(params_[k].register_hook([this, k](torch::Tensor grad) { on_grad(k, grad); }));
}

GradSync::~GradSync() {
  for (size_t k = 0; k < params_.size(); ++k) params_[k].remove_hook(hooks_[k]);
}

void GradSync::begin(const std::string& what) {
  what_ = what;
  next_launch_ = 0;
  got_.assign(params_.size(), false);
  for (Bucket& b : buckets_) {
    b.ready = 0;
    b.work.reset();
    b.flat.zero_();
  }
}

void GradSync::on_grad(size_t k, const torch::Tensor& grad) {
  const auto [bi, slot] = where_[k];
  Bucket& b = buckets_[bi];
  torch::NoGradGuard no_grad;
  torch::Tensor slice = b.flat.narrow(0, b.offset[slot], params_[k].numel());
  if (got_[k]) {  // a second gradient for the same parameter in one backward (autograd sums them first, so
                  // this is defensive): add it, unless its bucket has already been sent, which is a bug
    PS_ASSERT(bi >= next_launch_, "GradSync: a gradient arrived after its bucket's all-reduce started");
    slice.add_(grad.reshape({-1}));
    return;
  }
  slice.copy_(grad.reshape({-1}));
  got_[k] = true;
  ++b.ready;
  launch_ready();
}

void GradSync::launch_ready() {
  while (next_launch_ < buckets_.size() &&
         buckets_[next_launch_].ready == buckets_[next_launch_].params.size()) {
    Bucket& b = buckets_[next_launch_];
    b.work = dist_allreduce_sum_async(*group_, b.flat, what_);
    ++next_launch_;
  }
}

void GradSync::finish() {
  for (Bucket& b : buckets_) b.ready = b.params.size();  // a parameter without a gradient sends zeros
  launch_ready();
  torch::NoGradGuard no_grad;
  for (Bucket& b : buckets_) {
    if (b.work) dist_wait(*b.work);
    for (size_t s = 0; s < b.params.size(); ++s) {
      torch::Tensor& p = params_[b.params[s]];
      const torch::Tensor sum = b.flat.narrow(0, b.offset[s], p.numel()).view(p.sizes());
      if (p.grad().defined())
        p.mutable_grad().copy_(sum);
      else
        p.mutable_grad() = sum.clone();
    }
  }
}

void grad_sync_reference(const std::vector<torch::Tensor>& params, DistGroup& group,
                         const std::string& what) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor p : params) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    std::vector<torch::Tensor> one{p.grad().contiguous()};
    dist_allreduce_sum(group, one, what);
    p.mutable_grad().copy_(one[0]);
  }
}

}  // namespace phasescope
