// bench_common.h — what the benchmarks of bench/ share: one flag parser (CLI11: each bench's own flags
// plus --json FILE), one output format (results as aligned tables on stdout, progress on stderr; with
// --json FILE every result row is also appended to FILE as one JSON object per line, keyed by the
// printed column headers), and the timing helpers (clock, median, percentile, sgemm rate, load average).
// Not a harness: each bench keeps its own protocol (interleaved rounds, ours vs the reference side by
// side in one run) and nothing here asserts a speed. micro_bench.cpp is the exception: plain per-call
// costs, run by Google Benchmark with its own flags and output. Benchmark-only; src/ never includes it.
#pragma once
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace phasescope::bench {

// ---------------------------------------------------------------------------------------------------
// timing

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

inline double ms_since(Clock::time_point t0) { return 1e3 * seconds_since(t0); }

// The q-quantile by nearest rank (q = 0.5 is the upper median of an even count); 0 for no samples.
inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size() - 1) + 0.5))];
}

inline double median(const std::vector<double>& v) { return percentile(v, 0.5); }

// What this CPU does at best, at this thread count: GFLOP/s of a 1024 x 1024 x 1024 fp32 product, the
// best of 7 after a warm-up.
inline double sgemm_gflops() {
  const at::Tensor a = at::randn({1024, 1024}), b = at::randn({1024, 1024});
  at::mm(a, b);  // warm-up
  double best = 1e30;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = Clock::now();
    const at::Tensor c = at::mm(a, b);
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * 1024 * 1024 * 1024 / best / 1e9;
}

// The 1-minute load average (/proc/loadavg): on a shared machine it says how much a number can be trusted.
inline std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  in >> one;
  return one.empty() ? "?" : one;
}

// ---------------------------------------------------------------------------------------------------
// one run: flags and the JSON lines file

// A bench's flags and where its results go. main() reads:
//   bench::Run run("attention_bench", "what it measures");
//   run.cli.add_option("--rounds", rounds, "...");
//   if (const int rc = run.parse(argc, argv); rc >= 0) return rc;
// The first JSON line of a run is {"bench", "table": "run", "args", "cores", "load average", "unix time"};
// the rows of each Table and each info() follow, each with "bench" and "table".
struct Run {
  std::string name;
  CLI::App cli;
  std::string json_path;  // --json FILE: appended to, never truncated

  Run(const std::string& bench_name, const std::string& about) : name(bench_name), cli(about, bench_name) {
    cli.add_option("--json", json_path,
                   "also append every result row to FILE as JSON lines (keys: the printed column headers)")
        ->type_name("FILE");
  }

  // Appends {"bench": name, fields...} to --json FILE (nothing without --json); the run line comes first.
  void write(const nlohmann::ordered_json& fields) {
    if (json_path.empty()) return;
    if (!json_.is_open()) {
      json_.open(json_path, std::ios::app);
      if (!json_) {
        fmt::print(stderr, "{}: cannot open --json {} for appending: check that its folder exists\n", name,
                   json_path);
        std::exit(2);
      }
      const nlohmann::ordered_json head = {{"bench", name},
                                           {"table", "run"},
                                           {"args", args_},
                                           {"cores", std::thread::hardware_concurrency()},
                                           {"load average", load_average()},
                                           {"unix time", int64_t(std::time(nullptr))}};
      json_ << head.dump() << "\n";
    }
    nlohmann::ordered_json row = {{"bench", name}};
    for (const auto& [key, value] : fields.items()) row[key] = value;
    json_ << row.dump() << "\n";
    json_.flush();  // a bench killed halfway keeps the rows it measured
  }

  // Context of the results (the runtime, the sgemm rate): printed as "key: value", one JSON line
  // {"table": "info", "key", "value"}.
  void info(const std::string& key, const std::string& value) {
    fmt::print("{}: {}\n", key, value);
    write({{"table", "info"}, {"key", key}, {"value", value}});
  }
  void info(const std::string& key, double value, int decimals = 1) {
    fmt::print("{}: {:.{}f}\n", key, value, decimals);
    write({{"table", "info"}, {"key", key}, {"value", value}});
  }

