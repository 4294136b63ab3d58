//===- WgmmaHeuristicTest.cpp - the heuristic on Hopper's templates ------===//
// Why: on sm_90 the heuristic chooses among the wgmma families (per tile,
// persistent, cluster), whose shared-memory layouts and short-length rules
// are the Hopper-specific half of HeuristicTest.cpp's checks: every
// candidate fits, a larger one is refused with its sizes, and short
// sequences get persistent kernels and unpadded tiles.
#include "AutotuneTestUtil.h"

#include "flashjit/Autotune/Heuristic.h"
#include "flashjit/Templates/TileOrderKernel.h"
#include "flashjit/Templates/WgmmaForward.h"

#include <string>

using namespace flashjit;
using namespace flashjit::autotune;
using namespace flashjit::autotune::testing;

namespace {
/// The three-consumer (block_m 192) candidates `family` offers for `spec`.
std::vector<std::string> threeWarpgroupOffers(const char *family,
                                              const AttentionSpec &spec) {
  std::vector<std::string> three;
  for (const TileConfig &c : templateOf(family).candidates(spec))
    if (c.blockM == 192)
      three.push_back(c.canonical());
  return three;
}
} // namespace

TEST_CASE("wgmma: every candidate fits sm_90's shared memory; a larger "
          "config is refused with the sizes") {
  const KernelTemplate &wgmma = templateOf("wgmma");
  for (int64_t d : {64, 128, 256}) {
    AttentionSpec spec = benchSpec(d, false);
    std::vector<TileConfig> configs = wgmma.candidates(spec);
    CAPTURE(d);
    CHECK_FALSE(configs.empty());
    for (const TileConfig &config : configs) {
      CHECK_FALSE(static_cast<bool>(wgmma.checkConfig(spec, config)));
      CHECK(wgmma.resources(spec, config).sharedMemoryBytes <= 232448u);
      CHECK(config.warps == (config.blockM / 64 + 1) * 4);
    }
  }
  AttentionSpec d256 = benchSpec(256, false);
  llvm::Error err =
      wgmma.checkConfig(d256, TileConfig{"wgmma", 128, 96, 2, 12});
  REQUIRE(static_cast<bool>(err));
  std::string message = errorMessage(std::move(err));
  CHECK(message.find("bytes of shared memory; sm_90 allows at most 232448") !=
        std::string::npos);
  // block_n 176 fits the registers of two consumers at head dim 128, not
  // of three at head dim 64 (160 each); past 192 nothing is offered.
  CHECK_FALSE(llvm::errorToBool(wgmma.checkConfig(
      benchSpec(128, false), TileConfig{"wgmma", 128, 176, 2, 12})));
  llvm::Error three = wgmma.checkConfig(benchSpec(64, false),
                                        TileConfig{"wgmma", 192, 176, 2, 16});
  REQUIRE(static_cast<bool>(three));
  CHECK(errorMessage(std::move(three))
            .find("more than the 160 that 3 consumer") != std::string::npos);
  // The register split (setmaxnreg): the producer keeps 24 with two
  // consumers and 32 with three, persistent too, except persistent causal
  // with two consumers (40); the consumers share the rest of the block's
  // registers at entry (168 x 384, 128 x 512) in multiples of 8.
  const KernelTemplate &persistent = templateOf("wgmma_persistent");
  for (bool persistentGrid : {false, true})
    for (bool causal : {false, true}) {
      INFO(persistentGrid << " " << causal);
      bool more = persistentGrid && causal;
      CHECK(WgmmaForward::producerRegisters(2, persistentGrid, causal) ==
            (more ? 40u : 24u));
      CHECK(WgmmaForward::consumerRegisters(2, persistentGrid, causal) ==
            (more ? 232u : 240u));
      CHECK(WgmmaForward::producerRegisters(3, persistentGrid, causal) == 32u);
      CHECK(WgmmaForward::consumerRegisters(3, persistentGrid, causal) ==
            160u);
      for (int64_t c : {2, 3})
        CHECK(128 * (WgmmaForward::producerRegisters(c, persistentGrid,
                                                     causal) +
                     c * WgmmaForward::consumerRegisters(c, persistentGrid,
                                                         causal)) <=
              (c == 2 ? 168 * 384 : 128 * 512));
    }
  // One consumer (block_m 64) runs two blocks per SM: 128 registers per
  // thread at entry, 232 for the consumer beside a 24-register producer,
  // and half an SM's shared memory per block (a clear error past it).
  CHECK(WgmmaForward::blocksPerSM(1) == 2);
  CHECK(WgmmaForward::blocksPerSM(2) == 1);
  CHECK(WgmmaForward::consumerRegisters(1, false, false) == 232u);
  CHECK(128 * (WgmmaForward::producerRegisters(1, false, false) +
               WgmmaForward::consumerRegisters(1, false, false)) <=
        65536 / 2);
  TileConfig single{"wgmma", 64, 128, 2, 8};
  CHECK_FALSE(
      llvm::errorToBool(wgmma.checkConfig(benchSpec(64, true), single)));
  CHECK(wgmma.resources(benchSpec(64, true), single).registersPerThread ==
        128u);
  auto tooLarge = wgmma.checkConfig(benchSpec(128, false), single);
  REQUIRE(static_cast<bool>(tooLarge));
  CHECK(errorMessage(std::move(tooLarge))
            .find("most 115712 per block when two share an SM") !=
        std::string::npos);
  // Three persistent causal consumers keep their tile's state beside the
  // pipeline: block_n 128 at head dim 64 spilled there (ptxas), so it is
  // not offered; the per-tile kernel's fits, and the persistent one's 96.
  CHECK(llvm::errorToBool(persistent.checkConfig(
      benchSpec(64, true), TileConfig{"wgmma_persistent", 192, 128, 2, 16})));
  CHECK_FALSE(llvm::errorToBool(persistent.checkConfig(
      benchSpec(64, true), TileConfig{"wgmma_persistent", 192, 96, 2, 16})));
  CHECK_FALSE(llvm::errorToBool(wgmma.checkConfig(
      benchSpec(64, true), TileConfig{"wgmma", 192, 128, 2, 16})));
  // Unmasked head dim 64 is offered (the heuristic takes it for short
  // sequences only); head dim 256 has no room to stage O apart.
  CHECK_FALSE(persistent.candidates(benchSpec(64, false)).empty());
  CHECK(persistent.candidates(benchSpec(256, false)).empty());
  std::vector<TileConfig> unmasked = persistent.candidates(benchSpec(128, false));
  REQUIRE_FALSE(unmasked.empty());
  for (const TileConfig &c : unmasked) {
    INFO(c.canonical());
    CHECK(WgmmaForward::stagesOutputApart(benchSpec(128, false), c, true));
  }
  CHECK_FALSE(persistent.candidates(benchSpec(128, true)).empty());
  // O staged apart takes a Q tile's bytes more: m128 n160 just fits at
  // head dim 128 (Q, two K and two V tiles, O, 1 KiB alignment slack, 12
  // barriers and two 16-byte records), n176 does not; the per-tile kernel
  // always stages O in Q.
  TileConfig n160{"wgmma_persistent", 128, 160, 2, 12};
  CHECK(WgmmaForward::stagesOutputApart(benchSpec(128, false), n160, true));
  CHECK(persistent.resources(benchSpec(128, false), n160).sharedMemoryBytes ==
        1024 + 32768 * 2 + 4 * 40960 + 12 * 8 + 2 * 16);
  CHECK_FALSE(WgmmaForward::stagesOutputApart(
      benchSpec(128, false), TileConfig{"wgmma_persistent", 128, 176, 2, 12},
      true));
  CHECK_FALSE(WgmmaForward::stagesOutputApart(
      benchSpec(128, false), TileConfig{"wgmma", 128, 128, 2, 12}, false));
  CHECK(static_cast<bool>(llvm::errorToBool(wgmma.checkConfig(
      benchSpec(128, false), TileConfig{"wgmma", 128, 208, 2, 12}))));

  // The shared memory ends with the consumers' tile records.
  const TileConfig m192{"wgmma", 192, 128, 2, 16};
  for (bool causal : {false, true}) {
    WgmmaForward::SharedLayout three =
        WgmmaForward::sharedLayout(benchSpec(64, causal), m192, false);
    CHECK(three.bytes == 1024 + three.records + 3 * 16);
    CHECK(wgmma.resources(benchSpec(64, causal), m192).sharedMemoryBytes ==
          three.bytes);
  }
  WgmmaForward::SharedLayout two =
      WgmmaForward::sharedLayout(benchSpec(128, false), n160, true);
  CHECK(two.bytes == 1024 + two.records + 2 * 16);
  // One Q tile where a second does not fit (head dim 128, n160), the
  // kernel is not persistent or the head dim is above 64; two, with a
  // record per consumer and Q tile, where it does (head dim 64 at n128).
  CHECK(two.qBuffers == 1);
  CHECK(two.k == 128 * 128 * 2);
  CHECK(WgmmaForward::sharedLayout(benchSpec(64, true), m192, false)
            .qBuffers == 1);
  const TileConfig n128{"wgmma_persistent", 128, 128, 2, 12};
  WgmmaForward::SharedLayout doubled =
      WgmmaForward::sharedLayout(benchSpec(64, true), n128, true);
  CHECK(doubled.qBuffers == 2);
  CHECK(doubled.k == 2 * 128 * 64 * 2);
  CHECK(doubled.bytes == 1024 + doubled.records + 2 * 2 * 16);
  CHECK(doubled.bytes <= 232448);
  CHECK(WgmmaForward::sharedLayout(benchSpec(128, true), n128, true)
            .qBuffers == 1);

  // A mask_mod adds each consumer warp's scratch for its staged key-column
  // reads (4 bytes per column of a K/V tile), 16-byte aligned after the
  // records; without one the layout is as before.
  AttentionSpec masked = benchSpec(128, false);
  masked.maskMod = "func.func @mask_mod";
  WgmmaForward::SharedLayout plain =
      WgmmaForward::sharedLayout(benchSpec(128, false), n128, true);
  WgmmaForward::SharedLayout staged =
      WgmmaForward::sharedLayout(masked, n128, true);
  CHECK(plain.bytes == 1024 + plain.records + 2 * 16);
  CHECK(staged.bytes == plain.bytes + 2 * 4 * 128 * 4 + 12);
  CHECK(staged.maskColumns % 16 == 0);
  CHECK(staged.maskColumns >= staged.records + 2 * 16);
  CHECK(1024 + staged.maskColumns + 2 * 4 * 128 * 4 <= staged.bytes);
  CHECK(staged.bytes <= 232448);
  CHECK(staged.outputApart == plain.outputApart);

  // Clusters of two share K/V tiles: without a mask only (both blocks need
  // the same tiles), from head dim 128, with O staged apart as the
  // persistent kernel's unmasked configs; each block loads half of a K/V
  // tile's rows, so its boxes are half as tall.
  const KernelTemplate &cluster = templateOf("wgmma_cluster");
  CHECK(cluster.persistent());
  CHECK(cluster.clusterSize() == 2u);
  CHECK(persistent.clusterSize() == 1u);
  CHECK(wgmma.clusterSize() == 1u);
  // Only the persistent kernel takes tiles from the launch's counter, and
  // only it, block-sparse and not varlen, a tile order.
  CHECK_FALSE(cluster.takesTilesFromCounter());
  CHECK(persistent.takesTilesFromCounter());
  CHECK_FALSE(wgmma.takesTilesFromCounter());
  AttentionSpec sparse = benchSpec(128, false);
  sparse.sparseBlockM = sparse.sparseBlockN = 128;
  CHECK(usesTileOrder(sparse, n128));
  CHECK_FALSE(usesTileOrder(benchSpec(128, false), n128));
  CHECK_FALSE(usesTileOrder(sparse, TileConfig{"wgmma", 128, 128, 2, 12}));
  CHECK_FALSE(
      usesTileOrder(sparse, TileConfig{"wgmma_cluster", 128, 128, 2, 12}));
  CHECK_FALSE(usesTileOrder(sparse, TileConfig{"mma_sync", 128, 64, 2, 4}));
  AttentionSpec packed = sparse;
  packed.varlen = true;
  CHECK_FALSE(usesTileOrder(packed, n128));
  CHECK(tileOrderRowElements(4097, 128) == 2 * 36);
  CHECK(tileOrderRowElements(1, 128) == 2 * 4);
  CHECK(cluster.candidates(benchSpec(64, false)).empty());
  CHECK(cluster.candidates(benchSpec(128, true)).empty());
  CHECK(cluster.candidates(benchSpec(256, false)).empty());
  // The persistent grid's two-consumer configs (its three-consumer ones
  // are its own: plainHeadDim128).
  std::vector<TileConfig> twoConsumers;
  for (const TileConfig &c : unmasked)
    if (c.blockM == 128)
      twoConsumers.push_back(c);
  std::vector<TileConfig> shared = cluster.candidates(benchSpec(128, false));
  REQUIRE(shared.size() == twoConsumers.size());
  for (size_t i = 0; i < shared.size(); ++i) {
    CHECK(shared[i].family == "wgmma_cluster");
    CHECK(shared[i].blockN == twoConsumers[i].blockN);
  }
  TileConfig clusterN160{"wgmma_cluster", 128, 160, 2, 12};
  const AttentionSpec d128 = benchSpec(128, false);
  REQUIRE(cluster.tensorMapBoxes(d128, clusterN160).has_value());
  CHECK(cluster.tensorMapBoxes(d128, clusterN160)->kvRows == 80u);
  CHECK(persistent.tensorMapBoxes(d128, n160)->kvRows == 160u);
  CHECK(cluster.resources(benchSpec(128, false), clusterN160)
            .sharedMemoryBytes ==
        persistent.resources(benchSpec(128, false), n160).sharedMemoryBytes);
  llvm::Error causalCluster = cluster.checkConfig(
      benchSpec(128, true), TileConfig{"wgmma_cluster", 128, 128, 2, 12});
  REQUIRE(static_cast<bool>(causalCluster));
  CHECK(errorMessage(std::move(causalCluster)).find("use wgmma_persistent") !=
        std::string::npos);
}

