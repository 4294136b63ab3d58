//===- ErrorCodeTest.cpp - errors that carry their kind -------------------===//
// Why: the C API's status comes from these codes; a code lost on the way
// (re-wrapped by an outer layer, dropped from a joined error) would turn
// "unsupported" into "internal" for every caller.
#include "flashjit/Runtime/ErrorCode.h"

#include <doctest/doctest.h>

using namespace flashjit;

TEST_CASE("an error's code and text come back out") {
  ErrorParts parts =
      takeErrorParts(makeError(ErrorCode::Unsupported, "head dim 48"));
  CHECK(parts.code == ErrorCode::Unsupported);
  CHECK(parts.message == "head dim 48");
}

TEST_CASE("withCode tags plain errors and keeps an inner code") {
  CHECK_FALSE(static_cast<bool>(
      withCode(ErrorCode::CompileError, llvm::Error::success())));

  ErrorParts plain = takeErrorParts(
      withCode(ErrorCode::CompileError, llvm::createStringError("boom")));
  CHECK(plain.code == ErrorCode::CompileError);
  CHECK(plain.message == "boom");

  ErrorParts inner = takeErrorParts(
      withCode(ErrorCode::Internal, makeError(ErrorCode::NoDevice, "no GPU")));
  CHECK(inner.code == ErrorCode::NoDevice);

  // toString reads as before: the text alone.
  CHECK(llvm::toString(makeError(ErrorCode::LaunchError, "bad launch")) ==
        "bad launch");
}

TEST_CASE("joined errors keep the first code and every text") {
  llvm::Error joined =
      llvm::joinErrors(llvm::createStringError("first"),
                       makeError(ErrorCode::DriverError, "second"));
  ErrorParts parts = takeErrorParts(std::move(joined));
  CHECK(parts.code == ErrorCode::DriverError);
  CHECK(parts.message == "first\nsecond");

  ErrorParts untagged = takeErrorParts(llvm::createStringError("alone"));
  CHECK(untagged.code == ErrorCode::Internal);
  CHECK(std::string(errorCodeName(ErrorCode::InvalidArgument)) ==
        "invalid argument");
}
