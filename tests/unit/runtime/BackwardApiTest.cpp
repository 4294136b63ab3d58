//===- BackwardApiTest.cpp - the backward pass's API without a GPU --------===//
// Why: the backward kernels must build for every supported spec and the
// API must refuse bad arguments before anything reaches the device; both
// run in CI, which has no GPU.
#include "RuntimeTestUtil.h"

#include "flashjit/Backward.h"
#include "flashjit/Runtime/ErrorCode.h"
#include "flashjit/Templates/MmaSyncBackward.h"
#include "flashjit/Templates/WgmmaBackward.h"

#include <doctest/doctest.h>

using namespace flashjit;
using namespace flashjit::test;

namespace {
ErrorCode codeOf(llvm::Error err) { return takeErrorParts(std::move(err)).code; }

AttentionSpec gqaSpec() {
  AttentionSpec spec;
  spec.headDim = 64;
  spec.dtype = DType::F16;
  spec.causal = true;
  spec.numHeads = 4;
  spec.numKVHeads = 2;
  return spec;
}

/// Arguments over disjoint fake device addresses (never dereferenced: the
/// checks look at addresses, shapes and strides only).
struct FakeArgs {
  BackwardArgs args;
  FakeArgs(const AttentionSpec &spec, int64_t b, int64_t sq, int64_t sk,
           size_t workspaceBytes) {
    uintptr_t next = 0x10000000;
    auto take = [&](int64_t elements, int64_t bytes) {
      void *p = reinterpret_cast<void *>(next);
      next += (elements * bytes + 0xFFFF) / 0x10000 * 0x10000 + 0x10000;
      return p;
    };
    const int64_t H = spec.numHeads, Hkv = spec.numKVHeads, D = spec.headDim;
    auto qLike = [&] {
      return TensorRef::bhsd(take(b * H * sq * D, 2), spec.dtype, b, H, sq, D);
    };
    auto kLike = [&] {
      return TensorRef::bhsd(take(b * Hkv * sk * D, 2), spec.dtype, b, Hkv,
                             sk, D);
    };
    args.q = qLike();
    args.o = qLike();
    args.dO = qLike();
    args.dq = qLike();
    args.k = kLike();
    args.v = kLike();
    args.dk = kLike();
    args.dv = kLike();
    args.lse =
        LseRef::contiguous(static_cast<float *>(take(b * H * sq, 4)), b, H, sq);
    args.workspace = take(static_cast<int64_t>(workspaceBytes), 1);
    args.workspaceBytes = workspaceBytes;
  }
};
} // namespace

TEST_CASE("backward kernels build for sm_80 and sm_90a, cached apart from "
          "the forward") {
  for (const char *chip : {"sm_80", "sm_90a"}) {
    TempDir dir;
    Warnings warnings;
    ContextOptions options;
    options.chip = chip;
    options.cache = cacheOptions(dir / "cache", warnings);
    options.onWarning = warningSink(warnings);
    auto ctx = Context::create(options);
    REQUIRE(static_cast<bool>(ctx));
    AttentionSpec spec = gqaSpec();
    auto backward = (*ctx)->compileBackward(spec, BackwardOptions());
    REQUIRE_MESSAGE(static_cast<bool>(backward),
                    (backward ? "" : llvm::toString(backward.takeError())));
    const std::string &ptx = (*backward)->ptx();
    BackwardKernelNames names = BackwardKernelNames::of(spec.kernelName());
    CHECK((*backward)->info().name == names.main);
    for (const std::string &name :
         {names.preprocess, names.main, names.convert})
      CHECK(ptx.find(".entry " + name) != std::string::npos);
    // sm_80: mma.sync with f32 atomics into dQ; sm_90a: wgmma, dQ by
    // bulk reductions of staged rows.
    const bool hopper = std::string(chip) == "sm_90a";
    if (hopper) {
      CHECK(ptx.find("wgmma.mma_async.sync.aligned.m64n64k16") !=
            std::string::npos);
      CHECK(ptx.find("cp.reduce.async.bulk.global.shared::cta.bulk_group."
                     "add.f32") != std::string::npos);
    } else {
      CHECK(ptx.find("mma.sync.aligned.m16n8k16") != std::string::npos);
      CHECK(ptx.find("ldmatrix.sync.aligned") != std::string::npos);
      CHECK(ptx.find("atom.global.add.f32") != std::string::npos);
    }
    CHECK((*backward)->info().config.family ==
          (hopper ? "wgmma_bwd" : "mma_sync_bwd"));
    // The same object from memory; the forward is another entry.
    auto again = (*ctx)->compileBackward(spec, BackwardOptions());
    REQUIRE(static_cast<bool>(again));
    CHECK(again->get() == backward->get());
    auto forward = (*ctx)->compile(spec);
    REQUIRE(static_cast<bool>(forward));
    CHECK((*forward)->ptx().find(names.main) == std::string::npos);
    CHECK((*ctx)->cache().stats().builds == 2);
  }
}