// Short sequences: a tile's key loop is a few blocks long, so the choice
// changes with the length. The H100 rows below are the configs measured
// fastest at 512 and 1024 (tuner and same-run benchmark): a persistent
// template one block at a time, and between persistent configs, fewer
// padded keys or scores up to the diagonal. From 2048 on, the long choice.
TEST_CASE("short sequences: persistent templates and unpadded tiles") {
  DeviceModel h100 = knownGPU("h100");
  struct Row {
    int64_t headDim;
    bool causal;
    int64_t seqlen;
    const char *config;
  };
  const Row rows[] = {
      {128, false, 512, "wgmma_persistent:m128:n128:s2:w12"},
      {128, false, 1024, "wgmma_persistent:m128:n128:s2:w12"},
      {128, false, 2048, "wgmma_cluster:m128:n160:s2:w12"},
      {128, false, 4096, "wgmma_persistent:m192:n80:s2:w16"},
      {128, false, 8192, "wgmma_persistent:m192:n80:s2:w16"},
      {128, false, 16384, "wgmma_persistent:m192:n80:s2:w16"},
      {64, true, 512, "wgmma_persistent:m128:n128:s2:w12"},
      {64, true, 1024, "wgmma_persistent:m128:n128:s2:w12"},
      {64, true, 2048, "wgmma_persistent:m192:n96:s2:w16"},
      {64, false, 512, "wgmma_persistent:m192:n128:s2:w16"},
      {64, false, 1024, "wgmma_persistent:m192:n128:s2:w16"},
      {64, false, 2048, "wgmma:m192:n128:s2:w16"},
      {64, false, 8192, "wgmma:m192:n128:s2:w16"},
      {64, true, 8192, "wgmma_persistent:m192:n96:s2:w16"},
      {128, true, 8192, "wgmma_persistent:m128:n128:s2:w12"},
      {128, true, 512, "wgmma_persistent:m128:n128:s2:w12"},
  };
  for (const Row &row : rows) {
    HeuristicOptions options;
    options.shape = shapeForSeqlen(row.seqlen);
    CAPTURE(row.headDim);
    CAPTURE(row.causal);
    CAPTURE(row.seqlen);
    CHECK(options.shape.batch * options.shape.seqlen == 16384);
    auto choice =
        chooseConfig(benchSpec(row.headDim, row.causal), h100, options);
    REQUIRE(static_cast<bool>(choice));
    CHECK(choice->config.canonical() == row.config);
  }
  // Short: persistent one block at a time, then clusters, then the rest,
  // before the template order; long: the template order alone.
  HeuristicOptions shortOptions;
  shortOptions.shape = shapeForSeqlen(512);
  CandidateReport single, cluster, plain;
  single.persistent = cluster.persistent = true;
  cluster.clusterSize = 2;
  single.templateRank = 1;
  cluster.templateRank = 0;
  plain.templateRank = 0;
  CHECK(decidingRule(single, cluster, h100, shortOptions) ==
        RankingRule::LengthGrid);
  CHECK(ranksAbove(single, cluster, h100, shortOptions));
  CHECK(ranksAbove(cluster, plain, h100, shortOptions));
  HeuristicOptions at4k;
  at4k.shape = shapeForSeqlen(4096);
  CHECK(decidingRule(cluster, single, h100, at4k) ==
        RankingRule::TemplateOrder);
  CHECK(describeRule(RankingRule::LengthGrid, shortOptions)
            .find("up to 1024, a persistent template") != std::string::npos);
  // Computed scores rank persistent configs only, and only past a margin.
  CandidateReport a, b;
  a.persistent = b.persistent = true;
  a.computedWork = 512.0 * 512;
  b.computedWork = 512.0 * 640; // keys padded to 5 tiles of 128... of 160
  CHECK(decidingRule(a, b, h100, shortOptions) == RankingRule::ComputedWork);
  b.computedWork = 512.0 * 530; // 3.5% more: below the margin
  CHECK(decidingRule(a, b, h100, shortOptions) != RankingRule::ComputedWork);
  a.rightBound = b.rightBound = true; // with a diagonal: 10%
  b.computedWork = 512.0 * 560;
  CHECK(decidingRule(a, b, h100, shortOptions) != RankingRule::ComputedWork);
  b.computedWork = 512.0 * 600;
  CHECK(decidingRule(a, b, h100, shortOptions) == RankingRule::ComputedWork);
  b.persistent = false;
  CHECK(decidingRule(a, b, h100, at4k) != RankingRule::ComputedWork);
  // Longer unmasked sequences of a small head dim: non-persistent first.
  CandidateReport grid, plainTile;
  grid.persistent = true;
  grid.unmaskedSmallHead = plainTile.unmaskedSmallHead = true;
  grid.templateRank = 0;
  plainTile.templateRank = 1;
  CHECK(decidingRule(plainTile, grid, h100, at4k) == RankingRule::LengthGrid);
  CHECK(ranksAbove(grid, plainTile, h100, shortOptions));
  CHECK(shapeForSeqlen(0).seqlen == ProblemShape().seqlen);
  CHECK(shapeForSeqlen(100000).batch == 1);
}

