#!/usr/bin/env bash
# ptxas accepts every PTX `flashjit compile` emits: head dims 64/96/128/256,
# f16/bf16, causal or not, sm_80 and sm_90a. The tensor-core kernels of head
# dims 64, 96 and 128 (and 256 on sm_90a) must not spill and must use their
# family's instructions: on sm_90a, head dims 64, 128 and 256 take a wgmma
# family (wgmma.mma_async, TMA loads and the TMA store of O, mbarriers,
# setmaxnreg, and no ptxas warning or "Potential Performance Loss" note,
# e.g. that it serialized the wgmmas or ignored setmaxnreg); the others use
# mma.sync m16n8k16, ldmatrix and cp.async. Then every candidate config of
# the wgmma families, which must not spill or warn either; then the
# decode kernels and the backward's (their own limits below). Exit 77 (ctest:
# skipped) when ptxas is not installed. ptxas compiles each file as a whole
# program, as the runtime's cuModuleLoadDataEx does.
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
  for d in 64 96 128 256; do
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
        if [ "$d" -le 128 ] || [ "$arch" = sm_90a ]; then
          missing=""
          if [ "$arch" = sm_90a ] && [ "$d" -ne 96 ]; then
            insns=("wgmma.mma_async.sync.aligned.m64n" ".f32.$dtype.$dtype"
                   "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                   "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group"
                   "mbarrier.try_wait.parity" "mbarrier.arrive.expect_tx"
                   "setmaxnreg.inc.sync.aligned" "setmaxnreg.dec.sync.aligned"
                   "wgmma.wait_group.sync.aligned")
            if grep -qiE "warn|performance loss" "$work/$name.log"; then
              echo "FAIL $name: ptxas warns:"; grep -iE "warn|performance loss" "$work/$name.log"
              fails=$((fails + 1)); continue
            fi
          else
            insns=("mma.sync.aligned.m16n8k16.row.col.f32.$dtype.$dtype.f32"
                   "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
                   "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
                   "cp.async.cg.shared.global")
          fi
          for insn in "${insns[@]}"; do
            grep -qF "$insn" "$work/$name.ptx" || missing="$missing $insn"
          done
          if [ -n "$missing" ]; then
            echo "FAIL $name: the PTX lacks$missing"; fails=$((fails + 1)); continue
          fi
          if grep -qE "[1-9][0-9]* bytes spill (stores|loads)" "$work/$name.log"; then
            echo "FAIL $name spills:"; grep spill "$work/$name.log"; fails=$((fails + 1)); continue
          fi
        fi
        echo "ok   $name: $regs, $spill"
      done
    done
  done
done
# Every candidate of the wgmma families (the heuristic or the tuner may
# pick any): no spill, no ptxas warning; the persistent kernels take their
# tiles from the launch's counter (atom.global.add) while one block per tile
# does not, and the cluster kernels take theirs in a fixed order, are built
# for clusters of two and multicast their K/V loads.
for d in 64 128 256; do
  for dtype in f16 bf16; do
    for causal in "" --causal; do
      configs=$("$flashjit" compile --arch sm_90a --head-dim "$d" --dtype "$dtype" \
                  $causal --heads 8 --kv-heads 2 --explain -o /dev/null 2>/dev/null |
                grep -oE "^ +[0-9]+ +wgmma[a-z_]*:m[0-9]+:n[0-9]+:s[0-9]+:w[0-9]+" |
                awk '{print $2}')
      for config in $configs; do
        name="cand-d$d-$dtype${causal:+-causal}-${config//:/_}"
        count=$((count + 1))
        if ! "$flashjit" compile --arch sm_90a --head-dim "$d" --dtype "$dtype" $causal \
             --heads 8 --kv-heads 2 --config "$config" -o "$work/$name.ptx" \
             2>"$work/$name.err" ||
           ! "$ptxas" -arch=sm_90a -v "$work/$name.ptx" -o "$work/$name.cubin" \
             >"$work/$name.log" 2>&1; then
          echo "FAIL $name:"; cat "$work/$name.err" "$work/$name.log"
          fails=$((fails + 1)); continue
        fi
        counter=$(grep -c "atom.global.add" "$work/$name.ptx")
        problem=""
        grep -qE "[1-9][0-9]* bytes spill (stores|loads)" "$work/$name.log" && problem="spills"
        grep -qiE "warn|performance loss" "$work/$name.log" && problem="$problem ptxas warns"
        case "$config" in
          wgmma_persistent:*) [ "$counter" -gt 0 ] || problem="$problem no tile counter" ;;
          wgmma_cluster:*)
            [ "$counter" -eq 0 ] || problem="$problem a tile counter in a cluster kernel"
            grep -q "^.reqnctapercluster 2, 1, 1" "$work/$name.ptx" ||
              problem="$problem not built for clusters of 2"
            grep -q "cp.async.bulk.tensor.4d.*multicast::cluster" "$work/$name.ptx" ||
              problem="$problem no multicast load" ;;
          *) [ "$counter" -eq 0 ] || problem="$problem a tile counter in a per-tile kernel" ;;
        esac
        # After a row's first tile the softmax takes no row max; a
        # warpgroup's vote (bar.red.or) sends a tile that outgrew the
        # bound back through it.
        grep -q "bar.red.or.pred" "$work/$name.ptx" ||
          problem="$problem no vote of the bounded softmax"
        if [ -n "$problem" ]; then
          echo "FAIL $name:$problem"; grep -iE "spill|warn|performance loss" "$work/$name.log"
          fails=$((fails + 1)); continue
        fi
        echo "ok   $name: $(grep -o "Used [0-9]* registers" "$work/$name.log" | head -1)"
      done
    done
  done
