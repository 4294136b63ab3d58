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
# first variant and to cuDNN's median over the same runs; a run whose
# output differs from SDPA's (device-bench.sh exits 1) never counts.
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
python3 - "$runs" "$@" <<'PY'
import collections, json, os, statistics, sys
runs, variants = sys.argv[1], [v.split("=", 1)[0] for v in sys.argv[2:]]
ours = collections.defaultdict(lambda: collections.defaultdict(list))
cudnn = collections.defaultdict(list)
for name in sorted(os.listdir(runs)):
    path = os.path.join(runs, name, "bench.json")
    label = name.rsplit("-", 1)[0]
    if not os.path.exists(path) or label not in variants:
        continue
    for p in json.load(open(path))["points"]:
        key = (p["head_dim"], p["causal"], p["seqlen"])
        res = p["results"]
        ok = p.get("check", {}).get("ok", False)
        ours[key][label].append(res["flashjit"]["tflops"] if ok else float("nan"))
        if "sdpa-cudnn" in res:
            cudnn[key].append(res["sdpa-cudnn"]["tflops"])
def median(values):
    return statistics.median(values) if values else float("nan")
print("shape | cuDNN | " + " | ".join(f"{v} TFLOP/s (vs {variants[0]}, vs cuDNN)" for v in variants))
for key in sorted(ours):
    d, causal, seqlen = key
    first, c = median(ours[key][variants[0]]), median(cudnn[key])
    cells = []
    for v in variants:
        m = median(ours[key][v])
        cells.append(f"{m:.1f} ({m / first:.3f}, {m / c:.3f})")
    print(f"d{d} s{seqlen} {'causal' if causal else 'non-causal'} | {c:.1f} | " + " | ".join(cells))
PY
