// Why: a varlen kernel must have a name and cache key of its own (dense
// kernels keep theirs), only the families that build varlen kernels may be
// asked for one, and a varlen launch must refuse bad arguments on the host
// with a message that says what is wrong, before anything reaches the GPU;
// so must a paged one (AttentionSpec::pageSize), whose kernels differ.
#include "RuntimeTestUtil.h"

#include "flashjit/Runtime/ErrorCode.h"

#include <doctest/doctest.h>

using namespace flashjit;
using namespace flashjit::test;

namespace {
/// Fake device addresses, 256-byte aligned: check() reads no memory.
void *fake(uintptr_t n) { return reinterpret_cast<void *>(n * 0x10000000); }

AttentionSpec varlenSpec() {
  AttentionSpec s;
  s.headDim = 128;
  s.numHeads = 8;
  s.numKVHeads = 2;
  s.causal = true;
  s.causalAlign = CausalAlign::BottomRight;
  s.varlen = true;
  return s;
}

VarlenForwardArgs goodArgs(const AttentionSpec &s, int64_t totalQ,
                           int64_t totalK) {
  VarlenForwardArgs a;
  a.packed.q = TensorRef::packed(fake(1), s.dtype, totalQ, s.numHeads, 128);
  a.packed.o = TensorRef::packed(fake(2), s.dtype, totalQ, s.numHeads, 128);
  a.packed.k = TensorRef::packed(fake(3), s.dtype, totalK, s.numKVHeads, 128);
  a.packed.v = TensorRef::packed(fake(4), s.dtype, totalK, s.numKVHeads, 128);
  a.packed.lse =
      LseRef::packed(static_cast<float *>(fake(5)), s.numHeads, totalQ);
  a.cuSeqlensQ = static_cast<const int32_t *>(fake(6));
  a.cuSeqlensK = static_cast<const int32_t *>(fake(7));
  a.batch = 3;
  a.maxSeqlenQ = 500;
  return a;
}
} // namespace

TEST_CASE("varlen: its own kernel name and cache key, dense ones unchanged") {
  AttentionSpec dense = varlenSpec();
  dense.varlen = false;
  AttentionSpec varlen = varlenSpec();
  CHECK(varlen.kernelName() != dense.kernelName());
  CHECK(varlen.kernelName().find("_varlen") != std::string::npos);
  CHECK(varlen.canonical() != dense.canonical());
  CHECK(varlen.canonical().find(";varlen") != std::string::npos);
  CHECK_FALSE(varlen.isPlain());
  CHECK(varlen.mayEmptyRows());
  // A plain dense spec keeps the name and key it had without varlen.
  AttentionSpec plain;
  CHECK(plain.kernelName() == "flashjit_fwd_d128_bf16_h1_kv1");
  CHECK(plain.canonical() == "fwd;d=128;dtype=bf16;causal=0;hq=1;hkv=1");
  AttentionSpec withMod = varlenSpec();
  withMod.scoreMod = "func.func @m(%s: f32) -> f32 { return %s : f32 }";
  llvm::Error err = withMod.validate();
  REQUIRE(static_cast<bool>(err));
  CHECK(llvm::toString(std::move(err)).find("varlen") != std::string::npos);
}

TEST_CASE("varlen: a context builds varlen kernels in wgmma, wgmma_persistent and mma_sync only") {
  TempDir dir;
  Warnings warnings;
  auto ctx = sm90aContext(dir, warnings);
  REQUIRE(static_cast<bool>(ctx));
  AttentionSpec spec = varlenSpec();
  for (const char *family : {"wgmma", "wgmma_persistent", "mma_sync"}) {
    KernelOptions ko;
    ko.family = family;
    auto kernel = (*ctx)->compile(spec, ko);
    REQUIRE_MESSAGE(static_cast<bool>(kernel),
                    (kernel ? "" : llvm::toString(kernel.takeError())));
    CHECK((*kernel)->info().name == spec.kernelName());
    CHECK((*kernel)->ptx().find(spec.kernelName()) != std::string::npos);
  }
  // The heuristic never picks a family without varlen kernels; short
  // sequences (up to HeuristicOptions::shortVarlenSeqlen) go to mma_sync,
  // whose loads stop at each sequence's end, longer ones to
  // wgmma_persistent.
  auto chosen = (*ctx)->heuristicConfig(spec, 16384);
  REQUIRE(static_cast<bool>(chosen));
  CHECK(chosen->family == "wgmma_persistent");
  auto chosenShort = (*ctx)->heuristicConfig(spec, 34);
  REQUIRE(static_cast<bool>(chosenShort));
  CHECK(chosenShort->family == "mma_sync");
  AttentionSpec denseSpec = spec;
  denseSpec.varlen = false;
  auto denseShort = (*ctx)->heuristicConfig(denseSpec, 34);
  REQUIRE(static_cast<bool>(denseShort));
  CHECK(denseShort->family != "mma_sync");
  for (const char *family : {"wgmma_cluster", "cuda_core"}) {
    KernelOptions ko;
    ko.family = family;
    auto refused = (*ctx)->compile(spec, ko);
    REQUIRE_FALSE(static_cast<bool>(refused));
    CHECK(llvm::toString(refused.takeError()).find("varlen") !=
          std::string::npos);
  }
}

