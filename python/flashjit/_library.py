"""Finding, loading and declaring libflashjit.so.

Why: the package reaches the compiler and runtime through
the stable C API (runtime/include/flashjit/flashjit.h) with ctypes. The
library is found once, on first use (so `import flashjit` works on machines
without it), in this order:

1. $FLASHJIT_LIBRARY, a path to the .so (no fallback when it is set: a
   wrong path is an error, not a silent switch to another library);
2. a library shipped inside the package (flashjit/lib/libflashjit.so*);
3. the system's search (ctypes.util.find_library, then dlopen of the
   standard names, which honours LD_LIBRARY_PATH and ldconfig).

Every function gets its argtypes/restype here, so a wrong Python value is a
ctypes.ArgumentError, never a corrupt call. A failure names each place tried
and why it failed, and says how to point the package at the library.
"""

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path
from typing import List, Optional, Tuple

from . import _dlpack
from .errors import (STATUS_NAMES, STATUS_OK, LibraryNotFoundError,
                     error_for_status)

ENV_VAR = "FLASHJIT_LIBRARY"
# dlopen names, newest first: the versioned soname of an installed release,
# then the development name.
STANDARD_NAMES = ("libflashjit.so.0.4", "libflashjit.so.0", "libflashjit.so")
# The functions without which nothing works; the rest are looked up when used.
REQUIRED_SYMBOLS = (
    "flashjit_last_error", "flashjit_status_name", "flashjit_get_version",
    "flashjit_context_create", "flashjit_context_destroy",
    "flashjit_kernel_compile", "flashjit_kernel_release",
    "flashjit_kernel_forward",
)

_c_handle = ctypes.c_void_p
_c_status = ctypes.c_int
_p_dltensor = ctypes.POINTER(_dlpack.DLTensor)

# name -> (restype, argtypes), as flashjit.h declares them.
_SIGNATURES = {
    "flashjit_last_error": (ctypes.c_char_p, []),
    "flashjit_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "flashjit_get_version": (_c_status, [ctypes.POINTER(ctypes.c_int32)] * 4),
    "flashjit_context_create": (_c_status, [ctypes.c_int32, ctypes.c_char_p,
                                            ctypes.c_char_p, ctypes.POINTER(_c_handle)]),
    "flashjit_context_destroy": (_c_status, [_c_handle]),
    "flashjit_context_chip": (_c_status, [_c_handle, ctypes.POINTER(ctypes.c_char_p)]),
    "flashjit_context_device": (_c_status, [_c_handle, ctypes.POINTER(ctypes.c_int32),
                                            ctypes.POINTER(ctypes.c_char_p)]),
    "flashjit_kernel_compile": (_c_status, [_c_handle, ctypes.c_void_p,
                                            ctypes.POINTER(_c_handle)]),
    "flashjit_kernel_compile_config": (_c_status, [_c_handle, ctypes.c_void_p,
                                                   ctypes.c_char_p,
                                                   ctypes.POINTER(_c_handle)]),
    "flashjit_kernel_compile_for_seqlen": (_c_status, [_c_handle, ctypes.c_void_p,
                                                       ctypes.c_char_p, ctypes.c_int64,
                                                       ctypes.POINTER(_c_handle)]),
    "flashjit_kernel_release": (_c_status, [_c_handle]),
    "flashjit_kernel_describe": (_c_status, [_c_handle, ctypes.POINTER(ctypes.c_char_p),
                                             ctypes.POINTER(ctypes.c_char_p)]),
    "flashjit_kernel_forward": (_c_status, [_c_handle] + [_p_dltensor] * 5
                                + [ctypes.c_double, ctypes.c_void_p]),
    "flashjit_kernel_forward_varlen": (_c_status, [_c_handle] + [_p_dltensor] * 7
                                       + [ctypes.c_int64, ctypes.c_double, ctypes.c_void_p]),
    "flashjit_kernel_forward_paged": (_c_status, [_c_handle] + [_p_dltensor] * 8
                                      + [ctypes.c_int64, ctypes.c_double, ctypes.c_void_p]),
    "flashjit_kernel_forward_captures": (_c_status, [_c_handle] + [_p_dltensor] * 5
                                         + [ctypes.c_double, _p_dltensor, ctypes.c_int32,
                                            ctypes.c_void_p]),
    "flashjit_kernel_forward_block_sparse": (_c_status, [_c_handle] + [_p_dltensor] * 5
                                             + [ctypes.c_double, _p_dltensor, ctypes.c_int32]
                                             + [_p_dltensor] * 4 + [ctypes.c_void_p]),
    "flashjit_backward_compile_with_options": (_c_status, [_c_handle, ctypes.c_void_p,
                                                           ctypes.c_void_p,
                                                           ctypes.POINTER(_c_handle)]),
    "flashjit_backward_release": (_c_status, [_c_handle]),
    "flashjit_backward_workspace_size": (_c_status, [_c_handle, ctypes.c_int64, ctypes.c_int64,
                                                     ctypes.POINTER(ctypes.c_uint64)]),
    "flashjit_backward_run": (_c_status, [_c_handle] + [_p_dltensor] * 9
                              + [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_double,
                                 ctypes.c_void_p]),
    "flashjit_backward_run_captures": (_c_status, [_c_handle] + [_p_dltensor] * 9
                                       + [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_double,
                                          _p_dltensor, ctypes.c_int32, ctypes.c_void_p]),
    "flashjit_backward_run_varlen": (_c_status, [_c_handle] + [_p_dltensor] * 11
                                     + [ctypes.c_int64, ctypes.c_void_p, ctypes.c_uint64,
                                        ctypes.c_double, ctypes.c_void_p]),
    "flashjit_backward_run_block_sparse": (_c_status, [_c_handle] + [_p_dltensor] * 9
                                           + [ctypes.c_void_p, ctypes.c_uint64,
                                              ctypes.c_double, _p_dltensor, ctypes.c_int32]
                                           + [_p_dltensor] * 4 + [ctypes.c_void_p]),
}


