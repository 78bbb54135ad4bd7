#!/usr/bin/env bash
# bench.sh — the benchmarks (never part of the tests): attention scaling vs full attention at
# T = 1K/4K/8K, and the effect of the runtime set-up (allocator tuning, threads).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh attention_bench runtime_bench
./build/runtime_bench
./build/attention_bench --benchmark_color=false
