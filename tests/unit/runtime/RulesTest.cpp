//===- RulesTest.cpp - one test per rule of docs/rules.md -----------------===//
// Why: the rules users read (docs/rules.md, flashjit.h) and the checks the
// code runs must not drift apart. Each rule has a test case named after it
// that breaks it and meets it at its boundary, through Kernel::check (no
// GPU: fake, never dereferenced addresses); the last case reads
// docs/rules.md and checks that its rules are exactly the ones tested here.
#include "flashjit/FlashJIT.h"
#include "flashjit/Runtime/ForwardChecks.h"
#include "flashjit/Runtime/ModuleLoader.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Regex.h"

#include <cfloat>
#include <cmath>
#include <doctest/doctest.h>
#include <functional>
#include <set>

using namespace flashjit;

namespace {

/// Rule ids tested below; R15 (DLPack and the C spec) is tested through
/// the C API in CApiTest.cpp ("forward refuses malformed DLTensors before
/// anything else", "the spec is read by its struct_size, and bad fields
/// are named").
const std::set<std::string> kTested = {"R1",  "R2",  "R3",  "R4",  "R5",
                                       "R6",  "R7",  "R8",  "R9",  "R10",
                                       "R11", "R12", "R13", "R14", "R15"};

/// A fake device address `tib` TiB (plus `bytes`) into a free range.
void *at(uintptr_t tib, uintptr_t bytes = 0) {
  return reinterpret_cast<void *>((uintptr_t(1) << 47) + (tib << 40) + bytes);
}

AttentionSpec baseSpec() {
  AttentionSpec s;
  s.headDim = 64;
  s.numHeads = 4;
  s.numKVHeads = 2;
  return s;
}

ForwardArgs good(int64_t b = 2, int64_t sq = 40, int64_t sk = 50) {
  ForwardArgs a;
  a.q = TensorRef::bhsd(at(0), DType::BF16, b, 4, sq, 64);
  a.k = TensorRef::bhsd(at(1), DType::BF16, b, 2, sk, 64);
  a.v = TensorRef::bhsd(at(2), DType::BF16, b, 2, sk, 64);
  a.o = TensorRef::bhsd(at(3), DType::BF16, b, 4, sq, 64);
  a.lse = LseRef::contiguous(static_cast<float *>(at(4)), b, 4, sq);
  return a;
}

Kernel kernelOf(const AttentionSpec &spec, const char *family = "mma_sync") {
  KernelInfo info;
  info.name = "rules";
  info.config = TileConfig{family, 128, 64, 2, 4};
  info.numHeads = spec.numHeads;
  info.threadsPerBlock = 128;
  return Kernel(spec, info, "", nullptr, "no GPU in the unit tests");
}

/// "" when `a` passes, else the message.
std::string check(const ForwardArgs &a, const AttentionSpec &spec = baseSpec(),
                  const char *family = "mma_sync") {
  llvm::Error err = kernelOf(spec, family).check(a);
  return err ? llvm::toString(std::move(err)) : "";
}

/// Breaking `a` with `change` gives a message containing `part`.
void refused(std::function<void(ForwardArgs &)> change, const std::string &part,
             const AttentionSpec &spec = baseSpec()) {
  ForwardArgs a = good();
  change(a);
  std::string why = check(a, spec);
  INFO("expected: " << part << "\ngot: " << why);
  CHECK(why.find(part) != std::string::npos);
}

} // namespace

TEST_CASE("the arguments used below pass") { CHECK(check(good()) == ""); }

TEST_CASE("R1: data pointers are not null") {
  refused([](ForwardArgs &a) { a.q.data = nullptr; }, "q is a null pointer");
  refused([](ForwardArgs &a) { a.o.data = nullptr; }, "o is a null pointer");
  refused([](ForwardArgs &a) { a.lse.data = nullptr; }, "lse is a null pointer");
}

TEST_CASE("R2: 16-byte aligned tensors, 4-byte aligned lse, in every family") {
  for (const char *family : {"mma_sync", "cuda_core", "wgmma",
                             "wgmma_persistent", "wgmma_cluster"}) {
    CAPTURE(family);
    ForwardArgs a = good();
    a.v.data = at(2, 8);
    CHECK(check(a, baseSpec(), family).find("v pointer") != std::string::npos);
    a = good();
    a.q.data = at(0, 32);
    CHECK(check(a, baseSpec(), family) == "");
  }
  refused([](ForwardArgs &a) { a.lse.data = static_cast<float *>(at(4, 2)); },
          "lse pointer is not 4-byte aligned");
}

TEST_CASE("R3: the spec's dtype") {
  refused([](ForwardArgs &a) { a.k.dtype = DType::F16; },
          "k is f16 but the kernel was compiled for bf16");
}

TEST_CASE("R4: no empty tensor, extents below 2^31") {
  refused([](ForwardArgs &a) { a.q.shape[2] = a.o.shape[2] = 0; },
          "has an empty dimension");
  refused(
      [](ForwardArgs &a) {
        a.k.shape[2] = a.v.shape[2] = int64_t(1) << 31;
      },
      "seqlen 2147483648 is above 2^31 - 1");
}

