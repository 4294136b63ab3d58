#!/usr/bin/env bash
# Runs on the GPU machine (device tool): `flashjit autotune --json` for the
# default buckets under `time`, with the database, the JSON summary, the
# progress log and a per-bucket table (heuristic vs tuned TFLOP/s) written
# to $OUT; then, while time is left, checks that the runtime picks the tuned
# configs up ($FLASHJIT_TUNING_DB + `flashjit run --json`) and re-times a few
# buckets both ways. Extra arguments go to `flashjit autotune`. Expects the
# stripped build in .device-bundle and the LLVM runtime libraries in
# .device-carry (as tools/scripts/device-gpu-run.sh).
set -uo pipefail
started=$SECONDS
source "$(dirname "$0")/device-setup.sh"
flashjit autotune --dry-run "$@" > "$OUT/autotune-plan.txt" 2>&1
head -n 2 "$OUT/autotune-plan.txt"

echo "== flashjit autotune --json (progress in autotune-progress.txt)"
{ time timeout 570 flashjit autotune --json --db "$OUT/tuning.json" "$@" \
    > "$OUT/autotune.json" 2> "$OUT/autotune-progress.txt"; } 2> "$OUT/autotune-time.txt"
rc=$?
echo "autotune rc=$rc"; cat "$OUT/autotune-time.txt"
tail -n 5 "$OUT/autotune-progress.txt"
python3 - "$OUT/autotune.json" <<'PY' | tee "$OUT/autotune-table.txt"
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception as e:
    sys.exit(f"no JSON summary: {e}")
print(f"{j['gpu']['name']} (driver {j['gpu']['driver']}), flashjit {j['flashjit_version']}: "
      f"{j['seconds']:.0f} s (budget {j['time_budget_seconds']:.0f} s, spent: {j['budget_spent']}), "
      f"stopped by: {j['stopped_by']}")
print(f"{'bucket':38} {'heuristic':27} {'TFLOP/s':>8}  {'tuned':27} {'TFLOP/s':>8} {'speedup':>7} {'tried':>5} {'failed':>6}")
never_slower = True
for b in j["buckets"]:
    h, t = b["heuristic"], b["tuned"]
    if h and t and t["tflops"] < h["tflops"]:
        never_slower = False
    f = lambda m, k: (f"{m[k]:.1f}" if k == "tflops" else m[k]) if m else "-"
    sp = f"{t['tflops'] / h['tflops']:.2f}x" if h and t else "-"
    print(f"{b['description']:38} {b['heuristic_config'] or '-':27} {f(h, 'tflops'):>8}  "
          f"{f(t, 'config'):27} {f(t, 'tflops'):>8} {sp:>7} {b['tried']:>5} {len(b['failed']):>6}")
    for failed in b["failed"]:
        print(f"    failed {failed['config']}: {failed['error'].splitlines()[0][:160]}")
    if b["error"]:
        print(f"    no entry: {b['error'][:160]}")
print("tuned >= heuristic on every bucket:", never_slower)
print("under 10 minutes:", j["seconds"] < 600)
PY

# The runtime reads the database (tuned), and an empty folder gives the
# heuristic: re-time a few buckets both ways, while the command has time.
mkdir -p /tmp/flashjit-no-tuning
for args in "--head-dim 128" "--head-dim 128 --causal" "--head-dim 64" "--head-dim 64 --causal"; do
  if (( SECONDS - started > 480 )); then echo "skipped the re-timing: out of time"; break; fi
  name=$(echo $args | tr -d ' -')
  heads=$(( 2048 / $(echo $args | awk '{print $2}') ))
  for source in tuned heuristic; do
    db="$OUT/tuning.json"; [ $source = heuristic ] && db=/tmp/flashjit-no-tuning
    FLASHJIT_TUNING_DB=$db flashjit run --batch 8 --seqlen 2048 --heads $heads $args --json \
      > "$OUT/run-$name-$source.json" 2> "$OUT/run-$name-$source.err"
    python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(sys.argv[2], j['kernel'], j['config'], j['config_source'], 'passed' if j['passed'] else 'FAILED', '%.1f TFLOP/s' % j['tflops'])" \
      "$OUT/run-$name-$source.json" "$source" || cat "$OUT/run-$name-$source.err"
  done
done
echo "device-autotune.sh done in $(( SECONDS - started )) s; autotune rc=$rc"
exit $rc