TEST_CASE("backward: the deterministic kernels are their own cache entry, "
          "take turns on dQ and size their counters") {
  TempDir dir;
  Warnings warnings;
  auto ctx = sm90aContext(dir, warnings);
  REQUIRE(static_cast<bool>(ctx));
  AttentionSpec spec = gqaSpec();
  auto plain = (*ctx)->compileBackward(spec, BackwardOptions());
  REQUIRE(static_cast<bool>(plain));
  BackwardOptions detOptions;
  detOptions.deterministic = true;
  auto det = (*ctx)->compileBackward(spec, detOptions);
  REQUIRE_MESSAGE(static_cast<bool>(det),
                  (det ? "" : llvm::toString(det.takeError())));
  CHECK_FALSE((*plain)->deterministic());
  CHECK((*det)->deterministic());
  CHECK(det->get() != plain->get());
  CHECK((*ctx)->cache().stats().builds == 2);
  // Same tile sizes, the deterministic family (sm_90a: wgmma_bwd_det).
  TileConfig expected = WgmmaBackward::defaultConfig(spec);
  expected.family = WgmmaBackward::deterministicFamily().str();
  CHECK((*det)->info().config == expected);
  CHECK((*plain)->info().config.family == "wgmma_bwd");
  // The default kernels have no turns; the deterministic ones spin on an
  // acquire load and release with a fence, and keep the bulk reductions,
  // waiting for each to complete before the release.
  const std::string &ptx = (*det)->ptx();
  CHECK(ptx.find("ld.acquire.gpu.global.b32") != std::string::npos);
  CHECK(ptx.find("fence.acq_rel.gpu") != std::string::npos);
  CHECK(ptx.find("red.relaxed.gpu.global.add.s32") != std::string::npos);
  CHECK(ptx.find("cp.reduce.async.bulk") != std::string::npos);
  CHECK(ptx.find("cp.async.bulk.wait_group 0") != std::string::npos);
  CHECK((*plain)->ptx().find("ld.acquire") == std::string::npos);
  // A config of the deterministic family asks for the same kernels.
  BackwardOptions byFamily;
  byFamily.config = expected;
  auto again = (*ctx)->compileBackward(spec, byFamily);
  REQUIRE(static_cast<bool>(again));
  CHECK(again->get() == det->get());
  // An explicit mma_sync_bwd config with the flag: deterministic too, in
  // its own template's family; the mma_sync turns keep the f32 atomics.
  BackwardOptions sized;
  sized.config = TileConfig{"mma_sync_bwd", 32, 64, 1, 4};
  sized.deterministic = true;
  auto small = (*ctx)->compileBackward(spec, sized);
  REQUIRE(static_cast<bool>(small));
  CHECK((*small)->info().config.family == "mma_sync_bwd_det");
  CHECK((*small)->info().config.blockM == 32);
  CHECK((*small)->ptx().find("atom.global.add.f32") != std::string::npos);

  // One i32 counter per (batch, head, query block of block_m rows) after
  // the default workspace, in its own 256-byte part.
  const int64_t B = 2, Sq = 1000;
  const int64_t blockM = expected.blockM;
  const size_t counters =
      size_t(4) * B * spec.numHeads * ((Sq + blockM - 1) / blockM);
  CHECK((*det)->workspaceBytes(B, Sq) ==
        (*plain)->workspaceBytes(B, Sq) + (counters + 255) / 256 * 256);
  BackwardWorkspaceLayout layout =
      BackwardWorkspaceLayout::of(spec, (*det)->info().config, B, Sq);
  CHECK(layout.turnsOffset == (*plain)->workspaceBytes(B, Sq));
  CHECK(BackwardWorkspaceLayout::of(spec, (*plain)->info().config, B, Sq)
            .turnsOffset == 0);
  // The argument checks count the counters.
  FakeArgs args(spec, B, Sq, 300, (*plain)->workspaceBytes(B, Sq));
  llvm::Error err = (*det)->check(args.args);
  REQUIRE(static_cast<bool>(err));
  CHECK(llvm::toString(std::move(err)).find("workspaceBytes") !=
        std::string::npos);
}

