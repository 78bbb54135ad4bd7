// runtime.h — process-wide set-up that every phasescope binary runs once at start.
// What it does: (1) intra-op threads = all cores (libtorch defaults to 1 here); (2) keeps glibc
// malloc from handing large blocks back to the OS, because on these VMs every first touch of a
// 4 KiB page costs ~12 us and re-faulting freed tensors dominated training time; (3) flushes
// subnormal floats to zero, which made the first training steps of a small model ~10x slower.
// Not a config system: the only knobs are PHASESCOPE_THREADS and PHASESCOPE_NO_MALLOC_TUNING
// (the latter exists so bench/ can measure the effect side by side).
#pragma once
#include <string>

namespace phasescope {

struct RuntimeInfo {
  int threads = 0;              // intra-op threads libtorch will use
  bool malloc_tuned = false;    // whether the mallopt settings were applied
  bool flush_denormal = false;  // subnormal floats flushed to zero (SSE FTZ/DAZ)
};

// Idempotent; returns what was applied.
RuntimeInfo runtime_init();

// One line for logs, e.g. "threads=2 malloc_tuned=yes".
std::string runtime_describe(const RuntimeInfo& info);

}  // namespace phasescope
