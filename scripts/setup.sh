#!/usr/bin/env bash
# Installs nanovllm's build and test dependencies (Debian packages, and the
# npm clients of the end-to-end tests) and builds build/nanovllm. Used by README's quick start and by .ci/run.
# Runs apt-get through sudo when not root. CUDA sources are built when nvcc is
# found (PATH or /usr/local/cuda); CUDA=0 in the environment turns that off.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential pkg-config
  libjansson-dev     # JSON: config.json, safetensors headers, --json output
  libopenblas-dev    # sgemm for the CPU runner
  libxxhash-dev      # prefix-cache block hashes
  libuv1-dev         # the server's event loop
  libpcre2-dev       # tokenizer: pre-tokenizer regexes other than Qwen's (PCRE2 JIT)
  libutf8proc-dev    # tokenizer: NFC and Unicode categories
  clang-14 libclang-rt-14-dev  # make fuzz: clang with the libFuzzer runtime
  libcriterion-dev   # unit tests
  curl               # server tests and make docker-test drive the HTTP API with it
  chromium           # the chat page's test runs it headless (tests/e2e/webui.mjs)
  python3-numpy      # scripts/qwen3_ref.py, scripts/make_random_qwen3.py (make bench's model)
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends "${PACKAGES[@]}"

# The clients of the end-to-end tests (npm is on Debian 12 machines
# of this project; the versions are pinned by tests/e2e/package-lock.json).
npm ci --prefix tests/e2e --no-audit --no-fund

make -j"$(nproc)" all fixtures
