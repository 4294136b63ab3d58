//===- ParserGuard.h - input the MLIR 22 parser crashes on ----------------===//
// Why: flashjit parses MLIR text from its users (descriptions, score_mod
// and mask_mod functions), and MLIR 22's parser dereferences a null type
// on a dense array of `index` (`array<index ...>`, or `array<!t ...>` with
// `!t = index`: a segfault in Parser::parseDenseArrayAttr) instead of
// reporting an error. Library code must not crash on bad input, so every
// parse of user text is checked here first.
#ifndef FLASHJIT_COMPILER_PARSERGUARD_H
#define FLASHJIT_COMPILER_PARSERGUARD_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace flashjit {

/// An error naming `name` and the offending text when `text` holds a
/// construct the MLIR parser crashes on (outside string literals and
/// comments); success otherwise.
llvm::Error checkParserSafe(llvm::StringRef text, llvm::StringRef name);

} // namespace flashjit

#endif
