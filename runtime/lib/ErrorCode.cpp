//===- ErrorCode.cpp - what kind of failure an error is -------------------===//
// Why: see ErrorCode.h. Tagging keeps the text; reading consumes the error.
#include "flashjit/Runtime/ErrorCode.h"

namespace flashjit {

char CodedError::ID = 0;

const char *errorCodeName(ErrorCode code) {
  switch (code) {
  case ErrorCode::InvalidArgument:
    return "invalid argument";
  case ErrorCode::Unsupported:
    return "unsupported";
  case ErrorCode::NoDevice:
    return "no device";
  case ErrorCode::CompileError:
    return "compile error";
  case ErrorCode::DriverError:
    return "driver error";
  case ErrorCode::LaunchError:
    return "launch error";
  case ErrorCode::Internal:
    return "internal error";
  }
  return "internal error";
}

void CodedError::log(llvm::raw_ostream &os) const { os << Message; }

std::error_code CodedError::convertToErrorCode() const {
  return llvm::inconvertibleErrorCode();
}

llvm::Error makeError(ErrorCode code, const llvm::Twine &message) {
  return llvm::make_error<CodedError>(code, message.str());
}

llvm::Error withCode(ErrorCode code, llvm::Error err) {
  if (!err)
    return err;
  if (err.isA<CodedError>())
    return err;
  return makeError(code, llvm::toString(std::move(err)));
}

ErrorParts takeErrorParts(llvm::Error err) {
  ErrorParts parts;
  bool coded = false;
  auto append = [&](const std::string &text) {
    if (!parts.message.empty())
      parts.message += "\n";
    parts.message += text;
  };
  llvm::handleAllErrors(
      std::move(err),
      [&](const CodedError &e) {
        if (!coded)
          parts.code = e.code();
        coded = true;
        append(e.text());
      },
      [&](const llvm::ErrorInfoBase &e) { append(e.message()); });
  return parts;
}

} // namespace flashjit
