//===- ErrorCode.h - what kind of failure an error is -----------*- C++ -*-===//
// Why: a caller that embeds flashjit acts on the kind of a failure, not on
// its text: an unsupported spec means "use another backend", a bad argument
// is the caller's bug, a missing GPU is the machine. Context and Kernel tag
// the errors they return with one of these codes; the C API turns the code
// into its status and the text into its last-error message.
#ifndef FLASHJIT_RUNTIME_ERRORCODE_H
#define FLASHJIT_RUNTIME_ERRORCODE_H

#include "llvm/Support/Error.h"
#include <string>

namespace flashjit {

enum class ErrorCode {
  /// The caller passed something malformed (null pointer, bad shape,
  /// strides, dtype, a spec that no attention could have, an unknown chip).
  InvalidArgument,
  /// Well-formed, but no kernel template or target handles it.
  Unsupported,
  /// No CUDA driver or GPU: kernels compile but cannot load or launch.
  NoDevice,
  /// Generating or compiling the kernel failed (a flashjit bug).
  CompileError,
  /// The CUDA driver refused to JIT or load a module.
  DriverError,
  /// The launch itself failed.
  LaunchError,
  /// Anything else.
  Internal,
};

/// "invalid argument", "unsupported", ... (for messages).
const char *errorCodeName(ErrorCode code);

/// An error with its kind. log() prints the message alone, so
/// llvm::toString() reads as it did before the code was attached.
class CodedError : public llvm::ErrorInfo<CodedError> {
public:
  static char ID;
  CodedError(ErrorCode code, std::string message)
      : Code(code), Message(std::move(message)) {}
  ErrorCode code() const { return Code; }
  const std::string &text() const { return Message; }
  void log(llvm::raw_ostream &os) const override;
  std::error_code convertToErrorCode() const override;

private:
  ErrorCode Code;
  std::string Message;
};

/// A new error of kind `code`.
llvm::Error makeError(ErrorCode code, const llvm::Twine &message);

/// `err` tagged with `code`: success stays success, an error that already
/// has a code keeps it (the innermost layer knows best), any other error
/// becomes one CodedError with the same text.
llvm::Error withCode(ErrorCode code, llvm::Error err);

/// Splits a failure into its code and its text, consuming it (success
/// gives {Internal, ""}). Errors joined into one take the code of the
/// first tagged one and the text of all, one per line; untagged errors
/// are Internal.
struct ErrorParts {
  ErrorCode code = ErrorCode::Internal;
  std::string message;
};
ErrorParts takeErrorParts(llvm::Error err);

} // namespace flashjit

#endif
