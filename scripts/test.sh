#!/usr/bin/env bash
# test.sh — README command 2: install what is missing, check formatting, build, run every test (ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/format.sh --check  # every tracked C++ file as .clang-format says (fix: scripts/format.sh)
bash scripts/build.sh
bash scripts/js_reference.sh   # tokenizer_test reads the real tokenizer.json files from tests/js/node_modules
cd build && ctest --output-on-failure -j"$(nproc)"
