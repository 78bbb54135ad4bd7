// probe_bench.cpp — how fast the HTTP backend drives a server that answers instantly (a canned reply
// from the fake OpenAI-compatible server of the tests, in this process on loopback): requests/s and
// per-request latency p50/p99 at 1, 8 and 64 in flight, for token-id prompts of 128 and 1024 tokens;
// then the needle probe end to end (render, score, journal with fdatasync per batch) at 64 in flight.
// Client and server share the machine's cores, so this is a floor on the client's rate, not a server
// benchmark. The client's CPU per request (body, reply parse) is in micro_bench.
// `probe_bench --serve SECONDS` instead serves the fake (induction model with a planted phase pattern:
// wrong when the needle's key sits at position 3 or 7 mod 8; after "FP", "8" wins when the prompt
// length is 2 or 3 mod 4, else "32") on 127.0.0.1 for README-style demos.
// Usage: probe_bench [--in-flight 1,8,64] [--json FILE] | probe_bench --serve SECONDS (PROBE_BENCH_ONLY64=1
// in the environment: --in-flight 64). Run by scripts/bench.sh. Not a test.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "../tests/fake_openai_server.h"
#include "bench_common.h"
#include "http/http_pool.h"
#include "http/openai_client.h"
#include "http/server_tokenizer.h"
#include "probe/needle.h"

using namespace phasescope;
using bench::Clock;
using bench::percentile;
using bench::seconds_since;

