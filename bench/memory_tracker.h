// memory_tracker.h — counts the bytes of live CPU tensors (and their peak) by wrapping libtorch's
// CPU allocator. Benchmark-only: it measures what the attention kernels allocate, not process RSS.
// Not thread-safe beyond atomic counters; install once at start of a benchmark binary.
#pragma once
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstdint>

namespace phasescope::bench {

class TrackingAllocator final : public at::Allocator {
 public:
  static TrackingAllocator& install() {
    static TrackingAllocator tracker(c10::GetCPUAllocator());
    static bool done = false;
    if (!done) {
      c10::SetCPUAllocator(&tracker, /*priority=*/100);
      done = true;
    }
    return tracker;
  }

  at::DataPtr allocate(size_t n) const override {
    auto* ctx = new Ctx{inner_->allocate(n), n, this};
    const int64_t now = live_.fetch_add(int64_t(n)) + int64_t(n);
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    return {ctx->inner.get(), ctx, &TrackingAllocator::release, at::Device(at::DeviceType::CPU)};
  }
  at::DeleterFnPtr raw_deleter() const override { return nullptr; }

  int64_t live() const { return live_.load(); }
  int64_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(live_.load()); }

 private:
  struct Ctx {
    at::DataPtr inner;
    size_t bytes;
    const TrackingAllocator* owner;
  };
  explicit TrackingAllocator(at::Allocator* inner) : inner_(inner) {}
  static void release(void* p) {
    auto* ctx = static_cast<Ctx*>(p);
    ctx->owner->live_.fetch_sub(int64_t(ctx->bytes));
    delete ctx;  // frees the inner allocation through its own deleter
  }

  at::Allocator* inner_;
  mutable std::atomic<int64_t> live_{0};
  mutable std::atomic<int64_t> peak_{0};
};

}  // namespace phasescope::bench
