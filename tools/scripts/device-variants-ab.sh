#!/usr/bin/env bash
# Runs on the GPU machine (device tool): an interleaved A/B of flashjit
# builds in the variants benchmark (bench/variants_bench.py), with
# FlexAttention timed in the same runs. A variant is a libflashjit.so:
#
#   tools/scripts/device-variants-ab.sh ROUNDS LABEL=LIB [LABEL=LIB ...]
#   env: VARIANTS (default all: window,alibi,softcap,document,blocksparse)
#
# Every round runs each build in turn, so drifting clocks hit all alike.
# The table has, per row of the sweep, each build's median time, its ratio
# to the first build's, and the median over rounds of its time against
# FlexAttention's in the same run ("vs Flex", the issue's measure) and of
# its time over its own dense kernel's in the same run paired with the
# first build's. A run whose check fails never counts. Every run's numbers
# go to $OUT/variants-ab.json, the logs to variants-ab.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:?usage: device-variants-ab.sh ROUNDS LABEL=LIB [LABEL=LIB ...]}
shift
[ $# -ge 2 ] || { echo "give at least two LABEL=LIB builds" >&2; exit 2; }
if [ -f .device-carry/unpack.sh ]; then
  source .device-carry/unpack.sh
fi
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/out}
runs=$(mktemp -d)
for r in $(seq "$rounds"); do
  for build in "$@"; do
    label=${build%%=*} lib=${build#*=}
    FLASHJIT_CACHE_DIR="/tmp/variants-ab-cache-$label" timeout 500 \
      python3 bench/variants_bench.py --lib "$lib" --variants "${VARIANTS:-window,alibi,softcap,document,blocksparse}" \
      --repeats 3 --target-ms 30 --json "$runs/$label-$r.json" > "$runs/$label-$r.log" 2>&1
    echo "round $r of $rounds: $label rc=$?" >&2
  done
done
cat "$runs"/*.log > "$OUT/variants-ab.log" 2>/dev/null
python3 - "$runs" "$OUT/variants-ab.json" "$@" <<'PY'
import collections, json, os, statistics, sys
runs, dump, builds = sys.argv[1], sys.argv[2], [b.split("=", 1)[0] for b in sys.argv[3:]]
ms = collections.defaultdict(lambda: collections.defaultdict(dict))
flex = collections.defaultdict(lambda: collections.defaultdict(dict))
dense = collections.defaultdict(lambda: collections.defaultdict(dict))
record = []
for name in sorted(os.listdir(runs)):
    if not name.endswith(".json"):
        continue
    label, rnd = name[:-5].rsplit("-", 1)
    if label not in builds:
        continue
    points = json.load(open(os.path.join(runs, name)))["points"]
    record.append({"label": label, "round": int(rnd), "points": points})
    for p in points:
        key = (p["variant"], p["shape"])
        res = p["results"]
        if not p.get("check", {}).get("ok", False) or "flashjit" not in res:
            continue
        ms[key][label][rnd] = res["flashjit"]["ms"]
        if "flex" in res:
            flex[key][label][rnd] = res["flex"]["ms"]
        if "flashjit-dense" in res:
            dense[key][label][rnd] = res["flashjit-dense"]["ms"]
json.dump({"builds": builds, "runs": record}, open(dump, "w"), indent=1)
def median(values):
    values = list(values)
    return statistics.median(values) if values else float("nan")
first = builds[0]
print("variant | shape | " + " | ".join(
    f"{b} ms (vs {first}; vs Flex; time/dense paired vs {first})" for b in builds))
for key in ms:
    cells = []
    for b in builds:
        mine = ms[key][b]
        base = median(ms[key][first].values())
        vs_flex = median(flex[key][b][r] / t for r, t in mine.items() if r in flex[key][b])
        rel = [(t / dense[key][b][r]) / (ms[key][first][r] / dense[key][first][r])
               for r, t in mine.items()
               if r in dense[key][b] and r in ms[key][first] and r in dense[key][first]]
        cells.append(f"{median(mine.values()):.3f} ({median(mine.values()) / base:.3f}; "
                     f"{vs_flex:.2f}x; {median(rel):.3f})")
    print(f"{key[0]} | {key[1]} | " + " | ".join(cells))
PY
rm -rf "$runs"
