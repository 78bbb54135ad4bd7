// kv_memory.cpp — see kv_memory.h.
#include "attention/kv_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace phasescope {

KvMemory attn_kv_memory(const AttnConfig& c, int64_t T) {
  KvMemory m;
  if (T <= 0) return m;
  const int64_t D = c.head_dim, hkv = attn_is_ds(c) ? 1 : c.n_kv_heads;
  const int64_t w = std::min<int64_t>(T, c.window);
  switch (c.kind) {
    case AttnKind::Full:
      m.raw_tokens = T;
      m.raw_values = T * hkv * D * 2;
      break;
    case AttnKind::Window:
      m.raw_tokens = w;
      m.raw_values = w * hkv * D * 2;
      break;
    case AttnKind::Chunked: {
      const int64_t j0 = chunk_first_entry(c, 0);
      m.entries = chunk_entry_count(c, 0, T);
      m.entry_values = m.entries * hkv * D * (c.tied_kv ? 1 : 2);
      // the first token no finished entry covers, and the first an unfinished entry needs
      const int64_t covered = m.entries > 0 ? chunk_entry_start(c, j0 + m.entries - 1) + c.W : 0;
      const int64_t open_from = std::max<int64_t>(0, chunk_entry_start(c, j0 + m.entries));
      m.raw_tokens = c.uncompressed_tail ? T - covered : w;
      m.raw_values = m.raw_tokens * hkv * D * 2;
      m.state_values = std::max<int64_t>(0, T - open_from) * c.d_model;
      break;
    }
    case AttnKind::DsCsa:
    case AttnKind::DsHca:
    case AttnKind::DsCsa2: {
      const int64_t mm = c.ratio, coff = c.overlap ? 2 : 1;
      const bool indexer = c.index_topk > 0;
      m.entries = T / mm;
      m.entry_values = m.entries * (D + (indexer ? c.index_dim : 0));
      m.raw_tokens = w;
      m.raw_values = w * D;  // one latent per token serves as K and V
      m.state_values = 2 * coff * mm * coff * D + (indexer ? 2 * coff * mm * coff * c.index_dim : 0);
      break;
    }
    case AttnKind::DsWindow:
      m.raw_tokens = w;
      m.raw_values = w * D;
      break;
  }
  return m;
}

int64_t model_kv_bytes(const std::vector<AttnConfig>& layers, int64_t T, int bytes_per_value) {
  int64_t values = 0;
  for (const AttnConfig& c : layers) values += attn_kv_memory(c, T).total();
  return values * bytes_per_value;
}

double model_kv_bytes_per_token(const std::vector<AttnConfig>& layers, int64_t T, int bytes_per_value) {
  return T > 0 ? double(model_kv_bytes(layers, T, bytes_per_value)) / double(T) : 0.0;
}

KvMemoryRow kv_memory_row(const std::string& name, const std::vector<AttnConfig>& layers, int64_t T,
                          int bytes_per_value) {
  KvMemoryRow r;
  r.name = name;
  r.context = T;
  r.bytes_per_value = bytes_per_value;
  std::vector<AttnConfig> full;
  std::map<std::string, int> designs;  // "chunked W8/S8 w16" -> layers
  std::vector<std::string> order;
  for (const AttnConfig& c : layers) {
    r.entries += attn_kv_memory(c, T).entries;
    AttnConfig f = attn_config_default(AttnKind::Full);
    f.n_kv_heads = attn_is_ds(c) ? 1 : c.n_kv_heads;
    f.head_dim = c.head_dim;
    full.push_back(f);
    std::string d = attn_kind_name(c.kind);
    if (c.kind == AttnKind::Chunked)
      d += fmt::format(" W{}/S{}{} {}{}", c.W, c.S, c.grid_offset ? fmt::format("+{}", c.grid_offset) : "",
                       c.uncompressed_tail ? "tail" : fmt::format("w{}", c.window), c.tied_kv ? " tied" : "");
    else if (attn_is_compressed(c))
      d += fmt::format(" m{} w{}{}", c.ratio, c.window,
                       c.index_topk > 0 ? fmt::format(" top{}", c.index_topk) : "");
    else if (c.kind != AttnKind::Full)
      d += fmt::format(" w{}", c.window);
    d += fmt::format(" kv{}x{}", f.n_kv_heads, c.head_dim);
    if (!designs.count(d)) order.push_back(d);
    designs[d]++;
  }
  for (const std::string& d : order)
    r.design +=
        (r.design.empty() ? "" : " + ") + d + (designs[d] > 1 ? fmt::format(" (x{})", designs[d]) : "");
  r.bytes = model_kv_bytes(layers, T, bytes_per_value);
  r.per_token = model_kv_bytes_per_token(layers, T, bytes_per_value);
  const int64_t fb = model_kv_bytes(full, T, bytes_per_value);
  r.vs_full = fb > 0 ? double(r.bytes) / double(fb) : 0.0;
  return r;
}

std::string kv_memory_table(const std::vector<KvMemoryRow>& rows) {
  std::string s = fmt::format("{:<24} {:>9} {:>10} {:>14} {:>12} {:>9}  {}\n", "preset", "context", "entries",
                              "cache bytes", "bytes/token", "vs full", "design (per layer)");
  for (const KvMemoryRow& r : rows)
    s += fmt::format("{:<24} {:>9} {:>10} {:>14} {:>12.1f} {:>9.4f}  {}\n", r.name, r.context, r.entries,
                     r.bytes, r.per_token, r.vs_full, r.design);
  return s;
}

}  // namespace phasescope
