#!/usr/bin/env bash
# Runs on the GPU machine (device tool): the Python package's tests, GPU ones
# included, against the stripped build in .device-bundle (its
# lib/libflashjit.so), with the LLVM runtime libraries from .device-carry
# (device-setup.sh). The machine has CUDA, PyTorch, Triton and transformers
# but no internet: the package installs with --no-deps --no-build-isolation,
# and if transformers is missing and .device-pydeps/ holds wheels, those are
# installed from it with --no-index. Logs: $OUT/python-tests.log and
# $OUT/python-tests.xml (JUnit).
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/scripts/device-setup.sh
export FLASHJIT_LIBRARY=$PWD/.device-bundle/lib/libflashjit.so
export PYTHONUNBUFFERED=1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
if ! python3 -c "import transformers" 2>/dev/null && compgen -G ".device-pydeps/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/pydeps .device-pydeps/*.whl \
    && export PYTHONPATH=/tmp/pydeps${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -c "import transformers; print('transformers', transformers.__version__)" || echo "transformers: missing (its tests skip)"
if ! python3 -m pip install -q --no-deps --no-build-isolation --disable-pip-version-check ./python; then
  echo "pip install ./python failed: testing from the source tree"
  export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
fi
cd python/tests
# PYTEST_ARGS: extra pytest arguments (e.g. "-k gradients test_gpu_varlen.py").
timeout "${PYTEST_TIMEOUT:-540}" python3 -m pytest -v -rs -p no:cacheprovider \
  --junitxml="$OUT/python-tests.xml" ${PYTEST_ARGS:-.} \
  > "$OUT/python-tests.log" 2>&1
rc=$?
grep -E "^(FAILED|ERROR)|^SKIPPED|[0-9]+ (passed|failed|skipped|error)" "$OUT/python-tests.log" | tail -n 80
echo "python tests rc=$rc (log: \$OUT/python-tests.log)"
exit $rc
