//===- FoldRepeats.h - fold repeats among ops just emitted -----*- C++ -*-===//
// Why: a mod's region is inlined once per score, so its ops that depend on
// neither of the score's indices (a captured tensor read at the head, the
// 32-bit forms of a row's indices) come out once per score as well, and
// left to the kernel-level canonicalizer and CSE they took most of a
// variant's MLIR time (docs/performance.md). Folding the repeats where
// they are emitted leaves the kernel those passes make, for less work.
#ifndef FLASHJIT_TEMPLATES_FOLDREPEATS_H
#define FLASHJIT_TEMPLATES_FOLDREPEATS_H

#include "mlir/IR/Builders.h"

namespace flashjit {

/// Marks the builder's insertion point; fold() then replaces each op
/// emitted in that block since the mark by an equivalent earlier one from
/// the same span, as CSE would: ops free of memory effects, and reads with
/// no write or unknown effect between them. Ops with regions (and what
/// was emitted inside them) are left alone.
class RepeatFolder {
public:
  explicit RepeatFolder(mlir::OpBuilder &b);
  void fold();

private:
  mlir::OpBuilder &b;
  mlir::Block *block;
  /// The op before the first one emitted since the mark (null: the
  /// block's start).
  mlir::Operation *before;
};

} // namespace flashjit

#endif
