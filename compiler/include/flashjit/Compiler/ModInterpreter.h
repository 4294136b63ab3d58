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

private:
  ModInterpreter();
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace flashjit

#endif