TEST_CASE("backward: what is not supported is an error") {
  TempDir dir;
  Warnings warnings;
  auto ctx = sm90aContext(dir, warnings);
  REQUIRE(static_cast<bool>(ctx));
  // Sliding windows build, deterministic too, and mods compile.
  AttentionSpec window = gqaSpec();
  window.windowLeft = 64;
  auto windowed = (*ctx)->compileBackward(window, BackwardOptions());
  REQUIRE_MESSAGE(static_cast<bool>(windowed),
                  (windowed ? "" : llvm::toString(windowed.takeError())));
  BackwardOptions deterministic;
  deterministic.deterministic = true;
  auto turns = (*ctx)->compileBackward(window, deterministic);
  REQUIRE_MESSAGE(static_cast<bool>(turns),
                  (turns ? "" : llvm::toString(turns.takeError())));
  CHECK((*turns)->deterministic());
  AttentionSpec modded = gqaSpec();
  modded.scoreMod = "func.func @m(%s: f32, %b: index, %h: index, %q: index, "
                    "%k: index) -> f32 { return %s : f32 }";
  auto withMod = (*ctx)->compileBackward(modded, BackwardOptions());
  REQUIRE_MESSAGE(static_cast<bool>(withMod),
                  (withMod ? "" : llvm::toString(withMod.takeError())));
  // A score_mod the derivative pass has no rule for is a compile error
  // naming the op; a block mask is not supported yet.
  AttentionSpec noRule = gqaSpec();
  noRule.scoreMod = "func.func @m(%s: f32, %b: index, %h: index, %q: index, "
                    "%k: index) -> f32 { %c = arith.constant 3.0 : f32\n"
                    "%r = arith.remf %s, %c : f32\n return %r : f32 }";
  auto remf = (*ctx)->compileBackward(noRule, BackwardOptions());
  REQUIRE(!remf);
  ErrorParts remfError = takeErrorParts(remf.takeError());
  CHECK(remfError.code == ErrorCode::CompileError);
  CHECK(remfError.message.find("'arith.remf' op computes on the score with "
                               "no derivative rule") != std::string::npos);
  // Block masks build (tiles that divide the mask's block); not the
  // deterministic kernels.
  AttentionSpec sparse = gqaSpec();
  sparse.sparseBlockM = sparse.sparseBlockN = 128;
  auto blockSparse = (*ctx)->compileBackward(sparse, BackwardOptions());
  REQUIRE_MESSAGE(static_cast<bool>(blockSparse),
                  (blockSparse ? "" : llvm::toString(blockSparse.takeError())));
  auto sparseTurns = (*ctx)->compileBackward(sparse, deterministic);
  REQUIRE(!sparseTurns);
  ErrorParts sparseTurnsError = takeErrorParts(sparseTurns.takeError());
  CHECK(sparseTurnsError.code == ErrorCode::Unsupported);
  CHECK(sparseTurnsError.message.find("block masks") != std::string::npos);
  // A mask block of 64 keys: the default's 128-key tiles do not divide it,
  // a 64-key candidate does.
  AttentionSpec fine = sparse;
  fine.sparseBlockN = 64;
  auto fineBlocks = (*ctx)->compileBackward(fine, BackwardOptions());
  REQUIRE_MESSAGE(static_cast<bool>(fineBlocks),
                  (fineBlocks ? "" : llvm::toString(fineBlocks.takeError())));
  CHECK(64 % (*fineBlocks)->info().config.blockN == 0);
  // Head dims 64, 96, 128 and 256 only (the forward builds more).
  AttentionSpec narrow = gqaSpec();
  narrow.headDim = 32;
  auto tooNarrow = (*ctx)->compileBackward(narrow, BackwardOptions());
  REQUIRE(!tooNarrow);
  CHECK(codeOf(tooNarrow.takeError()) == ErrorCode::Unsupported);
  AttentionSpec wide = gqaSpec();
  wide.headDim = 256;
  auto d256 = (*ctx)->compileBackward(wide, BackwardOptions());
  REQUIRE_MESSAGE(static_cast<bool>(d256),
                  (d256 ? "" : llvm::toString(d256.takeError())));
  CHECK((*d256)->info().config.family == "mma_sync_bwd");
  BackwardOptions badConfig;
  badConfig.config = TileConfig{"mma_sync_bwd", 64, 48, 1, 3};
  auto bad = (*ctx)->compileBackward(gqaSpec(), badConfig);
  REQUIRE(!bad);
  CHECK(codeOf(bad.takeError()) == ErrorCode::InvalidArgument);
  // wgmma_bwd: sm_90a only, head dims 64 and 128.
  BackwardOptions hopper;
  hopper.config = TileConfig{"wgmma_bwd", 64, 128, 2, 8};
  AttentionSpec d96 = gqaSpec();
  d96.headDim = 96;
  auto noD96 = (*ctx)->compileBackward(d96, hopper);
  REQUIRE(!noD96);
  CHECK(codeOf(noD96.takeError()) == ErrorCode::InvalidArgument);
  hopper.config = TileConfig{"wgmma_bwd", 128, 128, 2, 8};
  AttentionSpec d128 = gqaSpec();
  d128.headDim = 128;
  auto tooTall = (*ctx)->compileBackward(d128, hopper);
  REQUIRE(!tooTall);
  CHECK(llvm::toString(tooTall.takeError()).find("block_m") !=
        std::string::npos);
  // A forward family is not a backward config.
  badConfig.config = TileConfig{"mma_sync", 64, 64, 2, 4};
  auto forwardConfig = (*ctx)->compileBackward(gqaSpec(), badConfig);
  REQUIRE(!forwardConfig);
  CHECK(llvm::toString(forwardConfig.takeError()).find("mma_sync_bwd") !=
        std::string::npos);
}

