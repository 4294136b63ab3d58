//===- ScoreModCost.cpp - what a score_mod costs the special-function unit ===//
// Why: the softmax already spends one of the special-function unit's
// results (ex2.approx) per score, and that unit retires 16 results per
// clock and SM on Hopper, a head dim 128 tile's products as many clocks as
// two per score. A score_mod with one more (soft-capping's tanh) makes the
// unit as busy as the tensor cores, and the tile configs that overlap one
// warpgroup's softmax with other warpgroups' products are then the faster
// (docs/performance.md): the templates offer them, and the heuristic ranks
// them, from this count.
#include "flashjit/Templates/KernelTemplate.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/StringSwitch.h"

#include <cctype>

namespace flashjit {

unsigned scoreModSpecialFunctions(const AttentionSpec &spec) {
  llvm::StringRef text = spec.scoreMod;
  unsigned count = 0;
  for (size_t at = text.find("math."); at != llvm::StringRef::npos;
       at = text.find("math.", at)) {
    at += 5;
    size_t end = at;
    while (end < text.size() &&
           (std::isalnum(static_cast<unsigned char>(text[end])) ||
            text[end] == '_'))
      ++end;
    count += llvm::StringSwitch<unsigned>(text.slice(at, end))
                 .Cases({"tanh", "exp", "exp2", "log", "log2", "sqrt", "rsqrt"},
                        1)
                 .Default(0);
    at = end;
  }
  return count;
}

bool specialFunctionBound(const AttentionSpec &spec) {
  return spec.headDim == 128 && !spec.hasRightBound() &&
         scoreModSpecialFunctions(spec) > 0;
}

} // namespace flashjit
