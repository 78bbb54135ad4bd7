// cmd_launch.cpp — `phasescope launch --nproc N [--master-port P] [--grace S] -- COMMAND ...`: run N ranks of
// a phasescope command (train) on this machine as one c10d group, like torchrun's standalone mode
// (dist/launch.h does the work).
#include <fmt/format.h>

#include <cstdlib>
#include <memory>

#include "dist/launch.h"
#include "tools/commands.h"

namespace phasescope {

void add_launch_command(CLI::App& app) {
  auto opt = std::make_shared<LaunchOptions>();
  auto* cmd = app.add_subcommand("launch",
                                 "run N data-parallel ranks of a phasescope command on this machine (`launch "
                                 "--nproc 2 -- train --preset "
                                 "lm-w8s8-1kv`): sets WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT "
                                 "for each, forwards Ctrl-C / "
                                 "SIGTERM, and stops the group when one rank fails, with its exit code");
  cmd->add_option("--nproc", opt->nproc, "ranks to start (1 to 1024)")->check(in_range(1, 1024));
  cmd->add_option("--master-port", opt->master_port, "rendezvous port on 127.0.0.1 (default: a free one)")
      ->check(in_range(0, 65535));
  cmd->add_option("--grace", opt->grace_s,
                  "seconds the other ranks get to stop (SIGTERM) after one fails, before SIGKILL");
  cmd->add_option("command", opt->args, "the phasescope command each rank runs, after --")->required();
  cmd->callback([opt] {
    const LaunchResult r = launch_local(*opt);
    if (r.failed_rank >= 0) {
      fmt::print(stderr,
                 "phasescope launch: {}; the other ranks were stopped. Rerun the same command to resume "
                 "from the last checkpoint.\n",
                 r.failure);
      std::exit(r.exit_code);
    }
    if (r.interrupted) std::exit(130);
  });
}

}  // namespace phasescope
