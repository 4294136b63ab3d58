#!/usr/bin/env bash
# Runs on the GPU machine (device tool): the side-by-side attention
# benchmark, bench/attention_bench.py, against the stripped install in
# .device-bundle (cmake --install build --prefix .device-bundle --strip),
# with the LLVM runtime libraries from .device-carry. Writes the log, the
# JSON and the results page (<gpu-name>.md, for bench/results/) into $OUT.
# Arguments go to the benchmark: --quick, --head-dims 128, --causal, ...
# A full sweep can outlast one 10-minute call: split it by --head-dims and
# --causal / --no-causal (FlexAttention compiles once per shape).
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ -f .device-carry/unpack.sh ]; then
  source .device-carry/unpack.sh   # libMLIR/libLLVM on LD_LIBRARY_PATH, before Python starts
else
  echo "warning: no .device-carry/unpack.sh: libMLIR/libLLVM must already be on LD_LIBRARY_PATH" >&2
fi
export FLASHJIT_LIB=${FLASHJIT_LIB:-$PWD/.device-bundle/lib/libflashjit.so}
export FLASHJIT_CACHE_DIR=${FLASHJIT_CACHE_DIR:-/tmp/flashjit-cache}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
echo "== bindings self-test ($FLASHJIT_LIB)"
python3 bench/attention_bench.py --self-test > "$OUT/self-test.txt" 2>&1
echo "self-test rc=$?"; grep -E "^FAIL|checks? (passed|failed)" "$OUT/self-test.txt"
echo "== attention_bench.py $*"
python3 bench/attention_bench.py --json "$OUT/bench.json" --out-md "$OUT" "$@" 2>&1 | tee "$OUT/bench.log"
rc=${PIPESTATUS[0]}
echo "attention_bench rc=$rc (1: flashjit's output differs from SDPA's)"
exit "$rc"
