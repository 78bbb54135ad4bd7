// dist_test.cpp — data-parallel training on c10d Gloo (issue 36): the bucketed gradient sum equals its
// scalar reference; every rank must run the same thing; bad settings name their variable; 2 ranks give the
// 1-rank weights; a checkpoint resumes at another world size; a killed rank fails the group cleanly and
// the rerun loses and repeats no metrics row; the launcher stops the group when a rank dies.
// In-process groups are threads (one Gloo group member each); the CLI tests start real processes.
#include "dist/dist.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "core/io.h"
#include "dist/grad_sync.h"
#include "dist/launch.h"
#include "model/load.h"
#include "testing.h"
#include "train/trainer.h"

using namespace phasescope;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Sets environment variables for one scope and restores them after.
struct EnvScope {
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  void set(const std::string& k, const std::optional<std::string>& v) {
    const char* old = std::getenv(k.c_str());
    saved.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
    if (v)
      ::setenv(k.c_str(), v->c_str(), 1);
    else
      ::unsetenv(k.c_str());
  }
  ~EnvScope() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
      if (it->second)
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else
        ::unsetenv(it->first.c_str());
    }
  }
};

DistEnv env_of(int rank, int world, int port) {
  DistEnv e;
  e.world_size = world;
  e.rank = rank;
  e.local_rank = rank;
  e.master_addr = "127.0.0.1";
  e.master_port = port;
  e.timeout_s = 60;
  return e;
}

// Runs f(rank, group) on `world` threads, each a member of one fresh group; returns each rank's error ("" if
// none).
std::vector<std::string> run_group(int world, const std::function<void(int, DistGroup&)>& f) {
  const int port = launch_free_port();
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        auto g = dist_join(env_of(r, world, port));
        f(r, *g);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

// A small model whose weights do not depend on any RNG: three linear maps, 1,000 parameters or so.
struct Net {
  std::vector<torch::Tensor> params;
  Net() {
    for (int64_t n : {24, 16, 8}) {
      params.push_back(
          (torch::arange(n * 12, torch::kFloat32).reshape({n, 12}).sin() * 0.3).requires_grad_());
      params.push_back((torch::arange(n, torch::kFloat32).cos() * 0.1).requires_grad_());
    }
  }
  torch::Tensor loss(int rank) {
    const torch::Tensor x = (torch::arange(5 * 12, torch::kFloat32).reshape({5, 12}) * (0.37 + rank)).sin();
    torch::Tensor total = torch::zeros({});
    for (size_t i = 0; i < params.size(); i += 2)  // every parameter is used
      total =
          total + torch::tanh(torch::matmul(x, params[i].t()) + params[i + 1]).pow(2).mean() * double(i + 1);
    return total;
  }
  std::vector<torch::Tensor> grads() const {
    std::vector<torch::Tensor> g;
    for (const auto& p : params) g.push_back(p.grad().clone());
    return g;
  }
  void zero() {
    for (auto& p : params)
      if (p.grad().defined()) p.mutable_grad().zero_();
  }
};

// The phasescope CLI with arguments, its output in `log`; returns the exit status (128 + signal if killed).
int cli(const std::string& args, const std::string& log, const std::string& env = "") {
  const std::string cmd =
      env + " PHASESCOPE_THREADS=1 " + std::string(PHASESCOPE_CLI) + " " + args + " > " + log + " 2>&1";
  return testutil::exit_code_of(std::system(cmd.c_str()));
}

// One rank of `phasescope train` as its own process, with the group's variables; stdout+stderr to `log`.
pid_t spawn_rank(const std::vector<std::string>& args, int rank, int world, int port,
                 const std::string& log) {
  return testutil::spawn_logged(PHASESCOPE_CLI, args,
                                {{"WORLD_SIZE", std::to_string(world)},
                                 {"RANK", std::to_string(rank)},
                                 {"MASTER_ADDR", "127.0.0.1"},
                                 {"MASTER_PORT", std::to_string(port)},
                                 {"PHASESCOPE_THREADS", "1"},
                                 {"PHASESCOPE_DIST_TIMEOUT", "60"}},
                                log);
}

// The tiny W8/S8 preset as a file: `steps` steps, a checkpoint every 5, a metrics row every step, and a
// constant learning rate (no warmup, no decay), so that a run stopped at step k and resumed to n follows
// the same schedule as one run to n.
std::string write_preset(const std::string& dir, int steps, int seq = 96, int batch = 4) {
  Preset p = testutil::tiny_preset("w8s8-1kv");
  p.name = "dist-tiny";
  p.train.steps = steps;
  p.train.warmup = 0;
  p.train.min_lr_ratio = 1.0;
  p.train.ckpt_every = 5;
  p.train.log_every = 1;
  p.task.seq_len = seq;
  p.train.batch = batch;
  p = preset_from_json(preset_to_json(p), "dist test preset");
  const std::string path = dir + "/dist-tiny.json";
  io_write_atomic(path, preset_to_json(p).dump(2));
  return path;
}

// The largest |a - b| over the model tensors of two checkpoints.
double max_weight_diff(const std::string& a, const std::string& b) {
  const CheckpointContents x = checkpoint_read(checkpoint_path(a)), y = checkpoint_read(checkpoint_path(b));
  double d = 0;
  int n = 0;
  for (const auto& [name, t] : x.tensors) {
    if (name.rfind("model.", 0) != 0) continue;
    d = std::max(d, (t - y.tensors.at(name)).abs().max().item<double>());
    ++n;
  }
  EXPECT_GT(n, 0);
  return d;
}

std::vector<int64_t> metric_steps(const std::string& dir) {
  std::vector<int64_t> s;
  for (const std::string& line : io_read_lines(dir + "/metrics.jsonl"))
    if (!line.empty()) s.push_back(json::parse(line).at("step").get<int64_t>());
  return s;
}

// Waits (up to 120 s) until DIR/metrics.jsonl has at least n rows; returns how many it has.
size_t wait_for_rows(const std::string& dir, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline &&
         (!fs::exists(dir + "/metrics.jsonl") || metric_steps(dir).size() < n))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return fs::exists(dir + "/metrics.jsonl") ? metric_steps(dir).size() : 0;
}

