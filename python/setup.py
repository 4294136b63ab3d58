"""Build of the flashjit package: pure Python, plus flashjit._fastpath where possible.

Why: flashjit._fastpath (csrc/fastpath.cpp) runs eager flashjit.attention
calls in C++ against PyTorch's C++ API, so it can only be built where
PyTorch and a C++ compiler are present at build time (`pip install
--no-build-isolation ./python` in an environment that has torch). Everywhere
else (no torch, no compiler, a failed compile, FLASHJIT_NO_EXTENSION=1) the
package installs without it and the same calls run in Python. The extension
is tied to the PyTorch it was built against; under another one it fails to
import and the Python path is used.
"""

import os
import sys

from setuptools import setup


def _extension():
    if os.environ.get("FLASHJIT_NO_EXTENSION", "") not in ("", "0"):
        return [], {}
    try:
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except Exception:  # no torch in the build environment
        return [], {}

    class OptionalBuild(BuildExtension.with_options(use_ninja=False)):
        """Builds the extension if it can; a failure is a warning."""

        def build_extension(self, ext):
            # Always built again (the installed PyTorch may have changed), and
            # a failed compile must not ship the output of an earlier build.
            path = self.get_ext_fullpath(ext.name)
            if os.path.exists(path):
                os.remove(path)
            super().build_extension(ext)

        def run(self):
            try:
                super().run()
            except Exception as e:  # no compiler, missing headers, ...
                print(f"warning: flashjit._fastpath not built ({e}); flashjit.attention "
                      "runs its eager calls in Python", file=sys.stderr)

    ext = CppExtension("flashjit._fastpath", ["csrc/fastpath.cpp"],
                       extra_compile_args=["-O2", "-fvisibility=hidden"], optional=True)
    return [ext], {"build_ext": OptionalBuild}


ext_modules, cmdclass = _extension()
setup(ext_modules=ext_modules, cmdclass=cmdclass)
