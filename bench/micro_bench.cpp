// micro_bench.cpp — plain per-call costs, measured by Google Benchmark (its own repetitions, flags and
// output: --benchmark_filter=REGEX, --benchmark_out=FILE --benchmark_out_format=json, --benchmark_color):
//   - the HTTP probe client's CPU per request, one thread: a /v1/completions body of 128 token ids, built
//     as the client builds it, and the parse of a canned completion reply (completion_reply_parse);
//   - the 1024 x 1024 x 1024 fp32 sgemm that attention_bench and train_bench compare their FLOP rates to.
// Not for side-by-side comparisons (ours vs torch, vs JS, one setting vs another): those run in their own
// benches on bench_common.h, each side in the same run. Run by scripts/bench.sh. Not a test.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/runtime.h"
#include "http/openai_client.h"

using namespace phasescope;

namespace {

// a request body of 128 token ids, the way the client writes one
void request_body_128(benchmark::State& state) {
  const std::vector<int> tokens(128, 1234);
  for (auto _ : state) {
    std::string b = "{\"model\":\"fake-model\",\"max_tokens\":1,\"prompt\":[";
    for (size_t k = 0; k < tokens.size(); ++k) {
      if (k) b += ',';
      b += fmt::format_int(tokens[k]).c_str();
    }
    b += "]}";
    benchmark::DoNotOptimize(b);
  }
}
BENCHMARK(request_body_128);

// a completion reply with one scored position and its top-2 alternatives, as vLLM sends it
void reply_parse(benchmark::State& state) {
  const std::string reply =
      "{\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" "
      "x\",\"logprobs\":{\"tokens\":[\"token_id:7\"],"
      "\"token_logprobs\":[-0.05],\"top_logprobs\":[{\"token_id:7\":-0.05,\"token_id:1\":-3.5}]},\"finish_"
      "reason\":\"length\"}],"
      "\"usage\":{\"prompt_tokens\":128,\"completion_tokens\":1,\"total_tokens\":129}}";
  for (auto _ : state) {
    CompletionChoice c = completion_reply_parse(reply);
    benchmark::DoNotOptimize(c);
  }
}
BENCHMARK(reply_parse);

// fp32 [1024, 1024] x [1024, 1024] at the runtime's thread count; FLOP/s = 2 x 1024^3 per call
void sgemm_1024(benchmark::State& state) {
  const torch::Tensor a = torch::randn({1024, 1024}), b = torch::randn({1024, 1024});
  for (auto _ : state) {
    torch::Tensor c = torch::mm(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * 1024 * 1024 * 1024, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(sgemm_1024)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  // the same set-up as every phasescope binary (threads, allocator), then Google Benchmark's own main
  fmt::print("runtime: {}\n", runtime_describe(runtime_init()));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