std::vector<int64_t> one_to(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 1; i <= n; ++i) v.push_back(i);
  return v;
}

}  // namespace

TEST(DistEnv, BadSettingsNameTheVariableAndTheFix) {
  EnvScope env;
  env.set("WORLD_SIZE", "2");
  env.set("RANK", "0");
  env.set("MASTER_ADDR", std::nullopt);
  env.set("MASTER_PORT", "29500");
  std::string e = testutil::error_of([] { dist_env_from_environment(); });
  EXPECT_NE(e.find("MASTER_ADDR"), std::string::npos) << e;
  EXPECT_NE(e.find("phasescope launch"), std::string::npos) << e;
  env.set("MASTER_ADDR", "127.0.0.1");
  EXPECT_EQ(testutil::error_of([] { dist_env_from_environment(); }), "");
  env.set("RANK", "2");
  e = testutil::error_of([] { dist_env_from_environment(); });
  EXPECT_NE(e.find("RANK"), std::string::npos) << e;
  env.set("RANK", "1");
  env.set("WORLD_SIZE", "two");
  e = testutil::error_of([] { dist_env_from_environment(); });
  EXPECT_NE(e.find("WORLD_SIZE"), std::string::npos) << e;
  env.set("WORLD_SIZE", "1");  // a single process needs nothing else
  env.set("MASTER_ADDR", std::nullopt);
  EXPECT_FALSE(dist_env_from_environment().enabled());
  // a flag stands in for its variable
  env.set("WORLD_SIZE", std::nullopt);
  DistFlags f;
  f.world_size = 2;
  f.rank = 1;
  f.master_addr = "127.0.0.1";
  f.master_port = 1234;
  const DistEnv d = dist_env_from_environment(f);
  EXPECT_EQ(d.world_size, 2);
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.master_port, 1234);
}

TEST(DistTrain, AWorldSizeThatDoesNotDivideTheBatchIsRefused) {
  auto g = std::make_shared<DistGroup>();
  g->env.world_size = 3;  // refused before any collective, so no group is formed
  TrainOptions opt;
  opt.out_dir = testutil::tmp_dir("dist-batch");
  opt.dist = g;
  const std::string e = testutil::error_of([&] { train_run(testutil::tiny_preset("w8s8-1kv"), opt); });
  EXPECT_NE(e.find("WORLD_SIZE"), std::string::npos) << e;
  EXPECT_NE(e.find("train.batch = 4"), std::string::npos) << e;
}

TEST(DistJoin, APortInUseIsNamed) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  DistEnv e = env_of(0, 2, ntohs(a.sin_port));
  e.timeout_s = 5;
  const std::string err = testutil::error_of([&] { dist_join(e); });
  close(fd);
  EXPECT_NE(err.find("MASTER_PORT"), std::string::npos) << err;
  EXPECT_NE(err.find("in use"), std::string::npos) << err;
}

