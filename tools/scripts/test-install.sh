#!/usr/bin/env bash
# Why: a program outside this tree sees flashjit only through an install.
# This installs the build into a temporary prefix, checks what was installed
# (the public headers alone, the soname, a RUNPATH that finds LLVM, nothing
# pointing back into the build), builds examples/c and examples/cpp against
# that prefix (CMake package, and pkg-config for the C one) and runs them in
# an empty environment: no LD_LIBRARY_PATH. Needs no GPU.
# Usage: test-install.sh [BUILD_DIR]        (default: build)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
build=$(cd "${1:-build}" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/flashjit-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail() { echo "test-install: error: $*" >&2; exit 1; }
# logged NAME COMMAND...: runs COMMAND quietly; shows its output if it fails.
logged() {
  local name=$1
  shift
  "$@" >"$work/$name.log" 2>&1 || { cat "$work/$name.log" >&2; fail "$name"; }
}

logged install cmake --install "$build" --prefix "$prefix"
lib=$(find "$prefix" -name libflashjit.so | head -n 1)
[ -n "$lib" ] || fail "no libflashjit.so under $prefix"
libdir=$(dirname "$lib")

# The C API's header, FlashJIT.h, Backward.h, Decode.h and the headers they
# include; no other.
expected="flashjit/Autotune/DecodeTuning.h
flashjit/Autotune/ShapeBuckets.h
flashjit/Autotune/TuningDatabase.h
flashjit/Backward.h
flashjit/Decode.h
flashjit/Dialect/AttentionSpec.h
flashjit/FlashJIT.h
flashjit/Runtime/CacheOptions.h
flashjit/Runtime/DeviceInfo.h
flashjit/Runtime/ErrorCode.h
flashjit/Runtime/TunedConfigs.h
flashjit/Runtime/TuningOptions.h
flashjit/Templates/DecodeKernel.h
flashjit/Templates/KernelABI.h
flashjit/Templates/Target.h
flashjit/Templates/TileConfig.h
flashjit/flashjit.h"
expected=$(LC_ALL=C sort <<<"$expected")
installed=$(cd "$prefix/include" && find . -type f | sed 's|^\./||' |
            LC_ALL=C sort)
if [ "$installed" != "$expected" ]; then
  diff <(echo "$expected") <(echo "$installed") >&2 || true
  fail "installed headers (>) differ from the public ones (<)"
fi

# libflashjit.so -> libflashjit.so.MAJOR.MINOR (the soname) -> the file.
dynamic=$(readelf -d "$lib")
soname=$(sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p' <<<"$dynamic")
[[ $soname =~ ^libflashjit\.so\.[0-9]+\.[0-9]+$ ]] || fail "soname '$soname'"
[ -L "$lib" ] && [ -L "$libdir/$soname" ] || fail "$soname or its link missing"
runpath=$(sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p' <<<"$dynamic")
[[ ":$runpath:" == *':$ORIGIN:'* ]] || fail "RUNPATH '$runpath' lacks \$ORIGIN"
[[ $runpath != *"$build"* ]] || fail "RUNPATH '$runpath' names the build folder"
if env -i /usr/bin/ldd "$lib" | grep 'not found' >&2; then
  fail "libflashjit.so does not find its libraries without LD_LIBRARY_PATH"
fi
if grep -rlIF "$build" "$prefix" >"$work/refs"; then
  cat "$work/refs" >&2
  fail "installed files point into the build folder $build"
fi
echo "installed: $(wc -l <<<"$installed") headers, $soname (RUNPATH $runpath)"

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
run_clean() {  # An empty environment but for PATH and a kernel cache.
  env -i PATH=/usr/bin:/bin FLASHJIT_CACHE_DIR="$work/cache" "$@"
}
for example in c cpp; do
  logged "configuring-examples-$example" cmake "${generator[@]}" \
    -S "$root/examples/$example" -B "$work/$example" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  found=$(sed -n 's/^flashjit_DIR:PATH=//p' "$work/$example/CMakeCache.txt")
  [[ $found == "$prefix"/* ]] ||
    fail "examples/$example found flashjit in '$found', not in $prefix"
  logged "building-examples-$example" cmake --build "$work/$example"
  echo "examples/$example (CMake, flashjit from $found):"
  run_clean "$work/$example/flashjit-example-$example" | sed 's/^/  /'
done

mkdir "$work/c-pkgconfig"
logged "building-examples-c-with-pkg-config" env \
  PKG_CONFIG_PATH="$libdir/pkgconfig" \
  make -C "$work/c-pkgconfig" -f "$root/examples/c/Makefile"
echo "examples/c (pkg-config):"
run_clean "$work/c-pkgconfig/flashjit-example-c" | sed 's/^/  /'
echo "test-install: ok"