// A score_mod on the special-function unit (soft-capping's tanh) beside the
// softmax's exponential keeps that unit as busy as the tensor cores at head
// dim 128: without a right bound the persistent grid offers three consumer
// warpgroups there, and the heuristic ranks them first from 1k (measured
// 7% faster than two ping-ponging consumers on an H200, 0.99x at 512,
// docs/performance.md); a causal kernel, a mod without such ops and the
// dense kernels keep their choice.
TEST_CASE("a score_mod on the special-function unit: three softmax "
          "warpgroups at head dim 128 without a right bound") {
  DeviceModel h100 = knownGPU("h100");
  auto withMod = [](bool causal, const char *op) {
    AttentionSpec spec = benchSpec(128, causal);
    spec.scoreMod = std::string("func.func @score_mod(%s: f32, %b: i32, %h: "
                                "i32, %q: i32, %k: i32) -> f32 {\n") +
                    "  %0 = " + op + " %s : f32\n  return %0 : f32\n}";
    return spec;
  };
  AttentionSpec tanhMod = withMod(false, "math.tanh");
  CHECK(scoreModSpecialFunctions(tanhMod) == 1);
  CHECK(scoreModSpecialFunctions(withMod(false, "math.absf")) == 0);
  CHECK(scoreModSpecialFunctions(withMod(false, "math.exp2")) == 1);
  CHECK(scoreModSpecialFunctions(benchSpec(128, false)) == 0);
  // Offered by the persistent grid only, block_n 64 and 80 (all that 160
  // registers hold), and not for a causal spec.
  CHECK(threeWarpgroupOffers("wgmma_persistent", tanhMod) ==
        std::vector<std::string>{"wgmma_persistent:m192:n64:s2:w16",
                                 "wgmma_persistent:m192:n80:s2:w16"});
  CHECK(threeWarpgroupOffers("wgmma_cluster", tanhMod).empty());
  CHECK(threeWarpgroupOffers("wgmma", tanhMod).empty());
  CHECK(threeWarpgroupOffers("wgmma_persistent", withMod(true, "math.tanh"))
            .empty());
  CHECK(threeWarpgroupOffers("wgmma_persistent", withMod(false, "math.absf"))
            .empty());
  struct Row {
    bool causal;
    const char *op;
    int64_t seqlen;
    const char *config;
  };
  const Row rows[] = {
      {false, "math.tanh", 512, "wgmma_persistent:m128:n128:s2:w12"},
      {false, "math.tanh", 1024, "wgmma_persistent:m192:n80:s2:w16"},
      {false, "math.tanh", 2048, "wgmma_persistent:m192:n80:s2:w16"},
      {false, "math.tanh", 8192, "wgmma_persistent:m192:n80:s2:w16"},
      {true, "math.tanh", 2048, "wgmma_persistent:m128:n128:s2:w12"},
      {true, "math.tanh", 8192, "wgmma_persistent:m128:n128:s2:w12"},
      {false, "math.absf", 8192, "wgmma_cluster:m128:n160:s2:w12"},
  };
  for (const Row &row : rows) {
    HeuristicOptions options;
    options.shape = shapeForSeqlen(row.seqlen);
    CAPTURE(row.causal);
    INFO("op " << std::string(row.op));
    CAPTURE(row.seqlen);
    auto choice = chooseConfig(withMod(row.causal, row.op), h100, options);
    REQUIRE(static_cast<bool>(choice));
    CHECK(choice->config.canonical() == row.config);
    if (row.causal || std::string(row.op) != "math.tanh" || row.seqlen < 1024)
      continue;
    // The rule that puts it above two consumers: the new one (up to 1k the
    // length's rule first ranks the persistent grid above the others).
    for (const CandidateReport &other : choice->considered)
      if (other.fits() && other.resources.softmaxWarpgroups == 2 &&
          (row.seqlen > 1024 || (other.persistent && other.clusterSize == 1))) {
        CAPTURE(other.config.canonical());
        CHECK(decidingRule(choice->considered.front(), other, h100, options) ==
              RankingRule::ThreeWarpgroups);
      }
  }
  CHECK(describeRule(RankingRule::ThreeWarpgroups, HeuristicOptions())
            .find("special-function unit") != std::string::npos);
}

