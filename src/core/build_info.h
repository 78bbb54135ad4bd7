// build_info.h — what this binary was built from, for the records that must say so (study rows,
// study.json, results.json). The definition is generated at every build by cmake/git_commit.cmake.
// Not here: anything computed.
#pragma once

namespace phasescope {

// `git describe --always --dirty --abbrev=12` of the source tree when this binary was built, e.g.
// "30cfa50a1b2c" or "30cfa50a1b2c-dirty"; "unknown" outside a git checkout.
const char* build_commit();

}  // namespace phasescope
