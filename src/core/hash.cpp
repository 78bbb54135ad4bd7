// hash.cpp — see hash.h.
#include "core/hash.h"

#include <cstdio>

namespace phasescope {

std::string hash_hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string hash_tokens_hex(const std::vector<int>& tokens) {
  uint64_t h = kFnvOffset;
  for (int t : tokens) {
    const uint32_t u = static_cast<uint32_t>(t);
    const unsigned char b[4] = {
        static_cast<unsigned char>(u & 0xff), static_cast<unsigned char>((u >> 8) & 0xff),
        static_cast<unsigned char>((u >> 16) & 0xff), static_cast<unsigned char>((u >> 24) & 0xff)};
    h = fnv1a(b, 4, h);
  }
  return hash_hex(h);
}

}  // namespace phasescope
