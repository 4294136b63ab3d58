// Why: the decode kernels (DecodeKernel.h) are built without the attn
// description; these tests check, without a GPU, that every supported
// decode spec gives PTX with both entries and the instructions the design
// relies on, that bad specs are errors, and that the tiling and the split
// rule say what DecodeKernel.h documents.
#include "flashjit/Compiler/Compiler.h"
#include "flashjit/Templates/DecodeKernel.h"

#include "llvm/ADT/StringRef.h"

#include <doctest/doctest.h>
#include <regex>

using namespace flashjit;

namespace {
CompileOptions forChip(const char *chip) {
  CompileOptions o;
  o.target = llvm::cantFail(Target::parse(chip));
  return o;
}

DecodeSpec decodeSpec(int64_t d, DType dtype, int64_t heads, int64_t kvHeads,
                      int64_t qLen, int64_t pageSize = 0) {
  DecodeSpec s;
  s.headDim = d;
  s.dtype = dtype;
  s.numHeads = heads;
  s.numKVHeads = kvHeads;
  s.qLen = qLen;
  s.pageSize = pageSize;
  return s;
}
} // namespace

TEST_CASE("decode: PTX with the split and combine entries") {
  for (const char *chip : {"sm_80", "sm_90a"})
    for (int64_t d : {64, 128, 256})
      for (DType dtype : {DType::F16, DType::BF16})
        for (auto [heads, kvHeads, qLen, page] :
             {std::tuple<int64_t, int64_t, int64_t, int64_t>{32, 8, 1, 0},
              {32, 8, 7, 0},
              {8, 1, 16, 0},
              {4, 4, 2, 0},
              {32, 8, 1, 16},
              {32, 1, 16, 64}}) {
          DecodeSpec spec = decodeSpec(d, dtype, heads, kvHeads, qLen, page);
          INFO(spec.canonical() << " " << chip);
          auto kernel = compileDecodeKernel(spec, forChip(chip));
          REQUIRE_MESSAGE(bool(kernel), llvm::toString(kernel.takeError()));
          const std::string &ptx = kernel->text;
          CHECK(ptx.find(".entry " + spec.kernelName() + "(") !=
                std::string::npos);
          CHECK(ptx.find(".entry " + spec.kernelName() + "_combine(") !=
                std::string::npos);
          CHECK(ptx.find("mma.sync.aligned.m16n8k16") != std::string::npos);
          CHECK(ptx.find("cp.async.cg.shared.global") != std::string::npos);
          CHECK(ptx.find("ldmatrix.sync.aligned") != std::string::npos);
          CHECK(ptx.find(".local") == std::string::npos); // no spills
          CHECK(kernel->info.name == spec.kernelName());
          CHECK(kernel->info.threadsPerBlock == 128);
          CHECK(kernel->info.config.family ==
                (page ? "decode_paged" : "decode"));
        }
}

TEST_CASE("decode: the cache key's spec text differs from the forward's") {
  DecodeSpec spec = decodeSpec(128, DType::BF16, 32, 8, 1);
  CHECK(spec.canonical().rfind("decode;", 0) == 0);
  CHECK(spec.canonical() != spec.attentionSpec().canonical());
  DecodeSpec paged = spec;
  paged.pageSize = 16;
  CHECK(paged.canonical() != spec.canonical());
  DecodeSpec twoTokens = spec;
  twoTokens.qLen = 2;
  CHECK(twoTokens.canonical() != spec.canonical());
  CHECK(decodeTiling(paged).config(paged).canonical() !=
        decodeTiling(spec).config(spec).canonical());
}