// Plain attention at head dim 128 (no mask, no mods): the persistent grid
// offers three softmax warpgroups too, and the heuristic ranks them first
// from 4k (an H200 measured 1.02-1.07x two warpgroups there against cuDNN
// in the same run, 1.00x at 2k, 0.96x at 1k; docs/performance.md); with
// a mask, a mod or another head dim the choice stays as it was.
TEST_CASE("plain attention at head dim 128: three softmax warpgroups from "
          "4k") {
  DeviceModel h100 = knownGPU("h100");
  AttentionSpec plain = benchSpec(128, false);
  CHECK(plainHeadDim128(plain));
  CHECK_FALSE(plainHeadDim128(benchSpec(128, true)));
  CHECK_FALSE(plainHeadDim128(benchSpec(64, false)));
  AttentionSpec withMask = plain;
  withMask.maskMod = "func.func @mask_mod(%b: i32, %h: i32, %q: i32, %k: "
                     "i32) -> i1 {\n  %0 = arith.cmpi sge, %q, %k : i32\n"
                     "  return %0 : i1\n}";
  CHECK_FALSE(plainHeadDim128(withMask));
  CHECK(threeWarpgroupOffers("wgmma_persistent", plain) ==
        std::vector<std::string>{"wgmma_persistent:m192:n64:s2:w16",
                                 "wgmma_persistent:m192:n80:s2:w16"});
  // The choices by length are rows of the short-sequences case; from 4k
  // the new rule is what puts three warpgroups above every two-warpgroup
  // config.
  for (int64_t seqlen : {4096, 16384}) {
    HeuristicOptions options;
    options.shape = shapeForSeqlen(seqlen);
    CAPTURE(seqlen);
    auto choice = chooseConfig(plain, h100, options);
    REQUIRE(static_cast<bool>(choice));
    CHECK(choice->config.canonical() == "wgmma_persistent:m192:n80:s2:w16");
    for (const CandidateReport &other : choice->considered)
      if (other.fits() && other.resources.softmaxWarpgroups == 2) {
        CAPTURE(other.config.canonical());
        CHECK(decidingRule(choice->considered.front(), other, h100, options) ==
              RankingRule::ThreeWarpgroups);
      }
  }
  CHECK(describeRule(RankingRule::ThreeWarpgroups, HeuristicOptions())
            .find("plain attention") != std::string::npos);
}
