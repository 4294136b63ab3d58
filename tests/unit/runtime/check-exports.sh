#!/usr/bin/env bash
# Checks what libflashjit.so exports: exactly the C functions flashjit.h
# declares (a missing one breaks callers at load time), and otherwise only
# C++ symbols of namespace flashjit, the C++ API of FlashJIT.h (a symbol of
# LLVM, MLIR or the standard library leaking out would clash with a host
# program's own and tie the ABI to flashjit's internals).
# Usage: check-exports.sh LIBRARY HEADER
set -euo pipefail
lib=$1 header=$2
llvm_bin=/usr/lib/llvm-22/bin
nm=$(command -v llvm-nm || command -v $llvm_bin/llvm-nm || command -v nm)
filt=$(command -v llvm-cxxfilt || command -v $llvm_bin/llvm-cxxfilt ||
       command -v c++filt)
exported=$("$nm" -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' |
           sort -u)
c_exported=$(grep -v '^_Z' <<<"$exported" || true)
cxx_exported=$(grep '^_Z' <<<"$exported" | "$filt" || true)
# Every flashjit_*( in the header but the static inline initialiser.
declared=$(grep -oE '\bflashjit_[a-z_]+\(' "$header" | tr -d '(' |
           grep -vxE "flashjit_(attention|decode)_spec_init" | sort -u)
if [ -z "$declared" ]; then
  echo "error: no functions found in $header" >&2
  exit 1
fi
missing=$(comm -13 <(echo "$c_exported") <(echo "$declared"))
extra=$(comm -23 <(echo "$c_exported") <(echo "$declared"))
if [ -n "$missing" ]; then
  echo "error: $lib lacks functions $header declares:" >&2
  echo "$missing" >&2
  exit 1
fi
if [ -n "$extra" ]; then
  echo "error: $lib exports C symbols $header does not declare:" >&2
  head -n 20 <<<"$extra" >&2
  exit 1
fi
prefix='^((vtable|typeinfo|typeinfo name|guard variable) for )?flashjit::'
foreign=$(grep -vE "$prefix" <<<"$cxx_exported" || true)
if [ -n "$foreign" ]; then
  echo "error: $lib exports C++ symbols outside namespace flashjit:" >&2
  head -n 20 <<<"$foreign" >&2
  exit 1
fi
# The entry points of FlashJIT.h (the C++ API test links them as well).
for entry in 'flashjit::Context::create(' 'flashjit::Context::compile(' \
             'flashjit::Kernel::forward(' 'flashjit::takeErrorParts('; do
  if ! grep -qF "$entry" <<<"$cxx_exported"; then
    echo "error: $lib does not export $entry...) of FlashJIT.h" >&2
    exit 1
  fi
done
echo "$lib exports the $(wc -l <<<"$declared") functions of $header and" \
     "$(grep -c . <<<"$cxx_exported") C++ symbols of namespace flashjit," \
     "nothing else"
