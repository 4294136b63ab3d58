#!/usr/bin/env bash
# Runs on the GPU machine (device tool): one part of the GPU test suite,
# so that the whole suite can be spread over the device tool's 600 s calls
# (every kernel compiles cold on a fresh machine; on an H200 the autotune
# and backward files alone ran past 545 s; on an H100, cold cache, the
# decode file took 77 s and the varlen file about 215 s; the other files'
# times are not measured yet). Four calls, PART 1 to 4, cover every test
# file once:
#
#   tools/scripts/device-gpu-suite.sh 1   # backward
#   tools/scripts/device-gpu-suite.sh 2   # autotune, decode
#   tools/scripts/device-gpu-suite.sh 3   # varlen, varlen backward
#   tools/scripts/device-gpu-suite.sh 4   # forward: configs, variants, runtime
#
# Each case's duration is logged (line-buffered: a timeout keeps the log so
# far) to $OUT/gpu-suite-PART.txt; the summary and any failure are printed.
set -uo pipefail
cd "$(dirname "$0")/../.."
part=${1:?usage: device-gpu-suite.sh PART (1 to 4)}
parts=(""
  "*/BackwardGpuTest.cpp"
  "*/AutotuneGpuTest.cpp,*/DecodeGpuTest.cpp"
  "*/VarlenGpuTest.cpp,*/VarlenBackwardGpuTest.cpp"
  "*/CorrectnessTest.cpp,*/TemplateConfigTest.cpp,*/VariantsGpuTest.cpp,*/TileOrderGpuTest.cpp,*/PersistentGpuTest.cpp,*/RuntimeGpuTest.cpp,*/ContextsGpuTest.cpp,*/NanGpuTest.cpp")
case "$part" in
  1|2|3|4) files=${parts[$part]} ;;
  *) echo "PART must be 1, 2, 3 or 4, not '$part'" >&2; exit 2 ;;
esac
# A test file that no part names would never run: say so.
all=$(IFS=,; echo "${parts[*]:1}")
for f in $(grep -l TEST_CASE tests/gpu/*.cpp); do
  case ",$all," in *"*/$(basename "$f"),"*) ;; *) echo "warning: no part runs $f" >&2 ;; esac
done
source tools/scripts/device-setup.sh > /dev/null
log="$OUT/gpu-suite-$part.txt"
start=$SECONDS
timeout "${SUITE_TIMEOUT:-560}" stdbuf -oL flashjit-gpu-tests --duration=true \
  --source-file="$files" > "$log" 2>&1
rc=$?
echo "gpu suite part $part: rc=$rc in $((SECONDS - start)) s$([ $rc = 124 ] && echo ' (timed out: the log holds the cases so far)')"
grep -E "ERROR|FATAL|test cases|assertions" "$log" | tail -n 20
exit $rc
