#!/usr/bin/env bash
# The Python package's tests for CI (no GPU, no PyTorch): builds a venv in
# build/python-venv with pytest and NumPy, installs ./python into it and runs
# python/tests against the built library. The ctypes layer (discovery, version,
# specs, contexts, kernel compiles, forward's checks, DLPack from NumPy) runs;
# the PyTorch, transformers and GPU tests skip with their reasons. PyTorch is
# not installed here on purpose (gigabytes); a venv that has it runs those too.
# Env: FLASHJIT_LIBRARY (default build/runtime/libflashjit.so), PYTHON
# (default python3), FLASHJIT_PY_VENV (default build/python-venv).
set -euo pipefail
cd "$(dirname "$0")/../.."
lib=${FLASHJIT_LIBRARY:-$PWD/build/runtime/libflashjit.so}
if [ ! -f "$lib" ]; then
  echo "error: $lib not found: build first (bash tools/scripts/build.sh) or set FLASHJIT_LIBRARY" >&2
  exit 1
fi
venv=${FLASHJIT_PY_VENV:-$PWD/build/python-venv}
python=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  if ! "$python" -m venv "$venv" 2>/dev/null; then
    # Debian's python3 keeps venv (ensurepip) in a package of its own.
    rm -rf "$venv"
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv
    "$python" -m venv "$venv"
  fi
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check pytest numpy
"$venv/bin/python" -m pip install -q --disable-pip-version-check ./python
export FLASHJIT_LIBRARY=$lib
export FLASHJIT_CACHE_DIR=${FLASHJIT_CACHE_DIR:-$(mktemp -d)}
# From outside python/, so the tests import the installed package.
cd python/tests
"$venv/bin/python" -m pytest -q -rs -p no:cacheprovider .
