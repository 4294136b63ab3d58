//===- HeuristicTest.cpp - the heuristic's choices per known GPU ----------===//
// Why: the choice the compiler builds without a tuning database must be the
// one the rules give; the expected configs below are derived by hand from
// the templates' resources and the device limits, so a change in either
// shows up here as a changed table row.
#include "AutotuneTestUtil.h"

#include "flashjit/Autotune/Heuristic.h"
#include "flashjit/Templates/WgmmaForward.h"

#include <nlohmann/json.hpp>

#include <set>
#include <string>

using namespace flashjit;
using namespace flashjit::autotune;
using namespace flashjit::autotune::testing;

namespace {

const KernelTemplate &cudaCore() { return templateOf("cuda_core"); }

struct ExpectedChoice {
  const char *gpu;
  int64_t headDim;
  int64_t blockM, blockN, warps;
  unsigned blocksPerSM;
  int64_t gridBlocks;
};

// cuda_core, bf16, heads = 2048 / d, batch 8 x seqlen 2048 (the default hint).
// Its resources: threads = block_m * d/32, shared = 2 * block_n * (d/32) * 40
// * 2 bytes (K and V tiles, padded slices), registers = 104 + block_n
// (120 / 136 / 168 for block_n 16 / 32 / 64); candidates block_m {32, 64, 128}
// x block_n {16, 32, 64}, 32 to 1024 threads.
// The register file (64K, 16K per SM quarter) decides before shared memory:
//  d=64:  block_m 128 is 256 threads; every block_n fits (168 x 256 = 43008
//         registers). 1 block/SM (12 warps of 168 registers fit, 2 blocks of
//         8 need 16) = 8 warps, which is enough, so the larger block_n 64
//         wins: m128 n64 w8. Shared 20 KB fits even the T4. Grid: 8 x 32
//         heads x 16 = 4096 blocks.
//  d=128: block_m 128 is 512 threads; only block_n 16 fits (120 x 512 =
//         61440; 136 x 512 = 69632 > 65536): m128 n16 w16, 1 block/SM.
//         Grid: 8 x 16 x 16 = 2048.
//  d=256: block_m 128 is 1024 threads: 120 x 1024 registers never fit;
//         block_m 64 (512 threads) fits only with block_n 16: m64 n16 w16.
//         Grid: 8 x 8 x 32 = 2048.
// So every GPU gets the same config from this template: registers, not
// shared memory, bound its large tiles (SramChoiceTest shows a template whose
// choice shared memory decides).
const ExpectedChoice kCudaCoreTable[] = {
    {"t4", 64, 128, 64, 8, 1, 4096},
    {"t4", 128, 128, 16, 16, 1, 2048},
    {"t4", 256, 64, 16, 16, 1, 2048},
    {"a10", 64, 128, 64, 8, 1, 4096},
    {"a10", 128, 128, 16, 16, 1, 2048},
    {"a10", 256, 64, 16, 16, 1, 2048},
    {"a100-40gb", 64, 128, 64, 8, 1, 4096},
    {"a100-40gb", 128, 128, 16, 16, 1, 2048},
    {"a100-40gb", 256, 64, 16, 16, 1, 2048},
    {"a100", 64, 128, 64, 8, 1, 4096},
    {"a100", 128, 128, 16, 16, 1, 2048},
    {"a100", 256, 64, 16, 16, 1, 2048},
    {"l4", 64, 128, 64, 8, 1, 4096},
    {"l4", 128, 128, 16, 16, 1, 2048},
    {"l4", 256, 64, 16, 16, 1, 2048},
    {"rtx4090", 64, 128, 64, 8, 1, 4096},
    {"rtx4090", 128, 128, 16, 16, 1, 2048},
    {"rtx4090", 256, 64, 16, 16, 1, 2048},
    {"h100", 64, 128, 64, 8, 1, 4096},
    {"h100", 128, 128, 16, 16, 1, 2048},
    {"h100", 256, 64, 16, 16, 1, 2048},
    {"h100-pcie", 64, 128, 64, 8, 1, 4096},
    {"h100-pcie", 128, 128, 16, 16, 1, 2048},
    {"h100-pcie", 256, 64, 16, 16, 1, 2048},
    {"h200", 64, 128, 64, 8, 1, 4096},
    {"h200", 128, 128, 16, 16, 1, 2048},
    {"h200", 256, 64, 16, 16, 1, 2048},
};

std::string errorOf(llvm::Error err) { return llvm::toString(std::move(err)); }

} // namespace

