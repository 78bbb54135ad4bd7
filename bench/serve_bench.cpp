// serve_bench.cpp — load test of `phasescope serve`: requests/s and latency percentiles at 1, 8 and 64
// concurrent clients, batched (--max-batch 32 and 8 with the 2 ms gathering window, 32 with none) against
// unbatched (--max-batch 1), printed as one table, after the cost of the bare forward pass at each batch size
// (what batching can win on this CPU). Workload: the lookup evaluation's own prompts (the checkpoint's
// layout, prefix protocol; 226 tokens for the laptop presets) as token ids, max_tokens 1, greedy: one scored
// sample per request, as an HTTP evaluation sends them. Model: --checkpoint DIR, else w8s8-1kv at its seeded
// random init (speed does not depend on training), written to a temp folder. Clients and server share this
// machine's cores; the server's torch threads are PHASESCOPE_THREADS (default: all cores). Run by
// scripts/bench.sh. Not a test. Then generation (max_tokens 32, 1 and 8 clients) on the KV cache against
// --no-kv-cache: requests/s and generated tokens/s.
// Usage: serve_bench [--checkpoint DIR] [--seconds S per cell (default 5)] [--json FILE]
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "core/runtime.h"
#include "eval/layout.h"
#include "eval/model_backend.h"
#include "model/load.h"
#include "serve/server.h"
#include "train/trainer.h"

using namespace phasescope;
using bench::Clock;
using bench::load_average;
using bench::percentile;

namespace {

struct Cell {
  int clients = 0;
  int64_t requests = 0, errors = 0;
  double seconds = 0;
  std::vector<double> ms;  // latency of every completed request
  double mean_rows = 0;    // sequences per forward pass during the cell
};

// `clients` threads, each with its own keep-alive connection, send requests back to back for `seconds`.
Cell run_cell(Server& server, const std::vector<std::string>& bodies, int clients, double seconds) {
  const EngineStats before = server.stats();
  std::vector<std::vector<double>> ms(static_cast<size_t>(clients));
  std::atomic<int64_t> errors{0};
  std::atomic<bool> go{false};
  const auto t_end_after = std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      httplib::Client cli("127.0.0.1", server.port());
      cli.set_tcp_nodelay(true);
      cli.set_keep_alive(true);
      cli.set_read_timeout(120, 0);
      while (!go) std::this_thread::yield();
      const auto t0 = Clock::now();
      for (size_t i = size_t(c); Clock::now() - t0 < t_end_after; i += size_t(clients)) {
        const auto ts = Clock::now();
        auto r = cli.Post("/v1/completions", bodies[i % bodies.size()], "application/json");
        if (!r || r->status != 200) {
          ++errors;
          continue;
        }
        ms[size_t(c)].push_back(bench::ms_since(ts));
      }
    });
  const auto t0 = Clock::now();
  go = true;
  for (auto& t : threads) t.join();
  Cell cell;
  cell.clients = clients;
  cell.seconds = bench::seconds_since(t0);
  for (auto& v : ms) cell.ms.insert(cell.ms.end(), v.begin(), v.end());
  cell.requests = int64_t(cell.ms.size());
  cell.errors = errors;
  const EngineStats after = server.stats();
  const int64_t f = after.forwards - before.forwards;
  cell.mean_rows = f > 0 ? double(after.forward_rows - before.forward_rows) / double(f) : 0;
  return cell;
}

}  // namespace