TEST_CASE("decode: bad specs are errors that say what is wrong") {
  auto message = [](const DecodeSpec &s) {
    auto kernel = compileDecodeKernel(s, forChip("sm_90a"));
    REQUIRE_FALSE(bool(kernel));
    return llvm::toString(kernel.takeError());
  };
  CHECK(message(decodeSpec(96, DType::BF16, 8, 8, 1))
            .find("head dims 64, "
                  "128 and 256") != std::string::npos);
  CHECK(message(decodeSpec(128, DType::BF16, 6, 4, 1)).find("multiple") !=
        std::string::npos);
  CHECK(message(decodeSpec(128, DType::BF16, 8, 8, 17)).find("1 to 16") !=
        std::string::npos);
  CHECK(message(decodeSpec(128, DType::BF16, 8, 8, 1, 8)).find("page size") !=
        std::string::npos);
  CHECK(message(decodeSpec(128, DType::BF16, 8, 8, 0)).find("1 to 16") !=
        std::string::npos);
}

TEST_CASE("decode: tiling packs a KV group's heads x tokens as rows") {
  // GQA 32/8, one token: 4 rows, one m16 tile, 4 warps over the keys.
  DecodeTiling t = decodeTiling(decodeSpec(128, DType::BF16, 32, 8, 1));
  CHECK(t.headsPerBlock == 4);
  CHECK(t.headChunks == 1);
  CHECK(t.rows == 4);
  CHECK(t.warpsM == 1);
  CHECK(t.warpsN == 4);
  CHECK(t.keysPerWarp * t.warpsN == t.blockN);
  // 7 tokens x 4 heads = 28 rows: two m tiles, 2 x 2 warps.
  t = decodeTiling(decodeSpec(128, DType::BF16, 32, 8, 7));
  CHECK(t.rows == 28);
  CHECK(t.warpsM == 2);
  CHECK(t.warpsN == 2);
  // MQA 32/1 with 16 tokens: 512 rows do not fit; chunks of 8 heads.
  t = decodeTiling(decodeSpec(128, DType::BF16, 32, 1, 16));
  CHECK(t.headsPerBlock == 8);
  CHECK(t.headChunks == 4);
  CHECK(t.rows == 128);
  CHECK(t.warpsM == 4);
  CHECK(t.mTilesPerWarp == 2);
  CHECK(t.warpsN == 1);
  // Head dim 256: at most 64 rows, one m tile per warp.
  t = decodeTiling(decodeSpec(256, DType::BF16, 32, 1, 16));
  CHECK(t.rows == 64);
  CHECK(t.mTilesPerWarp == 1);
  for (int64_t d : {64, 128, 256})
    for (int64_t qLen = 1; qLen <= 16; ++qLen)
      for (auto [h, kv] : {std::pair<int64_t, int64_t>{32, 8},
                           {8, 1},
                           {4, 4},
                           {32, 1},
                           {64, 2}}) {
        DecodeSpec spec = decodeSpec(d, DType::BF16, h, kv, qLen);
        DecodeTiling x = decodeTiling(spec);
        INFO(spec.canonical());
        CHECK(x.rows <= x.rowsPadded);
        CHECK(x.rowsPadded <= 128);
        CHECK(x.headsPerBlock * x.headChunks == spec.groupSize());
        CHECK(x.warpsM * x.warpsN == 4);
        CHECK(x.keysPerWarp % 16 == 0);
        CHECK(x.sharedBytes(spec) <= 227u * 1024);
      }
}

