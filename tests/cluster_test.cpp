// cluster_test.cpp — the study on a scheduler (issue 36, docs/cluster.md): shards started as separate
// processes into one shared folder, as a Slurm array or a Kubernetes Indexed Job starts them, one of them
// killed mid-run and started again, then one aggregation; the rows equal those of one process running the
// whole grid.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/io.h"
#include "testing.h"

using namespace phasescope;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// `phasescope study ARGS` as a child process, one compute thread, output to `log`.
pid_t spawn_study(std::vector<std::string> args, const std::string& log) {
  args.insert(args.begin(), "study");
  return testutil::spawn_logged(PHASESCOPE_CLI, args, {{"PHASESCOPE_THREADS", "1"}}, log);
}

using testutil::wait_exit;

}  // namespace

TEST(ClusterStudy, ShardsInOneSharedFolderOneKilledAndRerunEqualOneProcess) {
  const std::string dir = testutil::tmp_dir("cluster");
  const std::string grid = dir + "/grid.json", shared = dir + "/shared", one = dir + "/one";
  io_write_atomic(grid, R"({"name": "cluster-test", "toy": true, "runs": [
    {"preset": "w8s8-1kv", "seeds": 2, "family": "seeds", "paper": "W8/S8 · 1 KV"},
    {"preset": "w8s4-1kv", "seeds": 1, "family": "window-stride", "paper": "W8/S4 · 1 KV"}]})");
  auto args = [&](const std::string& shard, const std::string& out) {
    return std::vector<std::string>{"--grid", grid, "--seeds", "42,43", "--samples",  "1152",
                                    "--out",  out,  "--shard", shard,   "--no-report"};
  };
  // three shards at once into the shared folder, as an array job starts them
  std::vector<pid_t> shards;
  for (int k = 1; k <= 3; ++k)
    shards.push_back(
        spawn_study(args(fmt::format("{}/3", k), shared), fmt::format("{}/shard{}.log", dir, k)));
  // kill shard 2 (run w8s8-1kv@43) once it is evaluating, before its row exists
  const std::string run2 = shared + "/runs/w8s8-1kv@43";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(600);
  while (std::chrono::steady_clock::now() < deadline && !fs::exists(run2 + "/eval") &&
         !fs::exists(run2 + "/row.json"))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_FALSE(fs::exists(run2 + "/row.json")) << "shard 2 finished before it could be killed";
  ASSERT_TRUE(fs::exists(run2 + "/eval")) << testutil::slurp(dir + "/shard2.log");
  kill(shards[1], SIGKILL);
  EXPECT_EQ(wait_exit(shards[1]), 128 + SIGKILL);
  EXPECT_EQ(wait_exit(shards[0]), 0) << testutil::slurp(dir + "/shard1.log");
  EXPECT_EQ(wait_exit(shards[2]), 0) << testutil::slurp(dir + "/shard3.log");
  EXPECT_FALSE(fs::exists(run2 + "/row.json"));
  // the scheduler retries the failed index: the same command resumes it
  EXPECT_EQ(wait_exit(spawn_study(args("2/3", shared), dir + "/shard2-rerun.log")), 0)
      << testutil::slurp(dir + "/shard2-rerun.log");
  EXPECT_NE(testutil::slurp(dir + "/shard2-rerun.log").find("resum"), std::string::npos)
      << testutil::slurp(dir + "/shard2-rerun.log");
  // one aggregation over the shared folder, and a --merge of it into a fresh one
  std::vector<std::string> agg = {"--grid", grid,    "--seeds", "42,43",         "--samples",
                                  "1152",   "--out", shared,    "--report-only", "--no-report"};
  EXPECT_EQ(wait_exit(spawn_study(agg, dir + "/aggregate.log")), 0)
      << testutil::slurp(dir + "/aggregate.log");
  std::vector<std::string> merge = {"--grid",    grid,   "--seeds",    "42,43",
                                    "--samples", "1152", "--out",      dir + "/merged",
                                    "--merge",   shared, "--no-report"};
  EXPECT_EQ(wait_exit(spawn_study(merge, dir + "/merge.log")), 0) << testutil::slurp(dir + "/merge.log");
  // one process, the whole grid
  EXPECT_EQ(wait_exit(spawn_study(args("1/1", one), dir + "/one.log")), 0)
      << testutil::slurp(dir + "/one.log");
  const json a = json::parse(io_read_text(shared + "/study.json")),
             b = json::parse(io_read_text(one + "/study.json")),
             m = json::parse(io_read_text(dir + "/merged/study.json"));
  ASSERT_EQ(a["runs"].size(), 6u);  // 3 runs x 2 protocols
  EXPECT_EQ(a["runs"], b["runs"]);  // the same numbers, run for run
  EXPECT_EQ(m["runs"], b["runs"]);
  EXPECT_EQ(a["findings"].dump(), b["findings"].dump());
}

// a shard whose run fails exits non-zero, so that the scheduler sees it (and retries that index)
TEST(ClusterStudy, AShardWithAFailedRunExitsNonZero) {
  const std::string dir = testutil::tmp_dir("cluster-fail");
  const std::string grid = dir + "/grid.json";
  io_write_atomic(grid, R"({"name": "cluster-fail", "toy": true, "runs": [
    {"preset": "w8s8-1kv", "seeds": 1, "family": "seeds", "paper": "W8/S8 · 1 KV"}]})");
  // 48 prompts at 24 residues: two base examples, too few for matched residue groups; the run fails
  const int rc = wait_exit(
      spawn_study({"--grid", grid, "--seeds", "42", "--samples", "48", "--out", dir + "/out", "--no-report"},
                  dir + "/log"));
  const std::string log = testutil::slurp(dir + "/log");
  EXPECT_EQ(rc, 1) << log;
  EXPECT_NE(log.find("1 of this invocation's runs failed"), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(dir + "/out/study.json"));  // the aggregate is still written
}
