// Why: a decode launch must refuse bad arguments before anything reaches
// the GPU, with a message that says what is wrong; and a context must
// build the decode kernels once, under keys of their own.
#include "RuntimeTestUtil.h"

#include "flashjit/Decode.h"
#include "flashjit/Runtime/ErrorCode.h"

#include <doctest/doctest.h>

using namespace flashjit;
using namespace flashjit::test;

namespace {
ErrorCode codeOf(llvm::Error err) {
  return takeErrorParts(std::move(err)).code;
}

/// Fake device addresses, 256-byte aligned: check() reads no memory.
void *fake(uintptr_t n) { return reinterpret_cast<void *>(n * 0x100000); }

DecodeArgs goodArgs(const DecodeSpec &s, int64_t batch, int64_t capacity) {
  DecodeArgs a;
  a.q = decodeTensor(fake(1), s.dtype, batch, s.qLen, s.numHeads, s.headDim);
  a.o = decodeTensor(fake(2), s.dtype, batch, s.qLen, s.numHeads, s.headDim);
  if (s.paged()) {
    a.k =
        decodeTensor(fake(3), s.dtype, 40, s.pageSize, s.numKVHeads, s.headDim);
    a.v =
        decodeTensor(fake(4), s.dtype, 40, s.pageSize, s.numKVHeads, s.headDim);
    a.blockTable = static_cast<const int32_t *>(fake(5));
    a.maxPages = 10;
  } else {
    a.k = decodeTensor(fake(3), s.dtype, batch, capacity, s.numKVHeads,
                       s.headDim);
    a.v = decodeTensor(fake(4), s.dtype, batch, capacity, s.numKVHeads,
                       s.headDim);
  }
  a.lse = LseRef::contiguous(static_cast<float *>(fake(6)), batch, s.numHeads,
                             s.qLen);
  a.kvLens = static_cast<const int32_t *>(fake(7));
  return a;
}
} // namespace

TEST_CASE("decode: a context builds the decode kernels once") {
  TempDir dir;
  Warnings warnings;
  auto ctx = sm90aContext(dir, warnings);
  REQUIRE(static_cast<bool>(ctx));
  DecodeSpec spec;
  spec.numHeads = 8;
  spec.numKVHeads = 2;
  auto kernel = (*ctx)->decodeKernel(spec);
  REQUIRE_MESSAGE(static_cast<bool>(kernel),
                  (kernel ? "" : llvm::toString(kernel.takeError())));
  CHECK((*kernel)->info().config.family == "decode");
  CHECK((*kernel)->ptx().find(spec.kernelName() + "_combine") !=
        std::string::npos);
  auto again = (*ctx)->decodeKernel(spec);
  REQUIRE(static_cast<bool>(again));
  CHECK(again->get() == kernel->get());
  // Another query length is another kernel (and cache entry).
  DecodeSpec two = spec;
  two.qLen = 2;
  auto other = (*ctx)->decodeKernel(two);
  REQUIRE(static_cast<bool>(other));
  CHECK(other->get() != kernel->get());
  CHECK((*ctx)->cache().stats().builds == 2);

  DecodeSpec bad = spec;
  bad.qLen = 40;
  auto refused = (*ctx)->decodeKernel(bad);
  REQUIRE(!refused);
  CHECK(codeOf(refused.takeError()) == ErrorCode::InvalidArgument);

  // Good arguments pass the checks; without a GPU the launch says so.
  DecodeArgs args = goodArgs(spec, 3, 1000);
  CHECK(errorText((*kernel)->check(args)).empty());
  if (!(*ctx)->device()) {
    llvm::Error err = (*kernel)->decode(args);
    REQUIRE(static_cast<bool>(err));
    CHECK(codeOf(std::move(err)) == ErrorCode::NoDevice);
  }
}

