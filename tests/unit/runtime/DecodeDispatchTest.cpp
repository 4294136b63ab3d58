// Why: a decode kernel made without tile knobs serves each launch from the
// tuning database's decode bucket of its batch and longest KV length
// (DecodeTuning.h); these tests check, without a GPU, which variants a
// context attaches and that the launch's split count follows them.
#include "RuntimeTestUtil.h"

#include "flashjit/Autotune/DecodeTuning.h"
#include "flashjit/Decode.h"

#include <doctest/doctest.h>

using namespace flashjit;
using namespace flashjit::test;

namespace {
/// Fake device addresses: splitsFor() reads no memory.
void *fake(uintptr_t n) { return reinterpret_cast<void *>(n * 0x100000); }

DecodeArgs argsFor(const DecodeSpec &s, int64_t batch, int64_t kvLen) {
  DecodeArgs a;
  a.q = decodeTensor(fake(1), s.dtype, batch, s.qLen, s.numHeads, s.headDim);
  a.o = decodeTensor(fake(2), s.dtype, batch, s.qLen, s.numHeads, s.headDim);
  a.k = decodeTensor(fake(3), s.dtype, batch, kvLen, s.numKVHeads, s.headDim);
  a.v = decodeTensor(fake(4), s.dtype, batch, kvLen, s.numKVHeads, s.headDim);
  a.lse = LseRef::contiguous(static_cast<float *>(fake(6)), batch, s.numHeads,
                             s.qLen);
  a.kvLens = static_cast<const int32_t *>(fake(7));
  a.maxKvLen = kvLen;
  return a;
}

autotune::DecodeTuningEntry entry(int64_t batchMin,
                                  std::optional<int64_t> batchMax,
                                  int64_t kvMin, autotune::DecodeTunedConfig c) {
  autotune::DecodeTuningEntry e;
  e.bucket.batchMin = batchMin;
  e.bucket.batchMax = batchMax;
  e.bucket.kvMin = kvMin;
  e.config = c;
  e.gbps = 3000;
  return e;
}
} // namespace

TEST_CASE("decode: tuned buckets pick the kernel and the split waves") {
  TempDir dir;
  Warnings warnings;
  autotune::TuningDatabase db(sampleGpu(),
                              autotune::builtFlashjitVersion().str());
  // Batch [1, 4) from 32k keys: 64-key tiles in 3 stages; batch [4, 16):
  // the default kernel over two waves of splits.
  db.replaceDecode(entry(1, 4, 32768, {64, 3, 0, 1, 0, 1}));
  db.replaceDecode(entry(4, 16, 1, {0, 0, 0, 0, 0, 2}));
  std::string path =
      autotune::defaultDatabasePath(dir / "cache", sampleGpu().name);
  REQUIRE(errorText(db.save(path)) == "");
  auto ctx = makeContext(dir, warnings);

  DecodeSpec spec; // 32/8, d128, bf16, one token: the buckets' problem
  auto kernel = ctx->decodeKernel(spec);
  REQUIRE_MESSAGE(static_cast<bool>(kernel),
                  (kernel ? "" : llvm::toString(kernel.takeError())));
  const auto &variants = (*kernel)->tunedVariants();
  REQUIRE(variants.size() == 2);
  const DecodeKernel::TunedVariant *tile = nullptr, *waves = nullptr;
  for (const auto &v : variants)
    (v.kernel ? tile : waves) = &v;
  REQUIRE(tile);
  REQUIRE(waves);
  CHECK(tile->kernel->spec().blockN == 64);
  CHECK(tile->kernel->spec().stages == 3);
  CHECK(tile->batchMin == 1);
  CHECK(tile->batchMax == 4);
  CHECK(tile->kvMin == 32768);
  CHECK(tile->kvMax == 0);
  CHECK(waves->splitWaves == 2);
  CHECK(warnings.size() == 0);

  // Without a GPU the rule reasons with 2 x 132 resident blocks. Batch 1,
  // 40000 keys: 625 tiles of 64 keys in 33 splits (the tuned kernel), not
  // the default's 313 tiles of 128 in 32.
  CHECK((*kernel)->ruleSplits(1, 40000) == 32);
  CHECK((*kernel)->splitsFor(argsFor(spec, 1, 40000)) == 33);
  // Batch 1 below 32k keys: no bucket, the default.
  CHECK((*kernel)->splitsFor(argsFor(spec, 1, 20000)) ==
        (*kernel)->ruleSplits(1, 20000));
  // Batch 4: two waves, twice the default's splits.
  CHECK((*kernel)->ruleSplits(4, 65536) == 8);
  CHECK((*kernel)->splitsFor(argsFor(spec, 4, 65536)) == 16);
  // Batch 32: no bucket.
  CHECK((*kernel)->splitsFor(argsFor(spec, 32, 8192)) == 1);
  // An explicit split count still wins.
  DecodeArgs forced = argsFor(spec, 1, 40000);
  forced.numSplits = 5;
  CHECK((*kernel)->splitsFor(forced) == 5);

  // A spec with tile knobs, or another problem, takes no tuned variant.
  DecodeSpec knobs = spec;
  knobs.blockN = 128;
  auto named = ctx->decodeKernel(knobs);
  REQUIRE(static_cast<bool>(named));
  CHECK((*named)->tunedVariants().empty());
  DecodeSpec twoTokens = spec;
  twoTokens.qLen = 2;
  auto other = ctx->decodeKernel(twoTokens);
  REQUIRE(static_cast<bool>(other));
  CHECK((*other)->tunedVariants().empty());
}

TEST_CASE("decode: pages of 16 split for one block per SM") {
  TempDir dir;
  Warnings warnings;
  auto ctx = makeContext(dir, warnings);
  DecodeSpec spec; // 32/8, d128, bf16, one token
  spec.pageSize = 16;
  // Two blocks of the 64-key, three-stage tiles fit an SM, but the rule
  // plans a wave of one per SM: without a GPU, 132 blocks over 8 KV heads.
  CHECK(decodeTiling(spec).blockN == 64);
  CHECK(decodeTiling(spec).splitBlocksPerSM == 1);
  auto kernel = ctx->decodeKernel(spec);
  REQUIRE_MESSAGE(static_cast<bool>(kernel),
                  (kernel ? "" : llvm::toString(kernel.takeError())));
  CHECK((*kernel)->ruleSplits(1, 16384) == 16);
  CHECK((*kernel)->ruleSplits(1, 131072) == 16);
  // 2k keys are 32 tiles of 64: 16 splits of two.
  CHECK((*kernel)->ruleSplits(1, 2048) == 16);
  CHECK((*kernel)->ruleSplits(8, 16384) == 2);
  CHECK((*kernel)->ruleSplits(32, 16384) == 1);
  // Pages of 64 keep the occupancy's blocks (one of the 128-key tiles).
  spec.pageSize = 64;
  CHECK(decodeTiling(spec).splitBlocksPerSM == 0);
}
