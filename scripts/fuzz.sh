#!/usr/bin/env bash
# Fuzz Weft's input handling with cargo-fuzz (libFuzzer), each target for a fixed number of
# inputs starting from the seed corpus in fuzz/corpus/<target>:
#   frames     inbound frame decoding, JSON and MessagePack
#   arguments  tool-argument parsing and validation, result truncation
# Usage: scripts/fuzz.sh [inputs per target, default 1000000]
# Works on the stable toolchain (no sanitizer). A crash leaves its input in fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
runs="${1:-1000000}"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked --quiet
for target in frames arguments; do
  # A scratch copy of the seeds: libFuzzer adds what it finds to the corpus directory.
  work="$(mktemp -d)"
  cp "corpus/$target"/* "$work/"
  echo "fuzz.sh: $target, $runs inputs"
  cargo fuzz run "$target" --sanitizer none "$work" -- -runs="$runs" -max_len=65536 2>&1 \
    | grep -E "^(Done|==|INFO: seed corpus)|panicked|SUMMARY" || true
  status=${PIPESTATUS[0]}
  rm -rf "$work"
  [ "$status" -eq 0 ] || { echo "fuzz.sh: $target failed"; exit 1; }
done
