#!/usr/bin/env bash
# Runs on the GPU machine (device tool): the GPU test suite, the `flashjit
# run` checks and timings, with logs into $OUT. Where the whole suite does
# not fit one call, device-gpu-suite.sh runs it in parts. Expects the stripped build
# in .device-bundle and the LLVM runtime libraries in .device-carry.
set -uo pipefail
source "$(dirname "$0")/device-setup.sh"
echo "== GPU test suite"
# Line-buffered, with each test case's duration: a timeout leaves the log so far
# (the whole suite, variants included, takes about 7 minutes on an H100).
timeout 560 stdbuf -oL flashjit-gpu-tests --duration=true > "$OUT/gpu-tests.txt" 2>&1; rc=$?
grep -vE "^\s*$" "$OUT/gpu-tests.txt" | tail -n 40; echo "gpu tests rc=$rc"
echo "== flashjit run (cold, then warm from the disk cache)"
for args in "--causal" "" "--head-dim 64" "--head-dim 64 --causal"; do
  flashjit run --batch 4 --seqlen 4096 --heads 16 $args --json > "$OUT/run-$(echo $args | tr -d ' -').json" 2>&1
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(j['kernel'], 'passed' if j['passed'] else 'FAILED', 'rel_err %.2e' % j['rel_error'], '%.1f TFLOP/s' % j['tflops'], 'compile %.1f ms' % j['compile_ms'], j['cache'])" "$OUT/run-$(echo $args | tr -d ' -').json"
done
flashjit run --batch 4 --seqlen 4096 --heads 16 --causal --json | python3 -c "import json,sys; j=json.load(sys.stdin); print('warm:', j['kernel'], 'compile %.2f ms' % j['compile_ms'], j['cache'])"
flashjit cache list | head -5
