#!/usr/bin/env bash
# The main job: installs what is missing, builds, compiles the default
# attention kernel (bf16, head dim 128, causal) for the local GPU (sm_90a
# when there is none), and, when a GPU is present, runs it and checks it
# against the float64 reference.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tools/scripts/install-deps.sh
bash tools/scripts/build.sh
flashjit=build/tools/flashjit
$flashjit info
ptx=build/default-kernel.ptx
$flashjit compile --head-dim 128 --dtype bf16 --causal -o "$ptx"
echo "PTX: $PWD/$ptx ($(wc -c <"$ptx") bytes, $(wc -l <"$ptx") lines)"
if $flashjit info --json | grep -q '"device":'; then
  $flashjit run --head-dim 128 --dtype bf16 --causal
else
  echo "no GPU here: skipped running the kernel (flashjit run needs one)"
fi
