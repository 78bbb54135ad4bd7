#!/usr/bin/env bash
# test.sh — README command 2: install what is missing, build, run every test (ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd build && ctest --output-on-failure -j"$(nproc)"
