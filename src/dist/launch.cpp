// launch.cpp — see launch.h. POSIX: fork/exec, one stdout and one stderr pipe per rank, poll().
#include "dist/launch.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <thread>

#include "core/check.h"

extern char** environ;

namespace phasescope {

namespace {

std::atomic<int> g_launch_signal{0};
std::atomic<int> g_launch_signals_seen{0};
extern "C" void launch_on_signal(int sig) {
  g_launch_signal = sig;
  ++g_launch_signals_seen;
}

struct Rank {
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;
  std::string out_buf, err_buf;  // partial lines
  std::deque<std::string> tail;  // its last lines of stderr
  bool done = false;
  int code = 0;
};

std::string describe_exit(int status) {
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("exited with code {}", WEXITSTATUS(status));
}

int exit_code(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

// The environment of rank `k`: ours with the group's variables set.
std::vector<std::string> rank_env(const LaunchOptions& opt, int k, int port) {
  const std::vector<std::string> keys = {"WORLD_SIZE",       "RANK",        "LOCAL_RANK",
                                         "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
  std::vector<std::string> env;
  bool has_threads = false;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    has_threads = has_threads || key == "PHASESCOPE_THREADS";
    env.push_back(kv);
  }
  env.push_back(fmt::format("WORLD_SIZE={}", opt.nproc));
  env.push_back(fmt::format("RANK={}", k));
  env.push_back(fmt::format("LOCAL_RANK={}", k));
  env.push_back(fmt::format("LOCAL_WORLD_SIZE={}", opt.nproc));
  env.push_back("MASTER_ADDR=127.0.0.1");
  env.push_back(fmt::format("MASTER_PORT={}", port));
  if (!has_threads) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    env.push_back(fmt::format("PHASESCOPE_THREADS={}", std::max(1u, cores / unsigned(opt.nproc))));
  }
  return env;
}

pid_t spawn(const std::string& program, const std::vector<std::string>& args,
            const std::vector<std::string>& env, int out_w, int err_w, int close1, int close2) {
  std::vector<char*> argv, envp;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;
  // the child: its own process group, dies with the launcher, output into the pipes
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(127);
  dup2(out_w, STDOUT_FILENO);
  dup2(err_w, STDERR_FILENO);
  close(close1);
  close(close2);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  execve(program.c_str(), argv.data(), envp.data());
  std::fprintf(stderr, "phasescope launch: cannot run %s: %s\n", program.c_str(), std::strerror(errno));
  _exit(127);
}

// Read what is there; emit complete lines prefixed with the rank.
void drain(int& fd, std::string& buf, int k, bool is_err, Rank& r, const LaunchOptions& opt, bool flush_all) {
  if (fd < 0) return;
  char chunk[4096];
  for (;;) {
    const ssize_t n = read(fd, chunk, sizeof chunk);
    if (n > 0) {
      buf.append(chunk, size_t(n));
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      close(fd);
      fd = -1;
      flush_all = true;
    }
    break;
  }
  size_t nl;
  while ((nl = buf.find('\n')) != std::string::npos || (flush_all && !buf.empty())) {
    const std::string line = nl == std::string::npos ? buf : buf.substr(0, nl);
    buf.erase(0, nl == std::string::npos ? buf.size() : nl + 1);
    const std::string prefixed = fmt::format("[rank {}] {}", k, line);
    if (opt.out) {
      opt.out(prefixed, is_err);
    } else {
      std::fprintf(is_err ? stderr : stdout, "%s\n", prefixed.c_str());
      std::fflush(is_err ? stderr : stdout);
    }
    if (is_err) {
      r.tail.push_back(line);
      if (r.tail.size() > 8) r.tail.pop_front();
    }
  }
}

}  // namespace

int launch_free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  PS_ASSERT(fd >= 0, "launch_free_port: socket failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  close(fd);
  PS_ASSERT(ok, "launch_free_port: bind to 127.0.0.1:0 failed");
  return ntohs(a.sin_port);
}

LaunchResult launch_local(const LaunchOptions& opt) {
  if (opt.nproc < 1) fail("--nproc", fmt::format("is {}", opt.nproc), "start at least one rank");
  if (opt.args.empty())
    fail("launch", "no command to run",
         "give the rank command after --, e.g. `launch --nproc 2 -- train --preset tiny`");
  const std::string program = opt.program.empty() ? "/proc/self/exe" : opt.program;
  const int port = opt.master_port > 0 ? opt.master_port : launch_free_port();

  g_launch_signal = 0;
  g_launch_signals_seen = 0;
  auto old_int = std::signal(SIGINT, launch_on_signal);
  auto old_term = std::signal(SIGTERM, launch_on_signal);

  std::vector<Rank> ranks(size_t(opt.nproc));
  for (int k = 0; k < opt.nproc; ++k) {
    int po[2], pe[2];
    PS_ASSERT(pipe(po) == 0 && pipe(pe) == 0, "launch: pipe failed");
    Rank& r = ranks[size_t(k)];
    r.pid = spawn(program, opt.args, rank_env(opt, k, port), po[1], pe[1], po[0], pe[0]);
    close(po[1]);
    close(pe[1]);
    r.out_fd = po[0];
    r.err_fd = pe[0];
    fcntl(r.out_fd, F_SETFL, fcntl(r.out_fd, F_GETFL) | O_NONBLOCK);
    fcntl(r.err_fd, F_SETFL, fcntl(r.err_fd, F_GETFL) | O_NONBLOCK);
  }

  LaunchResult res;
  int forwarded = 0;  // signals passed on so far
  std::chrono::steady_clock::time_point kill_at{};
  bool stopping = false;
  auto signal_live = [&](int sig) {
    for (Rank& r : ranks)
      if (!r.done) kill(r.pid, sig);
  };
  for (;;) {
    // forward the launcher's signals: the first as it came, a second one as SIGKILL
    const int seen = g_launch_signals_seen;
    if (seen > forwarded) {
      res.interrupted = true;
      signal_live(forwarded == 0 ? int(g_launch_signal) : SIGKILL);
      forwarded = seen;
    }
    // output
    std::vector<pollfd> fds;
    for (Rank& r : ranks) {
      if (r.out_fd >= 0) fds.push_back({r.out_fd, POLLIN, 0});
      if (r.err_fd >= 0) fds.push_back({r.err_fd, POLLIN, 0});
    }
    if (!fds.empty()) poll(fds.data(), fds.size(), 100);
    for (int k = 0; k < opt.nproc; ++k) {
      Rank& r = ranks[size_t(k)];
      drain(r.out_fd, r.out_buf, k, false, r, opt, false);
      drain(r.err_fd, r.err_buf, k, true, r, opt, false);
    }
    // exits
    for (int k = 0; k < opt.nproc; ++k) {
      Rank& r = ranks[size_t(k)];
      if (r.done) continue;
      int status = 0;
      if (waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
      // what it wrote before exiting
      drain(r.out_fd, r.out_buf, k, false, r, opt, true);
      drain(r.err_fd, r.err_buf, k, true, r, opt, true);
      r.done = true;
      r.code = exit_code(status);
      if (r.code != 0 && res.failed_rank < 0 && !res.interrupted) {  // after our signal, exits are expected
        res.failed_rank = k;
        res.exit_code = r.code;
        std::string tail;
        for (const auto& l : r.tail) tail += "\n  " + l;
        res.failure = fmt::format("rank {} {}{}", k, describe_exit(status),
                                  tail.empty() ? std::string() : "; its last error output:" + tail);
        if (!stopping && !res.interrupted) {
          stopping = true;
          signal_live(SIGTERM);
          kill_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(opt.grace_s * 1000));
        }
      }
    }
    if (stopping && std::chrono::steady_clock::now() >= kill_at) signal_live(SIGKILL);
    if (std::all_of(ranks.begin(), ranks.end(), [](const Rank& r) { return r.done; })) break;
  }
  for (Rank& r : ranks) {
    if (r.out_fd >= 0) close(r.out_fd);
    if (r.err_fd >= 0) close(r.err_fd);
  }
  std::signal(SIGINT, old_int);
  std::signal(SIGTERM, old_term);
  return res;
}

}  // namespace phasescope
