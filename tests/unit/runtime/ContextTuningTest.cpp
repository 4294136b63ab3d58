//===- ContextTuningTest.cpp - compile() consults the tuning database -----===//
// Why: the promise of a tuned deployment: Context::compile builds the
// database's config for the spec's bucket, falls back to the heuristic
// (with one warning) when the database is stale, corrupt or names a config
// that cannot be built, and says where each kernel's config came from. No
// GPU is needed: the tuning options name the GPU the kernels are built for.
#include "RuntimeTestUtil.h"

#include "flashjit/Compiler/Compiler.h"
#include "flashjit/Backward.h"
#include "flashjit/FlashJIT.h"
#include "flashjit/Runtime/KernelCache.h"
#include "flashjit/Templates/MmaSyncBackward.h"

#include <doctest/doctest.h>

using namespace flashjit;
using namespace flashjit::test;
using autotune::GpuIdentity;
using autotune::TuningDatabase;
using autotune::TuningEntry;

namespace {

/// The heuristic's config for d128Spec() on an H100.
TileConfig heuristicFor(const AttentionSpec &spec) {
  TempDir dir;
  Warnings warnings;
  auto config = makeContext(dir, warnings)->heuristicConfig(spec);
  REQUIRE(static_cast<bool>(config));
  return *config;
}

/// A fitting config other than `than`, for the database to name.
TileConfig otherConfig(const TileConfig &than) {
  TileConfig other{"cuda_core", 64, 32, 1, 8};
  if (other == than)
    other = {"cuda_core", 32, 32, 1, 4};
  return other;
}

/// A database for the H100 with one entry: d128 bf16, seqlen [1024, 4096).
TuningDatabase tunedDatabase(const TileConfig &config) {
  TuningDatabase db(sampleGpu(), autotune::builtFlashjitVersion().str());
  TuningEntry entry;
  entry.bucket = {128, DType::BF16, false, 1024, 4096};
  entry.config = config;
  entry.tflops = 25;
  entry.heuristicTflops = 20;
  REQUIRE(errorText(db.upsert(entry)) == "");
  return db;
}

} // namespace

TEST_CASE("the tuned entry of the spec's bucket is built, from the default "
          "path") {
  TempDir dir;
  Warnings warnings;
  TileConfig heuristic = heuristicFor(d128Spec());
  TileConfig tuned = otherConfig(heuristic);
  REQUIRE(tuned != heuristic);
  // Where `flashjit autotune` writes by default: under the kernel cache.
  std::string path =
      autotune::defaultDatabasePath(dir / "cache", sampleGpu().name);
  REQUIRE(errorText(tunedDatabase(tuned).save(path)) == "");

  auto ctx = makeContext(dir, warnings);
  CHECK(ctx->tuning().path() == path);
  // No seqlen: the hint 2048 falls in [1024, 4096).
  auto kernel = compileOk(*ctx, d128Spec());
  CHECK(kernel->info().config == tuned);
  CHECK(kernel->configOrigin().source == ConfigSource::Tuned);
  CHECK(kernel->configOrigin().detail.find(
            "bucket d128 bf16 seqlen [1024, 4096)") != std::string::npos);
  CHECK(kernel->ptx().find(".entry") != std::string::npos);
  CHECK((compileOk(*ctx, d128Spec()) == kernel)); // the hot path

  KernelOptions shortRun;
  shortRun.seqlen = 512; // no bucket: the heuristic
  auto fallback = compileOk(*ctx, d128Spec(), shortRun);
  // The heuristic answers for the length class of 512, [1, 768).
  CHECK(fallback->info().config == *ctx->heuristicConfig(d128Spec(), 256));
  CHECK(fallback->configOrigin().source == ConfigSource::Heuristic);
  CHECK(fallback->configOrigin().detail.find("has no bucket for") !=
        std::string::npos);
  KernelOptions inBucket;
  inBucket.seqlen = 4095;
  CHECK((compileOk(*ctx, d128Spec(), inBucket) == kernel));
  // GQA shares the bucket of its head dim, dtype and causality.
  AttentionSpec gqa = d128Spec();
  gqa.numKVHeads = 4;
  CHECK(compileOk(*ctx, gqa)->info().config == tuned);
  CHECK(warnings.size() == 0);

  auto resolved = ctx->resolveConfig(d128Spec());
  REQUIRE(static_cast<bool>(resolved));
  CHECK(resolved->config == tuned);
  KernelOptions badSeqlen;
  badSeqlen.seqlen = 0;
  auto bad = ctx->compile(d128Spec(), badSeqlen);
  REQUIRE_FALSE(static_cast<bool>(bad));
  CHECK(llvm::toString(bad.takeError()) ==
        "the seqlen hint must be at least 1, got 0");
}

