#!/usr/bin/env bash
# Checks that libflashjit.so exports exactly the functions flashjit.h
# declares: a missing one breaks callers at load time, and a C++ symbol
# leaking out would clash with a host program's own LLVM or MLIR and tie the
# ABI to flashjit's internals.
# Usage: check-exports.sh LIBRARY HEADER
set -euo pipefail
lib=$1 header=$2
nm=$(command -v llvm-nm || command -v /usr/lib/llvm-22/bin/llvm-nm || command -v nm)
exported=$("$nm" -D --defined-only "$lib" | awk '{print $NF}' | sort -u)
# Every flashjit_*( in the header but the static inline initialiser.
declared=$(grep -oE '\bflashjit_[a-z_]+\(' "$header" | tr -d '(' |
           grep -vx flashjit_attention_spec_init | sort -u)
if [ -z "$declared" ]; then
  echo "error: no functions found in $header" >&2
  exit 1
fi
missing=$(comm -13 <(echo "$exported") <(echo "$declared"))
extra=$(comm -23 <(echo "$exported") <(echo "$declared"))
if [ -n "$missing" ]; then
  echo "error: $lib lacks functions $header declares:" >&2
  echo "$missing" >&2
  exit 1
fi
if [ -n "$extra" ]; then
  echo "error: $lib exports symbols $header does not declare:" >&2
  head -n 20 <<<"$extra" >&2
  exit 1
fi
echo "$lib exports the $(wc -l <<<"$declared") functions of $header, nothing else"