TEST_CASE("decode: bad arguments are refused with what is wrong") {
  TempDir dir;
  Warnings warnings;
  ContextOptions options;
  options.chip = "sm_80";
  options.cache = cacheOptions(dir / "cache", warnings);
  options.onWarning = warningSink(warnings);
  auto ctx = Context::create(options);
  REQUIRE(static_cast<bool>(ctx));
  DecodeSpec spec;
  spec.numHeads = 8;
  spec.numKVHeads = 2;
  spec.qLen = 3;
  auto kernel = (*ctx)->decodeKernel(spec);
  REQUIRE(static_cast<bool>(kernel));
  const DecodeKernel &k = **kernel;
  auto refusal = [&](auto change) {
    DecodeArgs a = goodArgs(spec, 2, 100);
    change(a);
    return errorText(k.check(a));
  };
  CHECK(refusal([](DecodeArgs &a) {
          a.q.data = nullptr;
        }).find("q is a null pointer") != std::string::npos);
  CHECK(refusal([](DecodeArgs &a) {
          a.q.dtype = DType::F16;
        }).find("q is f16") != std::string::npos);
  CHECK(refusal([](DecodeArgs &a) { a.o.shape[1] = 1; }).find("o has shape") !=
        std::string::npos);
  CHECK(refusal([](DecodeArgs &a) { a.k.shape[0] = 3; }).find("k has shape") !=
        std::string::npos);
  CHECK(refusal([](DecodeArgs &a) { a.v.strides[3] = 2; }).find("contiguous") !=
        std::string::npos);
  CHECK(refusal([](DecodeArgs &a) {
          a.k.strides[1] = 12;
        }).find("multiple of 8") != std::string::npos);
  CHECK(refusal([](DecodeArgs &a) {
          a.q.data = static_cast<char *>(a.q.data) + 8;
        }).find("16-byte aligned") != std::string::npos);
  CHECK(refusal([](DecodeArgs &a) { a.kvLens = nullptr; }).find("kvLens") !=
        std::string::npos);
  CHECK(refusal([](DecodeArgs &a) { a.lse.data = nullptr; }).find("lse") !=
        std::string::npos);
  CHECK(refusal([](DecodeArgs &a) {
          a.lse.shape[2] = 1;
        }).find("lse has shape") != std::string::npos);
  CHECK(refusal([](DecodeArgs &a) {
          a.o.data = a.k.data;
        }).find("overlap input k") != std::string::npos);
  CHECK(refusal([](DecodeArgs &a) { a.o.strides[1] = 8; }).find("o strides") !=
        std::string::npos);
  CHECK(refusal([](DecodeArgs &a) { a.numSplits = 1000; }).find("numSplits") !=
        std::string::npos);
  CHECK(refusal([](DecodeArgs &a) { a.scale = -1.0; }).find("scale") !=
        std::string::npos);
  CHECK(refusal([](DecodeArgs &a) {
          a.numSplits = 4;
          a.workspace = fake(9);
          a.workspaceBytes = 64;
        }).find("workspace holds 64 bytes") != std::string::npos);
  // Enough workspace passes.
  CHECK(refusal([&](DecodeArgs &a) {
          a.numSplits = 4;
          a.workspace = fake(9);
          a.workspaceBytes = k.workspaceBytes(2, 4);
        }).empty());
  CHECK(k.workspaceBytes(2, 4) == size_t(2 * 8 * 3 * 4 * 129 * 4));
  CHECK(k.workspaceBytes(2, 1) == 0);

  // Paged: the table and its shape.
  DecodeSpec paged = spec;
  paged.pageSize = 32;
  auto pagedKernel = (*ctx)->decodeKernel(paged);
  REQUIRE(static_cast<bool>(pagedKernel));
  auto pagedRefusal = [&](auto change) {
    DecodeArgs a = goodArgs(paged, 2, 0);
    change(a);
    return errorText((*pagedKernel)->check(a));
  };
  CHECK(pagedRefusal([](DecodeArgs &) {}).empty());
  CHECK(pagedRefusal([](DecodeArgs &a) {
          a.blockTable = nullptr;
        }).find("block table") != std::string::npos);
  CHECK(pagedRefusal([](DecodeArgs &a) { a.maxPages = 0; }).find("maxPages") !=
        std::string::npos);
  CHECK(pagedRefusal([](DecodeArgs &a) {
          a.blockTableStride = 3;
        }).find("row stride") != std::string::npos);
  CHECK(pagedRefusal([](DecodeArgs &a) {
          a.k.shape[1] = 16;
        }).find("k has shape") != std::string::npos);
  // The split rule sees the capacity or the hint.
  DecodeArgs a = goodArgs(spec, 1, 1 << 16);
  int64_t full = k.splitsFor(a);
  a.maxKvLen = 128;
  CHECK(k.splitsFor(a) <= 2);
  CHECK(full > 1);
}