TEST_CASE("a stale database: the heuristic, and one warning for the context") {
  TempDir dir;
  Warnings warnings;
  TileConfig heuristic = heuristicFor(d128Spec());
  TuningDatabase db = tunedDatabase(otherConfig(heuristic));
  db.gpu.driver = "535.104.05";
  std::string path = dir / "shipped.json";
  REQUIRE(errorText(db.save(path)) == "");

  auto ctx = makeContext(dir, warnings, path);
  CHECK(ctx->tuning().size() == 0);
  auto kernel = compileOk(*ctx, d128Spec());
  CHECK(kernel->info().config == heuristic);
  CHECK(kernel->configOrigin().source == ConfigSource::Heuristic);
  CHECK(llvm::StringRef(kernel->configOrigin().detail).starts_with("no tuning database"));
  AttentionSpec causal = d128Spec();
  causal.causal = true;
  compileOk(*ctx, causal);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings.text().find("driver 535.104.05 differs from 580.159.04") !=
        std::string::npos);
}

TEST_CASE("a corrupt database: the heuristic, and one warning") {
  TempDir dir;
  Warnings warnings;
  std::string path = dir / "shipped.json";
  REQUIRE(writeText(path, "{\"format\": 1, \"entries\": ["));
  auto ctx = makeContext(dir, warnings, path);
  auto kernel = compileOk(*ctx, d128Spec());
  CHECK(kernel->configOrigin().source == ConfigSource::Heuristic);
  CHECK(kernel->info().config == heuristicFor(d128Spec()));
  compileOk(*ctx, d128Spec());
  REQUIRE(warnings.size() == 1);
  CHECK(warnings.text().find("is not valid JSON") != std::string::npos);
}

TEST_CASE("no database: the heuristic, silently; a named one missing warns") {
  TempDir dir;
  Warnings quiet;
  auto ctx = makeContext(dir, quiet);
  auto kernel = compileOk(*ctx, d128Spec());
  CHECK(kernel->configOrigin().source == ConfigSource::Heuristic);
  CHECK(quiet.size() == 0);

  Warnings loud;
  auto named = makeContext(dir, loud, dir / "missing.json");
  CHECK(compileOk(*named, d128Spec())->configOrigin().source ==
        ConfigSource::Heuristic);
  REQUIRE(loud.size() == 1);
  CHECK(loud.text().find("does not exist") != std::string::npos);

  // Disabled: the database is not even read.
  ContextOptions options;
  options.chip = "sm_90a";
  options.cache.directory = "";
  options.tuning.enabled = false;
  options.tuning.database = dir / "missing.json";
  options.tuning.gpu = sampleGpu();
  Warnings none;
  options.onWarning = warningSink(none);
  auto off = Context::create(options);
  REQUIRE(static_cast<bool>(off));
  CHECK(none.size() == 0);
}

TEST_CASE("a tuned config this flashjit cannot build: the heuristic, one "
          "warning") {
  TempDir dir;
  Warnings warnings;
  TuningDatabase db = tunedDatabase({"no_such_family", 64, 32, 1, 4});
  std::string path = dir / "db.json";
  REQUIRE(errorText(db.save(path)) == "");
  auto ctx = makeContext(dir, warnings, path);
  auto kernel = compileOk(*ctx, d128Spec());
  CHECK(kernel->configOrigin().source == ConfigSource::Heuristic);
  CHECK(kernel->configOrigin().detail.find("cannot be built here") !=
        std::string::npos);
  AttentionSpec gqa = d128Spec();
  gqa.numKVHeads = 8;
  compileOk(*ctx, gqa);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings.text().find("unknown kernel family 'no_such_family'") !=
        std::string::npos);
}

