//===- NanGpuTest.cpp - what a NaN in V does, in every family -------------===//
// Why: a NaN in an input must reach exactly the outputs the documented
// semantics name (docs/rules.md, "NaN in the inputs"). In V at key j,
// column c: column c of every row that attends key j; column c of a row
// hidden from j by the causal mask only when its query block shares j's key
// tile (the tile's product multiplies the masked P = 0 by the NaN, as in
// PyTorch's flash backend); never another column, sequence or head, never
// the LSE. In K at key j: the whole rows (O and LSE) that attend j. In Q at
// row i: row i. Checked in every family against the float64 reference,
// row by row.
#include "GpuProblem.h"

using namespace flashjit;
using namespace flashjit::test;

namespace {
const char *const kFamilies[] = {"wgmma", "wgmma_persistent", "wgmma_cluster",
                                 "mma_sync", "cuda_core"};
} // namespace

TEST_CASE("a NaN in Q, K or V reaches the rows that attend it, and no "
          "others outside its tile") {
  constexpr int64_t kKey = 300, kCol = 5, kSeqlen = 1000;
  for (bool causal : {false, true})
    for (const char *family : kFamilies) {
      CAPTURE(causal);
      CAPTURE(family);
      AttentionSpec spec;
      spec.headDim = 128;
      spec.numHeads = spec.numKVHeads = 2;
      spec.causal = causal;
      auto kernel = compileFamily(spec, family);
      if (!kernel)
        continue;
      GpuProblem p(spec, 2, kSeqlen, freshSeed());
      // Sequence 1, head 0, key 300: inside the sequence. Sequence 0, head
      // 1, key 0: in memory right after the last key of head 0, which a
      // tile reading past the sequence's end would pick up.
      p.poisonInput('v', 1, 0, kKey, kCol);
      p.poisonInput('v', 0, 1, 0, 9);
      // Key 600 of sequence 1, head 1; query row 10 of sequence 0, head 0.
      p.poisonInput('k', 1, 1, 600, 3);
      p.poisonInput('q', 0, 0, 10, 7);
      const auto &ref = p.reference();
      auto out = p.outputs();
      out->poison(nullptr);
      REQUIRE_FALSE(bool(kernel->forward(p.args(*out))));
      {
        auto scope = llvm::cantFail(ScopedContext::enterDevice(gpuDriver(), 0));
        REQUIRE_FALSE(bool(FLASHJIT_CU(gpuDriver(), cuCtxSynchronize)));
      }
      std::vector<uint16_t> o;
      std::vector<float> lse;
      p.download(*out, o, lse);
      const TileConfig &config = kernel->info().config;
      // Rows whose query block ends before key 300's key tile begins never
      // take that tile.
      const int64_t tileStart = kKey / config.blockN * config.blockN;
      int64_t missingNaN = 0, strayNaN = 0, hiddenNaN = 0, lseBad = 0;
      int64_t firstHidden = -1, lastHidden = -1;
      double errSq = 0, refSq = 0;
      const int64_t d = spec.headDim;
      for (size_t r = 0; r < ref.size(); ++r) {
        const int64_t b = r / (2 * kSeqlen), h = (r / kSeqlen) % 2,
                      i = r % kSeqlen;
        // Rows whose scores hold a NaN: entirely NaN, O and LSE.
        const bool nanScores = (b == 0 && h == 0 && i == 10) ||
                               (b == 1 && h == 1 && (!causal || i >= 600));
        if (nanScores) {
          for (int64_t c = 0; c < d; ++c)
            missingNaN += !std::isnan(bitsToFloat(spec.dtype, o[r * d + c]));
          missingNaN += !std::isnan(lse[r]);
          continue;
        }
        for (int64_t c = 0; c < d; ++c) {
          const double want = ref[r].out[c];
          const double got = bitsToFloat(spec.dtype, o[r * d + c]);
          if (std::isnan(want)) {
            missingNaN += !std::isnan(got);
            continue;
          }
          if (std::isnan(got)) {
            const bool hiddenFromKey =
                causal && b == 1 && h == 0 && c == kCol && i < kKey;
            if (!hiddenFromKey) {
              ++strayNaN;
              continue;
            }
            ++hiddenNaN;
            if (firstHidden < 0)
              firstHidden = i;
            lastHidden = i;
            // Allowed only in a query block that reaches the key's tile.
            const int64_t blockEnd =
                i / config.blockM * config.blockM + config.blockM - 1;
            strayNaN += blockEnd < tileStart;
            continue;
          }
          errSq += (got - want) * (got - want);
          refSq += want * want;
        }
        lseBad += !(std::fabs(lse[r] - ref[r].lse) <=
                    1e-5 * std::max(1.0, std::fabs(ref[r].lse)));
      }
      MESSAGE(family << (causal ? " causal " : " ") << config.canonical()
                     << ": rows hidden from the NaN key that came out NaN: "
                     << (hiddenNaN ? std::to_string(firstHidden) + ".." +
                                         std::to_string(lastHidden)
                                   : std::string("none")));
      CHECK(missingNaN == 0);
      CHECK(strayNaN == 0);
      CHECK(lseBad == 0);
      CHECK(std::sqrt(errSq / refSq) <= checkTolerance(spec.dtype));
    }
}
