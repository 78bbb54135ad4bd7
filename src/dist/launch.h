// launch.h — start N ranks of a phasescope command on this machine, as torchrun's standalone mode does:
// each rank is a child process with WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and
// MASTER_PORT (a free port unless given) in its environment, and PHASESCOPE_THREADS = cores / N unless set.
// Each rank's output lines reach ours prefixed "[rank K] ". Rank processes run in their own process groups,
// so a terminal's Ctrl-C reaches the launcher alone, which forwards SIGINT / SIGTERM to every rank once (a
// training rank then stops after its step with a checkpoint); a second signal kills them. When one rank
// fails, the others get SIGTERM, then SIGKILL after `grace_s`, and the launcher returns that rank's exit
// code with its last lines of error output. Ranks die with the launcher (PR_SET_PDEATHSIG).
// Not here: the process group itself (dist.h), which the ranks form.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace phasescope {

struct LaunchOptions {
  int nproc = 1;
  int master_port = 0;            // 0: a free port on 127.0.0.1
  std::string program;            // the rank executable; "" = this executable (/proc/self/exe)
  std::vector<std::string> args;  // each rank's arguments, e.g. {"train", "--preset", "tiny"}
  double grace_s = 30;            // after a rank fails: seconds between SIGTERM and SIGKILL of the rest
  // where the ranks' prefixed lines go (is_err: the rank wrote it to stderr); default: our stdout / stderr
  std::function<void(const std::string& line, bool is_err)> out;
};

struct LaunchResult {
  int exit_code = 0;  // 0: every rank succeeded; else the first failed rank's code (128 + signal if killed)
  int failed_rank = -1;      // the first rank that failed, -1 if none
  std::string failure;       // what happened to it, with its last lines of error output
  bool interrupted = false;  // the launcher got SIGINT / SIGTERM and forwarded it
};

LaunchResult launch_local(const LaunchOptions& opt);

// A TCP port that was free on 127.0.0.1 a moment ago (bound to port 0, then closed).
int launch_free_port();

}  // namespace phasescope
