#!/usr/bin/env bash
# Runs on the GPU machine (device tool): the variants GPU tests and `flashjit
# run` checks of each preset, logs into $OUT. Expects the stripped build in
# .device-bundle and the LLVM runtime libraries in .device-carry.
set -uo pipefail
source "$(dirname "$0")/device-setup.sh"
echo "== variants GPU tests"
timeout ${VARIANT_TEST_TIMEOUT:-400} stdbuf -oL flashjit-gpu-tests --duration=true \
  --test-case="${VARIANT_TESTS:-structural masks*,score and mask mods*,soft-cap at spread*,block-sparse*}" \
  > "$OUT/variants-tests.txt" 2>&1; rc=$?
grep -vE "^\s*$" "$OUT/variants-tests.txt" | tail -n 40; echo "variants tests rc=$rc"
echo "== flashjit run per preset (h16 d128; batch x seqlen as given)"
while IFS='|' read -r shape args; do
  [ -z "$shape" ] && continue
  name=$(echo "$shape $args" | tr -d ' -,.')
  flashjit run $shape --heads 16 --iters 20 --warmup 5 $args --json \
    > "$OUT/run-$name.json" 2> "$OUT/run-$name.err"
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); m=j.get('block_mask', {}); print(sys.argv[2], j['config'], '%.3f ms' % j['median_ms'], 'passed' if j['passed'] else 'FAILED', 'rel_err %.2e' % j['rel_error'], '%.1f TFLOP/s' % j['tflops'], 'compile %.0f ms' % j['compile_ms'], ('mask %s %.2f ms listed %.3f host %s' % (m['source'], m['build_ms'], m['listed_fraction'], m['matches_host'] if m['host_checked'] else 'unchecked')) if m.get('source') == 'gpu' else '')" "$OUT/run-$name.json" "$shape $args" || tail -3 "$OUT/run-$name.err"
done <<'RUNS'
--batch 2 --seqlen 8192|
--batch 2 --seqlen 8192|--causal
--batch 2 --seqlen 8192|--causal --window 1024,0
--batch 2 --seqlen 8192|--causal --alibi
--batch 2 --seqlen 8192|--softcap 30
--batch 2 --seqlen 8192|--documents 8
--batch 2 --seqlen 8192|--prefix-lm
--batch 2 --seqlen 8192|--causal --causal-align bottom-right --seqlen-k 16384
--batch 2 --seqlen 8192|--documents 8 --sparse-block 128,128 --block-sparse 0.3
--batch 2 --seqlen 8192|--documents 8 --sparse-block 128,128
--batch 2 --seqlen 8192|--documents 8 --causal --sparse-block 128,128
--batch 1 --seqlen 1000|--documents 4 --causal --sparse-block 128,128
--batch 2 --seqlen 4096|--prefix-lm --sparse-block 128,128
--batch 1 --seqlen 16384|
--batch 1 --seqlen 16384|--block-sparse 0.1
--batch 1 --seqlen 16384|--block-sparse 0.25
--batch 1 --seqlen 16384|--block-sparse 0.5
RUNS
