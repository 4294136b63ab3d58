//===- VarlenBackwardTest.cpp - the varlen backward without a GPU ---------===//
// Why: training on packed sequences needs the backward of a varlen spec.
// Its kernels must build where the wgmma backward does (and nowhere else,
// with an error saying so), lay out the dQ accumulator so that every
// query block of every sequence lands inside it, and refuse bad offsets,
// batches and lengths on the host before anything launches.
#include "RuntimeTestUtil.h"

#include "flashjit/Backward.h"
#include "flashjit/DevTools/BackwardReference.h"
#include "flashjit/DevTools/VarlenHarness.h"
#include "flashjit/Runtime/ErrorCode.h"
#include "flashjit/Templates/MmaSyncBackward.h"
#include "flashjit/Templates/WgmmaBackward.h"

#include <doctest/doctest.h>

#include <cmath>
#include <random>

using namespace flashjit;
using namespace flashjit::test;

namespace {
ErrorParts partsOf(llvm::Error err) { return takeErrorParts(std::move(err)); }

AttentionSpec varlenSpec(int64_t headDim = 128) {
  AttentionSpec spec;
  spec.headDim = headDim;
  spec.dtype = DType::BF16;
  spec.causal = true;
  spec.causalAlign = CausalAlign::BottomRight;
  spec.numHeads = 8;
  spec.numKVHeads = 2;
  spec.varlen = true;
  return spec;
}

/// Packed arguments over disjoint fake device addresses (never read: the
/// checks look at addresses, shapes and strides only): totalQ query and
/// totalK key tokens of three sequences.
struct FakeVarlen {
  VarlenBackwardArgs args;
  FakeVarlen(const AttentionSpec &spec, int64_t totalQ, int64_t totalK,
             size_t workspaceBytes) {
    uintptr_t next = 0x10000000;
    auto take = [&](int64_t bytes) {
      void *p = reinterpret_cast<void *>(next);
      next += (bytes + 0xFFFF) / 0x10000 * 0x10000 + 0x10000;
      return p;
    };
    const int64_t H = spec.numHeads, Hkv = spec.numKVHeads, D = spec.headDim;
    BackwardArgs &a = args.packed;
    for (TensorRef *t : {&a.q, &a.o, &a.dO, &a.dq})
      *t = TensorRef::packed(take(totalQ * H * D * 2), spec.dtype, totalQ, H,
                             D);
    for (TensorRef *t : {&a.k, &a.v, &a.dk, &a.dv})
      *t = TensorRef::packed(take(totalK * Hkv * D * 2), spec.dtype, totalK,
                             Hkv, D);
    a.lse = LseRef::packed(static_cast<float *>(take(totalQ * H * 4)), H,
                           totalQ);
    a.workspace = take(static_cast<int64_t>(workspaceBytes));
    a.workspaceBytes = workspaceBytes;
    args.cuSeqlensQ = static_cast<const int32_t *>(take(16));
    args.cuSeqlensK = static_cast<const int32_t *>(take(16));
    args.batch = 3;
    args.maxSeqlenK = totalK / 2;
  }
};
} // namespace

