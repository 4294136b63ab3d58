#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test
# (doctest unit tests, lit tests, ptxas checks, GPU tests - skipped without
# a GPU), then installs the build and builds and runs the examples against
# the install, then the Python package's tests (those needing PyTorch or a
# GPU are skipped where there is none), then the unit tests under ASan and
# UBSan and each fuzz target for a minute (test-sanitize.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tools/scripts/install-deps.sh
bash tools/scripts/build.sh
ctest --test-dir build --output-on-failure
bash tools/scripts/test-install.sh build
bash tools/scripts/test-python.sh
bash tools/scripts/test-sanitize.sh