TEST_CASE("backward: argument checks before any launch") {
  TempDir dir;
  Warnings warnings;
  auto ctx = sm90aContext(dir, warnings);
  REQUIRE(static_cast<bool>(ctx));
  AttentionSpec spec = gqaSpec();
  auto backward = (*ctx)->compileBackward(spec, BackwardOptions());
  REQUIRE(static_cast<bool>(backward));
  const BackwardKernel &kernel = **backward;
  const int64_t B = 2, Sq = 100, Sk = 300;
  const size_t need = kernel.workspaceBytes(B, Sq);
  // D (f32 per query row) and the f32 dQ accumulator, each 256-aligned.
  CHECK(need >= size_t(4) * B * spec.numHeads * Sq * (spec.headDim + 1));
  CHECK(need % 256 == 0);

  FakeArgs good(spec, B, Sq, Sk, need);
  CHECK(errorText(kernel.check(good.args)).empty());
  if (!(*ctx)->device())
    CHECK(codeOf(kernel.backward(good.args)) == ErrorCode::NoDevice);

  auto refused = [&](BackwardArgs args, const char *words) {
    llvm::Error err = kernel.check(args);
    REQUIRE(static_cast<bool>(err));
    auto parts = takeErrorParts(std::move(err));
    CHECK(parts.code == ErrorCode::InvalidArgument);
    INFO(parts.message);
    CHECK(parts.message.find(words) != std::string::npos);
  };
  BackwardArgs a = good.args;
  a.workspace = nullptr;
  refused(a, "workspace is a null pointer");
  a = good.args;
  a.workspaceBytes = need - 256;
  refused(a, "workspaceBytes");
  a = good.args;
  a.dk.shape[2] = Sk - 1;
  refused(a, "dk shape");
  a = good.args;
  a.dq.shape[1] = 2;
  refused(a, "dq shape");
  a = good.args;
  a.dO.dtype = DType::BF16;
  refused(a, "dO is bf16");
  a = good.args;
  a.dv = a.dk;
  refused(a, "overlap");
  a = good.args;
  a.dq.data = a.q.data;
  refused(a, "overlaps input q");
  a = good.args;
  a.dk.strides = {0, 0, 0, 1};
  refused(a, "share memory");
  a = good.args;
  a.lse.shape[2] = Sq + 1;
  refused(a, "the forward's tensors");
  // A block mask on a dense spec.
  a = good.args;
  int32_t words[64] = {};
  a.blockMask.kvNumBlocks =
      CapturedRef::contiguous(words, CaptureDType::I32, {B, 4, 3});
  refused(a, "not block-sparse");

  // A block-sparse spec takes the transposed lists: per key block
  // (ceil(300 / 128) = 3) the query blocks (ceil(100 / 128) = 1).
  AttentionSpec sparse = spec;
  sparse.sparseBlockM = sparse.sparseBlockN = 128;
  auto sparseBackward = (*ctx)->compileBackward(sparse, BackwardOptions());
  REQUIRE(static_cast<bool>(sparseBackward));
  const BackwardKernel &sparseKernel = **sparseBackward;
  BackwardArgs lists = good.args;
  llvm::Error missing = sparseKernel.check(lists);
  REQUIRE(static_cast<bool>(missing));
  CHECK(errorText(std::move(missing)).find("q_num_blocks and q_indices") !=
        std::string::npos);
  lists.blockMask.kvNumBlocks =
      CapturedRef::contiguous(words, CaptureDType::I32, {B, 4, 3});
  lists.blockMask.kvIndices =
      CapturedRef::contiguous(words, CaptureDType::I32, {B, 4, 3, 1});
  CHECK(errorText(sparseKernel.check(lists)).empty());
  // Shaped as the forward's lists (per query block): refused, named.
  lists.blockMask.kvNumBlocks =
      CapturedRef::contiguous(words, CaptureDType::I32, {B, 4, 1});
  CHECK(errorText(sparseKernel.check(lists)).find("q_num_blocks has shape") !=
        std::string::npos);
}

