//===- ModInterpreter.h - a spec's mods evaluated on the host -----*- C++ -*-===//
// Why: the float64 reference must apply the same score_mod and mask_mod as
// the kernel, from the same text. This interprets the mods' functions op by
// op in double precision (integers in 64 bits), so a kernel is checked
// against what its description says rather than a second hand-written
// copy of each variant.
#ifndef FLASHJIT_COMPILER_MODINTERPRETER_H
#define FLASHJIT_COMPILER_MODINTERPRETER_H

#include "flashjit/Dialect/AttentionSpec.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"
#include <memory>
#include <vector>

namespace mlir {
class Block;
} // namespace mlir

namespace flashjit {

/// A captured tensor on the host: row-major values of its shape (i32
/// values held exactly in double).
struct HostCapture {
  std::vector<int64_t> shape;
  std::vector<double> values;
};

class ModInterpreter {
public:
  /// Parses the spec's score_mod and mask_mod; an error names what does
  /// not parse or which op it cannot evaluate.
  static llvm::Expected<std::unique_ptr<ModInterpreter>>
  create(const AttentionSpec &spec);
  ~ModInterpreter();

  /// For a checked run: create() when the spec has mods (null when it has
  /// none), and an error unless `captures` holds one tensor per captured
  /// tensor of the spec.
  static llvm::Expected<std::unique_ptr<ModInterpreter>>
  forCheck(const AttentionSpec &spec, llvm::ArrayRef<HostCapture> captures);

  bool hasScoreMod() const;
  bool hasMaskMod() const;
  /// score_mod(score, b, h, q, kv, captures...); `score` unchanged without
  /// one. A captured tensor read out of bounds is an error.
  llvm::Expected<double> score(double score, int64_t b, int64_t h, int64_t q,
                               int64_t kv,
                               llvm::ArrayRef<HostCapture> captures) const;
  /// mask_mod(b, h, q, kv, captures...); true without one.
  llvm::Expected<bool> keep(int64_t b, int64_t h, int64_t q, int64_t kv,
                            llvm::ArrayRef<HostCapture> captures) const;

  /// Interprets one block of mod ops (a func.func's body, or a score_mod,
  /// mask_mod or score_grad region of an attn.attention) with its leading
  /// arguments bound to `fixed` (the score, then b, h, q, kv) and the
  /// captures after them; returns every value it returns or yields.
  static llvm::Expected<std::vector<double>>
  evaluateBlock(mlir::Block &block, llvm::ArrayRef<double> fixed,
                llvm::ArrayRef<HostCapture> captures);

private:
  ModInterpreter();
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace flashjit

#endif
