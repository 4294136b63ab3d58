#!/usr/bin/env bash
# Runs on the GPU machine (device tool): an interleaved A/B of two flashjit
# builds on `flashjit run --json`, the heuristic's config for each shape.
# Every round runs each shape once per build, in turn, so drifting clocks
# hit both alike; the table has each build's median TFLOP/s and its ratio
# to the first build. Builds are `flashjit` binaries (a stripped install's
# bin/flashjit, each with its own kernel cache; the binary holds the
# library itself, so LD_LIBRARY_PATH does not switch builds); the LLVM
# runtime libraries come from .device-carry as for
# tools/scripts/device-gpu-run.sh.
#
#   tools/scripts/device-ab.sh ROUNDS LABEL=BINARY [LABEL=BINARY ...]
#   env: HEAD_DIMS (default "64 128 256"), SEQLENS ("2048 8192"), MASKS
#   ("none causal"), RUN_FLAGS (more `flashjit run` flags, e.g. "--softcap
#   30", or "--backward" to time the backward pass), CHECK_FLAGS (the
#   check's extent, default "--check-rows 8"; the backward's is e.g.
#   "--check-kv-groups 1"), ITERS
#   (timed launches per run, default 40: short bursts run at higher clocks
#   than the benchmark's 50 ms windows); batch x seqlen = 16k and heads x
#   head dim = 2048, as the benchmark.
set -uo pipefail
source "$(dirname "$0")/device-setup.sh" > /dev/null
rounds=${1:?usage: device-ab.sh ROUNDS LABEL=BINARY [LABEL=BINARY ...]}
shift
[ $# -ge 2 ] || { echo "give at least two LABEL=BINARY builds" >&2; exit 2; }
raw="$OUT/ab.txt"
: > "$raw"
for r in $(seq "$rounds"); do
  echo "round $r of $rounds" >&2
  for d in ${HEAD_DIMS:-64 128 256}; do
    for seqlen in ${SEQLENS:-2048 8192}; do
      for mask in ${MASKS:-none causal}; do
        causal=""; [ "$mask" = causal ] && causal=--causal
        for build in "$@"; do
          label=${build%%=*} bin=${build#*=}
          line=$(FLASHJIT_CACHE_DIR="/tmp/ab-cache-$label" timeout 60 "$bin" run \
            --json --head-dim "$d" --heads $((2048 / d)) --batch $((16384 / seqlen)) \
            --seqlen "$seqlen" $causal ${RUN_FLAGS:-} ${CHECK_FLAGS:---check-rows 8} --warmup 10 --iters "${ITERS:-40}" \
            2>>"$OUT/ab.err" | tr -d '\n')
          echo "$label|$d|$seqlen|${causal:+causal}|$line" >> "$raw"
        done
      done
    done
  done
done
python3 - "$raw" <<'PY'
import collections, json, statistics, sys
runs, labels, generators = collections.OrderedDict(), [], {}
for line in open(sys.argv[1]):
    label, d, seqlen, causal, text = line.rstrip("\n").split("|", 4)
    try:
        j = json.loads(text)
        generators.setdefault(label, set()).add(j.get("generator"))
        value = j["tflops"] if j["passed"] else float("nan")
    except (ValueError, KeyError):
        value = float("nan")  # a failed run or a wrong result never counts
    if label not in labels:
        labels.append(label)
    runs.setdefault((d, seqlen, causal), {}).setdefault(label, []).append(value)
print("shape | " + " | ".join(f"{l} TFLOP/s (ratio)" for l in labels))
for (d, seqlen, causal), by in runs.items():
    first = statistics.median(by[labels[0]])
    cells = []
    for l in labels:
        m = statistics.median(by.get(l, [float("nan")]))
        cells.append(f"{m:.1f} ({m / first:.3f})")
    print(f"d{d} s{seqlen} {causal or 'non-causal'} | " + " | ".join(cells))
# Two builds of one generator run the same kernels: say so, the ratios
# then measure noise only.
seen = {}
for label, ids in generators.items():
    for g in ids - {None}:
        if g in seen and seen[g] != label:
            print(f"warning: {seen[g]} and {label} report the same generator {g}: "
                  "the same kernel code ran on both sides")
        seen.setdefault(g, label)
PY
