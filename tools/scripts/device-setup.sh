# Sourced by the device-*.sh scripts on the GPU machine (device tool): the
# LLVM runtime libraries from .device-carry, the stripped build from
# .device-bundle on PATH, a private kernel cache, $OUT, and the GPU and
# toolchain recorded in $OUT/gpu.txt and $OUT/info.txt.
source .device-carry/unpack.sh
export PATH=$PWD/.device-bundle/bin:$PATH
export FLASHJIT_CACHE_DIR=${FLASHJIT_CACHE_DIR:-/tmp/flashjit-cache}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
flashjit info | tee "$OUT/info.txt"
