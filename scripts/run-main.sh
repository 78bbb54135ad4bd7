#!/usr/bin/env bash
# run-main.sh — README command 1, the main job: install what is missing, build, and run
# `phasescope reproduce` (train full-1kv, w8s8-1kv, w8s4-1kv; evaluate both padding protocols;
# compare with the paper; write runs/reproduce/report.html). Extra arguments go to reproduce,
# e.g. `scripts/run-main.sh --quick` for the whole pipeline in about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh phasescope_cli
./build/phasescope reproduce "$@"