TEST(GradSync, BucketedSumEqualsTheReferenceAndTheLocalSum) {
  std::vector<std::vector<torch::Tensor>> local(2), bucketed(2), reference(2);
  std::vector<size_t> buckets(2);
  const auto errors = run_group(2, [&](int r, DistGroup& g) {
    auto gp = std::shared_ptr<DistGroup>(&g, [](DistGroup*) {});
    Net net;
    net.loss(r).backward();
    local[size_t(r)] = net.grads();
    net.zero();
    {
      GradSync sync(net.params, gp, 600);  // several buckets: 600 bytes
      buckets[size_t(r)] = sync.n_buckets();
      sync.begin("test all-reduce");
      net.loss(r).backward();
      sync.finish();
    }
    bucketed[size_t(r)] = net.grads();
    net.zero();
    net.loss(r).backward();
    grad_sync_reference(net.params, g, "test reference");
    reference[size_t(r)] = net.grads();
  });
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  EXPECT_GT(buckets[0], 2u);
  for (size_t k = 0; k < local[0].size(); ++k) {
    const torch::Tensor sum = local[0][k] + local[1][k];
    for (int r = 0; r < 2; ++r) {  // a + b is exact in either order: equality, not closeness
      EXPECT_TRUE(torch::equal(bucketed[size_t(r)][k], sum)) << "parameter " << k << " rank " << r;
      EXPECT_TRUE(torch::equal(reference[size_t(r)][k], sum)) << "parameter " << k << " rank " << r;
    }
  }
}

TEST(DistIdentity, RanksThatRunDifferentThingsAreRefused) {
  const auto same =
      run_group(2, [](int r, DistGroup& g) { dist_check_identity(g, R"({"preset": {"seed": 42}})", "run"); });
  EXPECT_EQ(same[0], "");
  EXPECT_EQ(same[1], "");
  const auto errors = run_group(2, [](int r, DistGroup& g) {
    dist_check_identity(g, r == 0 ? R"({"preset": {"seed": 42}})" : R"({"preset": {"seed": 43}})", "run");
  });
  for (const std::string& e : errors)
    EXPECT_NE(e.find("rank 1 runs a different run than rank 0"), std::string::npos) << e;
  EXPECT_NE(errors[1].find("/preset/seed: rank 0 42, rank 1 43"), std::string::npos) << errors[1];
}

TEST(DistTrainCli, TwoRanksGiveTheOneRankWeightsAndResumeAtAnotherWorldSize) {
  const std::string dir = testutil::tmp_dir("dist-cli");
  const std::string preset = write_preset(dir, 20);
  // one rank, 20 steps straight: the reference
  ASSERT_EQ(cli("train --preset " + preset + " --out " + dir + "/one", dir + "/one.log"), 0)
      << testutil::slurp(dir + "/one.log");
  // two ranks, same global batch of 4 rows
  ASSERT_EQ(cli("launch --nproc 2 -- train --preset " + preset + " --out " + dir + "/two", dir + "/two.log"),
            0)
      << testutil::slurp(dir + "/two.log");
  EXPECT_NE(testutil::slurp(dir + "/two.log").find("data-parallel: 2 ranks, 2 rows each"), std::string::npos);
  // fp32: the two half-batch gradients summed differ from the whole batch's in summation order only;
  // measured here 20 steps apart by well under 1e-5
  const double d_two = max_weight_diff(dir + "/one", dir + "/two");
  EXPECT_LT(d_two, 1e-4) << "2 ranks vs 1 rank after 20 steps";
  EXPECT_EQ(metric_steps(dir + "/two"), one_to(20));
  // 10 steps on two ranks, then resumed to 20 on one
  ASSERT_EQ(cli("launch --nproc 2 -- train --preset " + preset + " --steps 10 --out " + dir + "/mix",
                dir + "/a.log"),
            0);
  const CheckpointContents half = checkpoint_read(checkpoint_path(dir + "/mix"));
  EXPECT_EQ(half.header.at("world_size").get<int>(), 2);
  EXPECT_EQ(half.header.at("data_rows").get<int64_t>(), 40);
  ASSERT_EQ(cli("train --preset " + preset + " --out " + dir + "/mix", dir + "/b.log"), 0)
      << testutil::slurp(dir + "/b.log");
  EXPECT_NE(testutil::slurp(dir + "/b.log").find("written by 2 rank(s), now 1"), std::string::npos);
  EXPECT_LT(max_weight_diff(dir + "/one", dir + "/mix"), 1e-4);
  EXPECT_EQ(metric_steps(dir + "/mix"), one_to(20));
  std::printf("[ measured ] max |w_2ranks - w_1rank| after 20 steps: %.3g\n", d_two);
}