int main(int argc, char** argv) {
  // options
  bench::Run run("serve_bench", "load test of `phasescope serve`: batched vs unbatched, KV cache vs none");
  std::string checkpoint;
  double seconds = 5;
  run.cli.add_option("--checkpoint", checkpoint,
                     "model folder (default: w8s8-1kv at its seeded random init)");
  run.cli.add_option("--seconds", seconds, "seconds per cell")->check(CLI::PositiveNumber);
  if (const int rc = run.parse(argc, argv); rc >= 0) return rc;
  run.info("runtime", runtime_describe(runtime_init()));
  run.info("load average at the start", load_average());
  run.info("cores", std::to_string(std::thread::hardware_concurrency()));

  // the checkpoint: given, or w8s8-1kv at its seeded init in a temp folder
  std::string tmp;
  if (checkpoint.empty()) {
    tmp = (std::filesystem::temp_directory_path() / fmt::format("phasescope-serve-bench-{}", ::getpid()))
              .string();
    train_write_init(preset_load("w8s8-1kv"), tmp);
    checkpoint = tmp;
  }
  const Preset preset = model_load(checkpoint).preset;

  // the workload: the evaluation's prompts of this checkpoint, as token-id requests for one token
  EvalOptions eo = eval_options_for(preset, PadProtocol::Prefix, 576, 24, 1);
  const LayoutDesign design = layout_build(eo.layout);
  std::vector<std::string> bodies;
  for (const LayoutSample& s : design.samples)
    bodies.push_back(nlohmann::json{{"prompt", s.tokens}, {"max_tokens", 1}, {"temperature", 0}}.dump());
  fmt::print("model: {} ({}), prompts of {} tokens, max_tokens 1, {:g} s per cell\n\n", preset.name,
             checkpoint, design.prompt_len, seconds);

  // the forward pass alone (no HTTP): what one batch costs at each size, on this thread
  {
    LoadedModel m = model_load(checkpoint);
    torch::NoGradGuard no_grad;
    fmt::print("forward pass alone (model_last_logprobs, {} tokens):\n", design.prompt_len);
    bench::Table table(run, "forward",
                       {bench::Col("batch", 6), bench::Col("ms", 9, 1), bench::Col("ms/row", 9, 2)});
    for (int B : {1, 8, 16, 32, 64}) {
      std::vector<const std::vector<int>*> prompts;
      for (int i = 0; i < B; ++i)
        prompts.push_back(&design.samples[size_t(i) % design.samples.size()].tokens);
      model_last_logprobs(*m.model, prompts);  // warm-up
      const int reps = std::max(2, 64 / B);
      const auto t0 = Clock::now();
      for (int r = 0; r < reps; ++r) model_last_logprobs(*m.model, prompts);
      const double ms = bench::ms_since(t0) / reps;
      table.row({B, ms, ms / B});
    }
    fmt::print("\n");
  }

  // batched and unbatched servers, all up at once; the cells run interleaved (for each client count, each
  // server in turn) so that a change in the machine's load during the run hits every server alike
  struct Config {
    int max_batch;
    double window_ms;
  };
  const std::vector<Config> configs = {{32, 2}, {8, 2}, {32, 0}, {1, 0}};
  const std::vector<int> client_counts = {1, 8, 64};
  std::vector<std::unique_ptr<Server>> servers;
  for (const Config& cfg : configs) {
    ServeOptions so;
    so.checkpoint = checkpoint;
    so.port = 0;
    so.max_batch = cfg.max_batch;
    so.batch_window_ms = cfg.window_ms;
    so.http_threads = 80;
    servers.emplace_back(new Server(so));
    run_cell(*servers.back(), bodies, 4, 0.5);  // warm-up: first-touch allocations, connections
  }
  std::vector<std::vector<Cell>> cells(configs.size());
  for (int clients : client_counts)
    for (size_t b = 0; b < configs.size(); ++b)
      cells[b].push_back(run_cell(*servers[b], bodies, clients, seconds));
  bench::Table table(run, "score",
                     {bench::Col("server", 34).left(), bench::Col("clients", 7), bench::Col("requests", 9),
                      bench::Col("req/s", 9, 1), bench::Col("p50 ms", 9, 1), bench::Col("p90 ms", 9, 1),
                      bench::Col("p99 ms", 9, 1), bench::Col("rows/pass", 10, 1), bench::Col("errors", 7)});
  for (size_t b = 0; b < configs.size(); ++b) {
    const Config& cfg = configs[b];
    const std::string name =
        cfg.max_batch == 1 ? std::string("--max-batch 1 (unbatched)")
                           : fmt::format("--max-batch {} --batch-window-ms {}", cfg.max_batch, cfg.window_ms);
    for (const Cell& c : cells[b])
      table.row({name, c.clients, c.requests, double(c.requests) / c.seconds, percentile(c.ms, 0.5),
                 percentile(c.ms, 0.9), percentile(c.ms, 0.99), c.mean_rows, c.errors});
    servers[b]->shutdown();
  }

  // generation: max_tokens 32 per request, on the KV cache (prefill once, one cached step per token)
  // against the whole-forward path (--no-kv-cache), interleaved the same way
  {
    std::vector<std::string> gen_bodies;
    for (const LayoutSample& s : design.samples)
      gen_bodies.push_back(
          nlohmann::json{{"prompt", s.tokens}, {"max_tokens", 32}, {"temperature", 0}}.dump());
    std::vector<std::unique_ptr<Server>> gen;
    for (bool cache : {true, false}) {
      ServeOptions so;
      so.checkpoint = checkpoint;
      so.port = 0;
      so.kv_cache = cache;
      so.max_model_len = int(design.prompt_len) + 32;
      so.http_threads = 80;
      gen.emplace_back(new Server(so));
      run_cell(*gen.back(), gen_bodies, 2, 0.5);  // warm-up
    }
    std::vector<std::vector<Cell>> gc(2);
    for (int clients : {1, 8})
      for (size_t b = 0; b < 2; ++b) gc[b].push_back(run_cell(*gen[b], gen_bodies, clients, seconds));
    fmt::print("\ngeneration, max_tokens 32 (prompts of {} tokens), --max-batch 32 --batch-window-ms 2:\n",
               design.prompt_len);
    bench::Table table(run, "generate",
                       {bench::Col("server", 34).left(), bench::Col("clients", 7), bench::Col("requests", 9),
                        bench::Col("req/s", 9, 2), bench::Col("tokens/s", 9, 1), bench::Col("p50 ms", 9, 1),
                        bench::Col("p90 ms", 10, 1), bench::Col("errors", 7)});
    for (size_t b = 0; b < 2; ++b) {
      for (const Cell& c : gc[b])
        table.row({b == 0 ? "KV cache (default)" : "--no-kv-cache", c.clients, c.requests,
                   double(c.requests) / c.seconds, 32.0 * double(c.requests) / c.seconds,
                   percentile(c.ms, 0.5), percentile(c.ms, 0.9), c.errors});
      gen[b]->shutdown();
    }
  }
  run.info("load average at the end", load_average());
  if (!tmp.empty()) std::filesystem::remove_all(tmp);
  return 0;
}
