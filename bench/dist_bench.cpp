// dist_bench.cpp — data-parallel scaling of `phasescope train` on c10d Gloo, side by side in one run:
// N ranks x 1 thread (`phasescope launch --nproc N`) against 1 rank x 1 thread, the same preset, the same
// global batch, the same steps, rounds interleaved (1, N, 1, N, ...) so that a change in the machine's
// load reaches both. Tokens/s comes from each run's metrics.jsonl: the global batch's tokens over the
// steps after the first (which pays for start-up), timed by rank 0's elapsed_s. Efficiency = speed-up / N.
// A third row per round runs N independent 1-rank trainings at once: no communication, the same sharing
// of cores, caches and memory bandwidth; it is the most N ranks can reach on this machine.
// Default: the language-model preset lm-w8s8-1kv on runs/corpus (`phasescope corpus build --out
// runs/corpus`), 6 steps. Usage: dist_bench [--preset P] [--corpus DIR] [--steps K] [--nproc N]
// [--rounds R] [--json FILE]. Run by scripts/bench.sh. Not a test: it asserts nothing.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_common.h"
#include "core/io.h"
#include "model/config.h"

using namespace phasescope;
namespace fs = std::filesystem;

namespace {

// The phasescope CLI beside this binary.
std::string cli_path() { return (fs::read_symlink("/proc/self/exe").parent_path() / "phasescope").string(); }

// The training command of one run: `launch --nproc n -- train ...` into a fresh `dir`, output to dir.log.
std::string train_command(const std::string& preset_file, int nproc, int steps, const std::string& dir) {
  fs::remove_all(dir);
  return fmt::format(
      "PHASESCOPE_THREADS=1 {} launch --nproc {} -- train --preset {} --steps {} --out {} > {}.log 2>&1",
      cli_path(), nproc, preset_file, steps, dir, dir);
}

// Runs `commands` at once (each in the background of one shell, then wait).
void run_together(const std::vector<std::string>& commands) {
  std::string sh;
  for (const std::string& c : commands) sh += "(" + c + ") & ";
  sh += "wait";
  if (std::system(sh.c_str()) != 0) fmt::print(stderr, "dist_bench: a run failed; see the .log files\n");
}

// Tokens/s of the run in `dir` over steps 2..K, from its metrics.jsonl (0 without two timed rows).
double train_tok_s(const std::string& preset_file, const std::string& dir) {
  if (!fs::exists(dir + "/metrics.jsonl")) {
    fmt::print(stderr, "dist_bench: no metrics in {}; see {}.log\n", dir, dir);
    return 0;
  }
  double t1 = -1, tk = -1;
  int64_t s1 = 0, sk = 0;
  for (const std::string& line : io_read_lines(dir + "/metrics.jsonl")) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("elapsed_s")) continue;
    if (t1 < 0) t1 = j["elapsed_s"], s1 = j["step"];
    tk = j["elapsed_s"], sk = j["step"];
  }
  const Preset p = preset_load(preset_file);
  return sk > s1 ? double(sk - s1) * double(p.train.batch) * double(p.task.seq_len) / (tk - t1) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Run run("dist_bench", "data-parallel scaling of train: N ranks x 1 thread vs 1 rank x 1 thread");
  std::string preset = "lm-w8s8-1kv", corpus = "runs/corpus", work = "/tmp/phasescope-dist-bench";
  int steps = 6, nproc = 2, rounds = 1;
  run.cli.add_option("--preset", preset, "preset name or file");
  run.cli.add_option("--corpus", corpus, "corpus folder, for a language-model preset");
  run.cli.add_option("--steps", steps, "training steps per run (the first is not timed)");
  run.cli.add_option("--nproc", nproc, "ranks of the data-parallel run");
  run.cli.add_option("--rounds", rounds, "interleaved rounds (1 rank, then N ranks, each round)");
  run.cli.add_option("--work", work, "scratch folder");
  if (const int rc = run.parse(argc, argv); rc >= 0) return rc;

  // the preset as run: a metrics row every step, no periodic evaluation
  Preset p = preset_load(preset);
  if (p.task.task == "corpus") {
    p.task.corpus = fs::absolute(corpus).string();
    if (!fs::exists(p.task.corpus + "/manifest.json")) {
      fmt::print(stderr, "dist_bench: no corpus at {}: run `phasescope corpus build --out {}` first\n",
                 corpus, corpus);
      return 2;
    }
  }
  p.train.log_every = 1;
  p.train.eval_every = 0;
  p.train.ckpt_every = 1 << 30;
  p = preset_from_json(preset_to_json(p), "dist_bench preset");
  fs::create_directories(work);
  const std::string preset_file = work + "/preset.json";
  io_write_atomic(preset_file, preset_to_json(p).dump(2));
  run.info("preset", fmt::format("{} (global batch {} x {} tokens)", p.name, p.train.batch, p.task.seq_len));
  run.info("load average", bench::load_average());

  bench::Table table(
      run, "scaling",
      {bench::Col("round", 5), bench::Col("ranks x threads", 22).left(), bench::Col("tokens/s", 10, 0),
       bench::Col("speed-up", 9, 2, "x"), bench::Col("efficiency", 10, 2)});
  // the ceiling: N independent 1-rank runs at once (no communication) share the machine's cores, caches
  // and memory bandwidth as the N ranks do; their summed tokens/s is what N ranks could reach here
  std::vector<double> one, many, apart;
  for (int r = 0; r < rounds; ++r) {
    run_together({train_command(preset_file, 1, steps, work + "/one")});
    one.push_back(train_tok_s(preset_file, work + "/one"));
    table.row({r + 1, "1 x 1", one.back(), 1.0, 1.0});
    run_together({train_command(preset_file, nproc, steps, work + "/many")});
    many.push_back(train_tok_s(preset_file, work + "/many"));
    const double up = one.back() > 0 ? many.back() / one.back() : 0.0;
    table.row({r + 1, fmt::format("{} x 1", nproc), many.back(), up, up / nproc});
    std::vector<std::string> cmds;
    for (int k = 0; k < nproc; ++k)
      cmds.push_back(train_command(preset_file, 1, steps, fmt::format("{}/apart{}", work, k)));
    run_together(cmds);
    double sum = 0;
    for (int k = 0; k < nproc; ++k) sum += train_tok_s(preset_file, fmt::format("{}/apart{}", work, k));
    const double up_apart = one.back() > 0 ? sum / one.back() : 0.0;
    apart.push_back(sum);
    table.row({r + 1, fmt::format("{} x (1 x 1) apart", nproc), sum, up_apart, up_apart / nproc});
  }
  const double up = bench::median(many) / std::max(bench::median(one), 1e-9);
  const double ceiling = bench::median(apart) / std::max(bench::median(one), 1e-9);
  run.info("median speed-up", up, 2);
  run.info("median efficiency", up / nproc, 2);
  run.info("machine ceiling (independent runs at once)", ceiling, 2);
  run.info("speed-up / ceiling", up / std::max(ceiling, 1e-9), 2);
  run.info("goal", fmt::format("speed-up >= {:.1f}x at {} ranks", 0.9 * nproc, nproc));
  return 0;
}