class Library:
    """The loaded library: its path, its C functions and its version."""

    def __init__(self, cdll: ctypes.CDLL, path: str):
        self._cdll = cdll
        self.path = path
        missing = [name for name in REQUIRED_SYMBOLS if not hasattr(cdll, name)]
        if missing:
            raise LibraryNotFoundError(
                f"{path} was loaded but lacks {', '.join(missing)}: it is not a "
                f"flashjit C API library (or a much older one); point ${ENV_VAR} "
                "at build/runtime/libflashjit.so of a current build")
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(cdll, name, None)
            if fn is not None:
                fn.restype = restype
                fn.argtypes = argtypes
        values = [ctypes.c_int32() for _ in range(4)]
        status = cdll.flashjit_get_version(*[ctypes.byref(v) for v in values])
        if status != STATUS_OK:
            raise self.error(status)
        self.version: Tuple[int, int, int] = tuple(v.value for v in values[:3])
        self.api_version: int = values[3].value

    def has(self, name: str) -> bool:
        """Whether this library exports `name` (later C API versions add
        functions)."""
        return hasattr(self._cdll, name)

    def fn(self, name: str):
        """The C function `name`, or an UnsupportedError naming the version."""
        fn = getattr(self._cdll, name, None)
        if fn is None:
            from .errors import UnsupportedError
            raise UnsupportedError(
                f"{self.path} (C API version {self.api_version}) has no {name}: "
                "use a newer libflashjit.so")
        return fn

    def last_error(self) -> str:
        raw = self._cdll.flashjit_last_error()
        return raw.decode("utf-8", "replace") if raw else ""

    def status_name(self, status: int) -> str:
        raw = self._cdll.flashjit_status_name(status)
        return raw.decode("utf-8", "replace") if raw else STATUS_NAMES.get(status, "unknown")

    def error(self, status: int):
        """The exception for a non-OK status just returned on this thread
        (the message is thread-local in the library, and ctypes calls run on
        the calling thread, so it is this call's)."""
        message = self.last_error() or "(the library gave no message)"
        return error_for_status(status, message, self.status_name(status))

    def check(self, status: int) -> None:
        if status != STATUS_OK:
            raise self.error(status)


