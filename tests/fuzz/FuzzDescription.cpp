//===- FuzzDescription.cpp - fuzz the attn description to PTX -------------===//
// Why: `flashjit compile` and compileDescription take MLIR text from other
// programs. Whatever the text, parsing, verifying and lowering it must end
// in a result or an error, never a crash, an abort (LLVM's
// report_fatal_error included) or a leak. The first byte picks the target
// and the stage to stop after; the rest is the text.
#include "flashjit/Compiler/Compiler.h"

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  flashjit::CompileOptions options;
  auto target = flashjit::Target::parse((data[0] & 4) ? "sm_80" : "sm_90a");
  if (!target) {
    llvm::consumeError(target.takeError());
    return 0;
  }
  options.target = *target;
  options.stopAfter = static_cast<flashjit::Stage>(data[0] % 4);
  std::string text(reinterpret_cast<const char *>(data + 1), size - 1);
  auto compiled = flashjit::compileDescription(text, options);
  if (!compiled)
    llvm::consumeError(compiled.takeError());
  return 0;
}
