#!/usr/bin/env bash
# Runs on the GPU machine (device tool): compute-sanitizer memcheck,
# racecheck and synccheck over `flashjit run` of small cases of the default
# configs (head dims 64 and 128, causal and not, ragged seqlens; the
# persistent ones also with more tiles than the grid has blocks), then an
# Nsight Compute summary (speed of light, warp states, pipes) of three
# default kernels: head dim 128 non-causal at b2 h16 s8192, head dim 128
# and 64 causal at the benchmark's 2k shape. Logs into $OUT.
set -uo pipefail
source "$(dirname "$0")/device-setup.sh" > /dev/null
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do
  for args in "--head-dim 64 --seqlen 200 --heads 2 --batch 1" \
              "--head-dim 128 --causal --seqlen 300 --seqlen-k 333 --heads 2 --batch 1" \
              "--head-dim 128 --causal --seqlen 1024 --heads 4 --batch 8" \
              "--head-dim 64 --causal --seqlen 1000 --heads 4 --batch 8" \
              "--head-dim 128 --seqlen 1000 --heads 4 --batch 8"; do
    name="san-$tool-$(echo $args | tr -d ' -')"
    timeout 240 "$san" --tool "$tool" --error-exitcode 9 flashjit run $args \
      --check-rows 8 --warmup 0 --iters 1 > "$OUT/$name.txt" 2>&1
    echo "$tool [$args]: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hazard' "$OUT/$name.txt" | head -2 | tr '\n' ' ')"
  done
done
for shape in "--head-dim 128 --heads 16 --batch 2 --seqlen 8192" \
             "--head-dim 128 --heads 16 --batch 8 --seqlen 2048 --causal" \
             "--head-dim 64 --heads 32 --batch 8 --seqlen 2048 --causal"; do
  name="ncu-$(echo $shape | tr -d ' -')"
  timeout 200 ncu --clock-control none --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
    flashjit run $shape --check-rows 4 --warmup 0 --iters 4 > "$OUT/$name.txt" 2>&1
  echo "== $shape: rc=$? ($(grep -o '[a-z_]*:m[0-9]*:n[0-9]*:s[0-9]*:w[0-9]*' "$OUT/$name.txt" | head -1))"
  grep -E "SM Frequency|Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Warp Cycles Per Issued|highest-utilized|stalled|stall type" "$OUT/$name.txt" | cut -c1-160
done
