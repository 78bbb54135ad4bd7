// testing.h — what many test files need, in one copy: fresh temporary folders, reading a file whole, the
// time since a steady-clock instant,
// the message of the phasescope::Error a call throws, child processes with their output in a file, and a
// tiny version of a preset that trains in
// well under a second per step. Header-only; tests include it after gtest.
// Not here: fakes of a particular module (eval_testing.h: backends; serve_testing.h: servers).
#pragma once
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "data/tasks.h"
#include "model/config.h"

namespace phasescope {
namespace testutil {

using Clock = std::chrono::steady_clock;

// Seconds (and milliseconds) from t0 to now on the steady clock.
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
inline double ms_since(Clock::time_point t0) { return 1000 * seconds_since(t0); }

// A fresh empty folder under the system temp dir, unique to this call and this process
// (phasescope-<name>-<pid>-XXXXXX, made by mkdtemp), so test binaries can run in parallel.
inline std::string tmp_dir(const std::string& name) {
  std::string tmpl = (std::filesystem::temp_directory_path() /
                      ("phasescope-" + name + "-" + std::to_string(::getpid()) + "-XXXXXX"))
                         .string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
  return tmpl;
}

// The whole file as a string (empty when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The message of the phasescope::Error that f throws; "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// `program args...` as a child process with `env` added to its environment, its stdout and stderr to `log`;
// returns its pid (wait for it with wait_exit).
inline pid_t spawn_logged(const std::string& program, const std::vector<std::string>& args,
                          const std::vector<std::pair<std::string, std::string>>& env,
                          const std::string& log) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(fd, 1);
  ::dup2(fd, 2);
  for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> argv{const_cast<char*>(program.c_str())};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(program.c_str(), argv.data());
  ::_exit(127);
}

// A wait status (waitpid, std::system) as an exit code: the process's own, or 128 + the signal that ended it.
inline int exit_code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits for the child pid; its exit_code_of.
inline int wait_exit(pid_t pid) {
  int st = 0;
  ::waitpid(pid, &st, 0);
  return exit_code_of(st);
}

// A preset shrunk for tests: d = 32, head dim 8, 16 records of 4 demos in 96-token rows, batch 4,
// 12 steps (warmup 3), a checkpoint every 4, no periodic evaluation.
inline Preset tiny_preset(const std::string& name) {
  Preset p = preset_load(name);
  p.model.d_model = 32;
  p.model.head_dim = 8;
  p.task.seq_len = 96;
  p.task.n_records = 16;
  p.task.n_demos = 4;
  p.task.min_records = 8;
  p.train.batch = 4;
  p.train.steps = 12;
  p.train.warmup = 3;
  p.train.log_every = 4;
  p.train.eval_every = 0;
  p.train.ckpt_every = 4;
  return preset_from_json(preset_to_json(p), "tiny " + name);
}

}  // namespace testutil
}  // namespace phasescope