TEST_CASE("an explicit config: built as named, cached under its own key") {
  TempDir dir;
  Warnings warnings;
  auto ctx = makeContext(dir, warnings);
  auto byDefault = compileOk(*ctx, d128Spec());
  TileConfig other = otherConfig(byDefault->info().config);
  auto named = ctx->compile(d128Spec(), other);
  REQUIRE(static_cast<bool>(named));
  CHECK((*named)->info().config == other);
  CHECK((*named)->configOrigin().source == ConfigSource::Explicit);
  CHECK((*named != byDefault));
  auto again = ctx->compile(d128Spec(), other);
  REQUIRE(static_cast<bool>(again));
  CHECK((*again == *named));
  CHECK((compileOk(*ctx, d128Spec()) == byDefault));
  // Two builds: the default and the named config, each its own cache entry.
  CHECK(ctx->cache().stats().builds == 2);

  auto bad = ctx->compile(d128Spec(), TileConfig{"cuda_core", 64, 32, 3, 8});
  REQUIRE_FALSE(static_cast<bool>(bad));
  CHECK(llvm::toString(bad.takeError()).find("stages") != std::string::npos);
  CHECK(std::string(configSourceName(ConfigSource::Tuned)) == "tuned");
  CHECK(std::string(configSourceName(ConfigSource::Explicit)) == "explicit");
  CHECK(std::string(configSourceName(ConfigSource::Heuristic)) == "heuristic");
}

TEST_CASE("an entry written by another generator is not served") {
  AttentionSpec spec = d128Spec();
  KernelOptions pinned;
  pinned.config = heuristicFor(spec);
  // The kernel as this generator builds it, and the inputs of its key.
  std::string fresh;
  {
    TempDir dir;
    Warnings warnings;
    auto kernel = makeContext(dir, warnings)->compile(spec, pinned);
    REQUIRE(static_cast<bool>(kernel));
    fresh = (*kernel)->ptx();
  }
  ToolchainVersions versions = toolchainVersions();
  CHECK(versions.generator == generatorId());
  CHECK(std::string(generatorId()).size() == 16);
  CacheKeyInputs inputs{spec.canonical(),
                        pinned.config->canonical(),
                        "sm_90a",
                        versions.flashjit,
                        versions.llvm,
                        std::to_string(llvm::cantFail(Target::parse("sm_90a"))
                                           .ptxVersion()),
                        versions.generator};
  // An entry under `generator` whose PTX is marked (still valid PTX, so a
  // GPU could load it), then a context's compile from that cache.
  const std::string mark = "\n// marked entry\n";
  auto servedFrom = [&](const std::string &generator) {
    TempDir dir;
    Warnings warnings;
    CacheKeyInputs in = inputs;
    in.generator = generator;
    {
      KernelCache cache(cacheOptions(dir / "cache", warnings));
      auto written = cache.getOrBuild(in, [&]() -> llvm::Expected<CacheEntry> {
        CacheEntry e;
        e.info.name = spec.kernelName();
        e.info.config = *pinned.config;
        e.info.threadsPerBlock = 128;
        e.info.numHeads = spec.numHeads;
        e.ptx = fresh + mark;
        return e;
      });
      REQUIRE(static_cast<bool>(written));
    }
    auto kernel = makeContext(dir, warnings)->compile(spec, pinned);
    REQUIRE(static_cast<bool>(kernel));
    return (*kernel)->ptx();
  };
  // The same generator's entry is served (so the check below can fail)...
  CHECK(servedFrom(versions.generator) == fresh + mark);
  // ...another generator's is not: the kernel is built again.
  CHECK(servedFrom("0123456789abcdef") == fresh);
}

