//===- ParserGuard.cpp - input the MLIR 22 parser crashes on --------------===//
// Why: see ParserGuard.h. A small lexer over the text that splits it into
// tokens where MLIR's own lexer does (strings, `//` comments that end at a
// newline or carriage return, NUL bytes as blanks, numbers, prefixed
// identifiers such as `!0` or `#x.array`, bare identifiers), finds the
// keyword `array`, then `<` and an element type that must be spelled out
// as a builtin integer or float type: `index` crashes the parser, and so
// does a type alias that names it (`!t = index` ... `array<!t`), so
// anything else is refused rather than resolved.
#include "flashjit/Compiler/ParserGuard.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

/// A character MLIR's lexer lets a bare identifier go on with.
bool isBareIdentifierChar(char c) {
  return llvm::isAlnum(c) || c == '_' || c == '$' || c == '.';
}

/// Where MLIR's lexer stops the token of `text` that starts at `i`, for
/// the kinds of token that could hide or split an `array` keyword (the
/// others, punctuation, blanks and NUL bytes, are one character each).
class Tokens {
public:
  explicit Tokens(llvm::StringRef text) : text(text) {}

  char at(size_t i) const { return i < text.size() ? text[i] : '\0'; }

  /// Past a string literal opened at `i` (MLIR ends a bad one with an
  /// error, so running on to the next quote only ever skips less).
  size_t string(size_t i) const {
    for (++i; i < text.size() && text[i] != '"'; ++i)
      if (text[i] == '\\')
        ++i;
    return i + 1;
  }

  /// Past a `//` comment at `i`: it ends at a newline or carriage return.
  size_t comment(size_t i) const {
    while (i < text.size() && text[i] != '\n' && text[i] != '\r')
      ++i;
    return i;
  }

  /// Past a number at `i`: hex `0x..`, digits, a fraction and an exponent.
  size_t number(size_t i) const {
    if (at(i) == '0' && at(i + 1) == 'x' && llvm::isHexDigit(at(i + 2))) {
      for (i += 2; llvm::isHexDigit(at(i));)
        ++i;
      return i;
    }
    while (llvm::isDigit(at(i)))
      ++i;
    if (at(i) != '.')
      return i;
    for (++i; llvm::isDigit(at(i));)
      ++i;
    bool sign = at(i + 1) == '+' || at(i + 1) == '-';
    if ((at(i) == 'e' || at(i) == 'E') &&
        llvm::isDigit(at(i + (sign ? 2 : 1))))
      for (i += sign ? 2 : 1; llvm::isDigit(at(i));)
        ++i;
    return i;
  }

  /// Past an identifier with a prefix (`!`, `#`, `%`, `^`) at `i`: digits
  /// only when it starts with one, else letters, digits and `$._-`.
  size_t prefixed(size_t i) const {
    ++i;
    if (llvm::isDigit(at(i))) {
      while (llvm::isDigit(at(i)))
        ++i;
      return i;
    }
    while (i < text.size() &&
           (isBareIdentifierChar(text[i]) || text[i] == '-'))
      ++i;
    return i;
  }

  size_t bare(size_t i) const {
    while (i < text.size() && isBareIdentifierChar(text[i]))
      ++i;
    return i;
  }

  /// Past blanks (NUL bytes included, as MLIR skips them) and comments.
  size_t blanks(size_t i) const {
    while (i < text.size()) {
      if (llvm::isSpace(text[i]) || text[i] == '\0')
        ++i;
      else if (text.substr(i).starts_with("//"))
        i = comment(i);
      else
        break;
    }
    return i;
  }

private:
  llvm::StringRef text;
};

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
  Tokens tokens(text);
  for (size_t i = 0; i < text.size();) {
    char c = text[i];
    if (c == '"') {
      i = tokens.string(i);
      continue;
    }
    if (text.substr(i).starts_with("//")) {
      i = tokens.comment(i);
      continue;
    }
    if (c == '!' || c == '#' || c == '%' || c == '^') {
      i = tokens.prefixed(i);
      continue;
    }
    if (llvm::isDigit(c)) {
      i = tokens.number(i);
      continue;
    }
    if (!llvm::isAlpha(c) && c != '_') {
      ++i;
      continue;
    }
    size_t start = i;
    i = tokens.bare(i);
    if (text.slice(start, i) != "array")
      continue;
    size_t open = tokens.blanks(i);
    if (tokens.at(open) != '<')
      continue;
    size_t type = tokens.blanks(open + 1);
    size_t end = tokens.at(type) == '!' ? tokens.prefixed(type)
                                        : tokens.bare(type);
    llvm::StringRef spelled = text.slice(type, end);
    if (!isIntegerOrFloatKeyword(spelled))
      return llvm::createStringError(
          llvm::formatv("{0}: a dense array's element type must be written "
                        "out as an integer or float type (`array<i64: 1, 2>`, "
                        "`array<f32: 0.5>`); `array<{1}` is not accepted "
                        "(MLIR's parser crashes on index elements, also "
                        "through a type alias)",
                        name, spelled)
              .str());
  }
  return llvm::Error::success();
}

} // namespace flashjit
