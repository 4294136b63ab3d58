#!/usr/bin/env bash
# Runs on the GPU machine (device tool): an interleaved A/B of flashjit
# builds on varlen prefill with equal lengths against the dense kernel of
# the same shape, `flashjit run --json` (each run checked against the
# float64 reference first). Varlen's goal is the dense kernel's rate, so
# each round times the first build's dense kernel beside every build's
# varlen kernel. Builds are `flashjit` binaries (a stripped install's
# bin/flashjit; the binary links flashjit statically, so an older build can
# travel as one file); the LLVM runtime libraries come from .device-carry.
#
#   tools/scripts/device-varlen-ab.sh ROUNDS LABEL=BINARY [LABEL=BINARY ...]
#   env: POINTS (batch:seqlen, default "16:1024 4:4096"), CAUSAL ("yes no"),
#   HEADS / KV_HEADS / HEAD_DIM (16 / HEADS / 128), DENSE_LAYOUTS (the
#   dense kernel's layouts timed each round, default "bhsd"; "bhsd bshd"
#   also times it in the packed tensors' token-major layout), ITERS (timed
#   calls per run, default 100: at 30 single rounds of 16 x 1024 moved by a
#   few percent), RUN_FLAGS (more `flashjit run` flags, e.g. "--config
#   wgmma_persistent"), BUDGET_S (start no round after this many seconds,
#   default 480; on an H100 a round of the default points with one build
#   and both layouts took about 55 s, the first one more for the cold
#   compiles)
#
# Every run's numbers go to $OUT/varlen-ab.jsonl; the table has per point
# the dense kernel's median TFLOP/s in each layout and each build's varlen
# median with its ratio to each. A run that fails its check or does not
# finish never counts (the table says how many did not).
set -uo pipefail
source "$(dirname "$0")/device-setup.sh" > /dev/null
rounds=${1:?usage: device-varlen-ab.sh ROUNDS LABEL=BINARY [LABEL=BINARY ...]}
shift
[ $# -ge 1 ] || { echo "give at least one LABEL=BINARY build" >&2; exit 2; }
raw="$OUT/varlen-ab.jsonl"
: > "$raw"
points=${POINTS:-"16:1024 4:4096"}
heads=${HEADS:-16} kvHeads=${KV_HEADS:-${HEADS:-16}} headDim=${HEAD_DIM:-128}
start=$SECONDS
# One run: label, binary, round, batch, seqlen, causal (yes/no), kind
# (dense-LAYOUT or varlen).
run1() {
  local label=$1 bin=$2 round=$3 batch=$4 len=$5 causal=$6 kind=$7
  local shape mask=""
  [ "$causal" = yes ] && mask=--causal
  if [ "$kind" != varlen ]; then
    shape="--batch $batch --seqlen $len --layout ${kind#dense-}"
  else
    shape="--varlen $(python3 -c "print(','.join(['$len'] * $batch))")"
  fi
  local out
  out=$(timeout 120 "$bin" run --json $shape --heads "$heads" \
    --kv-heads "$kvHeads" --head-dim "$headDim" --dtype bf16 $mask \
    --iters "${ITERS:-100}" --warmup 10 --check-rows 2 ${RUN_FLAGS:-} \
    2>> "$OUT/varlen-ab.err" | tr -d '\n')
  echo "{\"label\":\"$label\",\"kind\":\"$kind\",\"round\":$round,\"batch\":$batch,\"seqlen\":$len,\"causal\":\"$causal\",\"out\":${out:-null}}" >> "$raw"
}
first=${1%%=*} firstBin=${1#*=}
for r in $(seq "$rounds"); do
  if ((SECONDS - start > ${BUDGET_S:-480})); then
    echo "stopped before round $r: past BUDGET_S" >&2
    break
  fi
  echo "round $r of $rounds" >&2
  for causal in ${CAUSAL:-yes no}; do
    for point in $points; do
      batch=${point%%:*} len=${point#*:}
      for layout in ${DENSE_LAYOUTS:-bhsd}; do
        run1 "$first" "$firstBin" "$r" "$batch" "$len" "$causal" "dense-$layout"
      done
      for build in "$@"; do
        run1 "${build%%=*}" "${build#*=}" "$r" "$batch" "$len" "$causal" varlen
      done
    done
  done
done
python3 - "$raw" "$first" <<'PY'
import collections, json, statistics, sys
raw, first = sys.argv[1], sys.argv[2]
runs = collections.defaultdict(list)
labels, layouts, missing = [], [], 0
for line in open(raw):
    r = json.loads(line)
    out = r["out"]
    if r["kind"] == "varlen" and r["label"] not in labels:
        labels.append(r["label"])
    if r["kind"] != "varlen" and r["kind"] not in layouts:
        layouts.append(r["kind"])
    if not out or not out.get("passed"):
        missing += 1
        continue
    runs[(r["batch"], r["seqlen"], r["causal"], r["kind"], r["label"])].append(out["tflops"])
def median(key):
    return statistics.median(runs[key]) if runs[key] else float("nan")
print(f"runs failed or missing: {missing}")
print(f"point | causal | " + " | ".join(f"{lay} ({first})" for lay in layouts) + " | "
      + " | ".join(f"varlen {lab}" for lab in labels)
      + "  (TFLOP/s medians; ratio to each dense median)")
for batch, length, causal in sorted({k[:3] for k in runs}):
    dense = [median((batch, length, causal, lay, first)) for lay in layouts]
    cells = []
    for lab in labels:
        v = median((batch, length, causal, "varlen", lab))
        cells.append(f"{v:.1f} (" + ", ".join(f"{v / d:.3f}" for d in dense) + ")")
    print(f"{batch} x {length} | {causal} | " + " | ".join(f"{d:.1f}" for d in dense)
          + " | " + " | ".join(cells))
PY
