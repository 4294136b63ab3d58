//===- ParserGuard.cpp - input the MLIR 22 parser crashes on --------------===//
// Why: see ParserGuard.h. A small scan of the text's tokens: strings and
// comments skipped, `array` as a whole keyword (not a dialect's `x.array`
// or `!x.array`), then `<` and the element type `index`.
#include "flashjit/Compiler/ParserGuard.h"

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

/// Whether the identifier `word` starts at `i` and ends there.
bool wordAt(llvm::StringRef text, size_t i, llvm::StringRef word) {
  return text.substr(i).starts_with(word) &&
         (i + word.size() == text.size() ||
          !isIdentifierChar(text[i + word.size()]));
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
    if (wordAt(text, type, "index"))
      return llvm::createStringError(
          llvm::formatv("{0}: a dense array of index (`array<index`) is not "
                        "supported (MLIR's parser cannot read it); use an "
                        "integer element type such as i64",
                        name)
              .str());
  }
  return llvm::Error::success();
}

} // namespace flashjit
