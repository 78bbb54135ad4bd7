// runtime.cpp — see runtime.h.
#include "core/runtime.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <malloc.h>

#include <cstdlib>
#include <thread>

namespace phasescope {

RuntimeInfo runtime_init() {
  static bool done = false;
  static RuntimeInfo info;
  if (done) return info;
  done = true;

  // allocator: serve every block from the heap and never trim it, so freed tensor memory is
  // reused without new page faults (glibc otherwise mmaps blocks > 128 KiB and unmaps on free).
  const char* no_tune = std::getenv("PHASESCOPE_NO_MALLOC_TUNING");
  if (!(no_tune && *no_tune && std::string(no_tune) != "0")) {
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, -1);  // cast to size_t: never trim
    mallopt(M_TOP_PAD, 64 << 20);
    info.malloc_tuned = true;
  }

  // denormals: tiny early gradients squared (Adam's second moment) and near-zero attention
  // weights land in the subnormal range, where x86 arithmetic is ~100x slower; flush them to zero
  info.flush_denormal = at::globalContext().setFlushDenormal(true);

  // threads: all cores unless the user pins a number.
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  if (const char* env = std::getenv("PHASESCOPE_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) threads = n;
  }
  if (threads < 1) threads = 1;
  at::set_num_threads(threads);
  info.threads = at::get_num_threads();
  return info;
}

std::string runtime_describe(const RuntimeInfo& info) {
  return "threads=" + std::to_string(info.threads) + " malloc_tuned=" + (info.malloc_tuned ? "yes" : "no") +
         " flush_denormal=" + (info.flush_denormal ? "yes" : "no");
}

}  // namespace phasescope
