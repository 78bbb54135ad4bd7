// zoo.h — a smoke run over every attention kind: build each at toy size, check the batched module
// against the loop reference on random weights, and time a forward+backward. It is the README's
// main job until `reproduce` exists, and a quick health check of a build. Torch-free interface.
// Not a benchmark (bench/attention_bench.cpp measures scaling) and not a test (tests/ assert).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attention/config.h"

namespace phasescope {

struct ZooRow {
  std::string kind;           // attn_kind_name
  std::string shape;          // e.g. "W8/S8 w16" or "m4 overlap top8 w16"
  double max_rel_err = 0;     // fp64 batched vs reference: max |diff| / max |ref|
  double keys_per_query = 0;  // mean raw tokens + entries a query attends to (from the reference trace)
  double fwd_bwd_ms = 0;      // fp32 forward+backward at the timing length
};

struct ZooOptions {
  int check_tokens = 40;   // T for the reference comparison (the reference is O(T^2))
  int time_tokens = 1024;  // T for the timing
  int batch = 2;
  uint64_t seed = 1234;
};

// The toy configuration the zoo (and the tests) use for a kind.
AttnConfig zoo_config(AttnKind kind);

std::vector<ZooRow> zoo_run(const ZooOptions& opt);
std::string zoo_table(const std::vector<ZooRow>& rows);

}  // namespace phasescope
