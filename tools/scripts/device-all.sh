#!/usr/bin/env bash
# Runs on the GPU machine (device tool) in one call: the GPU test suite and
# `flashjit run` checks (device-gpu-run.sh), `flashjit autotune` for the
# default buckets (device-autotune.sh), then the side-by-side benchmark with
# the fresh tuning database (device-bench.sh). Everything lands in $OUT,
# packed into one results.tar.gz (the device tool brings back few files).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
export OUT
mkdir -p "$OUT"
bash tools/scripts/device-gpu-run.sh > "$OUT/gpu-run.log" 2>&1
grep -E "MESSAGE|test cases|assertions|ERROR|passed rel|FAILED" "$OUT/gpu-run.log" | head -30
bash tools/scripts/device-autotune.sh --max-candidates 24 > "$OUT/autotune-run.log" 2>&1
grep -A14 "^bucket " "$OUT/autotune-table.txt"
FLASHJIT_TUNING_DB="$OUT/tuning.json" bash tools/scripts/device-bench.sh "$@" \
  > "$OUT/bench-run.log" 2>&1
grep -E "^\|" "$OUT/bench-run.log"
tar -C "$OUT" -czf /tmp/results.tar.gz . && rm -rf "${OUT:?}"/* && mv /tmp/results.tar.gz "$OUT/"