TEST_CASE("cuda_core choices per known GPU and head dim") {
  CHECK(std::size(kCudaCoreTable) == knownGPUs().size() * 3);
  for (const ExpectedChoice &row : kCudaCoreTable) {
    for (bool causal : {false, true}) {
      DeviceModel device = knownGPU(row.gpu);
      AttentionSpec spec = benchSpec(row.headDim, causal);
      CAPTURE(row.gpu);
      CAPTURE(spec.canonical());
      auto choice = chooseConfigForTemplate(cudaCore(), spec, device);
      REQUIRE_MESSAGE(static_cast<bool>(choice),
                      (choice ? "" : errorOf(choice.takeError())));
      MESSAGE((std::string(row.gpu) + " d" + std::to_string(row.headDim) +
               (causal ? " causal: " : ": ") + choice->config.canonical()));
      CHECK(choice->config.family == "cuda_core");
      CHECK(choice->config.blockM == row.blockM);
      CHECK(choice->config.blockN == row.blockN);
      CHECK(choice->config.stages == 1);
      CHECK(choice->config.warps == row.warps);
      const CandidateReport &best = choice->considered.front();
      CHECK(best.config == choice->config);
      CHECK(best.blocksPerSM == row.blocksPerSM);
      CHECK(best.limitedBy == OccupancyLimit::Registers);
      CHECK(best.gridBlocks == row.gridBlocks);
      CHECK(best.fillsGpu(device));
      checkReportsAgainstDevice(choice->considered, device);

      // The full path (every template, the device's own target) agrees,
      // except where the device cannot run the template at all.
      auto full = chooseConfig(spec, device);
      if (device.computeCapability() < cudaCore().minComputeCapability()) {
        CHECK(choice->modelOnly);
        CHECK(choice->why.find("Model only") == 0);
        REQUIRE_FALSE(static_cast<bool>(full));
        std::string message = errorOf(full.takeError());
        CHECK(message.find("no tile config runs") != std::string::npos);
        CHECK(message.find("skipped cuda_core: compute capability 7.5 is "
                           "not supported") != std::string::npos);
      } else {
        CHECK_FALSE(choice->modelOnly);
        REQUIRE(static_cast<bool>(full));
        // A tensor-core template ranks first where it runs (wgmma on
        // sm_90a for its head dims: persistent when causal, in clusters
        // without a mask at head dim 128; else mma_sync); the cuda_core
        // choice is still among the candidates considered. Only the wgmma
        // families are ever left out (they need sm_90a).
        bool hopper = device.computeCapability() == 90;
        std::string wgmmaFamily = spec.causal             ? "wgmma_persistent"
                                  : spec.headDim == 128 ? "wgmma_cluster"
                                                        : "wgmma";
        CHECK(full->config.family == (hopper ? wgmmaFamily : "mma_sync"));
        for (const std::string &skipped : full->skippedTemplates)
          CHECK(skipped.find("wgmma") == 0);
        bool considered = false;
        for (const CandidateReport &r : full->considered)
          considered = considered || r.config == choice->config;
        CHECK(considered);
        // wgmma's causal tiles cross the diagonal whole (block_n divides
        // block_m); head dim 64 takes three consumers.
        if (causal && hopper)
          CHECK(full->config.blockM % full->config.blockN == 0);
        if (causal && hopper && spec.headDim == 64)
          CHECK(full->config.canonical() ==
                "wgmma_persistent:m192:n96:s2:w16");
      }
    }
  }
}

