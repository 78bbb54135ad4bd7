// dist.h — data-parallel process groups on PyTorch's c10d: Gloo on CPU (NCCL is not built into Debian's
// libtorch, so a CUDA build would add it here). A group is found the way torchrun and Slurm describe it:
// WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. Rank 0 hosts the rendezvous (a c10d TCPStore);
// every rank then joins a ProcessGroupGloo over loopback or the network.
// Every collective here blocks until done and turns a c10d failure (a peer killed, a timeout) into a
// phasescope::Error that says which collective, on which rank, and what to do (rerun to resume).
// Not here: gradient bucketing (dist/grad_sync.h) and the process launcher (dist/launch.h).
#pragma once
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace phasescope {

struct DistEnv {
  int world_size = 1;
  int rank = 0;
  int local_rank = 0;
  std::string master_addr;  // rank 0's host
  int master_port = 0;      // rank 0's rendezvous port
  double timeout_s = 1800;  // a collective that waits longer than this fails (a hung peer); a killed peer
                            // fails at once (its connection closes)
  bool enabled() const { return world_size > 1; }
};

// Command-line flags that stand in for the variables (`train --world-size --rank --master-addr ...`);
// an unset one leaves the environment's value.
struct DistFlags {
  std::optional<int> world_size, rank, local_rank, master_port;
  std::optional<std::string> master_addr;
};

// The group's description from the environment (WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT,
// PHASESCOPE_DIST_TIMEOUT seconds), each overridden by its flag. No WORLD_SIZE, or WORLD_SIZE=1: a single
// process (enabled() false). A malformed or missing value when WORLD_SIZE > 1 is an Error naming the
// variable and the fix.
DistEnv dist_env_from_environment(const DistFlags& flags = {});

struct DistImpl;  // the c10d store and process group (dist.cpp keeps c10d's headers out of this one)

struct DistGroup {
  DistEnv env;
  std::shared_ptr<DistImpl> impl;
  int rank() const { return env.rank; }
  int size() const { return env.world_size; }
  bool leader() const { return env.rank == 0; }
};

// Join the group `env` describes: rank 0 opens the rendezvous on MASTER_PORT (a port in use is an Error
// naming MASTER_PORT), the others connect to it (an unreachable MASTER_ADDR:MASTER_PORT fails after the
// timeout with an Error naming both), then a Gloo process group over the same host's interface.
std::shared_ptr<DistGroup> dist_join(const DistEnv& env);

// Sum `tensors` (fp32/fp64/int64, contiguous, CPU) over all ranks, in place. `what` names the collective
// in an error ("gradient all-reduce at step 12").
void dist_allreduce_sum(DistGroup& g, std::vector<torch::Tensor>& tensors, const std::string& what);

// Start a sum all-reduce and return a handle to wait on (the overlap of grad_sync.h).
struct DistWork;
std::shared_ptr<DistWork> dist_allreduce_sum_async(DistGroup& g, torch::Tensor flat, const std::string& what);
void dist_wait(DistWork& w);

// Every rank's `identity` (a JSON text: the run's preset, seed, output folder, ...) must be the same:
// all-gathers a 64-bit hash of it over the process group; when they differ, every rank raises the same
// Error naming the first rank that differs from rank 0 and the first field where (rank 0's text is read
// from the rendezvous store). `what` names the identity in the message ("the run's preset").
void dist_check_identity(DistGroup& g, const std::string& identity, const std::string& what);

// All ranks reach this point (a no-op for one rank).
void dist_barrier(DistGroup& g, const std::string& what);

}  // namespace phasescope
