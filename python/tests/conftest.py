"""Shared fixtures: what each test needs, and a clean skip when it is missing.

Why: the suite runs in three places: CI (the library, no torch, no GPU),
a developer machine (maybe torch for CPU) and the GPU machine (everything).
Each test asks for what it needs through a fixture, which skips it with the
reason when that is missing, so one command runs everywhere and the skip
list says what was not covered. GPU tests also carry the `gpu` marker
(`-m gpu` / `-m "not gpu"` select them).
"""

import os
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
try:  # the installed package, else the one next to tests/ (a plain checkout)
    import flashjit  # noqa: F401
except ImportError:
    sys.path.insert(0, str(HERE.parent))

REPO = HERE.parent.parent
# Kernels the tests compile go to a private disk cache unless one is chosen.
os.environ.setdefault("FLASHJIT_CACHE_DIR", tempfile.mkdtemp(prefix="flashjit-test-cache-"))
HEADER = REPO / "runtime" / "include" / "flashjit" / "flashjit.h"


def _library_or_reason():
    from flashjit import _library
    try:
        return _library.library(), None
    except Exception as e:  # LibraryNotFoundError, or a broken library
        return None, f"libflashjit.so not loadable ({e}); set FLASHJIT_LIBRARY"


@pytest.fixture(scope="session")
def lib():
    """The loaded library (skips without one)."""
    library, reason = _library_or_reason()
    if library is None:
        pytest.skip(reason)
    return library


@pytest.fixture(scope="session")
def torch():
    """torch (skips without it)."""
    return pytest.importorskip("torch", reason="PyTorch is not installed")


@pytest.fixture(scope="session")
def numpy():
    return pytest.importorskip("numpy", reason="NumPy is not installed")


@pytest.fixture(scope="session")
def cuda(torch, lib):
    """torch with a CUDA GPU and the library (skips otherwise)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible to PyTorch")
    return torch


@pytest.fixture(scope="session")
def transformers(torch):
    return pytest.importorskip("transformers", reason="transformers is not installed")


@pytest.fixture
def cache_dir(tmp_path):
    """A private kernel cache directory for one test."""
    return str(tmp_path / "cache")


@pytest.fixture
def has_gpu(lib):
    """Whether the library sees a GPU (a context reports it)."""
    from flashjit import Context
    with Context(0, cache_dir="") as ctx:
        return ctx.has_device


def pytest_report_header(config):
    lines = [f"FLASHJIT_LIBRARY={os.environ.get('FLASHJIT_LIBRARY', '(unset)')}"]
    library, reason = _library_or_reason()
    if library is not None:
        lines.append(f"libflashjit: {library.path} version "
                     f"{'.'.join(map(str, library.version))} C API {library.api_version}")
    else:
        lines.append(reason)
    return lines
