#!/usr/bin/env bash
# Runs on the GPU machine (device tool): an interleaved A/B of flashjit
# builds on decode steps, `flashjit run --decode --json` (each run checked
# against the float64 reference first), contiguous and paged caches. A
# paged cache is read as a ratio to the contiguous one, so each round times
# the first build's contiguous cache beside every build's paged ones.
# Builds are `flashjit` binaries (a stripped install's bin/flashjit); the
# LLVM runtime libraries come from .device-carry.
#
#   tools/scripts/device-decode-ab.sh ROUNDS LABEL=BINARY [LABEL=BINARY ...]
#   env: POINTS (batch:kv_len, default the issue's sweep from 1:16k to
#   128:16k), PAGES (default "16 64"), HEADS / KV_HEADS / HEAD_DIM (32 / 8 / 128), RUN_FLAGS
#   (more `flashjit run` flags, e.g. "--decode-tile 128,2"), BUDGET_S
#   (start no point after this many seconds, default 480; a point's runs
#   take up to a few seconds each at the sweep's sizes)
#
# Every run's numbers go to $OUT/decode-ab.jsonl; the table has per point
# the contiguous cache's median GB/s and each build's median per page size
# with its ratio to that. A run that fails its check or does not finish
# never counts (the table says how many did not).
set -uo pipefail
source "$(dirname "$0")/device-setup.sh" > /dev/null
rounds=${1:?usage: device-decode-ab.sh ROUNDS LABEL=BINARY [LABEL=BINARY ...]}
shift
[ $# -ge 1 ] || { echo "give at least one LABEL=BINARY build" >&2; exit 2; }
raw="$OUT/decode-ab.jsonl"
: > "$raw"
points=${POINTS:-"1:16384 1:131072 8:16384 8:131072 32:2048 32:16384 128:2048 128:16384"}
heads=${HEADS:-32} kvHeads=${KV_HEADS:-8} headDim=${HEAD_DIM:-128}
start=$SECONDS
# One run: label, binary, round, batch, KV length, page size (0: contiguous).
run1() {
  local label=$1 bin=$2 round=$3 batch=$4 len=$5 page=$6
  local paged=""
  ((page > 0)) && paged="--page-size $page"
  local out
  # Each of `run --decode`'s samples is back-to-back launches of 10 ms or
  # more: 30 samples take about 0.3 s at any size.
  out=$(timeout 120 "$bin" run --decode --json --batch "$batch" --kv-len "$len" \
    --heads "$heads" --kv-heads "$kvHeads" --head-dim "$headDim" --dtype bf16 \
    --q-len 1 --iters 30 --warmup 10 --check-rows 16 $paged ${RUN_FLAGS:-} \
    2>> "$OUT/decode-ab.err" | tr -d '\n')
  echo "{\"label\":\"$label\",\"round\":$round,\"batch\":$batch,\"kv_len\":$len,\"page_size\":$page,\"out\":${out:-null}}" >> "$raw"
}
first=${1%%=*} firstBin=${1#*=}
for r in $(seq "$rounds"); do
  echo "round $r of $rounds" >&2
  for point in $points; do
    # Past the budget no point starts, so the table below still comes out
    # inside the caller's time limit (with the points that ran).
    if ((SECONDS - start > ${BUDGET_S:-480})); then
      echo "stopped in round $r before $point: past BUDGET_S" >&2
      break 2
    fi
    batch=${point%%:*} len=${point#*:}
    run1 "$first" "$firstBin" "$r" "$batch" "$len" 0
    for build in "$@"; do
      for page in ${PAGES:-16 64}; do
        run1 "${build%%=*}" "${build#*=}" "$r" "$batch" "$len" "$page"
      done
    done
  done
done
python3 - "$raw" "$first" <<'PY'
import collections, json, statistics, sys
raw, first = sys.argv[1], sys.argv[2]
runs = collections.defaultdict(list)
labels, pages, missing = [], set(), 0
for line in open(raw):
    r = json.loads(line)
    out = r["out"]
    if r["label"] not in labels:
        labels.append(r["label"])
    pages.add(r["page_size"])
    if not out or not out.get("passed"):
        missing += 1
        continue
    runs[(r["batch"], r["kv_len"], r["label"], r["page_size"])].append(out["gb_per_s"])
def median(key):
    return statistics.median(runs[key]) if runs[key] else float("nan")
columns = [(lab, p) for p in sorted(pages) if p for lab in labels]
print(f"runs failed or missing: {missing}")
print("batch x KV | contiguous (" + first + ") | " +
      " | ".join(f"page {p} {lab}" for lab, p in columns) + "  (GB/s medians; ratio to contiguous)")
for batch, length in sorted({(k[0], k[1]) for k in runs}):
    c = median((batch, length, first, 0))
    cells = [f"{median((batch, length, lab, p)):.0f} ({median((batch, length, lab, p)) / c:.3f})"
             for lab, p in columns]
    print(f"{batch} x {length} | {c:.0f} | " + " | ".join(cells))
PY