TEST_CASE("R5: the spec's head dim, contiguous") {
  refused([](ForwardArgs &a) { a.v.shape[3] = 128; },
          "v head dim is 128 but the kernel was compiled for head dim 64");
  refused([](ForwardArgs &a) { a.q.strides[3] = 2; }, "q head-dim stride is 2");
}

TEST_CASE("R6: row strides are non-negative multiples of 8; 0 broadcasts") {
  refused([](ForwardArgs &a) { a.k.strides[2] = 68; },
          "must be non-negative multiples of 8");
  refused([](ForwardArgs &a) { a.k.strides[0] = -3200; },
          "must be non-negative multiples of 8");
  ForwardArgs a = good();
  a.k.strides[0] = a.v.strides[0] = 0;
  CHECK(check(a) == "");
}

TEST_CASE("R7: heads, batch and lengths agree with the spec and each other") {
  refused([](ForwardArgs &a) { a.q.shape[1] = a.o.shape[1] = 8; },
          "q has 8 heads but the kernel was compiled for 4");
  refused([](ForwardArgs &a) { a.v.shape[1] = 1; }, "kv heads");
  refused([](ForwardArgs &a) { a.k.shape[0] = 3; }, "batch sizes differ");
  refused([](ForwardArgs &a) { a.v.shape[2] = 49; }, "k has seqlen 50 but v has 49");
  refused([](ForwardArgs &a) { a.o.shape[2] = 39; }, "must equal q shape");
  refused([](ForwardArgs &a) { a.lse.shape[1] = 2; },
          "must be [batch, heads, seqlen]");
}

TEST_CASE("R8: batch x heads x seqlen_q below 2^31") {
  ForwardArgs a = good(16384, 32768, 8);
  std::string why = check(a, baseSpec(), "wgmma_persistent");
  CHECK(why.find("above 2^31 - 1: split the batch") != std::string::npos);
  a = good(16383, 32768, 8);
  CHECK(check(a, baseSpec(), "wgmma_persistent") == "");
}

TEST_CASE("R9: outputs own their elements and overlap nothing") {
  refused([](ForwardArgs &a) { a.o.strides[1] = 0; },
          "make distinct outputs share memory");
  refused([](ForwardArgs &a) { a.lse.strides = {1, 1, 1}; },
          "lse strides [1, 1, 1] make distinct outputs share memory");
  refused([](ForwardArgs &a) { a.lse.strides[2] = -1; },
          "must be non-negative");
  refused([](ForwardArgs &a) { a.o.data = a.k.data; }, "overlap input k");
  refused([](ForwardArgs &a) { a.lse.data = static_cast<float *>(a.o.data); },
          "o and lse overlap in memory");
}

TEST_CASE("R10: a tensor spans at most 2^62 bytes") {
  refused([](ForwardArgs &a) { a.k.strides[0] = int64_t(1) << 61; },
          "spans more than 2^62 bytes");
  refused([](ForwardArgs &a) { a.lse.strides[0] = int64_t(1) << 62; },
          "spans more than 2^62 bytes");
  // Extents each below 2^31 whose compact strides overflow int64 when
  // multiplied out: refused, without overflowing in the check.
  const int64_t big = (int64_t(1) << 31) - 1;
  refused(
      [&](ForwardArgs &a) {
        a.k = TensorRef::bhsd(at(1), DType::BF16, big, 2, big, 64);
      },
      "spans more than 2^62 bytes");
  ForwardArgs a = good();
  a.k.strides[0] = int64_t(1) << 40; // far apart, but within the limit
  a.v.data = at(8);
  a.o.data = at(16);
  a.lse.data = static_cast<float *>(at(24));
  CHECK(check(a) == "");
}

TEST_CASE("R11: scale finite, positive, a normal f32 times log2(e)") {
  auto withScale = [](double scale) {
    ForwardArgs a = good();
    a.scale = scale;
    return check(a);
  };
  for (double bad : {0.0, -1.0, double(INFINITY)}) {
    CAPTURE(bad);
    CHECK(withScale(bad).find("positive finite number") != std::string::npos);
  }
  for (double bad : {2.4e38, 1e300, double(FLT_MAX), 8.1e-39, 1e-45, 1e-300}) {
    CAPTURE(bad);
    std::string why = withScale(bad);
    CHECK(why.find("is out of range") != std::string::npos);
    CHECK(why.find("must be in [8.15") != std::string::npos);
  }
  for (double fine : {kMinScale, 1e-30, 0.125, 1e30, kMaxScale})
    CHECK_MESSAGE(withScale(fine) == "", fine);
  // The stated bounds: just inside, scale * log2(e) is a normal f32; just
  // outside, it is not.
  CHECK(std::isnormal(static_cast<float>(kMinScale * M_LOG2E)));
  CHECK(std::isfinite(static_cast<float>(kMaxScale * M_LOG2E)));
  CHECK_FALSE(std::isnormal(static_cast<float>(8.14e-39 * M_LOG2E)));
  CHECK_FALSE(std::isfinite(static_cast<float>(2.36e38 * M_LOG2E)));
}

