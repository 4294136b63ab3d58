# Sourced on the GPU machine (device tool): unpacks every build that
# tools/scripts/device-bundle.sh --save packed (.device-builds/NAME.xz) to
# /tmp/flashjit-NAME, with Python's lzma (the machine may lack xz), and
# lists them in BUILDS as NAME=/tmp/flashjit-NAME for the device-*-ab.sh
# scripts, e.g.
#
#   source tools/scripts/device-builds.sh
#   bash tools/scripts/device-varlen-ab.sh 3 new=$PWD/.device-bundle/bin/flashjit $BUILDS
BUILDS=""
for _packed in .device-builds/*.xz; do
  [ -e "$_packed" ] || continue
  _name=$(basename "$_packed" .xz)
  python3 - "$_packed" "/tmp/flashjit-$_name" <<'PY'
import lzma, os, shutil, sys
with lzma.open(sys.argv[1]) as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
os.chmod(sys.argv[2], 0o755)
PY
  BUILDS="$BUILDS $_name=/tmp/flashjit-$_name"
done
BUILDS=${BUILDS# }
unset _packed _name