TEST_CASE("varlen backward: built by wgmma_bwd on sm_90a, its own cache "
          "entry, refused elsewhere with the reason") {
  TempDir dir;
  Warnings warnings;
  auto ctx = sm90aContext(dir, warnings);
  REQUIRE(static_cast<bool>(ctx));
  for (int64_t headDim : {64, 128}) {
    AttentionSpec spec = varlenSpec(headDim);
    auto backward = (*ctx)->compileBackward(spec, BackwardOptions());
    REQUIRE_MESSAGE(static_cast<bool>(backward),
                    (backward ? "" : llvm::toString(backward.takeError())));
    CHECK((*backward)->info().config.family == "wgmma_bwd");
    CHECK((*backward)->info().name.find("_varlen") != std::string::npos);
    // The main kernel reads the offsets; the TMA maps stay its loads.
    const std::string &ptx = (*backward)->ptx();
    CHECK(ptx.find("cp.async.bulk.tensor") != std::string::npos);
    AttentionSpec dense = spec;
    dense.varlen = false;
    auto denseBackward = (*ctx)->compileBackward(dense, BackwardOptions());
    REQUIRE(static_cast<bool>(denseBackward));
    CHECK((*denseBackward)->info().name != (*backward)->info().name);
  }
  // Head dim 256 runs on mma_sync_bwd, which has no varlen form.
  auto d256 = (*ctx)->compileBackward(varlenSpec(256), BackwardOptions());
  REQUIRE(!d256);
  ErrorParts d256Error = partsOf(d256.takeError());
  CHECK(d256Error.code == ErrorCode::Unsupported);
  CHECK(d256Error.message.find("wgmma_bwd kernels only") != std::string::npos);
  // Neither the mma_sync family nor the deterministic kernels.
  BackwardOptions mmaSync;
  mmaSync.config = TileConfig{"mma_sync_bwd", 32, 128, 2, 8};
  auto noMmaSync = (*ctx)->compileBackward(varlenSpec(), mmaSync);
  REQUIRE(!noMmaSync);
  CHECK(llvm::toString(noMmaSync.takeError()).find("wgmma_bwd kernels only") !=
        std::string::npos);
  BackwardOptions deterministic;
  deterministic.deterministic = true;
  auto noTurns = (*ctx)->compileBackward(varlenSpec(), deterministic);
  REQUIRE(!noTurns);
  CHECK(llvm::toString(noTurns.takeError()).find("varlen") !=
        std::string::npos);
  // A paged cache is read by inference kernels only.
  AttentionSpec paged = varlenSpec();
  paged.pageSize = 64;
  auto noPages = (*ctx)->compileBackward(paged, BackwardOptions());
  REQUIRE(!noPages);
  CHECK(llvm::toString(noPages.takeError()).find("paged KV cache") !=
        std::string::npos);
}

TEST_CASE("varlen backward: sm_80 has no varlen backward") {
  TempDir dir;
  Warnings warnings;
  ContextOptions options;
  options.chip = "sm_80";
  options.cache = cacheOptions(dir / "cache", warnings);
  options.onWarning = warningSink(warnings);
  auto ctx = Context::create(options);
  REQUIRE(static_cast<bool>(ctx));
  auto backward = (*ctx)->compileBackward(varlenSpec(), BackwardOptions());
  REQUIRE(!backward);
  ErrorParts error = partsOf(backward.takeError());
  CHECK(error.code == ErrorCode::Unsupported);
  CHECK(error.message.find("sm_90a") != std::string::npos);
}

TEST_CASE("varlen backward: each head's dQ accumulator rows hold a last "
          "block that starts at any packed row") {
  AttentionSpec spec = varlenSpec();
  TileConfig config = WgmmaBackward::defaultConfig(spec);
  DqAccumLayout layout = DqAccumLayout::of(spec, config);
  CHECK(layout.extraRows == config.blockM);
  CHECK(layout.rowsPerHead(1000) == 1024 + config.blockM);
  // A query block starts at most at row total - 1 and spans block_m rows.
  for (int64_t total : {1, 63, 64, 65, 1000, 4097})
    CHECK(layout.rowsPerHead(total) >=
          static_cast<uint64_t>(total - 1 + config.blockM));
  spec.varlen = false;
  CHECK(DqAccumLayout::of(spec, config).rowsPerHead(1000) == 1024);
}

