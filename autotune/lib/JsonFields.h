//===- JsonFields.h - checked reads of JSON fields (private) -----*- C++
//-*-===//
// Why: device models and tuning databases come from files people edit; every
// read checks presence, type and range and names the field path in the error,
// so nlohmann's exceptions are never raised and a bad file gets a message
// that says which field to fix.
#ifndef FLASHJIT_AUTOTUNE_LIB_JSONFIELDS_H
#define FLASHJIT_AUTOTUNE_LIB_JSONFIELDS_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace flashjit::autotune::detail {

/// "entries[2].config" + "block_m" -> "entries[2].config.block_m".
std::string fieldPath(llvm::StringRef at, llvm::StringRef key);
/// A short description of a value for error messages: `string "64"`.
std::string describeJson(const nlohmann::json &value);
/// An error "<at>: <message>".
llvm::Error fieldError(llvm::StringRef at, const llvm::Twine &message);

/// Fails unless `value` is a JSON object.
llvm::Error requireObject(const nlohmann::json &value, llvm::StringRef at);
/// The member `key` of `object`, or an error naming the missing field.
llvm::Expected<const nlohmann::json *>
requireField(const nlohmann::json &object, llvm::StringRef at,
             llvm::StringRef key);

llvm::Expected<int64_t> readInt(const nlohmann::json &object,
                                llvm::StringRef at, llvm::StringRef key,
                                int64_t min, int64_t max);
llvm::Expected<double> readNumber(const nlohmann::json &object,
                                  llvm::StringRef at, llvm::StringRef key);
/// Absent or null -> std::nullopt; otherwise a number.
llvm::Expected<std::optional<double>>
readOptionalNumber(const nlohmann::json &object, llvm::StringRef at,
                   llvm::StringRef key);
llvm::Expected<std::string> readString(const nlohmann::json &object,
                                       llvm::StringRef at, llvm::StringRef key);
llvm::Expected<bool> readBool(const nlohmann::json &object, llvm::StringRef at,
                              llvm::StringRef key);

/// Serializes without throwing: invalid UTF-8 is replaced, not an exception.
std::string dumpJson(const nlohmann::json &value, int indent);

} // namespace flashjit::autotune::detail

#endif
