#!/usr/bin/env bash
# The sanitized checks: builds, with clang and ASan + UBSan (and libFuzzer's
# coverage hooks), only what the unit tests and the fuzz targets need into
# build-sanitize/, runs the unit tests there, then each fuzz target for
# FUZZ_SECONDS (default 60) from its corpus in tests/fuzz/corpus/. New
# inputs the fuzzer finds go to build-sanitize/fuzz-<target>/, never into
# the repository; a crash leaves its input in build-sanitize/. The fuzzers
# start from FUZZ_SEED (default 1): the same build, from the same corpus,
# tries the same inputs in the same order (how far it gets in the time
# depends on the machine), so a failure can be replayed. FUZZ_SEED=0 takes
# a random seed, for longer searches (FUZZ_SECONDS=1800).
set -euo pipefail
cd "$(dirname "$0")/../.."
clang=${CLANG:-clang-14}
clangxx=${CLANGXX:-clang++-14}
seconds=${FUZZ_SECONDS:-60}
[ -f build-sanitize/build.ninja ] ||
  cmake -G Ninja -B build-sanitize -S . -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER="$clang" -DCMAKE_CXX_COMPILER="$clangxx" \
    -DFLASHJIT_FUZZ=ON
unit=(flashjit-autotune-tests flashjit-compiler-tests flashjit-runtime-tests
      flashjit-capi-tests flashjit-cxxapi-tests flashjit-fakedriver-tests)
fuzz=(description mods capi)
ninja -C build-sanitize -j"${JOBS:-$(nproc)}" "${unit[@]}" \
  "${fuzz[@]/#/flashjit-fuzz-}"

# allow_user_poisoning=0: LLVM's allocators poison their free space in
# sanitized code only, but libMLIR (not sanitized) allocates from the same
# allocators, so that poison would flag MLIR's own valid reads.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:allow_user_poisoning=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# The unit test binaries alone (the other tests of label "unit" load the
# library from Python, where ASan cannot be the first runtime, or read its
# exports), without the cases that bound a time: sanitized code is slower.
for t in "${unit[@]}"; do
  bin=$(find build-sanitize/tests/unit -name "$t" -type f -perm -u+x | head -1)
  echo "$t (ASan + UBSan)"
  if [ "$t" = flashjit-fakedriver-tests ]; then
    LD_LIBRARY_PATH=build-sanitize/tests/unit/runtime/fakedriver "$bin"
  else
    "$bin" --test-case-exclude='*cost*'
  fi
done

for target in "${fuzz[@]}"; do
  found=build-sanitize/fuzz-$target
  mkdir -p "$found"
  echo "fuzzing $target for ${seconds}s"
  (cd build-sanitize &&
     ./tests/fuzz/flashjit-fuzz-$target -max_total_time="$seconds" \
       -seed="${FUZZ_SEED:-1}" -timeout=60 -rss_limit_mb=4096 \
       -print_final_stats=1 \
       "fuzz-$target" "../tests/fuzz/corpus/$target")
done
