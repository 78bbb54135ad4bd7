// dist.cpp — see dist.h. c10d's Gloo header needs USE_C10D_GLOO, which Torch's CMake package defines, and
// the Gloo headers of libgloo-dev.
#include "dist/dist.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "core/check.h"
#include "core/hash.h"
#include "core/json_fields.h"

namespace phasescope {

struct DistImpl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
};

struct DistWork {
  c10::intrusive_ptr<c10d::Work> work;  // null for a single process
  const DistGroup* group = nullptr;     // outlives its works
  std::string what;
};

namespace {

std::string env_or(const char* name, const std::string& dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : dflt;
}

// An integer setting (a flag's value, else the environment variable `name`) in [lo, hi]; `fix` says what
// a good value is.
int env_int(const char* name, const std::optional<int>& flag, int dflt, int lo, int hi,
            const std::string& fix) {
  const std::string s = flag ? std::to_string(*flag) : env_or(name, "");
  if (s.empty()) return dflt;
  size_t used = 0;
  long v = 0;
  try {
    v = std::stol(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || v < lo || v > hi)
    fail(name, fmt::format("is '{}', not an integer in [{}, {}]", s, lo, hi), fix);
  return int(v);
}

// The first line of a c10d / Gloo exception (its C++ stack trace follows on later lines).
std::string first_line(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  return line.size() > 400 ? line.substr(0, 400) + "..." : line;
}

[[noreturn]] void collective_failed(const DistGroup& g, const std::string& what, const std::exception& e) {
  fail(fmt::format("rank {} of {}", g.rank(), g.size()),
       fmt::format("{} failed: a peer is gone or did not answer within {:.0f} s ({})", what, g.env.timeout_s,
                   first_line(e.what())),
       "another rank failed or was killed (see its error above); rerun the same command to resume every rank "
       "from the last checkpoint");
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

}  // namespace

DistEnv dist_env_from_environment(const DistFlags& f) {
  DistEnv e;
  const std::string launch_fix =
      "set it as torchrun or Slurm would (or its flag), or start the ranks with `phasescope launch --nproc N "
      "-- "
      "train ...`, which sets WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR and MASTER_PORT";
  e.world_size =
      env_int("WORLD_SIZE", f.world_size, 1, 1, 1 << 20, "a positive number of ranks; " + launch_fix);
  e.timeout_s = env_int("PHASESCOPE_DIST_TIMEOUT", std::nullopt, 1800, 1, 1 << 30,
                        "seconds a collective may wait for a slow peer (default 1800)");
  if (!e.enabled()) return e;
  auto missing = [&]() {
    return fmt::format("is not set but WORLD_SIZE={} asks for a process group", e.world_size);
  };
  if (!f.rank && env_or("RANK", "").empty()) fail("RANK", missing(), launch_fix);
  e.rank = env_int("RANK", f.rank, 0, 0, e.world_size - 1,
                   fmt::format("this rank's index, 0 to WORLD_SIZE - 1 = {}", e.world_size - 1));
  e.local_rank =
      env_int("LOCAL_RANK", f.local_rank, e.rank, 0, e.world_size - 1, "this rank's index on its machine");
  e.master_addr = f.master_addr ? *f.master_addr : env_or("MASTER_ADDR", "");
  if (e.master_addr.empty())
    fail("MASTER_ADDR", missing(),
         "set MASTER_ADDR (or --master-addr) to rank 0's host name or address (127.0.0.1 when every rank "
         "runs on "
         "this machine), or start the ranks with `phasescope launch --nproc N -- train ...`, which sets it");
  if (!f.master_port && env_or("MASTER_PORT", "").empty())
    fail("MASTER_PORT", missing(),
         "set MASTER_PORT (or --master-port) to a free TCP port on rank 0's host (e.g. 29500), the same on "
         "every "
         "rank");
  e.master_port =
      env_int("MASTER_PORT", f.master_port, 0, 1, 65535, "a free TCP port on rank 0's host (e.g. 29500)");
  return e;
}

std::shared_ptr<DistGroup> dist_join(const DistEnv& env) {
  auto g = std::make_shared<DistGroup>();
  g->env = env;
  g->impl = std::make_shared<DistImpl>();
  if (!env.enabled()) return g;
  const auto timeout = std::chrono::milliseconds(int64_t(env.timeout_s * 1000));
  // the rendezvous: rank 0 serves it, every rank connects
  c10d::TCPStoreOptions so;
  so.port = uint16_t(env.master_port);
  so.isServer = env.rank == 0;
  so.numWorkers = size_t(env.world_size);
  so.waitWorkers = true;
  so.timeout = timeout;
  try {
    g->impl->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
  } catch (const std::exception& e) {
    const std::string msg = lower(e.what());
    if (env.rank == 0 &&
        (msg.find("address already in use") != std::string::npos ||
         msg.find("errno: 98") != std::string::npos || msg.find("eaddrinuse") != std::string::npos))
      fail(
          "MASTER_PORT",
          fmt::format("port {} is in use on this machine, so rank 0 cannot open the rendezvous there",
                      env.master_port),
          "choose another MASTER_PORT (the same on every rank), or stop what holds it (`ss -ltnp` shows it); "
          "`phasescope launch` picks a free port when --master-port is left out");
    fail("MASTER_ADDR / MASTER_PORT",
         fmt::format("rank {} could not {} the rendezvous at {}:{} within {:.0f} s ({})", env.rank,
                     env.rank == 0 ? "open" : "reach", env.master_addr, env.master_port, env.timeout_s,
                     first_line(e.what())),
         "check that rank 0 is running and that MASTER_ADDR and MASTER_PORT are rank 0's host and port on "
         "every "
         "rank; every rank of WORLD_SIZE must start");
  }
  // the process group: Gloo over the interface GLOO_SOCKET_IFNAME names, else loopback for a one-machine
  // group, else this host's name
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  const std::string ifname = env_or("GLOO_SOCKET_IFNAME", "");
  try {
    opts->devices.push_back(!ifname.empty() ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                            : is_loopback(env.master_addr)
                                ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                : c10d::ProcessGroupGloo::createDefaultDevice());
    g->impl->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(g->impl->store, env.rank, env.world_size, opts);
  } catch (const std::exception& e) {
    fail(fmt::format("rank {} of {}", env.rank, env.world_size),
         fmt::format("could not form the Gloo process group ({})", first_line(e.what())),
         "set GLOO_SOCKET_IFNAME to the network interface the ranks share (e.g. eth0), or check that every "
         "rank started");
  }
  return g;
}

void dist_allreduce_sum(DistGroup& g, std::vector<torch::Tensor>& tensors, const std::string& what) {
  // Gloo's allreduce takes one tensor per device: one call per tensor
  for (auto& t : tensors) dist_wait(*dist_allreduce_sum_async(g, t, what));
}

std::shared_ptr<DistWork> dist_allreduce_sum_async(DistGroup& g, torch::Tensor flat,
                                                   const std::string& what) {
  auto w = std::make_shared<DistWork>();
  w->group = &g;
  w->what = what;
  if (!g.env.enabled()) return w;
  PS_ASSERT(flat.is_contiguous() && flat.device().is_cpu(),
            "dist_allreduce_sum: a tensor is not contiguous on CPU");
  std::vector<at::Tensor> one{std::move(flat)};
  try {
    w->work = g.impl->pg->allreduce(one);
  } catch (const std::exception& e) {
    collective_failed(g, what, e);
  }
  return w;
}

void dist_wait(DistWork& w) {
  if (!w.work) return;
  try {
    w.work->wait();
  } catch (const std::exception& e) {
    collective_failed(*w.group, w.what, e);
  }
}

void dist_check_identity(DistGroup& g, const std::string& identity, const std::string& what) {
  if (!g.env.enabled()) return;
  const int64_t mine = int64_t(fnv1a(identity));
  std::vector<at::Tensor> in{torch::tensor({mine}, torch::kInt64)};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < g.size(); ++r) out[0].push_back(torch::zeros({1}, torch::kInt64));
  try {
    if (g.leader())  // rank 0's text, for the others' error message
      g.impl->store->set("phasescope/identity/0", std::vector<uint8_t>(identity.begin(), identity.end()));
    g.impl->pg->allgather(out, in)->wait();
  } catch (const std::exception& e) {
    collective_failed(g, "the start-up check of " + what, e);
  }
  int differs = -1;
  for (int r = 1; r < g.size() && differs < 0; ++r)
    if (out[0][size_t(r)].item<int64_t>() != out[0][0].item<int64_t>()) differs = r;
  if (differs < 0) return;
  std::string detail;
  if (g.rank() == differs) {  // this rank can say where it differs from rank 0
    const std::vector<uint8_t> bytes = g.impl->store->get("phasescope/identity/0");
    const std::string zero(bytes.begin(), bytes.end());
    try {
      detail = " (first difference at " +
               json_first_difference(json_parse_bounded(zero), json_parse_bounded(identity), "rank 0",
                                     fmt::format("rank {}", differs)) +
               ")";
    } catch (const std::exception&) {
      detail = "";
    }
  }
  fail(fmt::format("rank {} of {}", g.rank(), g.size()),
       fmt::format("rank {} runs a different {} than rank 0{}", differs, what, detail),
       "start every rank with the same command (preset, overrides, --seed, --out); `phasescope launch` does");
}

void dist_barrier(DistGroup& g, const std::string& what) {
  if (!g.env.enabled()) return;
  try {
    g.impl->pg->barrier()->wait();
  } catch (const std::exception& e) {
    collective_failed(g, what, e);
  }
}

}  // namespace phasescope