done
# The decode kernels (split + combine in one PTX): every head dim and
# dtype, the row shapes (1, 2 and 4 warps over the rows; head chunks),
# contiguous and paged; no spills in either kernel.
for arch in sm_80 sm_90a; do
  for d in 64 128 256; do
    for dtype in f16 bf16; do
      for shape in "32 8 1 0" "32 8 7 0" "8 1 16 16" "32 1 16 64" "4 4 2 0"; do
        set -- $shape
        name="decode-$arch-d$d-$dtype-h$1-kv$2-q$3-p$4"
        count=$((count + 1))
        if ! "$flashjit" compile --decode --arch "$arch" --head-dim "$d" \
             --dtype "$dtype" --heads "$1" --kv-heads "$2" --q-len "$3" \
             --page-size "$4" -o "$work/$name.ptx" 2>"$work/$name.err"; then
          echo "FAIL compile $name: $(cat "$work/$name.err")"; fails=$((fails + 1)); continue
        fi
        if ! "$ptxas" -arch="$arch" -v "$work/$name.ptx" -o "$work/$name.cubin" \
             >"$work/$name.log" 2>&1; then
          echo "FAIL ptxas $name:"; cat "$work/$name.log"; fails=$((fails + 1)); continue
        fi
        if grep -qE "[1-9][0-9]* bytes spill (stores|loads)" "$work/$name.log"; then
          echo "FAIL $name spills:"; grep spill "$work/$name.log"; fails=$((fails + 1)); continue
        fi
        echo "ok   $name: $(grep -o "Used [0-9]* registers" "$work/$name.log" | tail -1)"
      done
    done
  done
done
# The backward's three kernels (preprocess, main, convert in one PTX):
# the default configs of every head dim, dtype and mask on sm_80 and
# sm_90a, varlen on sm_90a, and every wgmma_bwd candidate. ptxas must
# accept them without a warning; the main kernel must use its family's
# instructions and spill at most 64 bytes (today the head dim 64 wgmma_bwd
# kernels of 128 query rows per step spill 52-64, their dK, dV, S^T and
# dP^T sharing 255 registers, and sm_80's head dim 128 causal kernel 4),
# the preprocess and convert kernels nothing.
backward_check() { # name arch [compile options...]
  local name=$1 arch=$2
  shift 2
  count=$((count + 1))
  if ! "$flashjit" compile --backward --arch "$arch" --heads 8 --kv-heads 2 "$@"        -o "$work/$name.ptx" 2>"$work/$name.err"; then
    echo "FAIL compile $name: $(cat "$work/$name.err")"; fails=$((fails + 1)); return
  fi
  if ! "$ptxas" -arch="$arch" -v "$work/$name.ptx" -o "$work/$name.cubin"        >"$work/$name.log" 2>&1; then
    echo "FAIL ptxas $name:"; cat "$work/$name.log"; fails=$((fails + 1)); return
  fi
  local problem="" main spill
  grep -qiE "warn|performance loss" "$work/$name.log" && problem="ptxas warns"
  main=$(grep -A2 "entry function '[^']*_bwd' for" "$work/$name.log")
  spill=$(echo "$main" | grep -oE "[0-9]+ bytes spill stores" | grep -oE "^[0-9]+")
  [ "${spill:-0}" -le 64 ] || problem="$problem main kernel spills $spill bytes"
  grep -B1 -A2 "entry function '[^']*_bwd_\(pre\|dq\)' for" "$work/$name.log" |
    grep -qE "[1-9][0-9]* bytes spill" && problem="$problem preprocess/convert spill"
  # The config `compile` reports: wgmma_bwd adds dQ by bulk reductions,
  # mma_sync_bwd by f32 atomics.
  local family insns
  family=$(grep -oE "config [a-z_]+" "$work/$name.err" | awk '{print $2}')
  case "$family" in
    wgmma_bwd) insns=("wgmma.mma_async.sync.aligned.m64n"
                      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32") ;;
    mma_sync_bwd) insns=("mma.sync.aligned.m16n8k16" "atom.global.add.f32") ;;
    *) insns=(); problem="$problem unexpected family '$family'" ;;
  esac
  for insn in "${insns[@]}"; do
    grep -qF "$insn" "$work/$name.ptx" || problem="$problem the PTX lacks $insn"
  done
  if [ -n "$problem" ]; then
    echo "FAIL $name: $problem"; grep -iE "spill|warn|performance loss" "$work/$name.log"
    fails=$((fails + 1)); return
  fi
  echo "ok   $name: $(echo "$main" | grep -o "[0-9]* bytes spill stores")"
}
for arch in sm_80 sm_90a; do
  for d in 64 96 128 256; do
    for dtype in f16 bf16; do
      for causal in "" --causal; do
        backward_check "bwd-$arch-d$d-$dtype${causal:+-causal}" "$arch" \
          --head-dim "$d" --dtype "$dtype" $causal
        if [ "$arch" = sm_90a ] && { [ "$d" = 64 ] || [ "$d" = 128 ]; }; then
          backward_check "bwd-varlen-d$d-$dtype${causal:+-causal}" sm_90a \
            --head-dim "$d" --dtype "$dtype" $causal --varlen
        fi
      done
    done
  done
done
for d in 64 128; do
  for block_m in 64 128; do
    [ "$d" = 128 ] && [ "$block_m" = 128 ] && continue
    for stages in 1 2 3; do
      backward_check "bwd-cand-d$d-m$block_m-s$stages" sm_90a --head-dim "$d" --causal \
        --backward-config "wgmma_bwd:m$block_m:n128:s$stages:w8"
    done
  done
done
echo "$((count - fails))/$count PTX files accepted by $("$ptxas" --version | tail -1)"
[ "$fails" -eq 0 ]