TEST_CASE("backward: the wgmma dQ accumulator holds whole tiles, and the "
          "stages fit in shared memory") {
  AttentionSpec spec = gqaSpec();
  spec.headDim = 128;
  const TileConfig wgmma{"wgmma_bwd", 64, 128, 2, 8};
  const TileConfig mma{"mma_sync_bwd", 32, 128, 2, 8};
  // Rows padded like the kernel's staging rows, seqlen_q rounded up to
  // block_m: a query block's rows are one range.
  DqAccumLayout padded = DqAccumLayout::of(spec, wgmma);
  CHECK(padded.rowFloats ==
        128 + WgmmaBackward::kDqRowPadding / int64_t(sizeof(float)));
  CHECK(padded.rowMultiple == 64);
  CHECK(padded.rowsPerHead(1000) == 1024);
  CHECK(padded.rowsPerHead(1024) == 1024);
  CHECK(padded.rowsPerHead(1) == 64);
  DqAccumLayout dense = DqAccumLayout::of(spec, mma);
  CHECK(dense.rowFloats == 128);
  CHECK(dense.rowsPerHead(1000) == 1000);

  const int64_t B = 2, Sq = 1000;
  const uint64_t heads = uint64_t(B) * spec.numHeads;
  auto part = [](uint64_t bytes) { return (bytes + 255) / 256 * 256; };
  BackwardWorkspaceLayout w = BackwardWorkspaceLayout::of(spec, wgmma, B, Sq);
  CHECK(w.dqAccumOffset == part(heads * Sq * 4));
  CHECK(w.totalBytes ==
        w.dqAccumOffset + part(heads * 1024 * padded.rowFloats * 4));
  BackwardWorkspaceLayout m = BackwardWorkspaceLayout::of(spec, mma, B, Sq);
  CHECK(m.totalBytes == m.dqAccumOffset + part(heads * Sq * 128 * 4));

  // Stages 1 to 3 at both block_m; 4 neither fits nor is offered.
  for (auto [d, blockM] : {std::pair<int64_t, int64_t>{128, 64}, {64, 128}}) {
    spec.headDim = d;
    for (int64_t stages = 1; stages <= 3; ++stages) {
      TileConfig c{"wgmma_bwd", blockM, 128, stages, 8};
      llvm::Error err = WgmmaBackward::checkConfig(spec, c);
      CHECK_MESSAGE(!err, c.canonical());
      llvm::consumeError(std::move(err));
      CHECK(WgmmaBackward::resources(spec, c).sharedMemoryBytes <=
            WgmmaBackward::kMaxSharedBytes);
      // A mask_mod adds each warp's staged query reads (4 bytes a query
      // row of the step), and still fits.
      AttentionSpec masked = spec;
      masked.maskMod = "mask_mod";
      const int64_t plain = WgmmaBackward::resources(spec, c).sharedMemoryBytes;
      const int64_t withMod =
          WgmmaBackward::resources(masked, c).sharedMemoryBytes;
      CHECK(withMod >= plain + 8 * blockM * 4);
      CHECK(withMod < plain + 8 * blockM * 4 + 16);
      CHECK(withMod <= WgmmaBackward::kMaxSharedBytes);
    }
    llvm::Error four =
        WgmmaBackward::checkConfig(spec, {"wgmma_bwd", blockM, 128, 4, 8});
    REQUIRE(static_cast<bool>(four));
    CHECK(llvm::toString(std::move(four)).find("stages must be 1") !=
          std::string::npos);
    bool offersThree = false;
    for (const TileConfig &c : WgmmaBackward::candidates(spec))
      offersThree |= c.stages == 3;
    CHECK(offersThree);
  }
}