TEST_CASE("decode: paged caches with pages shorter than the tile keep "
          "three buffers") {
  // Head dim 128, one token of GQA 32/8: 128-key tiles, two buffers.
  DecodeTiling contiguous =
      decodeTiling(decodeSpec(128, DType::BF16, 32, 8, 1));
  REQUIRE(contiguous.blockN == 128);
  CHECK(contiguous.stages == 2);
  for (int64_t page : {16, 32, 64}) {
    DecodeSpec spec = decodeSpec(128, DType::BF16, 32, 8, 1, page);
    DecodeTiling t = decodeTiling(spec);
    INFO(spec.canonical());
    // Pages of 16: 64-key tiles, two blocks of three buffers per SM.
    CHECK(t.blockN == (page == 16 ? 64 : 128));
    CHECK(t.stages == 3);
    CHECK(t.sharedBytes(spec) <= (page == 16 ? 113u : 227u) * 1024);
  }
  // Swizzled rows (unpadded) for cp.async copies, padded ones where the
  // tiles may be bulk copies.
  CHECK(contiguous.swizzledRows);
  CHECK(contiguous.rowElems(128) == 128);
  DecodeSpec bulk = decodeSpec(128, DType::BF16, 32, 8, 1);
  bulk.copyMode = 2;
  CHECK_FALSE(decodeTiling(bulk).swizzledRows);
  CHECK(decodeTiling(bulk).rowElems(128) == 136);
  // Pages of a whole tile or more, and an explicit stage count: as asked.
  CHECK(decodeTiling(decodeSpec(128, DType::BF16, 32, 8, 1, 128)).stages == 2);
  CHECK(decodeTiling(decodeSpec(128, DType::BF16, 32, 8, 1, 256)).stages == 2);
  DecodeSpec two = decodeSpec(128, DType::BF16, 32, 8, 1, 16);
  two.stages = 2;
  CHECK(decodeTiling(two).stages == 2);
}

TEST_CASE("decode: the split rule fills the GPU and stops at full waves") {
  DecodeSpec spec = decodeSpec(128, DType::BF16, 32, 8, 1);
  const int64_t resident = 2 * 132; // an H100 holding two blocks per SM
  // Enough (batch, KV head) blocks: no split.
  CHECK(chooseDecodeSplits(spec, 8, 65536, resident) == 4);
  CHECK(chooseDecodeSplits(spec, 32, 4096, resident) == 1);
  CHECK(chooseDecodeSplits(spec, 128, 2048, resident) == 1);
  // Batch 1: the 8 KV heads are split until a wave is full.
  CHECK(chooseDecodeSplits(spec, 1, 65536, resident) == 32);
  CHECK(chooseDecodeSplits(spec, 2, 65536, resident) == 16);
  // 2k keys are 16 tiles of 128 keys: 16 splits of one tile.
  CHECK(decodeTiling(spec).blockN == 128);
  CHECK(chooseDecodeSplits(spec, 1, 2048, resident) == 16);
  // 40 tiles in at most 33 splits: 2 tiles each, so 20 splits.
  CHECK(chooseDecodeSplits(spec, 1, 40 * 128, resident) == 20);
  // Never more splits than tiles of keys.
  CHECK(chooseDecodeSplits(spec, 1, 64, resident) == 1);
  CHECK(chooseDecodeSplits(spec, 1, 200, resident) <= 4);
  CHECK(chooseDecodeSplits(spec, 1, 1 << 20, resident) <= kMaxDecodeSplits);
  CHECK(decodeWorkspaceFloats(spec, 2, 1) == 0);
  CHECK(decodeWorkspaceFloats(spec, 2, 3) == 2 * 32 * 1 * 3 * 129);
}

TEST_CASE("decode: grids") {
  DecodeSpec spec = decodeSpec(128, DType::BF16, 32, 1, 16);
  LaunchGeometry g = decodeGeometry(spec, 3, 5);
  CHECK(g.gridX == 5 * 4);
  CHECK(g.gridY == 1);
  CHECK(g.gridZ == 3);
  CHECK(g.blockX == 128);
  LaunchGeometry c = decodeCombineGeometry(spec, 3);
  CHECK(c.gridX == (3 * 32 * 16 + 3) / 4);
  CHECK(c.blockX == kDecodeCombineThreads);
}