_lock = threading.Lock()
_library: Optional[Library] = None


def _package_candidates() -> List[Path]:
    here = Path(__file__).resolve().parent
    found: List[Path] = []
    for folder in (here / "lib", here):
        if folder.is_dir():
            found += sorted(folder.glob("libflashjit.so*"), reverse=True)
    return found


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _file_of(cdll: ctypes.CDLL) -> Optional[str]:
    """The file the dynamic loader opened for `cdll` (dladdr of one of its
    functions), or None where that cannot be asked."""
    for libname in (None, "libdl.so.2"):
        try:
            dladdr = ctypes.CDLL(libname).dladdr
        except (OSError, AttributeError):
            continue
        dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        dladdr.restype = ctypes.c_int
        info = _DlInfo()
        address = ctypes.cast(cdll.flashjit_get_version, ctypes.c_void_p)
        if dladdr(address, ctypes.byref(info)) and info.dli_fname:
            return os.path.realpath(info.dli_fname.decode("utf-8", "replace"))
        return None
    return None


def _try_load(target: str, tried: List[str], how: str) -> Optional[Library]:
    try:
        cdll = ctypes.CDLL(target)
    except OSError as e:
        tried.append(f"{how} {target}: {e}")
        return None
    path = target
    if hasattr(cdll, "flashjit_get_version"):
        path = _file_of(cdll) or target
    try:
        return Library(cdll, path)
    except LibraryNotFoundError as e:
        tried.append(f"{how} {target}: {e.message}")
        return None


def _load() -> Library:
    tried: List[str] = []
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(env).expanduser().resolve()  # dlopen reads a relative path from the cwd
        if not path.exists():
            raise LibraryNotFoundError(
                f"${ENV_VAR} is {env!r}, which does not exist: set it to the path of "
                "libflashjit.so (e.g. build/runtime/libflashjit.so of a flashjit "
                "build), or unset it to search the package and the system")
        lib = _try_load(str(path), tried, f"${ENV_VAR} =")
        if lib is None:
            raise LibraryNotFoundError(
                "libflashjit.so could not be loaded: " + "; ".join(tried) +
                ". If a dependency such as libMLIR.so or libLLVM.so is missing, add "
                "its folder (LLVM 22's lib/) to LD_LIBRARY_PATH")
        return lib

    for path in _package_candidates():
        lib = _try_load(str(path), tried, "bundled")
        if lib is not None:
            return lib
    found = ctypes.util.find_library("flashjit")
    names = ([found] if found else []) + [n for n in STANDARD_NAMES if n != found]
    if not found:
        tried.append("ctypes.util.find_library('flashjit'): nothing")
    for name in names:
        lib = _try_load(name, tried, "dlopen")
        if lib is not None:
            return lib
    raise LibraryNotFoundError(
        "libflashjit.so was not found. Tried: " + "; ".join(tried) +
        f". Fix: set {ENV_VAR}=/path/to/libflashjit.so (a flashjit build puts it "
        "in build/runtime/; `cmake --install build --prefix DIR` in DIR/lib), or "
        "add its folder to LD_LIBRARY_PATH. It also needs LLVM 22's libMLIR.so and "
        "libLLVM.so on the library path")


def library() -> Library:
    """The loaded library (found and loaded on the first call)."""
    global _library
    lib = _library
    if lib is None:
        with _lock:
            if _library is None:
                _library = _load()
            lib = _library
    return lib


def _reset_for_tests() -> None:
    """Forget the loaded library so the next call searches again (tests of
    the discovery order; the old CDLL stays loaded in the process)."""
    global _library
    with _lock:
        _library = None
