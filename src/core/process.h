// process.h — running a helper program to completion: argv searched in PATH, standard input from a
// file (or /dev/null), standard output captured (with standard error too when asked; else inherited),
// the exit status returned. One place for it: the corpus build runs node's BPE trainer through it and the
// chat templates run python3's jinja2. Not here: long-lived children (dist/launch.h).
#pragma once
#include <string>
#include <vector>

namespace phasescope {

struct ProgramRun {
  std::string out;  // standard output (and standard error when merged)
  int status = 0;   // exit status; 128 + signal when killed; 127 when it could not be started (absent)
};

// Runs argv with standard input from stdin_path ("" = /dev/null) and waits for it.
ProgramRun run_program(const std::vector<std::string>& argv, bool merge_stderr,
                       const std::string& stdin_path = "");

}  // namespace phasescope