TEST_CASE("R12: per-tile families take at most 65535 sequences and heads") {
  for (const char *family : {"mma_sync", "wgmma", "cuda_core"}) {
    CAPTURE(family);
    CHECK(check(good(65535, 1, 1), baseSpec(), family) == "");
    std::string why = check(good(65536, 1, 1), baseSpec(), family);
    CHECK(why.find("batch 65536 is above 65535") != std::string::npos);
    CHECK(why.find(family) != std::string::npos);
    CHECK(why.find("split the batch into calls of at most 65535") !=
          std::string::npos);
  }
  // The persistent families walk every tile from a one-dimensional grid.
  CHECK(check(good(100000, 1, 1), baseSpec(), "wgmma_persistent") == "");
  CHECK(check(good(100000, 1, 1), baseSpec(), "wgmma_cluster") == "");
  // Heads: a spec of 70000 heads (one key/value head).
  AttentionSpec many = baseSpec();
  many.numHeads = 70000;
  many.numKVHeads = 1;
  ForwardArgs a;
  a.q = TensorRef::bhsd(at(0), DType::BF16, 1, 70000, 1, 64);
  a.k = TensorRef::bhsd(at(1), DType::BF16, 1, 1, 1, 64);
  a.v = TensorRef::bhsd(at(2), DType::BF16, 1, 1, 1, 64);
  a.o = TensorRef::bhsd(at(3), DType::BF16, 1, 70000, 1, 64);
  a.lse = LseRef::contiguous(static_cast<float *>(at(4)), 1, 70000, 1);
  std::string why = check(a, many);
  CHECK(why.find("q has 70000 heads, above 65535") != std::string::npos);
  CHECK(why.find("split the heads") != std::string::npos);
  CHECK(check(a, many, "wgmma_persistent") == "");
}

TEST_CASE("R13: captured tensors as the spec declares them") {
  AttentionSpec spec = baseSpec();
  spec.captures.push_back({"bias", CaptureDType::F32, {4}});
  ForwardArgs a = good();
  CHECK(check(a, spec).find("the call gives 0") != std::string::npos);
  a.captures.push_back(CapturedRef::contiguous(at(8), CaptureDType::F32, {4}));
  CHECK(check(a, spec) == "");
  a.captures[0].shape[0] = 5;
  CHECK(check(a, spec).find("has size 5 in dimension 0") != std::string::npos);
  a.captures[0] = CapturedRef::contiguous(at(8, 2), CaptureDType::F32, {4});
  CHECK(check(a, spec).find("is not 4-byte aligned") != std::string::npos);
  a.captures[0] = CapturedRef::contiguous(at(8), CaptureDType::I32, {4});
  CHECK(check(a, spec).find("has dtype i32") != std::string::npos);
  // A statically shaped capture is indexed with 32-bit offsets: its span
  // stays below 2^31 elements; a dynamic dimension lifts the limit.
  a.captures[0] = CapturedRef::contiguous(at(8), CaptureDType::F32, {4});
  a.captures[0].strides[0] = int64_t(1) << 30;
  CHECK(check(a, spec).find("must span fewer than 2^31") != std::string::npos);
  a.captures[0].strides[0] = (int64_t(1) << 29) - 1;
  CHECK(check(a, spec) == "");
  spec.captures[0].shape[0] = -1;
  a.captures[0].strides[0] = int64_t(1) << 30;
  CHECK(check(a, spec) == "");
}

TEST_CASE("R14: a block mask for a block-sparse spec, none for a dense one") {
  AttentionSpec sparse = baseSpec();
  sparse.sparseBlockM = sparse.sparseBlockN = 16;
  ForwardArgs a = good(); // 40 rows: 3 query blocks; 50 keys: 4 key blocks
  CHECK(check(a, sparse).find("needs kv_num_blocks and kv_indices") !=
        std::string::npos);
  a.blockMask.kvNumBlocks =
      CapturedRef::contiguous(at(9), CaptureDType::I32, {1, 1, 3});
  a.blockMask.kvIndices =
      CapturedRef::contiguous(at(10), CaptureDType::I32, {2, 4, 3, 4});
  CHECK(check(a, sparse) == "");
  CHECK(check(a).find("not block-sparse") != std::string::npos);
  a.blockMask.fullKvNumBlocks = a.blockMask.kvNumBlocks;
  CHECK(check(a, sparse).find("come together") != std::string::npos);
}

TEST_CASE("docs/rules.md lists exactly the rules tested here") {
  auto text = llvm::MemoryBuffer::getFile(FLASHJIT_SOURCE_DIR "/docs/rules.md");
  REQUIRE(bool(text));
  std::set<std::string> documented;
  llvm::SmallVector<llvm::StringRef, 64> lines;
  (*text)->getBuffer().split(lines, '\n');
  llvm::Regex row("^\\| (R[0-9]+) \\|");
  for (llvm::StringRef line : lines) {
    llvm::SmallVector<llvm::StringRef, 2> match;
    if (row.match(line, &match))
      documented.insert(match[1].str());
  }
  CHECK(documented == kTested);
}
