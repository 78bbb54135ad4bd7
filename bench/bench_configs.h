// bench_configs.h — the one laptop-size layer every attention benchmark times: d = 128, 4 heads of 32,
// window 16; compressed kinds at their presets' shapes (DeepSeek CSA with top-64 entries).
#pragma once
#include <sstream>
#include <string>
#include <vector>

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

// "a,b,c" -> {"a", "b", "c"}: the benches' list flags
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace phasescope::bench
