#!/usr/bin/env bash
# Runs on the GPU machine (device tool): the whole GPU test suite in one
# call. Run one process at a time, the suite takes longer than a device
# call may (the backward file alone ran past 520 s on an H100): each case
# compiles its kernels cold, one after another, and most cases spend
# milliseconds on the GPU. So the cases that time nothing run in WORKERS
# processes at once (each with its own kernel cache), over SHARDS slices
# of one shuffled order of the cases (doctest's --order-by=rand with a
# fixed seed, so every process sees the same order, and --first/--last),
# and the cases whose checks compare timings (launch overhead, tensor
# map encoding, the kernel cache's load times, the autotuner) run after
# them, alone on the GPU.
#
#   tools/scripts/device-gpu-parallel.sh [WORKERS [SHARDS]]   # 6 and 24
#
# GPU_TESTS names the test binary (default flashjit-gpu-tests on PATH,
# after device-setup.sh); SLOW_CASES the cases (doctest name filters) that
# take minutes alone, run in one more process started first (default the
# head dim 256 backward; empty: none);
# SHARD_TIMEOUT and TIMED_TIMEOUT (seconds) bound each shard and the timed
# part. Logs: $OUT/gpu-parallel/shard-K.txt and
# timed-*.txt (shard-slow.txt for SLOW_CASES). Prints one line per shard
# and every failure; exits 1 when a case failed, a shard timed out or left
# no log, or a case ran in no shard.
set -uo pipefail
cd "$(dirname "$0")/../.."
workers=${1:-6}
shards=${2:-24}
case "$workers$shards" in
  *[!0-9]*) echo "usage: device-gpu-parallel.sh [WORKERS [SHARDS]] (numbers)" >&2; exit 2 ;;
esac
if [ -z "${GPU_TESTS:-}" ]; then
  source tools/scripts/device-setup.sh > /dev/null
  GPU_TESTS=flashjit-gpu-tests
fi
OUT=${OUT:-/tmp/out}
logs="$OUT/gpu-parallel"
mkdir -p "$logs"

# The cases that compare times, by name, and the autotuner's file.
timedNames='launch overhead*,tensor maps*,kernel cache:*,what keeping the context costs*'
timedFile='*/AutotuneGpuTest.cpp'
# Cases that take minutes alone (SLOW_CASES, doctest name filters; empty:
# none): one process of their own, started first, so that no shard holds
# one beside others.
slowNames=${SLOW_CASES-'backward: head dim 256*'}
notTimed=(--test-case-exclude="$timedNames" --source-file-exclude="$timedFile")
untimed=(--test-case-exclude="$timedNames${slowNames:+,$slowNames}"
  --source-file-exclude="$timedFile" --order-by=rand --rand-seed=7)
slow=()
[ -n "$slowNames" ] && slow=(--test-case="$slowNames" "${notTimed[@]}")

count=$("$GPU_TESTS" --count "${untimed[@]}" |
  sed -n 's/.*passing the current filters: \([0-9]*\).*/\1/p')
if [ -z "$count" ]; then
  echo "could not count the test cases (is there a GPU? $GPU_TESTS --count printed no count)" >&2
  "$GPU_TESTS" --count "${untimed[@]}" | tail -3 >&2
  exit 1
fi
[ "$shards" -gt "$count" ] && shards=$count
[ "$shards" -lt 1 ] && shards=1
per=$(((count + shards - 1) / shards))
echo "$count cases that time nothing, $shards shards of up to $per, $workers at once"

# Each case in exactly one shard: the shards' lists, joined, are the whole
# list.
# (The slow cases count as a shard of their own.)
"$GPU_TESTS" --list-test-cases "${notTimed[@]}" | grep -v '^\[doctest\]\|^====\|^GPU: ' \
  | sort > "$logs/all-cases.txt"