TEST_CASE("mma_sync on the H100: two m tiles per warp, one buffer at the "
          "register cap") {
  DeviceModel h100 = knownGPU("h100");
  struct Row {
    int64_t headDim, blockM, blockN, stages, warps;
  };
  // Measured on an H100 (autotune, bench/results): these are the fastest
  // or within 5% of it for non-causal bf16 at seqlen 2k-16k.
  for (Row row : {Row{64, 128, 64, 2, 4}, Row{128, 128, 48, 1, 4}}) {
    auto choice = chooseConfigForTemplate(templateOf("mma_sync"),
                                          benchSpec(row.headDim, false), h100);
    REQUIRE(static_cast<bool>(choice));
    CAPTURE(choice->config.canonical());
    CHECK(choice->config ==
          TileConfig{"mma_sync", row.blockM, row.blockN, row.stages,
                     row.warps});
    CHECK(choice->considered.front().resources.queryRowsPerWarp == 32);
  }
}

TEST_CASE("shared memory bounds cuda_core candidates on the T4, not the H100") {
  DeviceModel t4 = knownGPU("t4"), h100 = knownGPU("h100");
  const KernelTemplate &tmpl = cudaCore();
  TileConfig m32n64{"cuda_core", 32, 64, 1, 0};

  // d=256, block_n 64: 2 x 64 x 8 slices x 40 x 2 bytes = 80 KB of K/V tiles.
  AttentionSpec d256 = benchSpec(256, false);
  m32n64.warps = 8;
  CandidateReport onT4 = evaluateConfig(tmpl, d256, m32n64, t4, {});
  CHECK(onT4.resources.sharedMemoryBytes == 80 * 1024);
  CHECK(onT4.rejection ==
        "needs 80 KB of shared memory, the Tesla T4 allows 64 KB per block");
  CandidateReport onH100 = evaluateConfig(tmpl, d256, m32n64, h100, {});
  CHECK(onH100.fits());
  CHECK(onH100.blocksPerSM == 1);

  // d=128, block_n 64: 40 KB; the T4 holds one such block, the H100 five by
  // shared memory but three by registers (3 x 4 warps x 168 x 32 <= 64K).
  AttentionSpec d128 = benchSpec(128, false);
  m32n64.warps = 4;
  onT4 = evaluateConfig(tmpl, d128, m32n64, t4, {});
  REQUIRE(onT4.fits());
  CHECK(onT4.blocksPerSM == 1);
  CHECK(onT4.limitedBy == OccupancyLimit::SharedMemory);
  onH100 = evaluateConfig(tmpl, d128, m32n64, h100, {});
  REQUIRE(onH100.fits());
  CHECK(onH100.blocksPerSM == 3);
  CHECK(onH100.limitedBy == OccupancyLimit::Registers);
}

TEST_CASE("every candidate reported as fitting fits, on every known GPU") {
  for (const KnownGPU &gpu : knownGPUs())
    for (int64_t headDim : {32, 64, 128, 256})
      for (ProblemShape shape :
           {ProblemShape{}, ProblemShape{1, 128}, ProblemShape{2, 32768}}) {
        CAPTURE(gpu.key);
        CAPTURE(headDim);
        auto reports = evaluateTemplate(cudaCore(), benchSpec(headDim, true),
                                        gpu.model, shape);
        REQUIRE(static_cast<bool>(reports));
        CHECK(reports->size() >= 3);
        checkReportsAgainstDevice(*reports, gpu.model);
      }
}

