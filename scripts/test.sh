#!/usr/bin/env bash
# test.sh — README command 2: install what is missing, check formatting, build, run every test (ctest),
# then the Python package's tests (pytest under Debian's /usr/bin/python3, which has python3-torch).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/format.sh --check  # every tracked C++ file as .clang-format says (fix: scripts/format.sh)
bash scripts/build.sh
bash scripts/js_reference.sh   # tokenizer_test reads the real tokenizer.json files from tests/js/node_modules
(cd build && ctest --output-on-failure -j"$(nproc)")
PYTHONPATH=python PHASESCOPE_THREADS=1 PHASESCOPE_CLI=build/phasescope /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests
