// process.cpp — posix_spawn with a pipe for standard output (process.h).
#include "core/process.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/check.h"

extern char** environ;

namespace phasescope {

ProgramRun run_program(const std::vector<std::string>& argv, bool merge_stderr,
                       const std::string& stdin_path) {
  // the child: standard input from the file, standard output (and standard error) into a pipe
  int fds[2];
  // close-on-exec: a child another thread starts meanwhile inherits neither end (the dup2 below clears it)
  if (::pipe2(fds, O_CLOEXEC) != 0)
    fail(argv.at(0), std::string("pipe failed: ") + std::strerror(errno), "retry");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, stdin_path.empty() ? "/dev/null" : stdin_path.c_str(),
                                   O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  if (merge_stderr) posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);

  // its output, then its exit status
  ProgramRun r;
  if (spawned == 0) {
    char piece[1 << 16];
    ssize_t n = 0;
    while ((n = ::read(fds[0], piece, sizeof piece)) != 0) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      r.out.append(piece, size_t(n));
    }
  }
  ::close(fds[0]);
  r.status = 127;
  if (spawned == 0) {
    int ws = 0;
    while (::waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    r.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
  }
  return r;
}

}  // namespace phasescope
