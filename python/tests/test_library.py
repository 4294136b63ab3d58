"""Finding and loading libflashjit.so, its version, and the C layouts.

Why: a wrong library path must be an error that says what was tried and how
to fix it, never a crash or a silent switch to another library; and the
ctypes structs must match flashjit.h byte for byte, or every later call
passes garbage. Needs only the library (no torch, no GPU).
"""

import ctypes
import re
import sys

import pytest

import flashjit
from flashjit import _library
from flashjit.errors import STATUS_NAMES, LibraryNotFoundError
from flashjit.spec import SPEC_SIZES, CSpec
from flashjit._dlpack import DLTensor

from conftest import HEADER, REPO


@pytest.fixture
def fresh(monkeypatch):
    """Forget the loaded library for one test, and again afterwards."""
    _library._reset_for_tests()
    yield monkeypatch
    monkeypatch.undo()
    _library._reset_for_tests()


def test_import_needs_no_library_or_torch():
    # Importing the package must not load either (they load on first use).
    import subprocess
    code = ("import sys, flashjit; from flashjit import _library; "
            "assert _library._library is None; assert 'torch' not in sys.modules; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO / "python"), "FLASHJIT_LIBRARY": "/nonexistent"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_env_var_to_missing_file(fresh):
    fresh.setenv("FLASHJIT_LIBRARY", "/nonexistent/libflashjit.so")
    with pytest.raises(LibraryNotFoundError) as info:
        flashjit.version()
    message = str(info.value)
    assert "/nonexistent/libflashjit.so" in message
    assert "does not exist" in message and "FLASHJIT_LIBRARY" in message
    assert isinstance(info.value, OSError) and isinstance(info.value, flashjit.FlashjitError)


def test_env_var_to_a_file_that_is_not_a_library(fresh, tmp_path):
    bogus = tmp_path / "libflashjit.so"
    bogus.write_text("not an ELF file\n")
    fresh.setenv("FLASHJIT_LIBRARY", str(bogus))
    with pytest.raises(LibraryNotFoundError) as info:
        flashjit.version()
    assert str(bogus) in str(info.value)
    assert "LD_LIBRARY_PATH" in str(info.value)


def test_env_var_to_another_shared_library(fresh):
    import _ctypes  # an extension module: a real shared object without flashjit's symbols
    fresh.setenv("FLASHJIT_LIBRARY", _ctypes.__file__)
    with pytest.raises(LibraryNotFoundError) as info:
        flashjit.version()
    assert "flashjit_last_error" in str(info.value)
    assert "not a flashjit C API library" in str(info.value)


def test_nothing_found_names_every_attempt(fresh):
    fresh.delenv("FLASHJIT_LIBRARY", raising=False)
    fresh.setattr(_library, "_package_candidates", lambda: [])
    fresh.setattr(_library.ctypes.util, "find_library", lambda name: None)
    fresh.setattr(_library, "STANDARD_NAMES", ("libflashjit-test-absent.so.9",))
    with pytest.raises(LibraryNotFoundError) as info:
        flashjit.version()
    message = str(info.value)
    assert "libflashjit-test-absent.so.9" in message
    assert "find_library" in message
    assert "FLASHJIT_LIBRARY=" in message


def test_bundled_library_is_found_without_env(fresh, lib):
    fresh.delenv("FLASHJIT_LIBRARY", raising=False)
    from pathlib import Path
    fresh.setattr(_library, "_package_candidates", lambda: [Path(lib.path)])
    assert flashjit.library_path() == lib.path


def test_system_search_finds_the_library(fresh, lib):
    # As if installed where dlopen looks: the search by name gets it.
    fresh.delenv("FLASHJIT_LIBRARY", raising=False)
    fresh.setattr(_library, "_package_candidates", lambda: [])
    fresh.setattr(_library.ctypes.util, "find_library", lambda name: None)
    fresh.setattr(_library, "STANDARD_NAMES", ("libflashjit-test-absent.so", lib.path))
    assert flashjit.library_path() == lib.path


def test_version(lib):
    v = flashjit.version()
    assert isinstance(v, flashjit.Version)
    assert all(isinstance(x, int) and x >= 0 for x in v)
    assert v.api_version >= 3
    assert str(v).startswith(f"{v.major}.{v.minor}.{v.patch}")
    if HEADER.exists():
        declared = re.search(r"#define FLASHJIT_C_API_VERSION (\d+)", HEADER.read_text())
        assert declared and v.api_version >= int(declared.group(1))


def test_status_names_match_the_library(lib):
    for status, name in STATUS_NAMES.items():
        assert lib.status_name(status) == name


def test_spec_struct_matches_the_header():
    # offsetof() values of flashjit_attention_spec_t on LP64 (x86-64, aarch64).
    expected = {"struct_size": 0, "head_dim": 8, "dtype": 16, "causal": 20, "num_heads": 24,
                "num_kv_heads": 32, "causal_align": 40, "num_captures": 44, "window_left": 48,
                "window_right": 56, "score_mod": 64, "mask_mod": 72, "capture_dtype": 80,
                "capture_rank": 112, "capture_shape": 144, "sparse_block_m": 400,
                "sparse_block_n": 408, "varlen": 416, "page_size": 424}
    for field, offset in expected.items():
        assert getattr(CSpec, field).offset == offset, field
    assert ctypes.sizeof(CSpec) == 432
    assert SPEC_SIZES == {1: 40, 2: 400, 3: 416, 8: 424, 10: 432}
    if HEADER.exists():  # every field of the header is in the struct, in order
        body = HEADER.read_text().split("typedef struct flashjit_attention_spec {")[1]
        body = body.split("} flashjit_attention_spec_t;")[0]
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        names = re.findall(r"\b(\w+)(?:\[\d+\])*;", body)
        assert names == [f[0] for f in CSpec._fields_]


def test_dltensor_struct_matches_dlpack():
    assert ctypes.sizeof(DLTensor) == 48
    assert DLTensor.shape.offset == 24 and DLTensor.byte_offset.offset == 40
