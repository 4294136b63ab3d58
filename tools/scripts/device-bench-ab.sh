#!/usr/bin/env bash
# Runs on the GPU machine (device tool): an interleaved A/B of flashjit
# variants inside the benchmark (bench/attention_bench.py, through
# device-bench.sh), with cuDNN timed in the same runs. The benchmark's
# 50 ms windows run at sustained clocks, where power sets the rate; the
# short bursts of `flashjit run` (device-ab.sh) run at boost clocks and can
# show a gain the benchmark does not (docs/performance.md). A variant is a libflashjit.so,
# optionally with a config or family for --flashjit-config:
#
#   tools/scripts/device-bench-ab.sh ROUNDS LABEL=LIB[@CONFIG] [...]
#   env: HEAD_DIMS (default 64,128), SEQLENS (2k,4k,8k,16k), MASK (empty:
#   both; --causal or --no-causal)
#
# Every round runs each variant in turn, so drifting clocks hit all alike.
# The table has each variant's median TFLOP/s per shape, its ratio to the
# first variant and to cuDNN's median over the same runs, and the median
# over rounds of its ratio to the first variant with each run divided by
# the cuDNN of its own run ("paired"): a run at lower clocks (throttled)
# then counts at the rate it had against cuDNN. A run whose output differs
# from SDPA's (device-bench.sh exits 1) never counts. Every run's numbers
# go to $OUT/bench-ab.json (label, round, per point flashjit and cuDNN
# TFLOP/s); the runs' folders are removed unless KEEP_RUNS=1, since the
# device tool returns at most 8 files.
set -uo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:?usage: device-bench-ab.sh ROUNDS LABEL=LIB[@CONFIG] [LABEL=LIB[@CONFIG] ...]}
shift
[ $# -ge 2 ] || { echo "give at least two LABEL=LIB[@CONFIG] variants" >&2; exit 2; }
OUT=${OUT:-/tmp/out}
runs="$OUT/bench-ab"
mkdir -p "$runs"
for r in $(seq "$rounds"); do
  for variant in "$@"; do
    label=${variant%%=*} spec=${variant#*=}
    lib=${spec%%@*} config=""
    [ "$spec" != "$lib" ] && config=${spec#*@}
    dir="$runs/$label-$r"
    FLASHJIT_LIB="$lib" FLASHJIT_CACHE_DIR="/tmp/bench-ab-cache-$label" OUT="$dir" \
      timeout 300 bash tools/scripts/device-bench.sh --head-dims "${HEAD_DIMS:-64,128}" \
      --seqlens "${SEQLENS:-2k,4k,8k,16k}" ${MASK:-} --peers sdpa-cudnn \
      --repeats 5 --target-ms 50 ${config:+--flashjit-config "$config"} \
      > "$dir.log" 2>&1
    echo "round $r of $rounds: $label rc=$?" >&2
  done
done
python3 - "$runs" "$OUT/bench-ab.json" "$@" <<'PY'
import collections, json, os, statistics, sys
runs, dump, variants = sys.argv[1], sys.argv[2], [v.split("=", 1)[0] for v in sys.argv[3:]]
ours = collections.defaultdict(lambda: collections.defaultdict(list))
cudnn = collections.defaultdict(list)
# Per shape, label and round: flashjit over the same run's cuDNN.
paired = collections.defaultdict(lambda: collections.defaultdict(dict))
record = []
for name in sorted(os.listdir(runs)):
    path = os.path.join(runs, name, "bench.json")
    label, rnd = name.rsplit("-", 1)
    if not os.path.exists(path) or label not in variants:
        continue
    points = []
    for p in json.load(open(path))["points"]:
        key = (p["head_dim"], p["causal"], p["seqlen"])
        res = p["results"]
        ok = p.get("check", {}).get("ok", False)
        mine = res["flashjit"]["tflops"] if ok else float("nan")
        ours[key][label].append(mine)
        theirs = res.get("sdpa-cudnn", {}).get("tflops")
        if theirs:
            cudnn[key].append(theirs)
            paired[key][label][rnd] = mine / theirs
        points.append({"head_dim": key[0], "causal": key[1], "seqlen": key[2],
                       "flashjit_tflops": mine, "cudnn_tflops": theirs, "checked": ok})
    record.append({"label": label, "round": int(rnd), "points": points})
json.dump({"variants": variants, "runs": record}, open(dump, "w"), indent=1)
def median(values):
    return statistics.median(values) if values else float("nan")
print("shape | cuDNN | " + " | ".join(
    f"{v} TFLOP/s (vs {variants[0]}, vs cuDNN, paired vs {variants[0]})" for v in variants))
for key in sorted(ours):
    d, causal, seqlen = key
    first, c = median(ours[key][variants[0]]), median(cudnn[key])
    base = paired[key][variants[0]]
    cells = []
    for v in variants:
        m = median(ours[key][v])
        mine = paired[key][v]
        ratio = median([mine[r] / base[r] for r in mine if r in base])
        cells.append(f"{m:.1f} ({m / first:.3f}, {m / c:.3f}, {ratio:.3f})")
    print(f"d{d} s{seqlen} {'causal' if causal else 'non-causal'} | {c:.1f} | " + " | ".join(cells))
PY
cat "$runs"/*.log > "$OUT/bench-ab.log" 2>/dev/null
[ "${KEEP_RUNS:-0}" = 1 ] || rm -rf "$runs"
