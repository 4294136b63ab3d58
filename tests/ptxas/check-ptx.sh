#!/usr/bin/env bash
# ptxas accepts every PTX `flashjit compile` emits: head dims 64/128/256,
# f16/bf16, causal or not, sm_80 and sm_90a. Exit 77 (ctest: skipped) when
# ptxas is not installed.
set -uo pipefail
flashjit=${1:?usage: check-ptx.sh path/to/flashjit [ptxas]}
ptxas=${2:-$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)}
if [ ! -x "$ptxas" ]; then
  echo "SKIPPED: ptxas not found"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0 count=0
for arch in sm_80 sm_90a; do
  for d in 64 128 256; do
    for dtype in f16 bf16; do
      for causal in "" --causal; do
        name="$arch-d$d-$dtype${causal:+-causal}"
        count=$((count + 1))
        if ! "$flashjit" compile --arch "$arch" --head-dim "$d" --dtype "$dtype" \
             $causal --heads 8 --kv-heads 2 -o "$work/$name.ptx" 2>"$work/$name.err"; then
          echo "FAIL compile $name: $(cat "$work/$name.err")"; fails=$((fails + 1)); continue
        fi
        if ! "$ptxas" -arch="$arch" -v "$work/$name.ptx" -o "$work/$name.cubin" \
             >"$work/$name.log" 2>&1; then
          echo "FAIL ptxas $name:"; cat "$work/$name.log"; fails=$((fails + 1)); continue
        fi
        regs=$(grep -o "Used [0-9]* registers" "$work/$name.log" | head -1)
        spill=$(grep -o "[0-9]* bytes spill stores" "$work/$name.log" | head -1)
        echo "ok   $name: $regs, $spill"
      done
    done
  done
done
echo "$((count - fails))/$count PTX files accepted by $("$ptxas" --version | tail -1)"
[ "$fails" -eq 0 ]
