"""Exceptions raised by the flashjit package.

Why: every C call returns a flashjit_status_t and leaves a message in
flashjit_last_error(); Python code should catch one exception type per
status rather than compare integers. Each exception carries the status
number, the library's name for it and the library's message, so a bug
report shows exactly what the library said. Argument problems found in
Python before any C call use the same classes (InvalidArgumentError is also
a ValueError), so callers need not know which layer caught them.
"""

from typing import Optional

# flashjit_status_t values, in the order of runtime/include/flashjit/flashjit.h.
STATUS_OK = 0
STATUS_INVALID_ARGUMENT = 1
STATUS_UNSUPPORTED = 2
STATUS_NO_DEVICE = 3
STATUS_COMPILE_ERROR = 4
STATUS_DRIVER_ERROR = 5
STATUS_LAUNCH_ERROR = 6
STATUS_INTERNAL = 7

# The words flashjit_status_name() returns; used when the library cannot be
# asked (it failed to load, or the error was found in Python).
STATUS_NAMES = {
    STATUS_OK: "ok",
    STATUS_INVALID_ARGUMENT: "invalid argument",
    STATUS_UNSUPPORTED: "unsupported",
    STATUS_NO_DEVICE: "no device",
    STATUS_COMPILE_ERROR: "compile error",
    STATUS_DRIVER_ERROR: "driver error",
    STATUS_LAUNCH_ERROR: "launch error",
    STATUS_INTERNAL: "internal error",
}


class FlashjitError(RuntimeError):
    """A flashjit call failed.

    Attributes:
        status: the flashjit_status_t value (None when no status applies,
            as for a library that could not be loaded).
        status_name: the library's word for the status ("invalid argument").
        message: what went wrong (flashjit_last_error() for library calls).
    """

    status: Optional[int] = None

    def __init__(self, message: str, status: Optional[int] = None,
                 status_name: Optional[str] = None):
        if status is not None:
            self.status = status
        self.status_name = status_name or STATUS_NAMES.get(self.status, "error")
        self.message = message
        super().__init__(f"{self.status_name}: {message}" if self.status is not None
                         else message)


class InvalidArgumentError(FlashjitError, ValueError):
    """A malformed tensor, spec or argument (FLASHJIT_STATUS_INVALID_ARGUMENT)."""
    status = STATUS_INVALID_ARGUMENT


class UnsupportedError(FlashjitError):
    """Well-formed but not handled by any kernel (FLASHJIT_STATUS_UNSUPPORTED)."""
    status = STATUS_UNSUPPORTED


class NoDeviceError(FlashjitError):
    """No CUDA driver or GPU: kernels compile but cannot launch."""
    status = STATUS_NO_DEVICE


class CompileError(FlashjitError):
    """Generating or compiling the kernel failed."""
    status = STATUS_COMPILE_ERROR


class DriverError(FlashjitError):
    """The CUDA driver refused to JIT or load the kernel's module."""
    status = STATUS_DRIVER_ERROR


class LaunchError(FlashjitError):
    """The kernel launch failed."""
    status = STATUS_LAUNCH_ERROR


class InternalError(FlashjitError):
    """Out of memory, or a failure the library has no better word for."""
    status = STATUS_INTERNAL


class LibraryNotFoundError(FlashjitError, OSError):
    """libflashjit.so could not be found or loaded."""
    status = None


class GraphCaptureError(FlashjitError):
    """A call inside CUDA graph capture that needs work a capture cannot
    record: compiling a kernel, or a persistent kernel's first launch on the
    capturing stream (found in Python; no library status)."""
    status = None


_BY_STATUS = {cls.status: cls for cls in (
    InvalidArgumentError, UnsupportedError, NoDeviceError, CompileError,
    DriverError, LaunchError, InternalError)}


def error_for_status(status: int, message: str,
                     status_name: Optional[str] = None) -> FlashjitError:
    """The exception for a non-OK status (an unknown status gives a plain
    FlashjitError that still carries the number)."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        return FlashjitError(message, status=status,
                             status_name=status_name or f"unknown status {status}")
    return cls(message, status_name=status_name)
