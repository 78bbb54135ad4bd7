#!/usr/bin/env bash
# bench.sh — the benchmarks (never part of the tests): attention scaling vs full attention at
# T = 1K/4K/8K, the effect of the runtime set-up (allocator tuning, threads), training speed vs
# PyTorch-Python, tokenizer encode speed vs the JavaScript reference (tests/js, via npm), the
# HTTP server under load (serve_bench: req/s and latency at 1/8/64 clients, batched vs unbatched),
# the HTTP probe client's request rate against an instant local server (probe_bench), and decoding with
# the compressed KV cache per kind (decode_bench: cache bytes per token, cached step vs whole forward);
# then the plain per-call costs through Google Benchmark (micro_bench: the probe client's request body and
# reply parse, the sgemm rate); and data-parallel scaling of train on the language-model preset
# (dist_bench: 2 ranks x 1 thread vs 1 x 1, which builds the corpus first if runs/corpus lacks it), and the
# Python package against the C++ calls it wraps (bench/python_bench.py).
# Every bench prints aligned tables; their rows also go, one JSON object per
# line, to build/bench-results.jsonl (bench/bench_common.h: --json FILE), micro_bench's to
# build/micro_bench.json (Google Benchmark's own format).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# the PyTorch-Python reference of train_bench (benchmark only; the product stays C++)
if ! dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q "install ok installed"; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get install -y -qq --no-install-recommends python3-torch
fi
bash scripts/build.sh --target attention_bench decode_bench runtime_bench train_bench tokenizer_bench serve_bench \
  probe_bench micro_bench dist_bench phasescope_cli
bash scripts/js_reference.sh   # the real tokenizer.json files and the JS reference tokenizer_bench runs
results=build/bench-results.jsonl   # appended to: one run line per bench, then its rows
./build/tokenizer_bench --json "$results"
./build/runtime_bench --json "$results"
./build/train_bench --json "$results"
./build/attention_bench --json "$results"
./build/decode_bench --json "$results"
./build/serve_bench --json "$results"
./build/probe_bench --json "$results"
[ -f runs/corpus/manifest.json ] || ./build/phasescope corpus build --out runs/corpus
./build/dist_bench --json "$results"
bash scripts/build.sh phasescope_python
PYTHONPATH=python PHASESCOPE_CLI=build/phasescope /usr/bin/python3 bench/python_bench.py --json "$results"
./build/micro_bench --benchmark_color=false --benchmark_out=build/micro_bench.json --benchmark_out_format=json
echo "bench: rows in $results, micro_bench in build/micro_bench.json"