TEST_CASE("varlen: host checks of a launch") {
  TempDir dir;
  Warnings warnings;
  auto ctx = sm90aContext(dir, warnings);
  REQUIRE(static_cast<bool>(ctx));
  AttentionSpec spec = varlenSpec();
  KernelOptions ko;
  ko.family = "wgmma";
  auto kernel = (*ctx)->compile(spec, ko);
  REQUIRE(static_cast<bool>(kernel));
  const Kernel &k = **kernel;
  auto errorOf = [&](const VarlenForwardArgs &a) {
    llvm::Error err = k.checkVarlen(a);
    return err ? llvm::toString(std::move(err)) : std::string();
  };
  CHECK_MESSAGE(errorOf(goodArgs(spec, 1000, 3000)).empty(),
                errorOf(goodArgs(spec, 1000, 3000)));
  VarlenForwardArgs a = goodArgs(spec, 1000, 3000);
  a.cuSeqlensQ = nullptr;
  CHECK(errorOf(a).find("cu_seqlens_q is a null pointer") != std::string::npos);
  a = goodArgs(spec, 1000, 3000);
  a.cuSeqlensK = reinterpret_cast<const int32_t *>(
      static_cast<char *>(fake(7)) + 2);
  CHECK(errorOf(a).find("cu_seqlens_k is not 4-byte aligned") !=
        std::string::npos);
  a = goodArgs(spec, 1000, 3000);
  a.maxSeqlenQ = 0;
  CHECK(errorOf(a).find("max_seqlen_q must be at least 1") !=
        std::string::npos);
  a.maxSeqlenQ = 1001;
  CHECK(errorOf(a).find("longer than the packed query tokens") !=
        std::string::npos);
  a = goodArgs(spec, 1000, 3000);
  a.batch = 70000;
  CHECK(errorOf(a).find("out of range") != std::string::npos);
  a = goodArgs(spec, 1000, 3000);
  a.packed.q = TensorRef::bhsd(fake(1), spec.dtype, 2, 8, 500, 128);
  CHECK(errorOf(a).find("batch-1 views") != std::string::npos);
  a = goodArgs(spec, 1000, 3000);
  a.packed.lse =
      LseRef::packed(static_cast<float *>(fake(5)), spec.numHeads, 999);
  CHECK(errorOf(a).find("lse shape") != std::string::npos);
  // A dense launch of a varlen kernel, and a varlen launch of a dense one.
  ForwardArgs dense = goodArgs(spec, 1000, 1000).packed;
  llvm::Error err = k.check(dense);
  REQUIRE(static_cast<bool>(err));
  CHECK(llvm::toString(std::move(err)).find("forwardVarlen") !=
        std::string::npos);
  AttentionSpec denseSpec = spec;
  denseSpec.varlen = false;
  auto denseKernel = (*ctx)->compile(denseSpec, ko);
  REQUIRE(static_cast<bool>(denseKernel));
  llvm::Error notVarlen =
      (*denseKernel)->checkVarlen(goodArgs(spec, 1000, 3000));
  REQUIRE(static_cast<bool>(notVarlen));
  CHECK(llvm::toString(std::move(notVarlen)).find("not a varlen kernel") !=
        std::string::npos);
}

