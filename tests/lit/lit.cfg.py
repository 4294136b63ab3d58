# lit configuration: .mlir and .test files under tests/lit, run with the
# build's flashjit-opt/flashjit and LLVM's FileCheck/not. Tests that need
# ptxas say `REQUIRES: ptxas` and report UNSUPPORTED where it is absent.
import os
import lit.formats

config.name = "flashjit"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".test"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.flashjit_obj_root, "tests", "lit")
config.environment["PATH"] = os.pathsep.join(
    [config.flashjit_tools_dir, config.llvm_tools_dir,
     config.environment.get("PATH", os.environ.get("PATH", ""))])
# Kernel-cache tests must not touch the user's cache.
config.environment["FLASHJIT_CACHE_DIR"] = os.path.join(
    config.test_exec_root, "cache")
if config.ptxas and os.path.exists(config.ptxas) and not config.ptxas.endswith("NOTFOUND"):
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", config.ptxas))
