#!/usr/bin/env bash
# build.sh — configure and build everything (library, CLI, tests, benchmarks) into build/.
# Assumes scripts/setup.sh has run. Uses Ninja and all cores. No arguments: everything.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > build.log 2>&1 || { cat build.log; exit 1; }
# arguments: target names (e.g. `scripts/build.sh phasescope_cli`), or cmake --build options as they are
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then set -- --target "$@"; fi
cmake --build build -j"$(nproc)" "$@"