TEST_CASE("waves, tail and K/V traffic of a candidate") {
  DeviceModel h100 = knownGPU("h100");
  TileConfig config{"cuda_core", 128, 16, 1, 16};
  CandidateReport c =
      evaluateConfig(cudaCore(), benchSpec(128, false), config, h100, {});
  REQUIRE(c.fits());
  // 2048 blocks over 132 SMs x 1 block: 15.52 waves, the 16th 52% full.
  CHECK(c.waves == doctest::Approx(2048.0 / 132));
  CHECK(c.lastWaveFill == doctest::Approx(68.0 / 132));
  CHECK(c.tailEfficiency == doctest::Approx(2048.0 / 132 / 16));
  CHECK(c.activeWarps == 132 * 16);
  CHECK(c.occupancy == doctest::Approx(16.0 / 64));
  // Every block of every head reads all 2048 K and V rows of 128 bf16.
  CHECK(c.kvBytesRead == doctest::Approx(2048.0 * 2048 * 2 * 128 * 2));
  CandidateReport causal =
      evaluateConfig(cudaCore(), benchSpec(128, true), config, h100, {});
  // Causal: block i reads (i + 1) * 128 rows: 136 / 256 of the full read.
  CHECK(causal.kvBytesRead == doctest::Approx(c.kvBytesRead * 136 / 256));
}

TEST_CASE("the ranking rules apply in order") {
  DeviceModel h100 = knownGPU("h100");
  HeuristicOptions options;
  auto report = [&](int64_t blockM, int64_t blockN, unsigned blocksPerSM,
                    int64_t grid, unsigned warps) {
    CandidateReport r;
    r.config = {"cuda_core", blockM, blockN, 1, warps};
    r.resources.threadsPerBlock = warps * 32;
    r.blocksPerSM = blocksPerSM;
    r.gridBlocks = grid;
    r.activeWarps =
        std::min<int64_t>(grid, int64_t(h100.smCount) * blocksPerSM) * warps;
    return r;
  };
  // A full wave beats a larger tile that leaves SMs idle.
  CandidateReport small = report(64, 64, 1, 264, 4);
  CandidateReport idle = report(128, 64, 1, 100, 8);
  CHECK(ranksAbove(small, idle, h100, options));
  CHECK(decidingRule(small, idle, h100, options) == RankingRule::FillsGpu);
  // Every rule has words of its own for --explain (the tie-break's are
  // its own only).
  std::set<std::string> words;
  for (int r = 0; r <= static_cast<int>(RankingRule::ConfigName); ++r)
    words.insert(describeRule(static_cast<RankingRule>(r), options));
  CHECK(words.size() ==
        static_cast<size_t>(RankingRule::ConfigName) + 1);
  // Below 8 warps per SM, occupancy decides; above, the larger block_m.
  CandidateReport fourWarps = report(128, 64, 1, 4096, 4);
  CandidateReport eightWarps = report(64, 64, 2, 4096, 4);
  CHECK(decidingRule(eightWarps, fourWarps, h100, options) ==
        RankingRule::EnoughWarps);
  CandidateReport sixteenWarps = report(64, 64, 4, 4096, 4);
  CandidateReport bigTile = report(128, 32, 1, 4096, 8);
  CHECK(ranksAbove(bigTile, sixteenWarps, h100, options));
  CHECK(decidingRule(bigTile, sixteenWarps, h100, options) ==
        RankingRule::BlockM);
  CandidateReport wideN = report(128, 64, 1, 4096, 8);
  CHECK(decidingRule(wideN, bigTile, h100, options) == RankingRule::BlockN);
  // Causal: a block_n that divides block_m beats a wider one that does not.
  CandidateReport straddles = report(128, 176, 1, 4096, 8);
  straddles.diagonalAligned = false;
  CHECK(ranksAbove(wideN, straddles, h100, options));
  CHECK(decidingRule(wideN, straddles, h100, options) ==
        RankingRule::DiagonalTiles);
  // A more capable template comes first whatever its tiles.
  CandidateReport preferred = report(64, 16, 1, 10, 4);
  preferred.templateRank = 0;
  bigTile.templateRank = 1;
  CHECK(ranksAbove(preferred, bigTile, h100, options));
  // Identical numbers: the name decides, and never both ways.
  CandidateReport a = report(128, 64, 1, 4096, 8), b = a;
  b.config.family = "other";
  CHECK(ranksAbove(a, b, h100, options) != ranksAbove(b, a, h100, options));
  CHECK_FALSE(ranksAbove(a, a, h100, options));
}

