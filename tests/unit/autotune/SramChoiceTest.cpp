//===- SramChoiceTest.cpp - choices that shared memory decides ------------===//
// Why: the heuristic must give a GPU with more shared memory larger tiles or
// deeper pipelines where a template's resources allow it. cuda_core's large
// tiles run out of registers first (HeuristicTest), so this test uses a
// stand-in for the planned pipelined tensor-core templates: a Q tile plus a
// ring of `stages` K/V tiles in shared memory and a modest register budget,
// so that shared memory is what separates the T4, A10, A100 and H100.
#include "AutotuneTestUtil.h"

#include "flashjit/Autotune/Heuristic.h"

#include "mlir/IR/Location.h"

using namespace flashjit;
using namespace flashjit::autotune;
using namespace flashjit::autotune::testing;

namespace {

/// block_m {64, 128} x block_n {32, 64, 128} x stages {1, 2, 3}, block_m/16
/// warps; shared = (block_m * d + stages * 2 * block_n * d) * 2 bytes;
/// 96 registers per thread.
class PipelinedTestTemplate final : public KernelTemplate {
public:
  llvm::StringRef family() const override { return "test_pipelined"; }
  int minComputeCapability() const override { return 80; }
  std::vector<int64_t> headDims() const override { return {64, 128, 256}; }
  llvm::Error checkConfig(const AttentionSpec &,
                          const TileConfig &config) const override {
    if (config.family != family() || config.warps != config.blockM / 16)
      return llvm::createStringError("test_pipelined: not one of its configs");
    return llvm::Error::success();
  }
  TemplateResources resources(const AttentionSpec &spec,
                              const TileConfig &config) const override {
    TemplateResources r;
    r.threadsPerBlock = static_cast<unsigned>(config.warps * 32);
    r.sharedMemoryBytes = static_cast<unsigned>(
        (config.blockM * spec.headDim +
         config.stages * 2 * config.blockN * spec.headDim) *
        2);
    r.registersPerThread = 96;
    return r;
  }
  std::vector<TileConfig> candidates(const AttentionSpec &) const override {
    std::vector<TileConfig> out;
    for (int64_t blockM : {64, 128})
      for (int64_t blockN : {32, 64, 128})
        for (int64_t stages : {1, 2, 3})
          out.push_back(
              {"test_pipelined", blockM, blockN, stages, blockM / 16});
    return out;
  }

protected:
  void emit(mlir::OpBuilder &, mlir::Location, const AttentionSpec &,
            const TileConfig &, llvm::StringRef,
            const ModRegions &) const override {}
};

const PipelinedTestTemplate kPipelined;

struct Row {
  const char *gpu;
  int64_t headDim;
  int64_t blockM, blockN, stages;
};

// Derived by hand. Every config with block_m 128 has 8 warps, enough at one
// block per SM, and 1024 or more blocks fill every GPU; so the largest
// block_m that fits wins, then the largest block_n, then the most stages.
// With Q = 128 * d * 2 bytes and K/V = stages * block_n * d * 4 bytes, the
// limit per block (64 / 99 / 163 / 227 KB) picks:
//  d=64  (Q 16 KB, K/V stages * block_n * 256 B): stages * block_n <= 192 /
//        332 / 588 / 844 -> n128 s1 / n128 s2 / n128 s3 / n128 s3.
//  d=128 (Q 32 KB, stages * block_n * 512 B): <= 64 / 134 / 262 / 390 ->
//        n64 s1 / n128 s1 / n128 s2 / n128 s3.
//  d=256 (Q 64 KB, stages * block_n * 1 KB): the T4 cannot hold a 128-row
//        Q tile with any K/V, so m64 (Q 32 KB): n32 s1; then <= 35 / 99 /
//        163 -> m128 n32 s1 / m128 n64 s1 / m128 n128 s1.
const Row kTable[] = {
    {"t4", 64, 128, 128, 1},         {"t4", 128, 128, 64, 1},
    {"t4", 256, 64, 32, 1},          {"a10", 64, 128, 128, 2},
    {"a10", 128, 128, 128, 1},       {"a10", 256, 128, 32, 1},
    {"l4", 64, 128, 128, 2},         {"l4", 128, 128, 128, 1},
    {"l4", 256, 128, 32, 1},         {"rtx4090", 64, 128, 128, 2},
    {"rtx4090", 128, 128, 128, 1},   {"rtx4090", 256, 128, 32, 1},
    {"a100-40gb", 64, 128, 128, 3},  {"a100-40gb", 128, 128, 128, 2},
    {"a100-40gb", 256, 128, 64, 1},  {"a100", 64, 128, 128, 3},
    {"a100", 128, 128, 128, 2},      {"a100", 256, 128, 64, 1},
    {"h100", 64, 128, 128, 3},       {"h100", 128, 128, 128, 3},
    {"h100", 256, 128, 128, 1},      {"h100-pcie", 64, 128, 128, 3},
    {"h100-pcie", 128, 128, 128, 3}, {"h100-pcie", 256, 128, 128, 1},
    {"h200", 64, 128, 128, 3},       {"h200", 128, 128, 128, 3},
    {"h200", 256, 128, 128, 1},
};

TileConfig choose(const DeviceModel &device, int64_t headDim, bool causal) {
  auto choice =
      chooseConfigForTemplate(kPipelined, benchSpec(headDim, causal), device);
  REQUIRE_MESSAGE(static_cast<bool>(choice),
                  (choice ? "" : llvm::toString(choice.takeError())));
  checkReportsAgainstDevice(choice->considered, device);
  return choice->config;
}

} // namespace

