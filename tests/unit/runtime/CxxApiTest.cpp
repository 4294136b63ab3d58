//===- CxxApiTest.cpp - the C++ API through libflashjit.so alone ----------===//
// Why: a program that embeds flashjit in C++ links libflashjit.so and
// libLLVM, not the static layers. This binary does the same (FlashjitCxx),
// so it fails to link if libflashjit.so stops exporting a part of FlashJIT.h
// it uses, and it checks that errors made inside the library keep their
// ErrorCode on this side. No GPU is needed.
#include "flashjit/FlashJIT.h"

#include <doctest/doctest.h>

#include <string>

using namespace flashjit;

namespace {

bool has(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

/// A context for sm_90a with an in-memory cache and no tuning database.
std::unique_ptr<Context> makeContext() {
  ContextOptions options;
  options.chip = "sm_90a";
  options.cache.directory = "";
  options.tuning.enabled = false;
  auto ctx = Context::create(options);
  REQUIRE_MESSAGE(static_cast<bool>(ctx),
                  (ctx ? "" : llvm::toString(ctx.takeError())));
  return std::move(*ctx);
}

} // namespace

TEST_CASE("a context compiles a kernel through libflashjit.so") {
  auto ctx = makeContext();
  CHECK(ctx->target().chip == "sm_90a");
  CHECK(ctx->device().has_value() == ctx->deviceError().empty());

  AttentionSpec spec;
  spec.headDim = 64;
  spec.causal = true;
  spec.numHeads = 4;
  spec.numKVHeads = 2;
  REQUIRE_FALSE(static_cast<bool>(spec.validate()));
  auto resolved = ctx->resolveConfig(spec);
  REQUIRE(static_cast<bool>(resolved));
  CHECK(resolved->origin.source == ConfigSource::Heuristic);
  CHECK(std::string(configSourceName(resolved->origin.source)) == "heuristic");

  auto kernel = ctx->compile(spec);
  REQUIRE_MESSAGE(static_cast<bool>(kernel),
                  (kernel ? "" : llvm::toString(kernel.takeError())));
  CHECK((*kernel)->spec().kernelName() == spec.kernelName());
  CHECK(has((*kernel)->ptx(), ".entry " + spec.kernelName()));
  CHECK((*kernel)->info().config == resolved->config);
  auto again = TileConfig::parse((*kernel)->info().config.canonical());
  REQUIRE(static_cast<bool>(again));
  CHECK(*again == resolved->config);
}

TEST_CASE("errors made inside the library keep their code") {
  auto ctx = makeContext();
  AttentionSpec spec;
  spec.headDim = 48;
  auto kernel = ctx->compile(spec);
  REQUIRE_FALSE(static_cast<bool>(kernel));
  ErrorParts parts = takeErrorParts(kernel.takeError());
  CHECK(parts.code == ErrorCode::Unsupported);
  CHECK(has(parts.message, "48"));

  auto target = Target::parse("sm_12");
  REQUIRE_FALSE(static_cast<bool>(target));
  llvm::consumeError(target.takeError());

  llvm::Error made = makeError(ErrorCode::NoDevice, "no GPU here");
  CHECK(made.isA<CodedError>());
  ErrorParts madeParts = takeErrorParts(std::move(made));
  CHECK(madeParts.code == ErrorCode::NoDevice);
  CHECK(madeParts.message == "no GPU here");
}

TEST_CASE("forward's checks run without a device") {
  auto ctx = makeContext();
  AttentionSpec spec;
  spec.headDim = 64;
  auto kernel =
      ctx->compile(spec, KernelOptions{{}, std::string("mma_sync"), {}});
  REQUIRE(static_cast<bool>(kernel));

  // Fake, aligned device addresses: check() never dereferences them.
  auto *base = reinterpret_cast<char *>(uintptr_t{0x70000000});
  ForwardArgs args;
  args.q = TensorRef::bhsd(base, DType::BF16, 1, 1, 128, 64);
  args.k = TensorRef::bshd(base + 0x10000, DType::BF16, 1, 1, 128, 64);
  args.v = TensorRef::bhsd(base + 0x20000, DType::BF16, 1, 1, 128, 64);
  args.o = TensorRef::bhsd(base + 0x30000, DType::BF16, 1, 1, 128, 64);
  args.lse =
      LseRef::contiguous(reinterpret_cast<float *>(base + 0x40000), 1, 1, 128);
  llvm::Error ok = (*kernel)->check(args);
  CHECK_MESSAGE(!ok, llvm::toString(std::move(ok)));

  args.v.dtype = DType::F16;
  ErrorParts bad = takeErrorParts((*kernel)->check(args));
  CHECK(bad.code == ErrorCode::InvalidArgument);

  if (!ctx->device()) {
    args.v.dtype = DType::BF16;
    ErrorParts noDevice = takeErrorParts((*kernel)->forward(args));
    CHECK(noDevice.code == ErrorCode::NoDevice);
  }
}
