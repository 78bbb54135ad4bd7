// hash.h — the one hash: 64-bit FNV-1a, used to fingerprint prompts (journal tokens_hash), designs,
// checkpoint data and model identities. Not cryptographic: it detects accidents (a changed prompt, a
// swapped file), not attackers. Chain calls by passing the previous value as `h`.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace phasescope {

constexpr uint64_t kFnvOffset = 1469598103934665603ULL;

inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnvOffset) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}
inline uint64_t fnv1a(const std::string& s, uint64_t h = kFnvOffset) { return fnv1a(s.data(), s.size(), h); }

// 16 lower-case hex digits.
std::string hash_hex(uint64_t h);

// Token ids hashed as 4 little-endian bytes each (the journal's tokens_hash), as hex.
std::string hash_tokens_hex(const std::vector<int>& tokens);

}  // namespace phasescope
