//===- FileIO.h - whole-file reads and writes for the cache --------*- C++
//-*-===//
// Why: the cache reads and writes whole small files and must see every
// failure (a full disk shows up at write or close), with errno turned into
// a message that names the file. Private to the runtime library.
#ifndef FLASHJIT_RUNTIME_LIB_FILEIO_H
#define FLASHJIT_RUNTIME_LIB_FILEIO_H

#include "llvm/Support/Error.h"
#include <string>

namespace flashjit {

/// The contents of `path`; an error names the file and the reason.
llvm::Expected<std::string> readWholeFile(const std::string &path);

/// Creates `path` (which must not exist) holding exactly `data`.
llvm::Error writeNewFile(const std::string &path, llvm::StringRef data);

/// Removes a directory tree; an error names what could not be removed.
llvm::Error removeTree(const std::string &path);

} // namespace flashjit

#endif
