#!/usr/bin/env bash
# bench.sh — the benchmarks (never part of the tests): attention scaling vs full attention at
# T = 1K/4K/8K, the effect of the runtime set-up (allocator tuning, threads), and the HTTP probe
# client's request rate against an instant local server.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# the PyTorch-Python reference of train_bench (benchmark only; the product stays C++)
if ! dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q "install ok installed"; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get install -y -qq --no-install-recommends python3-torch
fi
bash scripts/build.sh attention_bench runtime_bench train_bench probe_bench
./build/runtime_bench
./build/train_bench
./build/attention_bench --benchmark_color=false
./build/probe_bench
