#!/usr/bin/env bash
# trials.sh — fault and hostile-input trials (issue 18): kill -9 of train / eval / probe needle with
# results compared to uninterrupted runs, a hostile-HTTP storm against serve with memory before and
# after, tokenizer fuzzing, preset and checkpoint mutations. Prints the counts (crashes, hangs, silent
# acceptances, unclear errors, lost / duplicated samples) and writes runs/trials/summary.json; exits 1
# if any count is not zero. Not part of CI (about 15 minutes on 2 cores). Every run uses one thread.
#   bash scripts/trials.sh                       # everything, default sizes
#   bash scripts/trials.sh --only http,presets   # some sections; --help lists the sizes
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if ! command -v python3 >/dev/null 2>&1; then  # the trials' driver (standard library only); not CI's
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get install -y -qq python3
fi
bash scripts/build.sh
bash scripts/js_reference.sh  # the tokenizer.json files the fuzzing uses
exec python3 scripts/trials.py "$@"
