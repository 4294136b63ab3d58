#!/usr/bin/env bash
# Configures (once) and builds flashjit into build/ with Ninja.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -f build/build.ninja ] || cmake -G Ninja -B build -S . -DCMAKE_BUILD_TYPE=Release
ninja -C build -j"$(nproc)"
