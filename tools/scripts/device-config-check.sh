#!/usr/bin/env bash
# Runs on the GPU machine (device tool): `flashjit run` of one explicit tile
# config (default: the wgmma template's) over a matrix of shapes (head dims,
# causal, ragged and tiny seqlens, GQA, both layouts, f16/bf16), each run
# under a time limit so that a kernel that hangs shows as a failure. Prints
# one line per run and a count; JSON lines go to $OUT/config-check.jsonl.
# Usage: device-config-check.sh [family-config-for-d64] [for-d128]
set -uo pipefail
source "$(dirname "$0")/device-setup.sh"
c64=${1:-wgmma:m192:n128:s2:w16}
c128=${2:-wgmma:m128:n128:s2:w12}
pass=0 fail=0
run() {
  local line
  # `flashjit run --json` prints one JSON document (several lines) on
  # stdout; diagnostics go to stderr.
  line=$(timeout 60 flashjit run --json "$@" 2>>"$OUT/config-check.err" | tr -d '\n')
  echo "$line" >> "$OUT/config-check.jsonl"
  if python3 -c "import json,sys; j=json.loads(sys.argv[1]); sys.exit(0 if j.get('passed') else 1)" "$line" 2>/dev/null; then
    pass=$((pass + 1))
    python3 -c "import json,sys; j=json.loads(sys.argv[1]); print('ok  ', ' '.join(sys.argv[2:]), 'rel_err %.2e' % j['rel_error'], '%.1f TFLOP/s' % j['tflops'])" "$line" "$@"
  else
    fail=$((fail + 1)); echo "FAIL $* -> ${line:0:400}"
  fi
}
for d in 64 128; do
  cfg=$c64; [ "$d" = 128 ] && cfg=$c128
  for causal in "" --causal; do
    for shape in "--batch 1 --seqlen 1" "--batch 2 --seqlen 77" "--batch 2 --seqlen 1000" \
                 "--batch 1 --seqlen 300 --seqlen-k 1234" "--batch 4 --seqlen 4096"; do
      run --config "$cfg" --head-dim $d $causal --heads 8 $shape
    done
    run --config "$cfg" --head-dim $d $causal --heads 8 --kv-heads 2 --batch 2 --seqlen 999
    run --config "$cfg" --head-dim $d $causal --heads 4 --batch 2 --seqlen 513 --layout bshd
    run --config "$cfg" --head-dim $d $causal --heads 4 --batch 2 --seqlen 700 --dtype f16
  done
done
echo "config check: $pass passed, $fail failed"
