// bench_configs.h — the one laptop-size layer every attention benchmark times: d = 128, 4 heads of 32,
// window 16; compressed kinds at their presets' shapes (DeepSeek CSA with top-64 entries).
#pragma once
#include "attention/config.h"

namespace phasescope::bench {

inline AttnConfig bench_config(AttnKind kind) {
  AttnConfig c = attn_config_default(kind);
  c.d_model = 128;
  c.n_heads = 4;
  c.head_dim = 32;
  c.window = 16;
  if (kind == AttnKind::DsCsa) c.index_topk = 64;
  return c;
}

}  // namespace phasescope::bench