TEST_CASE("a pipelined template's choice follows each GPU's shared memory") {
  for (const Row &row : kTable)
    for (bool causal : {false, true}) {
      CAPTURE(row.gpu);
      CAPTURE(row.headDim);
      CAPTURE(causal);
      TileConfig config = choose(knownGPU(row.gpu), row.headDim, causal);
      MESSAGE((std::string(row.gpu) + " d" + std::to_string(row.headDim) +
               (causal ? " causal: " : ": ") + config.canonical()));
      CHECK(config.blockM == row.blockM);
      CHECK(config.blockN == row.blockN);
      CHECK(config.stages == row.stages);
      CHECK(config.warps == row.blockM / 16);
    }
}

TEST_CASE("T4 and H100 get different configs for every head dim") {
  DeviceModel t4 = knownGPU("t4"), h100 = knownGPU("h100");
  for (int64_t headDim : {64, 128, 256}) {
    CAPTURE(headDim);
    TileConfig onT4 = choose(t4, headDim, false);
    TileConfig onH100 = choose(h100, headDim, false);
    CHECK(onT4 != onH100);

    // Shared memory alone explains it: an H100 model cut to the T4's shared
    // memory (its SMs, registers and threads unchanged) picks the T4's config.
    DeviceModel cut = h100;
    cut.name = "H100 with 64 KB shared memory";
    cut.sharedMemoryPerSM = t4.sharedMemoryPerSM;
    cut.sharedMemoryPerBlockOptin = t4.sharedMemoryPerBlockOptin;
    cut.reservedSharedMemoryPerBlock = 0;
    CHECK(choose(cut, headDim, false) == onT4);
  }
}

TEST_CASE("configs over the T4's shared memory are rejected with the sizes") {
  DeviceModel t4 = knownGPU("t4");
  AttentionSpec spec = benchSpec(128, false);
  CandidateReport report = evaluateConfig(
      kPipelined, spec, {"test_pipelined", 128, 128, 2, 8}, t4, {});
  // (128 * 128 + 2 * 2 * 128 * 128) * 2 bytes = 160 KB.
  CHECK(report.rejection ==
        "needs 160 KB of shared memory, the Tesla T4 allows 64 KB per block");
  auto h100 =
      evaluateConfig(kPipelined, spec, {"test_pipelined", 128, 128, 2, 8},
                     knownGPU("h100"), {});
  CHECK(h100.fits());
  CHECK(h100.blocksPerSM == 1);
  CHECK(h100.limitedBy == OccupancyLimit::SharedMemory);

  // The template's own refusal is reported as such.
  CandidateReport odd = evaluateConfig(
      kPipelined, spec, {"test_pipelined", 128, 128, 2, 4}, t4, {});
  CHECK(odd.rejection.find("the test_pipelined template rejects it") == 0);
}
