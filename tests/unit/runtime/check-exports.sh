#!/usr/bin/env bash
# Checks what libflashjit.so exports: exactly the C functions flashjit.h
# declares (a missing one breaks callers at load time), and otherwise only
# the C++ API of the installed headers: every exported C++ symbol belongs
# to a class or function that one of those headers defines or declares. An
# internal symbol (the compiler, the templates, the kernel cache, the
# developer tools) or one of LLVM, MLIR or the standard library leaking out
# would tie the ABI to flashjit's internals or clash with a host program's
# own. The measurement-only kernel families must not be in the library at
# all, not even as a name.
# Usage: check-exports.sh LIBRARY C_HEADER PUBLIC_HEADER...
set -euo pipefail
lib=$1 header=$2
shift 2
public_headers=("$@")
if [ ${#public_headers[@]} -eq 0 ]; then
  echo "error: no public headers given" >&2
  exit 1
fi
llvm_bin=/usr/lib/llvm-22/bin
nm=$(command -v llvm-nm || command -v $llvm_bin/llvm-nm || command -v nm)
filt=$(command -v llvm-cxxfilt || command -v $llvm_bin/llvm-cxxfilt ||
       command -v c++filt)
exported=$("$nm" -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' |
           sort -u)
c_exported=$(grep -v '^_Z' <<<"$exported" || true)
cxx_exported=$(grep '^_Z' <<<"$exported" | "$filt" || true)

# The C API: every flashjit_*( in the header but the static inline
# initialiser, nothing more.
declared=$(grep -oE '\bflashjit_[a-z_]+\(' "$header" | tr -d '(' |
           grep -vxE "flashjit_((attention|decode)_spec|backward_options)_init" | sort -u)
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

# The names the installed headers offer: classes, structs and enums they
# define (not those only declared, as `class KernelCache;`), and every
# identifier called or declared as a function outside comments.
code=$(cat "${public_headers[@]}" | sed -e 's://.*$::')
types=$(grep -oE '\b(class|struct)[[:space:]]+[A-Za-z_][A-Za-z0-9_]*[[:space:]]*(final[[:space:]]*)?[:{]' \
          <<<"$code" | awk '{print $2}' | tr -d ':{' || true)
functions=$(grep -oE '\b[A-Za-z_][A-Za-z0-9_]*[[:space:]]*\(' <<<"$code" |
            tr -d '( \t' || true)
public_names=$(printf '%s\n%s\n' "$types" "$functions" | grep . | sort -u)
if ! grep -qx Context <<<"$public_names"; then
  echo "error: the public headers given do not define flashjit::Context" >&2
  exit 1
fi

# Each exported C++ symbol as the name it belongs to: vtables and the like
# belong to their class; namespaces flashjit and flashjit::autotune are
# stripped; the first name left (a class, or a free function) must be one
# the headers offer.
prefix='^((vtable|VTT|typeinfo|typeinfo name|guard variable|non-virtual thunk to|virtual thunk to) for )?'
foreign=$(grep -vE "${prefix}flashjit::" <<<"$cxx_exported" || true)
if [ -n "$foreign" ]; then
  echo "error: $lib exports C++ symbols outside namespace flashjit:" >&2
  head -n 20 <<<"$foreign" >&2
  exit 1
fi
owners=$(sed -E "s/${prefix}//; s/^flashjit::(autotune::)?//; s/[^A-Za-z0-9_].*//" \
           <<<"$cxx_exported")
internal=$(paste -d '\t' <(echo "$owners") <(echo "$cxx_exported") |
           awk -F'\t' 'NR == FNR { ok[$1] = 1; next } !($1 in ok) { print $2 }' \
             <(echo "$public_names") - || true)
if [ -n "$internal" ]; then
  echo "error: $lib exports C++ symbols that no installed header declares" \
       "(internal code: narrow runtime/lib/flashjit.map):" >&2
  head -n 20 <<<"$internal" >&2
  exit 1
fi
# The developer tools' names, should a header ever mention them.
devtools='referenceRow|HostProblem|HostBlockMask|runAndCheck|CheckReport|Benchmark|measureCandidate|timeLaunches|registerMeasurementTemplate'
if grep -E "\b($devtools)\b" <<<"$cxx_exported" >/dev/null; then
  echo "error: $lib exports developer-tool symbols:" >&2
  grep -E "\b($devtools)\b" <<<"$cxx_exported" | head -n 20 >&2
  exit 1
fi
if grep -aq 'nosoftmax' "$lib"; then
  echo "error: $lib contains a measurement-only kernel family (nosoftmax):" \
       "it belongs to the developer tools (devtools/)" >&2
  exit 1
fi

# The entry points of FlashJIT.h (the C++ API test links them as well).
for entry in 'flashjit::Context::create(' 'flashjit::Context::compile(' \
             'flashjit::Kernel::forward(' 'flashjit::takeErrorParts(' \
             'flashjit::CodedError::ID'; do
  if ! grep -qF "$entry" <<<"$cxx_exported"; then
    echo "error: $lib does not export $entry...) of FlashJIT.h" >&2
    exit 1
  fi
done
echo "$lib exports the $(wc -l <<<"$declared") functions of $header and" \
     "$(grep -c . <<<"$cxx_exported") C++ symbols of the installed headers'" \
     "classes and functions, nothing else"
