#!/usr/bin/env bash
# format.sh — clang-format (Debian's, .clang-format: Google style, 110 columns) over every tracked C++
# source. No argument: rewrite the files in place. --check: change nothing, list the files that differ
# and exit 1 if any does (scripts/test.sh runs this, so CI fails on an unformatted file).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format: clang-format is missing (scripts/setup.sh installs it)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.cpp' '*.h' | grep -v '^tests/js/')
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f"); done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "format: ${#bad[@]} of ${#files[@]} files differ from .clang-format: ${bad[*]}" >&2
    echo "format: fix with scripts/format.sh (rewrites them in place)" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files match .clang-format ($(clang-format --version))"
else
  clang-format -i "${files[@]}"
fi