  // Parses the flags: -1 to go on, else the exit code (0 after --help; nonzero after a bad flag, printed).
  int parse(int argc, char** argv) {
    args_.assign(argv + 1, argv + argc);  // for the JSON run line
    try {
      cli.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return cli.exit(e);
    }
    return -1;
  }

 private:
  std::ofstream json_;
  std::vector<std::string> args_;
};

// ---------------------------------------------------------------------------------------------------
// tables

// One cell: an integer, a real, a text, or nothing ("-" on screen, null in JSON).
struct Value {
  enum Kind { None, Int, Real, Text } kind = None;
  int64_t i = 0;
  double d = 0;
  std::string s;

  Value() = default;
  template <class T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
  Value(T v) : kind(Int), i(int64_t(v)) {}
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Value(T v) : kind(std::isfinite(double(v)) ? Real : None), d(double(v)) {}
  Value(std::string v) : kind(Text), s(std::move(v)) {}
  Value(const char* v) : kind(Text), s(v) {}
};

// v where it was measured, else nothing ("-").
inline Value if_known(bool known, double v) { return known ? Value(v) : Value(); }

// One column: its header (also its JSON key), its width, the decimals of a real and a unit printed after
// a number but kept out of the JSON ("x", "%"). Right-aligned unless left().
struct Col {
  std::string header;
  int width = 0;
  int decimals = 0;
  std::string suffix;
  bool align_left = false;

  Col(std::string h, int w, int dec = 0, std::string unit = "")
      : header(std::move(h)), width(w), decimals(dec), suffix(std::move(unit)) {}
  Col& left() {
    align_left = true;
    return *this;
  }
};

// A result table: its header is printed when it is made, each row() prints one aligned line (columns one
// space apart, trailing blanks trimmed) and writes one JSON line {"table": name, header: value, ...}.
class Table {
 public:
  Table(Run& run, std::string name, std::vector<Col> cols) : run_(run), name_(std::move(name)), cols_(cols) {
    std::string line;
    for (const Col& c : cols_) line += pad(c, c.header) + " ";
    print_line(line);
  }

  void row(const std::vector<Value>& cells) {
    if (cells.size() != cols_.size()) {
      fmt::print(stderr, "{}: table {} got {} cells for {} columns (a bug in the bench)\n", run_.name, name_,
                 cells.size(), cols_.size());
      std::exit(2);
    }
    std::string line;
    nlohmann::ordered_json j = {{"table", name_}};
    for (size_t k = 0; k < cols_.size(); ++k) {
      const Col& c = cols_[k];
      const Value& v = cells[k];
      line += pad(c, text(c, v)) + " ";
      if (v.kind == Value::Int) j[c.header] = v.i;
      if (v.kind == Value::Real) j[c.header] = v.d;
      if (v.kind == Value::Text) j[c.header] = v.s;
      if (v.kind == Value::None) j[c.header] = nullptr;
    }
    print_line(line);
    run_.write(j);
  }

 private:
  static std::string text(const Col& c, const Value& v) {
    switch (v.kind) {
      case Value::Int:
        return fmt::format("{}{}", v.i, c.suffix);
      case Value::Real:
        return fmt::format("{:.{}f}{}", v.d, c.decimals, c.suffix);
      case Value::Text:
        return v.s;
      case Value::None:
        break;
    }
    return "-";
  }
  static std::string pad(const Col& c, const std::string& s) {
    return c.align_left ? fmt::format("{:<{}}", s, c.width) : fmt::format("{:>{}}", s, c.width);
  }
  static void print_line(std::string line) {
    line.erase(line.find_last_not_of(' ') + 1);
    fmt::print("{}\n", line);
    std::fflush(stdout);  // rows appear as they are measured, also through a pipe
  }

  Run& run_;
  std::string name_;
  std::vector<Col> cols_;
};

}  // namespace phasescope::bench
