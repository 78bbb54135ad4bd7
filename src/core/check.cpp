// check.cpp — see check.h.
#include "core/check.h"

namespace phasescope {

void fail(const std::string& where, const std::string& what, const std::string& fix) {
  std::string msg = where.empty() ? what : where + ": " + what;
  if (!fix.empty()) msg += ". Fix: " + fix;
  throw Error(msg);
}

void assert_failed(const char* expr, const char* file, int line, const std::string& msg) {
  throw Error(std::string("internal check failed at ") + file + ":" + std::to_string(line) + ": (" + expr +
              ") " + msg);
}

}  // namespace phasescope