: > "$logs/sharded-cases.txt"
: > "$logs/slow-cases.txt"
if [ ${#slow[@]} -gt 0 ]; then
  "$GPU_TESTS" --list-test-cases "${slow[@]}" | grep -v '^\[doctest\]\|^====\|^GPU: ' \
    > "$logs/slow-cases.txt"
  cat "$logs/slow-cases.txt" >> "$logs/sharded-cases.txt"
fi
for ((k = 0; k < shards; ++k)); do
  first=$((k * per + 1)) last=$(((k + 1) * per))
  [ "$first" -gt "$count" ] && break
  "$GPU_TESTS" --list-test-cases "${untimed[@]}" --first=$first --last=$last \
    | grep -v '^\[doctest\]\|^====\|^GPU: ' >> "$logs/sharded-cases.txt"
done
sort "$logs/sharded-cases.txt" -o "$logs/sharded-cases.txt"
if ! cmp -s "$logs/all-cases.txt" "$logs/sharded-cases.txt"; then
  echo "the shards do not cover each case once:" >&2
  diff "$logs/all-cases.txt" "$logs/sharded-cases.txt" | head >&2
  exit 1
fi

export GPU_TESTS per logs
runShard() {
  local k=$1 start=$SECONDS label range=()
  if [ "$k" = slow ]; then
    # The slow cases, by their own filters (slow=(...)), all of them.
    label="slow cases"
  else
    local first=$((k * per + 1)) last=$(((k + 1) * per))
    label="shard $k (cases $first-$last)"
    range=(--first=$first --last=$last)
  fi
  timeout "${SHARD_TIMEOUT:-480}" stdbuf -oL "$GPU_TESTS" --duration=true \
    "${@:2}" "${range[@]}" > "$logs/shard-$k.txt" 2>&1
  local rc=$?
  # doctest's summary counts every case that passes the filters; the
  # cases run are those with a duration line.
  echo "$label: rc=$rc in $((SECONDS - start)) s," \
    "$(grep -c '^[0-9.]* s: ' "$logs/shard-$k.txt") run," \
    "$(grep -ho '[0-9]* failed |' "$logs/shard-$k.txt" | head -1)" \
    "$(grep -h 'assertions:' "$logs/shard-$k.txt" | tr -s ' ' | cut -d'|' -f2-3)" \
    "$([ $rc = 124 ] && echo '(timed out)')"
}
export -f runShard
start=$SECONDS
slowPid=""
if [ -s "$logs/slow-cases.txt" ]; then
  runShard slow "${slow[@]}" &
  slowPid=$!
  [ "$workers" -gt 1 ] && workers=$((workers - 1))
fi
seq 0 $((shards - 1)) | xargs -P "$workers" -I{} bash -c \
  'runShard "$@"' _ {} "${untimed[@]}"
[ -n "$slowPid" ] && wait "$slowPid"
echo "untimed cases done in $((SECONDS - start)) s"

start=$SECONDS
timeout "${TIMED_TIMEOUT:-300}" stdbuf -oL "$GPU_TESTS" --duration=true \
  --test-case="$timedNames" > "$logs/timed-names.txt" 2>&1
echo "timed cases: rc=$? $(grep -h 'test cases:' "$logs/timed-names.txt" | tr -s ' ')"
timeout "${TIMED_TIMEOUT:-300}" stdbuf -oL "$GPU_TESTS" --duration=true \
  --source-file="$timedFile" > "$logs/timed-autotune.txt" 2>&1
echo "autotune cases: rc=$? $(grep -h 'test cases:' "$logs/timed-autotune.txt" | tr -s ' ')"
echo "timed cases done in $((SECONDS - start)) s"

failed=0
# Every shard that had cases, and the slow cases, must have left a log.
expected=()
for ((k = 0; k < shards && k * per < count; ++k)); do expected+=("$logs/shard-$k.txt"); done
[ -s "$logs/slow-cases.txt" ] && expected+=("$logs/shard-slow.txt")
for f in "${expected[@]}"; do
  if [ ! -f "$f" ]; then
    failed=1
    echo "--- $(basename "$f"): missing (its process did not run)" >&2
  fi
done
for f in "$logs"/shard-*.txt "$logs"/timed-*.txt; do
  if ! grep -q 'Status: SUCCESS' "$f"; then
    failed=1
    echo "--- $(basename "$f"): not a success" >&2
    grep -E 'ERROR|FATAL|values:|test cases:' "$f" | head -20 >&2
  fi
done
exit $failed
