#!/usr/bin/env bash
# Runs on the GPU machine (device tool): the variants GPU tests and `flashjit
# run` checks of each preset, logs into $OUT. Expects the stripped build in
# .device-bundle and the LLVM runtime libraries in .device-carry.
set -uo pipefail
source "$(dirname "$0")/device-setup.sh"
echo "== variants GPU tests"
timeout ${VARIANT_TEST_TIMEOUT:-400} stdbuf -oL flashjit-gpu-tests --duration=true \
  --test-case='structural masks*,score and mask mods*,soft-cap at spread*' \
  > "$OUT/variants-tests.txt" 2>&1; rc=$?
grep -vE "^\s*$" "$OUT/variants-tests.txt" | tail -n 40; echo "variants tests rc=$rc"
echo "== flashjit run per preset (b2 h16 s8192 d128)"
for args in "--causal" "--causal --window 1024,0" "--causal --alibi" "--softcap 30" \
            "--documents 8" "--prefix-lm" "--causal --causal-align bottom-right --seqlen-k 16384"; do
  name=$(echo $args | tr -d ' -,')
  flashjit run --batch 2 --seqlen 8192 --heads 16 --iters 20 --warmup 5 $args --json \
    > "$OUT/run-$name.json" 2> "$OUT/run-$name.err"
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(sys.argv[2], j['config'], 'passed' if j['passed'] else 'FAILED', 'rel_err %.2e' % j['rel_error'], '%.1f TFLOP/s' % j['tflops'], 'compile %.0f ms' % j['compile_ms'])" "$OUT/run-$name.json" "$args" || tail -3 "$OUT/run-$name.err"
done
