//===- TemplateConfigTest.cpp - every tile config of every template -------===//
// Why: the heuristic and the tuner may pick any candidate a template
// offers, so each one (not only today's default) must be exact: odd
// lengths, both dtypes, causal and not, against the float64 reference.
#include "GpuTestUtil.h"

#include "flashjit/Templates/KernelTemplate.h"

#include <cstdlib>

using namespace flashjit;
using namespace flashjit::test;

namespace {

void checkConfig(const AttentionSpec &spec, const TileConfig &config,
                 int64_t seqlen, int64_t batch = 1,
                 std::optional<double> scale = std::nullopt) {
  CheckOptions o;
  o.batch = batch;
  o.seqlenQ = seqlen;
  o.seqlenK = seqlen;
  o.seed = freshSeed();
  o.rowsPerHead = 32;
  o.scale = scale;
  INFO(describe(spec, o) << " config " << config.canonical());
  auto kernel = gpuContext().compile(spec, config);
  REQUIRE_MESSAGE(bool(kernel), llvm::toString(kernel.takeError()));
  CHECK((*kernel)->info().config == config);
  auto report = runAndCheck(**kernel, o);
  REQUIRE_MESSAGE(bool(report), llvm::toString(report.takeError()));
  INFO(report->summary());
  CHECK(report->nonFinite == 0);
  CHECK(report->passed);
}

/// The problem each config is checked on: f16 causal, bf16 not, GQA 2/1.
AttentionSpec configSpec(int64_t headDim, bool causal) {
  AttentionSpec spec;
  spec.headDim = headDim;
  spec.causal = causal;
  spec.dtype = causal ? DType::F16 : DType::BF16;
  spec.numHeads = 2;
  spec.numKVHeads = 1;
  return spec;
}

/// FLASHJIT_TEST_FAMILIES (comma-separated families, e.g.
/// wgmma_persistent,wgmma) narrows the case to those templates, to check
/// the configs a change touched in one short run; unset, every template.
bool familySelected(llvm::StringRef family) {
  const char *list = std::getenv("FLASHJIT_TEST_FAMILIES");
  if (!list || !*list)
    return true;
  llvm::SmallVector<llvm::StringRef> families;
  llvm::StringRef(list).split(families, ',', -1, /*KeepEmpty=*/false);
  return llvm::is_contained(families, family);
}

/// FLASHJIT_TEST_CAUSAL (0 or 1) narrows the case to unmasked or causal
/// specs, e.g. after a change to the causal kernels alone; unset, both.
bool causalSelected(bool causal) {
  const char *only = std::getenv("FLASHJIT_TEST_CAUSAL");
  if (!only || !*only)
    return true;
  return causal == (llvm::StringRef(only) == "1");
}

} // namespace

TEST_CASE("every candidate config of every template is exact") {
  const Target &target = gpuContext().target();
  for (const KernelTemplate *tmpl : allTemplates())
    for (int64_t d : tmpl->measurementOnly() || !familySelected(tmpl->family())
                         ? std::vector<int64_t>{}
                         : tmpl->headDims())
      for (bool causal : {false, true}) {
        if (!causalSelected(causal))
          continue;
        AttentionSpec spec = configSpec(d, causal);
        if (llvm::Error err = tmpl->supports(spec, target)) {
          llvm::consumeError(std::move(err));
          continue;
        }
        for (const TileConfig &config : tmpl->candidates(spec)) {
          // Configs beyond the register file are never chosen.
          if (tmpl->resources(spec, config).registersPerThread > 255)
            continue;
          checkConfig(spec, config, causal ? 333 : 200);
          // Scores whose later tiles outgrow the first tile's max past
          // any bound (CorrectnessTest's "scores far apart").
          checkConfig(spec, config, causal ? 333 : 200, 1, /*scale=*/4.0);
          // A persistent grid with more tiles than blocks: each block
          // takes several, with the ring and the Q rows reused across them
          // (4 x 2 x 33 or more tiles against 132 blocks on an H100).
          if (tmpl->persistent())
            checkConfig(spec, config, 4097, /*batch=*/4);
        }
      }
}

// block_m 64 (one consumer warpgroup, two blocks per SM) is no candidate:
// it runs slower than two or three consumers at every measured length
// (docs/performance.md). A caller may still pin it (--config, a tuning
// database), so it must build and be exact, in both grids.
TEST_CASE("block_m 64 configs (two blocks per SM) are exact") {
  if (gpuContext().target().computeCapability < 90)
    return;
  for (llvm::StringRef family : {"wgmma", "wgmma_persistent"})
    for (int64_t d : {64, 128})
      for (bool causal : {false, true}) {
        AttentionSpec spec = configSpec(d, causal);
        TileConfig config{family.str(), 64, d == 64 ? 128 : 64, 2, 8};
        checkConfig(spec, config, causal ? 333 : 200);
        checkConfig(spec, config, causal ? 333 : 200, 1, /*scale=*/4.0);
        checkConfig(spec, config, 4097, /*batch=*/4);
      }
}
