//===- FuzzMods.cpp - fuzz the host's reading of score_mod / mask_mod -----===//
// Why: `flashjit run --score-mod FILE`, the GPU suite and the host block
// mask read mods from text and interpret them on the host (ModInterpreter)
// to check the kernels. Whatever the text, parsing it and evaluating it at
// any indices must end in a value or an error, never a crash, a trap or
// undefined behaviour. The first byte picks score_mod or mask_mod and the
// indices; the rest is the text. Two captured tensors are passed, of
// shapes [3, 5] and [7], for mods that read captures.
#include "flashjit/Compiler/ModInterpreter.h"
#include "flashjit/Dialect/AttentionSpec.h"

#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  flashjit::AttentionSpec spec;
  std::string text(reinterpret_cast<const char *>(data + 1), size - 1);
  bool score = data[0] & 1;
  (score ? spec.scoreMod : spec.maskMod) = text;
  auto interpreter = flashjit::ModInterpreter::create(spec);
  if (!interpreter) {
    llvm::consumeError(interpreter.takeError());
    return 0;
  }
  // Small indices, the largest a sequence has, and scores of every kind.
  const int64_t big = (data[0] & 2) ? INT64_MAX : (int64_t(1) << 40);
  const int64_t indices[][4] = {{0, 0, 0, 0}, {1, 3, 17, 5}, {2, 1, big, 0}};
  const double scores[] = {0.0, -1.5, 1e30, -1e30};
  std::vector<flashjit::HostCapture> captures(2);
  captures[0].shape = {3, 5};
  captures[1].shape = {7};
  for (auto &c : captures) {
    int64_t elements = 1;
    for (int64_t extent : c.shape)
      elements *= extent;
    for (int64_t i = 0; i < elements; ++i)
      c.values.push_back(double(i % 4) - 1.0);
  }
  for (const auto &at : indices) {
    for (double s : scores) {
      if (score) {
        auto value =
            (*interpreter)->score(s, at[0], at[1], at[2], at[3], captures);
        if (!value)
          llvm::consumeError(value.takeError());
      } else {
        auto keep = (*interpreter)->keep(at[0], at[1], at[2], at[3], captures);
        if (!keep)
          llvm::consumeError(keep.takeError());
      }
    }
  }
  return 0;
}