TEST_CASE("decode: the copy path and L2 hint knobs") {
  DecodeSpec spec = decodeSpec(128, DType::BF16, 32, 8, 1);
  DecodeSpec bulk = spec;
  bulk.copyMode = 2;
  DecodeSpec hinted = spec;
  hinted.evictFirst = 1;
  // Each knob is part of the kernel's name and cache key.
  CHECK(bulk.canonical() != spec.canonical());
  CHECK(hinted.canonical() != spec.canonical());
  CHECK(bulk.kernelName() != spec.kernelName());
  CHECK(hinted.kernelName() != bulk.kernelName());
  // Bulk copies: one bulk copy per key row on the stage's mbarrier, Q
  // still by cp.async; paged and at every head dim.
  for (int64_t d : {64, 128, 256})
    for (int64_t page : {0, 16}) {
      DecodeSpec s = decodeSpec(d, DType::BF16, 32, 8, 2, page);
      s.copyMode = 2;
      for (int64_t ef : {-1, 1}) {
        s.evictFirst = ef;
        INFO(s.canonical());
        auto kernel = compileDecodeKernel(s, forChip("sm_90a"));
        REQUIRE_MESSAGE(bool(kernel), llvm::toString(kernel.takeError()));
        const std::string &ptx = kernel->text;
        CHECK(llvm::StringRef(ptx).count(
                  "cp.async.bulk.shared::cluster.global.mbarrier::"
                  "complete_tx::bytes") >= 2);
        CHECK(ptx.find("mbarrier.try_wait.parity") != std::string::npos);
        CHECK(ptx.find("mbarrier.arrive.expect_tx") != std::string::npos);
        CHECK(ptx.find("cp.async.cg.shared.global") != std::string::npos);
        CHECK((ptx.find("createpolicy.fractional.L2::evict_first") !=
               std::string::npos) == (ef > 0));
        CHECK(ptx.find(".local") == std::string::npos);
        CHECK(kernel->info.sharedMemoryBytes ==
              decodeTiling(s).sharedBytes(s));
      }
    }
  // Before sm_90 there is no bulk copy: an error that says so.
  auto old = compileDecodeKernel(bulk, forChip("sm_80"));
  REQUIRE_FALSE(bool(old));
  CHECK(llvm::toString(old.takeError()).find("sm_90") != std::string::npos);
  // evict_first goes with bulk copies only (it faulted with cp.async).
  DecodeSpec cpAsyncHint = hinted;
  cpAsyncHint.copyMode = 1;
  CHECK(llvm::toString(cpAsyncHint.validate()).find("bulk copies") !=
        std::string::npos);
  hinted.copyMode = 0;
  CHECK(llvm::toString(hinted.validate()).find("evict_first") !=
        std::string::npos);
  // The mbarriers sit after the stages, 8 bytes each.
  DecodeTiling t = decodeTiling(spec);
  CHECK(t.sharedBytes(spec) == t.barrierOffset(spec) + 8 * t.stages);
  // Bad knob values are errors naming the knob.
  DecodeSpec bad = spec;
  bad.copyMode = 3;
  CHECK(llvm::toString(bad.validate()).find("copy mode") != std::string::npos);
  bad = spec;
  bad.evictFirst = 2;
  CHECK(llvm::toString(bad.validate()).find("evictFirst") !=
        std::string::npos);
}

TEST_CASE("decode: more split waves give more splits, never fewer") {
  DecodeSpec spec = decodeSpec(128, DType::BF16, 32, 8, 1);
  const int64_t resident = 2 * 132;
  CHECK(chooseDecodeSplits(spec, 1, 65536, resident, 1) == 32);
  CHECK(chooseDecodeSplits(spec, 1, 65536, resident, 2) == 64);
  for (int64_t batch : {1, 2, 8, 32, 128})
    for (int64_t len : {64, 2048, 16384, 131072})
      CHECK(chooseDecodeSplits(spec, batch, len, resident, 2) >=
            chooseDecodeSplits(spec, batch, len, resident, 1));
  // A full GPU stays unsplit whatever the waves.
  CHECK(chooseDecodeSplits(spec, 128, 2048, resident, 2) == 1);
}