TEST_CASE("the backward: the tuned entry of its bucket, by the seqlen hint") {
  TempDir dir;
  Warnings warnings;
  // A backward entry beside a forward one of the same bucket: each pass
  // reads its own.
  const TileConfig forwardTuned = otherConfig(heuristicFor(d128Spec()));
  TuningDatabase db = tunedDatabase(forwardTuned);
  TuningEntry backward;
  backward.bucket = {128, DType::BF16, false, 1024, 4096};
  backward.config = {"wgmma_bwd", 64, 128, 3, 8};
  backward.tflops = 520;
  db.replaceBackward(backward);
  TuningEntry unbuildable = backward;
  unbuildable.bucket = {128, DType::BF16, false, 4096, std::nullopt};
  unbuildable.config = {"wgmma_bwd", 96, 128, 2, 8};
  db.replaceBackward(unbuildable);
  std::string path = dir / "db.json";
  REQUIRE(errorText(db.save(path)) == "");
  auto ctx = makeContext(dir, warnings, path);
  const TileConfig defaults =
      MmaSyncBackward::defaultConfig(d128Spec(), ctx->target());
  REQUIRE(defaults != backward.config);

  // No hint: 2048, in [1024, 4096).
  auto resolved = ctx->resolveBackwardConfig(d128Spec(), {});
  REQUIRE(static_cast<bool>(resolved));
  CHECK(resolved->config == backward.config);
  CHECK(resolved->origin.source == ConfigSource::Tuned);
  CHECK(resolved->origin.detail.find("backward bucket d128 bf16 seqlen "
                                     "[1024, 4096)") != std::string::npos);
  auto kernel = ctx->compileBackward(d128Spec(), {});
  REQUIRE_MESSAGE(static_cast<bool>(kernel),
                  (kernel ? "" : llvm::toString(kernel.takeError())));
  CHECK((*kernel)->info().config == backward.config);
  // The forward still builds its own entry.
  CHECK(compileOk(*ctx, d128Spec())->info().config == forwardTuned);
  // Deterministic: the tuned tile sizes in the deterministic family.
  BackwardOptions det;
  det.deterministic = true;
  auto detKernel = ctx->compileBackward(d128Spec(), det);
  REQUIRE(static_cast<bool>(detKernel));
  CHECK((*detKernel)->info().config.family == "wgmma_bwd_det");
  CHECK((*detKernel)->info().config.stages == 3);

  // Outside every bucket, and causal (another bucket): the default.
  BackwardOptions shortRun;
  shortRun.seqlen = 512;
  resolved = ctx->resolveBackwardConfig(d128Spec(), shortRun);
  REQUIRE(static_cast<bool>(resolved));
  CHECK(resolved->config == defaults);
  CHECK(resolved->origin.source == ConfigSource::Heuristic);
  CHECK(resolved->origin.detail.find("no backward bucket") !=
        std::string::npos);
  AttentionSpec causal = d128Spec();
  causal.causal = true;
  resolved = ctx->resolveBackwardConfig(causal, {});
  REQUIRE(static_cast<bool>(resolved));
  CHECK(resolved->config ==
        MmaSyncBackward::defaultConfig(causal, ctx->target()));
  CHECK(warnings.size() == 0);

  // A tuned config this flashjit cannot build: the default, one warning.
  BackwardOptions longRun;
  longRun.seqlen = 16384;
  for (int i = 0; i < 2; ++i) {
    resolved = ctx->resolveBackwardConfig(d128Spec(), longRun);
    REQUIRE(static_cast<bool>(resolved));
    CHECK(resolved->config == defaults);
    CHECK(resolved->origin.detail.find("cannot be built here") !=
          std::string::npos);
  }
  CHECK(warnings.size() == 1);

  // A named config wins; a bad hint is an error.
  BackwardOptions named;
  named.config = TileConfig{"wgmma_bwd", 64, 128, 1, 8};
  resolved = ctx->resolveBackwardConfig(d128Spec(), named);
  REQUIRE(static_cast<bool>(resolved));
  CHECK(resolved->config == *named.config);
  CHECK(resolved->origin.source == ConfigSource::Explicit);
  BackwardOptions badHint;
  badHint.seqlen = 0;
  auto bad = ctx->compileBackward(d128Spec(), badHint);
  REQUIRE_FALSE(static_cast<bool>(bad));
  CHECK(llvm::toString(bad.takeError()) ==
        "the backward's seqlen hint must be at least 1, got 0");
}
