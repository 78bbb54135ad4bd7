#!/usr/bin/env bash
# run-main.sh — README command 1, the main job: install what is missing, build, and run it.
# Until `phasescope reproduce` exists, the main job is the attention zoo's smoke run: every kind
# checked against its loop reference and timed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh phasescope_cli
./build/phasescope zoo "$@"
