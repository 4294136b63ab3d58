//===- ParserGuard.cpp - input the MLIR 22 parser crashes on --------------===//
// Why: see ParserGuard.h. A small scan of the text's tokens: strings and
// comments skipped, `array` as a whole keyword (not a dialect's `x.array`
// or `!x.array`), then `<` and an element type that must be spelled out as
// a builtin integer or float type: `index` crashes the parser, and so does
// a type alias that names it (`!t = index` ... `array<!t`), so anything
// else is refused rather than resolved.
#include "flashjit/Compiler/ParserGuard.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

bool isIdentifierChar(char c) {
  return llvm::isAlnum(c) || c == '_' || c == '$' || c == '.';
}

/// Position past whitespace and `//` comments from `i`.
size_t skipSpace(llvm::StringRef text, size_t i) {
  while (i < text.size()) {
    if (llvm::isSpace(text[i])) {
      ++i;
    } else if (text.substr(i).starts_with("//")) {
      size_t end = text.find('\n', i);
      i = end == llvm::StringRef::npos ? text.size() : end;
    } else {
      break;
    }
  }
  return i;
}

/// Whether `type` spells a builtin integer (`i8`, `si32`, `ui64`) or
/// float (`f16`, `bf16`, `tf32`, `f8E4M3FN`, ...) type: the element types
/// a dense array holds, none of which the parser crashes on.
bool isIntegerOrFloatKeyword(llvm::StringRef type) {
  llvm::StringRef width = type;
  width.consume_front("s") || width.consume_front("u");
  if (width.consume_front("i"))
    return !width.empty() && llvm::all_of(width, llvm::isDigit);
  return type == "bf16" || type == "tf32" ||
         (type.size() >= 2 && type[0] == 'f' && llvm::isDigit(type[1]));
}

} // namespace

llvm::Error checkParserSafe(llvm::StringRef text, llvm::StringRef name) {
  for (size_t i = 0; i < text.size();) {
    char c = text[i];
    if (c == '"') { // a string literal, escapes included
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\')
          ++i;
      ++i;
      continue;
    }
    if (text.substr(i).starts_with("//")) {
      i = skipSpace(text, i);
      continue;
    }
    if (!isIdentifierChar(c)) {
      ++i;
      continue;
    }
    size_t start = i;
    while (i < text.size() && isIdentifierChar(text[i]))
      ++i;
    bool prefixed = start > 0 && (text[start - 1] == '!' ||
                                  text[start - 1] == '#');
    if (prefixed || text.slice(start, i) != "array")
      continue;
    size_t open = skipSpace(text, i);
    if (open >= text.size() || text[open] != '<')
      continue;
    size_t type = skipSpace(text, open + 1);
    size_t end = type;
    if (end < text.size() && text[end] == '!')
      ++end;
    while (end < text.size() && isIdentifierChar(text[end]))
      ++end;
    llvm::StringRef spelled = text.slice(type, end);
    if (!isIntegerOrFloatKeyword(spelled))
      return llvm::createStringError(
          llvm::formatv("{0}: a dense array's element type must be written "
                        "out as an integer or float type (`array<i64: 1, 2>`, "
                        "`array<f32: 0.5>`); `array<{1}` is not accepted "
                        "(MLIR's parser crashes on index elements, also "
                        "through a type alias)",
                        name, spelled.empty() ? "" : spelled)
              .str());
  }
  return llvm::Error::success();
}

} // namespace flashjit
