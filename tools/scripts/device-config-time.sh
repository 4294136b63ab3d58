#!/usr/bin/env bash
# Runs on the GPU machine (device tool): `flashjit run` of several explicit
# tile configs on the benchmark's shape (batch x seqlen = 16k tokens,
# hidden 2048), causal and not, to compare configs of one template in one
# call. Prints one line per (config, causal); JSON lines go to
# $OUT/config-time.jsonl.
# Usage: device-config-time.sh SEQLEN CONFIG@HEADDIM...
set -uo pipefail
source "$(dirname "$0")/device-setup.sh" > /dev/null
seqlen=${1:?usage: device-config-time.sh SEQLEN CONFIG@HEADDIM...}
shift
for item in "$@"; do
  config=${item%@*} d=${item#*@}
  heads=$((2048 / d)) batch=$((16384 / seqlen))
  for causal in "" --causal; do
    line=$(timeout 120 flashjit run --json --config "$config" --head-dim "$d" \
             --heads "$heads" --batch "$batch" --seqlen "$seqlen" $causal \
             --check-rows 16 --warmup 5 --iters 30 2>>"$OUT/config-time.err" | tr -d '\n')
    echo "$line" >> "$OUT/config-time.jsonl"
    python3 -c "import json,sys
try:
  j=json.loads(sys.argv[1]); print('%-26s d%-3s %-6s %s %6.1f TFLOP/s rel %.1e' % (sys.argv[2], sys.argv[3], 'causal' if sys.argv[4] else '', 'ok  ' if j['passed'] else 'FAIL', j['tflops'], j['rel_error']))
except Exception as e: print('FAIL', sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[1][:200])" "$line" "$config" "$d" "$causal"
  done
done
