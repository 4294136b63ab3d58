#!/usr/bin/env bash
# Runs on the GPU machine (device tool): every sweep the results pages
# quote, in two calls of the device tool's 600 s, each part under its own
# timeout so that a slow one leaves the others' results. Part 1: the
# forward sweep with SDPA flash, cuDNN and FlexAttention (unmasked, then
# causal), `flashjit autotune` and the sweep without and with its database
# (interleaved, cuDNN in the same runs), training against SDPA flash and
# cuDNN, the backward alone at head dim 128 x 16k, the variants against
# FlexAttention. Part 2: the decode sweep (contiguous, pages of 16 and 64,
# SDPA flash, cuDNN, a device copy) and varlen against the dense kernel.
# On an H100 part 1 took about 430 s and part 2 about 460 s.
#
#   tools/scripts/device-sweeps.sh 1   # or 2
#
# Everything lands in $OUT/sweeps-PART.tar.gz (the device tool returns few
# files); the tables are printed. Expects the stripped build in
# .device-bundle and the LLVM runtime libraries in .device-carry.
set -uo pipefail
cd "$(dirname "$0")/../.."
part=${1:?usage: device-sweeps.sh PART (1 or 2)}
FINAL=${OUT:-/tmp/out}
W=/tmp/sweeps-$part
rm -rf "$W" && mkdir -p "$W" "$FINAL"
export OUT=$W
source tools/scripts/device-setup.sh > /dev/null
trap 'tar -C /tmp -czf "$FINAL/sweeps-$part.tar.gz" "sweeps-$part"' EXIT
export FLASHJIT_LIB=$PWD/.device-bundle/lib/libflashjit.so
export FLASHJIT_LIBRARY=$FLASHJIT_LIB PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# Runs "$@" as step NAME under a timeout of LIMIT seconds, cut to what is
# left of the call's BUDGET (default 570 s), logging into $W/NAME.log.
step() {
  local name=$1 limit=$2 left=$(( ${BUDGET:-570} - SECONDS ))
  shift 2
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 10 ]; then
    echo "$name: skipped, the call's budget is spent"
    return
  fi
  timeout "$limit" "$@" > "$W/$name.log" 2>&1
  echo "$name: rc=$? at $SECONDS s"
}
tables() { grep -h "^|" "$@" | cut -c1-230; }

case "$part" in
1)
  for mask in no-causal causal; do
    OUT=$W/forward-$mask step forward-$mask 140 bash tools/scripts/device-bench.sh \
      --$mask --peers sdpa-flash,sdpa-cudnn,flex --repeats 3 --target-ms 30
  done
  OUT=$W/tune step autotune 110 bash tools/scripts/device-autotune.sh \
    --head-dims 64,128 --max-candidates 12 --time-budget 80
  for round in 1 2; do
    for db in none tuned; do
      if [ $db = tuned ]; then export FLASHJIT_TUNING_DB=$W/tune/tuning.json
      else unset FLASHJIT_TUNING_DB; fi
      OUT=$W/$db-$round step forward-$db-$round 60 bash tools/scripts/device-bench.sh \
        --peers sdpa-cudnn --repeats 5 --target-ms 40
    done
  done
  unset FLASHJIT_TUNING_DB
  python3 -m pip install -q --no-deps --no-build-isolation \
    --disable-pip-version-check ./python > "$W/pip.log" 2>&1 ||
    export PYTHONPATH=$PWD/python
  step training 90 python3 bench/training_bench.py --head-dims 128,64 \
    --seqlens 1024,2048,4096,8192,16384 --peers sdpa-flash,sdpa-cudnn \
    --repeats 3 --target-ms 25 --no-memory --json "$W/training.json"
  for mask in "" --causal; do
    step "backward$mask" 30 flashjit run --backward --batch 1 --seqlen 16384 \
      --heads 16 --head-dim 128 $mask --json
  done
  step variants 100 python3 bench/variants_bench.py --repeats 3 --target-ms 25 \
    --json "$W/variants.json"
  tables "$W"/forward-no-causal.log "$W"/forward-causal.log "$W"/training.log \
    "$W"/variants.log
  grep -A26 "^bucket" "$W/tune/autotune-table.txt"
  ;;
2)
  step decode 150 python3 bench/decode_bench.py --flashjit flashjit \
    --kv-layouts bshd --page-sizes 16,64 --repeats 3 --target-ms 10 \
    --points 1:2k,1:16k,1:64k,1:128k,8:16k,8:64k,8:128k,32:2k,32:8k,32:16k,64:2k,64:8k,64:16k,128:2k,128:8k,128:16k \
    --json "$W/decode.json" --out-md "$W/decode.md"
  step varlen 420 python3 bench/varlen_bench.py --flashjit flashjit \
    --out-md "$W/varlen.md" --out-json "$W/varlen.json"
  tables "$W"/decode.log "$W"/varlen.log
  ;;
*)
  echo "PART must be 1 or 2, not '$part'" >&2
  exit 2
  ;;
esac
