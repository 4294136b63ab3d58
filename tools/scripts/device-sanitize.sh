#!/usr/bin/env bash
# Runs on the GPU machine (device tool): compute-sanitizer memcheck,
# racecheck and synccheck over `flashjit run` of small cases of the default
# configs (head dims 64 and 128, causal and not, ragged seqlens), then an
# Nsight Compute summary (speed of light, warp states) of the head-dim-128
# kernel at b4 h16 s4096. Logs into $OUT.
set -uo pipefail
source "$(dirname "$0")/device-setup.sh" > /dev/null
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do
  for args in "--head-dim 64 --seqlen 200" "--head-dim 128 --causal --seqlen 300 --seqlen-k 333"; do
    name="san-$tool-$(echo $args | tr -d ' -')"
    timeout 240 "$san" --tool "$tool" --error-exitcode 9 flashjit run $args \
      --heads 2 --batch 1 --check-rows 8 --warmup 0 --iters 1 > "$OUT/$name.txt" 2>&1
    echo "$tool [$args]: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hazard' "$OUT/$name.txt" | head -2 | tr '\n' ' ')"
  done
done
timeout 200 ncu --clock-control none --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
  flashjit run --head-dim 128 --heads 16 --batch 4 --seqlen 4096 --check-rows 4 \
  --warmup 0 --iters 4 > "$OUT/ncu-d128.txt" 2>&1
grep -E "SM Frequency|Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Warp Cycles Per Issued|highest-utilized|stalled|stall type" "$OUT/ncu-d128.txt" | cut -c1-160
