// token_source.cpp — see token_source.h.
#include "http/token_source.h"

#include <algorithm>

namespace phasescope {

bool token_source_tokens_after(const TokenSource& ts, const std::string& before, const std::string& piece,
                               std::vector<int>* out) {
  const std::vector<int> a = ts.encode(before), ab = ts.encode(before + piece);
  if (ab.size() < a.size() || !std::equal(a.begin(), a.end(), ab.begin())) return false;
  out->assign(ab.begin() + static_cast<std::ptrdiff_t>(a.size()), ab.end());
  return true;
}

}  // namespace phasescope
