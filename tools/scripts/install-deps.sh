#!/usr/bin/env bash
# Installs what flashjit needs to build and test on Debian 12 (bookworm):
# LLVM/MLIR 22, lit/FileCheck, nlohmann/json, doctest, DLPack (the C API's
# tensor header), CMake and Ninja, and the -dev packages LLVM's CMake config
# asks for; make and pkg-config build the C example against an install;
# clang 14 with its sanitizer and libFuzzer runtimes builds the sanitized
# unit tests and the fuzz targets (test-sanitize.sh).
# Only missing packages are installed. The CUDA toolkit (cuda.h; ptxas for
# the PTX tests) is expected to be there already (/usr/local/cuda).
set -euo pipefail
packages=(cmake ninja-build g++ make pkgconf python3 llvm-22-dev libmlir-22-dev
          mlir-22-tools llvm-22-tools nlohmann-json3-dev doctest-dev libdlpack-dev
          libzstd-dev zlib1g-dev libxml2-dev libedit-dev libffi-dev libz3-dev
          clang-14 libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
cuda_h=""
for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
  [ -n "$d" ] && [ -f "$d/include/cuda.h" ] && cuda_h="$d/include/cuda.h" && break
done
if [ -z "$cuda_h" ]; then
  echo "error: cuda.h not found: install the CUDA toolkit (or set CUDA_HOME)" >&2
  exit 1
fi
