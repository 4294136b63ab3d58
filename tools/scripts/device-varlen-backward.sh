#!/usr/bin/env bash
# Runs on the GPU machine (device tool): the varlen backward's GPU cases,
# the dense backward's and the varlen forward's (the code they share), the
# Python package's varlen tests (gradients through varlen_attention), then
# `flashjit run --varlen ... --backward` beside `flashjit run --backward` on
# the same tokens (equal lengths: the varlen backward against the dense
# one, interleaved rounds), and a batch of many short sequences. Logs and
# JSON lines in $OUT. Env: QUICK=1 skips the dense backward's and varlen
# forward's suites, PYTHON_TESTS=0 the Python tests, ROUNDS (default 2)
# the timing rounds; the whole script can outlast one device call (600 s),
# so split it across calls with these.
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/scripts/device-setup.sh
ROUNDS=${ROUNDS:-2}
flashjit-gpu-tests -tc="varlen backward*" > "$OUT/varlen-backward-tests.log" 2>&1
echo "varlen backward cases: rc=$?"; grep -E "test cases|assertions" "$OUT/varlen-backward-tests.log"
grep -E "FAILED|ERROR" "$OUT/varlen-backward-tests.log" | head -20
if [ "${QUICK:-0}" = 0 ]; then
  flashjit-gpu-tests -tc="backward*,varlen*" -tce="varlen backward*" > "$OUT/backward-varlen-tests.log" 2>&1
  echo "backward and varlen cases: rc=$?"; grep -E "test cases|assertions" "$OUT/backward-varlen-tests.log"
  grep -E "FAILED|ERROR" "$OUT/backward-varlen-tests.log" | head -20
fi
if [ "${PYTHON_TESTS:-1}" = 1 ]; then
  PYTEST_ARGS="test_gpu_varlen.py" PYTEST_TIMEOUT=240 bash tools/scripts/device-python.sh \
    > "$OUT/python-varlen.log" 2>&1
  tail -3 "$OUT/python-varlen.log"
fi
# Equal lengths: varlen against dense, same tokens (16k), d128 and d64.
: > "$OUT/varlen-backward-timing.jsonl"
lengths() { local n=$1 s=$2 out=""; for _ in $(seq "$n"); do out="$out$s,"; done; echo "${out%,}"; }
for round in $(seq "$ROUNDS"); do
  for d in 128 64; do
    heads=$((2048 / d))
    for causal in "" --causal; do
      for shape in 4:4096 16:1024 2:8192; do
        b=${shape%%:*} s=${shape##*:}
        flashjit run --backward --batch "$b" --seqlen "$s" --heads "$heads" --head-dim "$d" \
          $causal --iters 20 --warmup 5 --check-kv-groups 2 --json \
          | python3 -c "import json,sys; j=json.load(sys.stdin); j.update(kind='dense', round=$round); print(json.dumps(j))" \
          >> "$OUT/varlen-backward-timing.jsonl"
        flashjit run --varlen "$(lengths "$b" "$s")" --backward --heads "$heads" --head-dim "$d" \
          $causal --iters 20 --warmup 5 --check-kv-groups 2 --json \
          | python3 -c "import json,sys; j=json.load(sys.stdin); j.update(kind='varlen', round=$round, batch=$b, seqlen=$s); print(json.dumps(j))" \
          >> "$OUT/varlen-backward-timing.jsonl"
      done
    done
  done
done
# Many short sequences (8192 x 34) against the same tokens padded to 64.
flashjit run --varlen "$(lengths 8192 34)" --backward --heads 16 --head-dim 128 --causal --check-kv-groups 4 \
  --iters 20 --warmup 5 --json \
  | python3 -c "import json,sys; j=json.load(sys.stdin); j.update(kind='varlen-short'); print(json.dumps(j))" \
  >> "$OUT/varlen-backward-timing.jsonl"
flashjit run --backward --batch 8192 --seqlen 64 --heads 16 --head-dim 128 --causal \
  --iters 20 --warmup 5 --check-kv-groups 2 --json \
  | python3 -c "import json,sys; j=json.load(sys.stdin); j.update(kind='dense-padded-64'); print(json.dumps(j))" \
  >> "$OUT/varlen-backward-timing.jsonl"
python3 - "$OUT/varlen-backward-timing.jsonl" <<'PY'
import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
bad = [r for r in rows if not r.get("passed")]
print(f"{len(rows)} runs, {len(bad)} failed checks")
key = lambda r: (r["head_dim"], r["causal"], r.get("batch"), r.get("seqlen", r.get("seqlen_q")))
t = collections.defaultdict(lambda: collections.defaultdict(list))
for r in rows:
    if r["kind"] in ("dense", "varlen"):
        t[key(r)][r["kind"]].append(r["median_ms"])
print("| head dim | causal | batch x seqlen | dense ms | varlen ms | varlen/dense time |")
print("|---|---|---|---|---|---|")
for k, v in sorted(t.items()):
    d, c, b, s = k
    dm, vm = sorted(v["dense"]), sorted(v["varlen"])
    print(f"| {d} | {c} | {b} x {s} | {', '.join('%.3f' % x for x in dm)} | "
          f"{', '.join('%.3f' % x for x in vm)} | "
          f"{', '.join('%.3f' % (y / x) for x, y in zip(v['dense'], v['varlen']))} |")
for r in rows:
    if r["kind"] in ("varlen-short", "dense-padded-64"):
        print(r["kind"], "%.3f ms" % r["median_ms"], "%.1f TFLOP/s" % r["tflops"], "passed" if r["passed"] else "FAILED")
PY
