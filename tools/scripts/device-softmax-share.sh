#!/usr/bin/env bash
# Runs on the GPU machine (device tool): what share of the mma_sync kernel's
# time the softmax takes. Times each config with `flashjit run --config` and
# its measurement-only twin mma_sync_nosoftmax (P = S: no mask, max, exp2,
# sum or rescale; its output is wrong by design, so its check fails) at
# b=4 h=16 s=4096 bf16, and prints 1 - t(no softmax) / t(full).
set -uo pipefail
source "$(dirname "$0")/device-setup.sh"
for entry in "64 m128:n64:s2:w4" "128 m128:n48:s1:w4"; do
  set -- $entry
  for causal in "" "--causal"; do
    for family in mma_sync mma_sync_nosoftmax; do
      flashjit run --head-dim "$1" $causal --batch 4 --seqlen 4096 --heads 16 \
        --iters 50 --config "$family:$2" --json > "$OUT/share-$1$causal-$family.json" 2>/dev/null
    done
    python3 - "$OUT/share-$1$causal-mma_sync.json" "$OUT/share-$1$causal-mma_sync_nosoftmax.json" "$1" "$causal" "$2" <<'PY'
import json, sys
full, ablated = (json.load(open(p)) for p in sys.argv[1:3])
share = 1 - ablated["median_ms"] / full["median_ms"]
print(f"d{sys.argv[3]} {sys.argv[4] or 'non-causal'} {sys.argv[5]}: full {full['median_ms']:.3f} ms "
      f"({full['tflops']:.1f} TFLOP/s, check {'passed' if full['passed'] else 'FAILED'}), "
      f"without softmax {ablated['median_ms']:.3f} ms: softmax share {share * 100:.1f}%")
PY
  done
done