TEST_CASE("varlen paged: name, key, spec rules and host checks of a launch") {
  AttentionSpec spec = varlenSpec();
  spec.pageSize = 16;
  REQUIRE_FALSE(static_cast<bool>(spec.validate()));
  AttentionSpec packed = varlenSpec();
  CHECK(spec.kernelName().find("_varlen_paged_v") != std::string::npos);
  CHECK(spec.canonical() == packed.canonical() + ";page=16");
  auto specError = [](AttentionSpec s) {
    llvm::Error err = s.validate();
    return err ? llvm::toString(std::move(err)) : std::string();
  };
  for (int64_t bad : {8, 48, 512, -16}) {
    AttentionSpec s = spec;
    s.pageSize = bad;
    CHECK(specError(s).find("a power of two from 16 to 256") !=
          std::string::npos);
  }
  AttentionSpec dense = spec;
  dense.varlen = false;
  CHECK(specError(dense).find("read by varlen kernels only") !=
        std::string::npos);

  TempDir dir;
  Warnings warnings;
  auto ctx = sm90aContext(dir, warnings);
  REQUIRE(static_cast<bool>(ctx));
  // A tile holds whole pages or lies in one: block_n 176 takes pages of
  // 16, not 64.
  KernelOptions n176;
  n176.config = TileConfig{"wgmma", 128, 176, 2, 12};
  CHECK(static_cast<bool>((*ctx)->compile(spec, n176)));
  AttentionSpec page64 = spec;
  page64.pageSize = 64;
  auto refused = (*ctx)->compile(page64, n176);
  REQUIRE_FALSE(static_cast<bool>(refused));
  CHECK(llvm::toString(refused.takeError()).find("whole pages") !=
        std::string::npos);
  for (const char *family : {"wgmma", "wgmma_persistent", "mma_sync"}) {
    KernelOptions ko;
    ko.family = family;
    auto kernel = (*ctx)->compile(spec, ko);
    REQUIRE(static_cast<bool>(kernel));
    const Kernel &k = **kernel;
    if (auto boxes = k.tensorMapBoxes())
      CHECK(boxes->kvRows == 16u);
    auto errorOf = [&](const VarlenForwardArgs &a) {
      llvm::Error err = k.checkVarlen(a);
      return err ? llvm::toString(std::move(err)) : std::string();
    };
    // A pool of 60 pages of 16 tokens, 8 pages per table row.
    VarlenForwardArgs a = goodArgs(spec, 1000, 960);
    a.cuSeqlensK = nullptr;
    a.kvLens = static_cast<const int32_t *>(fake(8));
    a.blockTable = static_cast<const int32_t *>(fake(9));
    a.maxPages = 8;
    CHECK_MESSAGE(errorOf(a).empty(), errorOf(a));
    VarlenForwardArgs b = a;
    b.cuSeqlensK = static_cast<const int32_t *>(fake(7));
    CHECK(errorOf(b).find("not cu_seqlens_k") != std::string::npos);
    b = a;
    b.maxPages = 0;
    CHECK(errorOf(b).find("max_pages 0 is out of range") != std::string::npos);
    b.maxPages = int64_t(1) << 28;
    CHECK(errorOf(b).find("out of range") != std::string::npos);
    b = goodArgs(spec, 1000, 970);
    b.cuSeqlensK = nullptr;
    b.kvLens = a.kvLens;
    b.blockTable = a.blockTable;
    b.maxPages = 8;
    CHECK(errorOf(b).find("whole pages of 16 tokens") != std::string::npos);
    b = a;
    b.kvLens = nullptr;
    CHECK(errorOf(b).find("kv_lens is a null pointer") != std::string::npos);
    b = a;
    b.blockTable = reinterpret_cast<const int32_t *>(
        static_cast<const char *>(fake(9)) + 2);
    CHECK(errorOf(b).find("block_table is not 4-byte aligned") !=
          std::string::npos);
  }
  // Paged arguments to a kernel of packed K/V.
  KernelOptions wgmma;
  wgmma.family = "wgmma";
  auto packedKernel = (*ctx)->compile(packed, wgmma);
  REQUIRE(static_cast<bool>(packedKernel));
  VarlenForwardArgs a = goodArgs(packed, 1000, 3000);
  a.blockTable = static_cast<const int32_t *>(fake(9));
  llvm::Error err = (*packedKernel)->checkVarlen(a);
  REQUIRE(static_cast<bool>(err));
  CHECK(llvm::toString(std::move(err)).find(
            "kernels compiled with a page size") != std::string::npos);
}
