#!/usr/bin/env bash
# Runs on the GPU machine (device tool): the paged varlen GPU tests, then
# varlen prefill with K/V packed (page size 0) and in paged caches of 16,
# 32, 64 and 256 tokens, on the same shapes, each launch checked against
# the float64 reference first and timed (`flashjit run --varlen ...
# --page-size P`; median of 30 launches); ROUNDS rounds, interleaved.
# Expects the stripped build in .device-bundle and the LLVM runtime
# libraries in .device-carry. Logs and JSON rows into $OUT.
set -uo pipefail
source "$(dirname "$0")/device-setup.sh" > /dev/null
H="--heads 32 --kv-heads 8 --head-dim 128 --dtype bf16"
BR="--causal --causal-align bottom-right"
timeout ${PAGED_TEST_TIMEOUT:-200} flashjit-gpu-tests --test-case="varlen paged*" \
  > "$OUT/varlen-paged-tests.txt" 2>&1
echo "varlen paged tests rc=$?"; tail -n 3 "$OUT/varlen-paged-tests.txt"
repeat() {
  local n=$1 len=$2
  local out=$len
  for ((i = 1; i < n; ++i)); do out+=",$len"; done
  echo "$out"
}
SHAPES=(
  "--varlen $(repeat 4 4096) --causal"
  "--varlen $(repeat 16 1024) --causal"
  "--varlen $(repeat 8 512) --varlen-k $(repeat 8 8192) $BR"
  "--varlen $(repeat 2 8192) --config wgmma:m128:n128:s2:w12"
)
for round in $(seq 1 "${ROUNDS:-2}"); do
  for shape in "${SHAPES[@]}"; do
    for page in 0 16 32 64 256; do
      flashjit run $shape $H --page-size $page --check-rows 2 --iters 30 \
        --warmup 5 --json > "$OUT/row.json" 2>&1
      python3 - "$OUT/row.json" "$round" "$page" "$shape" <<'PY' | tee -a "$OUT/varlen-paged.jsonl"
import json, sys
row = json.load(open(sys.argv[1]))
print(json.dumps({"round": int(sys.argv[2]), "page_size": int(sys.argv[3]),
                  "shape": sys.argv[4], "config": row["config"],
                  "passed": row["passed"], "tflops": row["tflops"],
                  "median_ms": row["median_ms"]}))
PY
    done
  done
done