TEST_CASE("varlen backward: argument checks before any launch") {
  TempDir dir;
  Warnings warnings;
  auto ctx = sm90aContext(dir, warnings);
  REQUIRE(static_cast<bool>(ctx));
  AttentionSpec spec = varlenSpec();
  auto backward = (*ctx)->compileBackward(spec, BackwardOptions());
  REQUIRE(static_cast<bool>(backward));
  const BackwardKernel &kernel = **backward;
  const int64_t totalQ = 1000, totalK = 3000;
  const size_t need = kernel.workspaceBytes(1, totalQ);
  FakeVarlen good(spec, totalQ, totalK, need);
  CHECK(errorText(kernel.checkVarlen(good.args)).empty());
  if (!(*ctx)->device())
    CHECK(partsOf(kernel.backwardVarlen(good.args)).code ==
          ErrorCode::NoDevice);
  // No sequences: nothing to check beyond the tensors, nothing launched.
  FakeVarlen none = good;
  none.args.batch = 0;
  CHECK(!kernel.backwardVarlen(none.args));

  auto refused = [&](const VarlenBackwardArgs &args, const char *words) {
    ErrorParts parts = partsOf(kernel.checkVarlen(args));
    CHECK(parts.code == ErrorCode::InvalidArgument);
    CHECK_MESSAGE(parts.message.find(words) != std::string::npos,
                  parts.message);
  };
  // The dense calls refuse a varlen kernel.
  ErrorParts dense = partsOf(kernel.check(good.args.packed));
  CHECK(dense.code == ErrorCode::InvalidArgument);
  CHECK(dense.message.find("backwardVarlen") != std::string::npos);
  CHECK(partsOf(kernel.backward(good.args.packed)).code ==
        ErrorCode::InvalidArgument);
  VarlenBackwardArgs bad = good.args;
  bad.cuSeqlensQ = nullptr;
  refused(bad, "cu_seqlens_q is a null pointer");
  bad = good.args;
  bad.cuSeqlensK = reinterpret_cast<const int32_t *>(
      reinterpret_cast<uintptr_t>(good.args.cuSeqlensK) + 2);
  refused(bad, "cu_seqlens_k is not 4-byte aligned");
  bad = good.args;
  bad.batch = 70000;
  refused(bad, "varlen batch 70000 is out of range");
  bad = good.args;
  bad.maxSeqlenK = 0;
  refused(bad, "max_seqlen_k 0 is out of range");
  bad.maxSeqlenK = totalK + 1;
  refused(bad, "max_seqlen_k 3001 is out of range");
  bad = good.args;
  bad.packed.q.shape[0] = 2;
  refused(bad, "batch-1 views of the packed tokens");
  bad = good.args;
  bad.packed.workspaceBytes = need - 256;
  refused(bad, "workspaceBytes(batch, seqlen_q)");
  // A dense backward kernel refuses the varlen call.
  AttentionSpec denseSpec = spec;
  denseSpec.varlen = false;
  auto denseKernel = (*ctx)->compileBackward(denseSpec, BackwardOptions());
  REQUIRE(static_cast<bool>(denseKernel));
  ErrorParts notVarlen = partsOf((*denseKernel)->checkVarlen(good.args));
  CHECK(notVarlen.code == ErrorCode::InvalidArgument);
  CHECK(notVarlen.message.find("not the backward of a varlen spec") !=
        std::string::npos);
}

TEST_CASE("varlen backward: the reference's gradients of an empty sequence "
          "are zero") {
  // A packed batch may hold sequences without queries or without keys;
  // the float64 reference then has no row to compute.
  std::mt19937_64 rng(7);
  for (auto [sq, sk] : {std::pair<int64_t, int64_t>{0, 0}, {0, 5}, {3, 0},
                        {3, 5}}) {
    HostBackwardProblem host;
    host.spec = varlenSpec(64);
    host.spec.varlen = false;
    host.seqlenQ = sq;
    host.seqlenK = sk;
    host.scale = host.spec.defaultScale();
    const int64_t H = host.spec.numHeads, Hkv = host.spec.numKVHeads, D = 64;
    std::vector<float> q, k, v, dO;
    randomPacked(q, DType::BF16, sq, H, D, rng);
    randomPacked(dO, DType::BF16, sq, H, D, rng);
    randomPacked(k, DType::BF16, sk, Hkv, D, rng);
    randomPacked(v, DType::BF16, sk, Hkv, D, rng);
    host.q = sequenceOf(q, 0, sq, H, D);
    host.dO = sequenceOf(dO, 0, sq, H, D);
    host.k = sequenceOf(k, 0, sk, Hkv, D);
    host.v = sequenceOf(v, 0, sk, Hkv, D);
    ReferenceGradients ref = referenceGradients(host, 0, 1);
    CHECK(ref.error.empty());
    const size_t group = static_cast<size_t>(host.spec.groupSize());
    CHECK(ref.dq.size() == group * sq * D);
    CHECK(ref.dk.size() == static_cast<size_t>(sk * D));
    double sum = 0;
    for (const auto *g : {&ref.dq, &ref.dk, &ref.dv})
      for (double x : *g)
        sum += std::fabs(x);
    CHECK((sum > 0) == (sq > 0 && sk > 0));
  }
  CHECK(cumulativeOffsets({0, 3, 0, 5}) == std::vector<int32_t>{0, 0, 3, 3, 8});
}
