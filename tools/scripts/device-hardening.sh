#!/usr/bin/env bash
# On the GPU machine, from an installed bundle on PATH: what issue 22
# (hardening) needs a GPU for. PyTorch SDPA's backends on a NaN in V (the
# reference for docs/rules.md), then the GPU tests of launches with another
# context current, persistent kernels under streams, graphs and a fault,
# NaN semantics in every family, the launch overhead, the autotune
# re-measurement and the sharper correctness checks, each group under its
# own time limit so that one that hangs leaves the others' results.
# Usage: device-hardening.sh <folder with sdpa_nan_probe.py> [groups...]
set -uo pipefail
here=$1
shift
out=${OUT:-/tmp/flashjit-hardening}
mkdir -p "$out"
groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(probe new runtime autotune correctness)
for g in "${groups[@]}"; do
  start=$(date +%s)
  case $g in
    probe) timeout 40 python3 "$here/sdpa_nan_probe.py" ;;
    new) timeout 110 flashjit-gpu-tests --duration=true \
           -tc='*context*,*persistent kernel*,*NaN*' ;;
    runtime) timeout 30 flashjit-gpu-tests --duration=true \
               -tc='bad arguments*,launch overhead*' ;;
    autotune) timeout 60 flashjit-gpu-tests --duration=true \
                -tc='one bucket tuned*' ;;
    correctness) timeout "${CORRECTNESS_LIMIT:-240}" flashjit-gpu-tests \
                   --duration=true -tc="${CORRECTNESS_TESTS:-matrix*,GQA*,BSHD*,different query*,other head dims*,scores far apart*,long context*,two million rows*}" ;;
    *) echo "unknown group $g" ;;
  esac > "$out/$g.txt" 2>&1
  rc=$?
  echo "$g: exit $rc after $(( $(date +%s) - start ))s" | tee -a "$out/summary.txt"
  tail -4 "$out/$g.txt"
done
