#!/usr/bin/env bash
# js_reference.sh — install the tokenizer references of tests/js (npm ci: the real tokenizer.json files
# and the JS / HF-Rust reference tokenizers, pinned by tests/js/package-lock.json) when missing or stale.
# Idempotent: a stamp holds the lock file's hash, so a second run costs one sha256sum.
# Not a test: tests/tokenizer_test.cpp and bench/tokenizer_bench.cpp use what this installs.
set -euo pipefail
cd "$(dirname "$0")/../tests/js"
stamp=node_modules/.phasescope-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "js_reference: npm ci --prefix tests/js" >&2
npm ci --no-audit --no-fund --loglevel=error
echo "$want" > "$stamp"