TEST(DistTrainCli, AKilledRankFailsTheGroupCleanlyAndTheRerunLosesNoRow) {
  const std::string dir = testutil::tmp_dir("dist-kill");
  const std::string preset = write_preset(dir, 400, 256, 8);
  const std::string out = dir + "/run";
  const std::vector<std::string> args = {"train", "--preset", preset, "--out", out};
  const int port = launch_free_port();
  const pid_t r0 = spawn_rank(args, 0, 2, port, dir + "/r0.log");
  const pid_t r1 = spawn_rank(args, 1, 2, port, dir + "/r1.log");
  // wait until a checkpoint is behind us (step 12 logged), then kill rank 1 mid-run
  ASSERT_GE(wait_for_rows(out, 12), 12u) << testutil::slurp(dir + "/r0.log");
  kill(r1, SIGKILL);
  testutil::wait_exit(r1);
  const auto t_kill = std::chrono::steady_clock::now();
  const int code0 = testutil::wait_exit(r0);
  const double waited = testutil::seconds_since(t_kill);
  const std::string log0 = testutil::slurp(dir + "/r0.log");
  ASSERT_EQ(code0, 1) << log0;
  EXPECT_NE(log0.find("rerun the same command to resume"), std::string::npos) << log0;
  EXPECT_LT(waited, 60.0) << "rank 0 must not hang on a dead peer";
  const int64_t killed_at = metric_steps(out).back();
  ASSERT_LT(killed_at, 400) << "the run ended before the kill";
  // the same command, on one rank this time: resumes from the last checkpoint, every row once
  ASSERT_EQ(cli("train --preset " + preset + " --out " + out, dir + "/rerun.log"), 0)
      << testutil::slurp(dir + "/rerun.log");
  EXPECT_NE(testutil::slurp(dir + "/rerun.log").find("resuming dist-tiny from step"), std::string::npos);
  EXPECT_EQ(metric_steps(out), one_to(400));
  std::printf("[ measured ] rank 0 exited %.2f s after rank 1 was killed at step ~%lld\n", waited,
              static_cast<long long>(killed_at));
}

TEST(Launch, StopsTheGroupWhenARankDiesAndReportsIt) {
  // a rank that fails at start-up (an unknown preset) ends the group with its exit code and its error
  LaunchOptions opt;
  opt.nproc = 2;
  opt.program = PHASESCOPE_CLI;
  opt.args = {"train", "--preset", "no-such-preset", "--out", testutil::tmp_dir("launch-bad")};
  opt.grace_s = 5;
  std::vector<std::string> lines;
  opt.out = [&](const std::string& l, bool) { lines.push_back(l); };
  const LaunchResult r = launch_local(opt);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_GE(r.failed_rank, 0);
  EXPECT_NE(r.failure.find("no-such-preset"), std::string::npos) << r.failure;
  bool prefixed = false;
  for (const auto& l : lines) prefixed = prefixed || l.rfind("[rank ", 0) == 0;
  EXPECT_TRUE(prefixed);
  // a rank that runs forever is stopped when the other dies: `sleep` stands in for a rank
  LaunchOptions s;
  s.nproc = 2;
  s.program = "/bin/sh";
  s.args = {"-c", "if [ \"$RANK\" = 1 ]; then echo dying >&2; exit 3; fi; sleep 600"};
  s.grace_s = 2;
  s.out = [](const std::string&, bool) {};
  const auto t0 = std::chrono::steady_clock::now();
  const LaunchResult k = launch_local(s);
  EXPECT_LT(testutil::seconds_since(t0), 30.0);
  EXPECT_EQ(k.failed_rank, 1);
  EXPECT_EQ(k.exit_code, 3);
  EXPECT_NE(k.failure.find("dying"), std::string::npos) << k.failure;
}

TEST(Launch, ForwardsSigtermSoEveryRankStopsAfterTheSameStepWithACheckpoint) {
  const std::string dir = testutil::tmp_dir("launch-term");
  const std::string preset = write_preset(dir, 400, 256, 8);
  const std::string out = dir + "/run";
  const pid_t pid = testutil::spawn_logged(
      PHASESCOPE_CLI, {"launch", "--nproc", "2", "--", "train", "--preset", preset, "--out", out},
      {{"PHASESCOPE_THREADS", "1"}}, dir + "/launch.log");
  ASSERT_GE(wait_for_rows(out, 12), 12u) << testutil::slurp(dir + "/launch.log");
  kill(pid, SIGTERM);
  const int code = testutil::wait_exit(pid);
  const std::string log = testutil::slurp(dir + "/launch.log");
  ASSERT_EQ(code, 130) << log;
  EXPECT_NE(log.find("[rank 0] interrupted by signal"), std::string::npos) << log;
  // the checkpoint is the last logged step: every rank stopped after the same one
  const int64_t last = metric_steps(out).back();
  ASSERT_LT(last, 400);
  EXPECT_EQ(checkpoint_read(checkpoint_path(out)).header.at("step").get<int64_t>(), last);
  ASSERT_EQ(cli("launch --nproc 2 -- train --preset " + preset + " --out " + out, dir + "/rerun.log"), 0)
      << testutil::slurp(dir + "/rerun.log");
  EXPECT_EQ(metric_steps(out), one_to(400));
}