namespace {

struct Row {
  int in_flight = 0, prompt = 0;
  int64_t requests = 0, errors = 0;
  double seconds = 0, p50 = 0, p99 = 0;
  std::string first_error;
  std::string note;
};

// n requests of `prompt` tokens through the backend at `in_flight`, in batches of 4 x in_flight.
Row measure(const std::string& url, int in_flight, int prompt, int64_t n, int max_connecting = 4) {
  HttpOptions ho;
  ho.max_connecting = max_connecting;
  ho.base_urls = {url};
  ho.api_key_env = "";
  ho.concurrency = in_flight;
  HttpPool pool(ho);
  OpenAIOptions o;
  o.model = "fake-model";
  o.bos_id = fake::kBos;
  o.max_context = -1;
  o.batch = std::max(64, 4 * in_flight);
  HttpBackend b(pool, o, nullptr);
  std::vector<int> tokens(static_cast<size_t>(prompt));
  tokens[0] = fake::kBos;
  for (int i = 1; i < prompt; ++i) tokens[size_t(i)] = 1000 + (i * 7919) % 50000;
  const std::vector<ScoreRequest> batch(size_t(o.batch), ScoreRequest{tokens, 7});
  b.score(std::vector<ScoreRequest>(size_t(in_flight), ScoreRequest{tokens, 7}));  // warm: connections open

  Row r;
  r.in_flight = in_flight;
  r.prompt = prompt;
  std::vector<double> ms;
  const auto t0 = Clock::now();
  while (r.requests < n) {
    for (const ScoreResult& x : b.score(batch)) {
      ms.push_back(x.ms);
      r.errors += x.error.empty() ? 0 : 1;
      if (!x.error.empty() && r.first_error.empty()) r.first_error = x.error;
    }
    r.requests += int64_t(batch.size());
  }
  r.seconds = seconds_since(t0);
  for (const HttpEndpointStats& st : pool.stats())
    if (st.failures > 0)
      r.first_error +=
          fmt::format(" [{} failed attempts, {} rests; last: {}]", st.failures, st.rests, st.last_failure);
  r.p50 = percentile(ms, 0.50);
  r.p99 = percentile(ms, 0.99);
  return r;
}

int serve(double seconds) {
  fake::Server s(128);  // httplib serves one keep-alive connection per thread: at least --concurrency
  const int fp = s.tok.id_of("FP"), eight = s.tok.id_of("8"), thirty_two = s.tok.id_of("32");
  s.model = [=](const std::vector<int>& t) {
    if (!t.empty() && t.back() == fp) {  // the FP8 probe: "8" wins when the prompt length is 2 or 3 mod 4
      const double l8 = t.size() % 4 >= 2 ? -0.15 : -2.0;
      return l8 > -1 ? fake::Dist{{eight, l8}, {thirty_two, -2.1}}
                     : fake::Dist{{thirty_two, -0.2}, {eight, l8}};
    }
    int64_t q = -1;
    const int p = fake::induction_next(t, &q);
    if (p < 0) return fake::Dist{{fake::kBos, -0.1}};
    const int64_t key = q - 2;  // "key" ":" -> value
    if (key % 8 == 3 || key % 8 == 7) return fake::Dist{{fake::kBos, -0.3}, {p, -1.4}};
    return fake::Dist{{p, -0.05}, {fake::kBos, -3.5}};
  };
  fmt::print("fake OpenAI-compatible server (model \"fake-model\") at {} for {} s\n", s.url(), seconds);
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // flags: --serve runs the fake server alone; otherwise the benchmark
  bench::Run run("probe_bench", "the HTTP backend's request rate against an instant local server");
  double serve_s = 0;
  std::vector<int> in_flights = {1, 8, 64};
  if (std::getenv("PROBE_BENCH_ONLY64")) in_flights = {64};
  run.cli.add_option("--serve", serve_s, "only serve the fake OpenAI-compatible server for SECONDS");
  run.cli.add_option("--in-flight", in_flights, "requests in flight, e.g. 8,64")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  if (const int rc = run.parse(argc, argv); rc >= 0) return rc;
  if (serve_s > 0) return serve(serve_s);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  fmt::print("HTTP backend vs an instant local server (client and server in one process, {} cores)\n", cores);

  // the instant server: a canned reply, 72 server threads (one per keep-alive connection)
  fake::Server s(72);
  s.instant = true;

  // requests/s and latency by concurrency and prompt length
  bench::Table rate(run, "rate",
                    {bench::Col("in flight", 9), bench::Col("prompt", 8), bench::Col("requests", 9),
                     bench::Col("errors", 7), bench::Col("req/s", 10), bench::Col("p50 ms", 9, 3),
                     bench::Col("p99 ms", 9, 3), bench::Col("note", 0).left()});
  auto print = [&](const Row& r) {
    std::string note = r.note;
    if (!r.first_error.empty()) note += (note.empty() ? "" : "  ") + r.first_error;
    rate.row(
        {r.in_flight, r.prompt, r.requests, r.errors, double(r.requests) / r.seconds, r.p50, r.p99, note});
  };
  for (int prompt : {128, 1024})
    for (int in_flight : in_flights) {
      const int64_t n = in_flight == 1 ? 1000 : (prompt == 128 ? 8000 : 4000);
      print(measure(s.url(), in_flight, prompt, n));
    }
  // the same burst against httplib's own listen queue of 5 (llama-server-like), with and without
  // the pool's limit on connections opened at once
  {
    fake::Server small(72, 0);
    small.instant = true;
    Row r = measure(small.url(), 64, 128, 8000, 4);
    r.note = "listen backlog 5, <= 4 connecting (default)";
    print(r);
    r = measure(small.url(), 64, 128, 8000, 0);
    r.note = "listen backlog 5, unlimited connecting";
    print(r);
  }

  // the needle probe end to end: render, score, journal (fdatasync per batch), 64 in flight
  {
    fake::Server t(72);  // tokenize works; completions are canned
    t.instant = true;
    HttpOptions ho;
    ho.base_urls = {t.url()};
    ho.api_key_env = "";
    ho.concurrency = 64;
    HttpPool pool(ho);
    ServerTokenizer ts(pool, "fake-model");
    OpenAIOptions o;
    o.model = "fake-model";
    o.max_context = -1;
    HttpBackend b(pool, o, &ts);
    NeedleSpec spec;
    spec.context = 1024;
    spec.samples_per_group = 512;  // 4096 prompts
    const auto tb = Clock::now();
    const NeedleDesign d = needle_build(spec, ts, nullptr);
    const double build_s = seconds_since(tb);
    const std::string dir = (std::filesystem::temp_directory_path() / "phasescope-probe-bench").string();
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    ScoringOptions po;
    po.max_failed_batches = 1000000;  // the canned answers are all wrong; that is not a failure
    const ScoringSummary sum = scoring_run(
        b, d.samples(), [&](int64_t i) { return needle_render(d, i, "fake-model"); }, dir + "/journal.jsonl",
        po);
    fmt::print(
        "\nneedle probe end to end, context 1024, 64 in flight (design = tokenize + verify; scoring "
        "journals with fdatasync per batch):\n");
    bench::Table needle(run, "needle",
                        {bench::Col("prompts", 8), bench::Col("batch", 6), bench::Col("design s", 9, 2),
                         bench::Col("scoring s", 10, 2), bench::Col("req/s", 10), bench::Col("failed", 7)});
    needle.row({sum.total, b.max_batch(), build_s, sum.wall_s, double(sum.scored + sum.failed) / sum.wall_s,
                sum.failed});
    std::filesystem::remove_all(dir);
  }
  return 0;
}
