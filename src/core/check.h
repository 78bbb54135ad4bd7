// check.h — phasescope's one error type and the checks that raise it.
// A phasescope::Error always says what was wrong, where (file/field), and how to fix it; the CLI
// prints it and exits non-zero. Not an assertion framework: internal invariants use PS_ASSERT,
// which also throws (so tests can see it) but is phrased for developers.
#pragma once
#include <stdexcept>
#include <string>

namespace phasescope {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Build the user-facing message: "<where>: <what>. Fix: <fix>".
[[noreturn]] void fail(const std::string& where, const std::string& what, const std::string& fix);

// Internal invariant; message names the source line.
[[noreturn]] void assert_failed(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace phasescope

#define PS_ASSERT(cond, msg)                                                    \
  do {                                                                          \
    if (!(cond)) ::phasescope::assert_failed(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)
