#!/usr/bin/env bash
# setup.sh — install every Debian package phasescope needs, idempotently.
# Called by both README commands (scripts/run-main.sh, scripts/test.sh); safe to run again.
# Not a build script: building is CMake's job (scripts/build.sh).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev            # PyTorch 1.13 C++ API: tensors + autograd, c10d process groups
  libgloo-dev             # the headers c10d's Gloo process group needs (data-parallel train, src/dist)
  python3-torch pybind11-dev  # the Python package (python/): phasescope._core binds the C++ library to torch
  python3-pytest python3-numpy  # its tests (scripts/test.sh runs them)
  python3-jinja2          # chat templates, rendered as transformers renders them (--chat-template)
  libopenblas0-openmp     # without it libtorch's matmuls use the slow reference BLAS
  nlohmann-json3-dev      # JSON configs, journals, checkpoint headers
  libcli11-dev            # CLI parsing
  libpcre2-dev            # Unicode regexes of HuggingFace pre-tokenizers (src/tokenizer)
  libutf8proc-dev         # Unicode normalization (NFC, ...) of HuggingFace normalizers (src/tokenizer)
  nodejs                  # the JavaScript reference tokenizers of the tests and bench (tests/js, npm ci)
  libcpp-httplib-dev      # HTTP client for probes, HTTP server for `phasescope serve`
  libfmt-dev              # formatting
  libgtest-dev libgmock-dev  # tests (ctest)
  libbenchmark-dev        # bench/
  gnuplot-nox             # plots (PNG via the pngcairo terminal)
  clang-format            # scripts/format.sh --check: the tests refuse unformatted sources (.clang-format)
  chromium                # headless check that the HTML report renders its figures (tests/eval_report_test)
  zlib1g-dev              # the corpus reads the kernel documentation's .gz files (src/data/corpus_sources.cpp)
  # the language models' corpus (phasescope corpus build; sizes and licences: docs/lm/corpus.md)
  libpython3.11-stdlib libpython3.11-testsuite  # code: CPython's standard library and its tests (*.py)
  python3.11-doc          # prose: the Python documentation's reST sources
  linux-doc-6.1           # prose: the Linux kernel's Documentation/ (reST and text, gzip-compressed)
  bible-kjv               # prose: the King James bible (its data file and `bible`, the only reader of it)
  fortunes                # prose: fortune cookies (everyday English, many animal words and names)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# npm: Debian's package, unless an npm is already there (a nodejs from NodeSource ships its own npm,
# and Debian's npm package conflicts with that nodejs)
if ! command -v npm >/dev/null 2>&1; then
  dpkg-query -W -f='${Status}' npm 2>/dev/null | grep -q "install ok installed" || missing+=(npm)
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