TEST_CASE("the explanation shows the choice, the rule and the rejections") {
  DeviceModel t4 = knownGPU("t4");
  auto choice =
      chooseConfigForTemplate(cudaCore(), benchSpec(256, false), t4, {});
  REQUIRE(static_cast<bool>(choice));
  std::string text = renderChoiceText(*choice);
  MESSAGE(text);
  CHECK(text.find("chosen:     cuda_core:m64:n16:s1:w16 (model only)") !=
        std::string::npos);
  CHECK(text.find("Tesla T4 (compute capability 7.5, 40 SMs, 64 KB shared "
                  "memory per block") != std::string::npos);
  CHECK(text.find("rejected: needs 80 KB of shared memory, the Tesla T4 "
                  "allows 64 KB per block") != std::string::npos);
  CHECK(choice->why.find("ranks first of 3 fitting candidate(s) (6 "
                         "rejected)") != std::string::npos);
  CHECK(choice->why.find("by a larger block_m") != std::string::npos);

  nlohmann::json j = choiceToJson(*choice);
  CHECK(j["config"]["block_m"] == 64);
  CHECK(j["model_only"] == true);
  CHECK(j["device"]["name"] == "Tesla T4");
  CHECK(j["spec"]["head_dim"] == 256);
  REQUIRE(j["candidates"].size() == choice->considered.size());
  CHECK(j["candidates"][0]["rank"] == 1);
  CHECK(j["candidates"][0]["limited_by"] == "registers");
  size_t rejected = 0;
  for (const auto &c : j["candidates"])
    if (!c["fits"].get<bool>()) {
      ++rejected;
      CHECK(c.contains("rejection"));
    }
  CHECK(rejected == 6);
}

TEST_CASE("bad inputs are errors, not aborts") {
  DeviceModel h100 = knownGPU("h100");
  HeuristicOptions badShape;
  badShape.shape.seqlen = 0;
  auto shapeErr = chooseConfig(benchSpec(128, false), h100, badShape);
  REQUIRE_FALSE(static_cast<bool>(shapeErr));
  CHECK(errorOf(shapeErr.takeError()).find("at least 1") != std::string::npos);

  AttentionSpec d72 = benchSpec(128, false);
  d72.headDim = 72;
  auto unsupported = chooseConfig(d72, h100);
  REQUIRE_FALSE(static_cast<bool>(unsupported));
  CHECK(errorOf(unsupported.takeError())
            .find("head dim 72 is not supported by the cuda_core template") !=
        std::string::npos);
  auto direct = chooseConfigForTemplate(cudaCore(), d72, h100);
  REQUIRE_FALSE(static_cast<bool>(direct));
  consumeError(direct.takeError());

  DeviceModel broken = h100;
  broken.smCount = 0;
  auto brokenErr = chooseConfig(benchSpec(128, false), broken);
  REQUIRE_FALSE(static_cast<bool>(brokenErr));
  CHECK(errorOf(brokenErr.takeError()).find("sm_count") != std::string::npos);

  // A config breaking several limits names each of them.
  CandidateReport both =
      evaluateConfig(cudaCore(), benchSpec(256, false),
                     {"cuda_core", 128, 64, 1, 32}, knownGPU("t4"), {});
  CHECK(both.rejection ==
        "needs 80 KB of shared memory, the Tesla T4 allows 64 KB per block; "
        "and needs 172032 registers per block (168 per thread x 1024 "
        "threads), the Tesla T4 has 65536 per SM");

  // A device too small for every candidate: the error lists the reasons.
  DeviceModel tiny = h100;
  tiny.name = "tiny";
  tiny.sharedMemoryPerSM = tiny.sharedMemoryPerBlockOptin = 4 * 1024;
  auto none = chooseConfig(benchSpec(128, false), tiny);
  REQUIRE_FALSE(static_cast<bool>(none));
  std::string message = errorOf(none.takeError());
  CHECK(message.find("no tile config runs fwd;d=128") != std::string::npos);
  CHECK(message.find("the tiny allows 4 KB per block") != std::string::npos);
}
