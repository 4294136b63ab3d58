#!/usr/bin/env bash
# Packs what the device tool's GPU machine needs from this build, inside
# its 64 MiB limit on everything that travels (the LLVM runtime .deb files
# of .device-carry take about 51 MB of it):
#
#   tools/scripts/device-bundle.sh              # the build -> .device-bundle
#   tools/scripts/device-bundle.sh --no-lib     # without libflashjit.so
#                                               # (no Python on the device)
#   tools/scripts/device-bundle.sh --save NAME  # the build's flashjit CLI,
#       xz-compressed (about 0.9 MB), as .device-builds/NAME.xz: an A/B
#       partner for the device-*-ab.sh scripts. Save the base build, change
#       the code, rebuild, bundle; on the device,
#       `source tools/scripts/device-builds.sh` unpacks every saved build
#       to /tmp/flashjit-NAME.
#
# The flashjit CLI and the GPU tests link flashjit statically, so one file
# is a whole build. Build first (ninja -C build). Both folders must be
# ignored by git (.gitignore has .device-bundle; add /.device-builds/ to
# .git/info/exclude) and named in the run's carry.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build}
case "${1:-}" in
--save)
  name=${2:?usage: device-bundle.sh --save NAME}
  mkdir -p .device-builds
  strip -o ".device-builds/$name" "$build/tools/flashjit"
  xz -9 -f ".device-builds/$name"
  echo "saved .device-builds/$name.xz ($(du -h ".device-builds/$name.xz" | cut -f1))"
  ;;
"" | --no-lib)
  rm -rf .device-bundle
  cmake --install "$build" --prefix .device-bundle --strip > /dev/null
  rm -rf .device-bundle/bin/flashjit-opt .device-bundle/include \
    .device-bundle/lib/cmake .device-bundle/lib/pkgconfig
  [ "${1:-}" = --no-lib ] && rm -rf .device-bundle/lib
  ;;
*)
  echo "usage: device-bundle.sh [--no-lib | --save NAME]" >&2
  exit 2
  ;;
esac
# What travels: tracked files, untracked files git does not ignore, and the
# carried folders (du fails on a folder that is not there: the sum stands).
tracked=$(git ls-files -z | xargs -0 du -cb 2> /dev/null | tail -1 | cut -f1)
carried=$(du -scb .device-carry .device-bundle .device-builds .device-jobs \
  2> /dev/null | tail -1 | cut -f1 || true)
total=$((tracked + carried))
awk -v t="$total" -v k="$tracked" 'BEGIN { printf "travels: about %.1f MiB of 64 (tracked files %.1f MiB)\n", t / 1048576, k / 1048576 }'
# The tool counts more than these sums: a tree of 63.7 MiB by this count
# was refused, one of 62.8 went.
if ((total > 63 * 1048576)); then
  echo "too close to the device tool's limit: bundle with --no-lib, or save fewer builds" >&2
  exit 1
fi
