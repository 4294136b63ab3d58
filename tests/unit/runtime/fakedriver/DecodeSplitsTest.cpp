//===- DecodeSplitsTest.cpp - the split rule on a loaded decode kernel ----===//
// Why: the split rule plans a wave of the blocks the device holds at once,
// which a loaded module learns from the driver's occupancy, except where a
// tiling plans fewer per SM (DecodeTiling::splitBlocksPerSM: pages of 16);
// the fake driver (FakeCudaDriver.cpp) answers the occupancy a test sets,
// so both paths run without a GPU.
#include "FakeDriverUtil.h"

#include "flashjit/Decode.h"

using namespace flashjit;
using namespace flashjit::test;

TEST_CASE("decode splits: the device's blocks per SM, capped by the tiling") {
  TempDir dir;
  setCurrent(primary(0));
  auto ctx = contextOn(0, dir);
  // Two blocks per SM on the fake's 132 SMs (set back for the next test).
  fake().setBlocksPerSM(2);
  struct Reset {
    ~Reset() { fake().setBlocksPerSM(1); }
  } reset;
  DecodeSpec contiguous; // 32/8, d128, bf16, one token
  auto wide = ctx->decodeKernel(contiguous);
  REQUIRE_MESSAGE(bool(wide), llvm::toString(wide.takeError()));
  DecodeSpec paged = contiguous;
  paged.pageSize = 16;
  auto shortPages = ctx->decodeKernel(paged);
  REQUIRE_MESSAGE(bool(shortPages), llvm::toString(shortPages.takeError()));
  // The contiguous cache's tiling takes what the device holds: 264 blocks
  // over 8 KV heads, 33 splits of 128 tiles of 128 keys, lowered to the 32
  // that give the same tiles per split.
  CHECK((*wide)->ruleSplits(1, 16384) == 32);
  // Pages of 16 plan one block per SM: 132 over 8, 16 splits of 256 tiles.
  CHECK((*shortPages)->ruleSplits(1, 16384) == 16);
  CHECK((*shortPages)->ruleSplits(8, 16384) == 2);
  // From batch 14 (112 blocks, 80% of a wave of 132) neither splits.
  CHECK((*wide)->ruleSplits(32, 16384) == 1);
  CHECK((*shortPages)->ruleSplits(14, 16384) == 1);
}
