//===- LengthChoiceTest.cpp - one kernel handle, a config per length -----===//
// Why: a kernel compiled for one length must serve a call of another
// length with that length's config (the tuning database's bucket, else
// the heuristic's choice for the length class), pin its config when asked,
// and keep working after its Context is gone. No GPU is needed: the
// choice happens before the launch (Kernel::kernelForLengths).
#include "RuntimeTestUtil.h"

#include "flashjit/FlashJIT.h"
#include "flashjit/Runtime/LengthClasses.h"

#include <doctest/doctest.h>

#include <climits>

using namespace flashjit;
using namespace flashjit::test;
using autotune::TuningDatabase;
using autotune::TuningEntry;

namespace {

std::shared_ptr<const Kernel> forLengths(const Kernel &kernel, int64_t q,
                                         int64_t k) {
  auto chosen = kernel.kernelForLengths(q, k);
  REQUIRE_MESSAGE(static_cast<bool>(chosen),
                  (chosen ? "" : llvm::toString(chosen.takeError())));
  REQUIRE((*chosen != nullptr));
  return *chosen;
}

} // namespace

TEST_CASE("length classes: the default ranges, refined by the database") {
  TunedConfigs none;
  auto classes = lengthClasses(d128Spec(), none);
  REQUIRE(classes.size() == 6);
  const int64_t firsts[] = {1, 384, 768, 1536, 3072, 8192};
  const int64_t representatives[] = {128, 512, 1024, 2048, 4096, 16384};
  for (size_t i = 0; i < 6; ++i) {
    CHECK(classes[i].first == firsts[i]);
    CHECK(classes[i].end == (i + 1 < 6 ? firsts[i + 1] : INT64_MAX));
    CHECK(classes[i].representative == representatives[i]);
  }
  CHECK(lengthClassOf(classes, 0) == 0);
  CHECK(lengthClassOf(classes, 1) == 0);
  CHECK(lengthClassOf(classes, 383) == 0);
  CHECK(lengthClassOf(classes, 384) == 1);
  CHECK(lengthClassOf(classes, 767) == 1);
  CHECK(lengthClassOf(classes, 768) == 2);
  CHECK(lengthClassOf(classes, 1536) == 3);
  CHECK(lengthClassOf(classes, 8192) == 5);
  CHECK(lengthClassOf(classes, INT64_MAX) == 5);
  CHECK(callLength(1, 5000) == 5000);
  CHECK(callLength(700, 3) == 700);

  // A database bucket [256, 768) for the spec splits the first range; a
  // bucket of another head dim changes nothing.
  TempDir dir;
  Warnings warnings;
  TuningDatabase db(sampleGpu(), autotune::builtFlashjitVersion().str());
  TuningEntry entry;
  entry.bucket = {128, DType::BF16, false, 256, 768};
  entry.config = {"cuda_core", 64, 32, 1, 8};
  entry.tflops = 1;
  REQUIRE(errorText(db.upsert(entry)) == "");
  entry.bucket = {64, DType::BF16, false, 100, 200};
  REQUIRE(errorText(db.upsert(entry)) == "");
  std::string path = (dir / "tuning.json");
  REQUIRE(errorText(db.save(path)) == "");
  auto ctx = makeContext(dir, warnings, path);
  REQUIRE(ctx->tuning().size() == 2);
  auto refined = lengthClasses(d128Spec(), ctx->tuning());
  REQUIRE(refined.size() == 7);
  CHECK(refined[0].first == 1);
  CHECK(refined[0].end == 256);
  CHECK(refined[1].first == 256);
  CHECK(refined[1].end == 384);
  CHECK(refined[2].first == 384);
  CHECK(refined[2].end == 768);
  CHECK(refined[2].contains(512));
  CHECK(refined[3].first == 768);
  CHECK(warnings.size() == 0);
}

TEST_CASE("varlen: short sequences get the short-sequence choice") {
  // A batch of 34-token sequences must run the config the heuristic ranks
  // first for short varlen sequences (no TMA boxes over the packed K/V),
  // not the one for the first default range's 128.
  AttentionSpec spec = d128Spec();
  spec.varlen = true;
  TunedConfigs none;
  auto classes = lengthClasses(spec, none);
  REQUIRE(classes.size() == 7);
  CHECK(classes[0].first == 1);
  CHECK(classes[0].end == 65);
  CHECK(classes[0].representative == 32);
  CHECK(classes[1].first == 65);
  CHECK(classes[1].end == 384);
  CHECK(classes[1].representative == 128);
  CHECK(lengthClasses(d128Spec(), none).size() == 6); // dense: unchanged

  TempDir dir;
  Warnings warnings;
  auto ctx = makeContext(dir, warnings, "");
  KernelOptions options;
  options.seqlen = 34;
  options.perLengthConfig = false;
  auto shortOne = compileOk(*ctx, spec, options);
  CHECK(shortOne->info().config.family == "mma_sync");
  CHECK(shortOne->info().config == *ctx->heuristicConfig(spec, 64));
  options.seqlen = 1024;
  auto longer = compileOk(*ctx, spec, options);
  CHECK(longer->info().config.family != "mma_sync");
}

TEST_CASE("one handle serves each length with its class's config") {
  TempDir dir;
  Warnings warnings;
  // The database tunes d128 at [1, 1024) to a config the heuristic never
  // picks, so the switch is visible without a GPU.
  TuningDatabase db(sampleGpu(), autotune::builtFlashjitVersion().str());
  TuningEntry entry;
  entry.bucket = {128, DType::BF16, false, 1, 1024};
  entry.config = {"cuda_core", 64, 32, 1, 8};
  entry.tflops = 1;
  REQUIRE(errorText(db.upsert(entry)) == "");
  std::string path = (dir / "tuning.json");
  REQUIRE(errorText(db.save(path)) == "");
  auto ctx = makeContext(dir, warnings, path);

  auto kernel = compileOk(*ctx, d128Spec()); // the hint 2048
  CHECK(kernel->configOrigin().source == ConfigSource::Heuristic);
  CHECK((kernel->servedLengths() == std::make_pair<int64_t, int64_t>(1536, 3072)));
  CHECK((forLengths(*kernel, 2048, 2048) == kernel));
  CHECK((forLengths(*kernel, 100, 2500) == kernel)); // the longer decides

  auto shortOne = forLengths(*kernel, 512, 512);
  CHECK((shortOne != kernel));
  CHECK(shortOne->info().config == entry.config);
  CHECK(shortOne->configOrigin().source == ConfigSource::Tuned);
  CHECK((shortOne->servedLengths() == std::make_pair<int64_t, int64_t>(384, 768)));
  // The same object for every length of the bucket (three classes here:
  // [1, 384), [384, 768) and [768, 1024)), and from compile().
  CHECK((forLengths(*kernel, 1, 1) == shortOne));
  CHECK((forLengths(*shortOne, 1000, 17) == shortOne));
  KernelOptions hint;
  hint.seqlen = 700;
  CHECK((compileOk(*ctx, d128Spec(), hint) == shortOne));
  // And back: the short kernel sends long calls to the long class.
  CHECK((forLengths(*shortOne, 3000, 3000) == kernel));

  auto longOne = forLengths(*kernel, 20000, 20000);
  CHECK(longOne->info().config ==
        *ctx->heuristicConfig(d128Spec(), 16384));
  CHECK(longOne->configOrigin().source == ConfigSource::Heuristic);

  // Pinned: every length runs the config built now.
  KernelOptions pinned;
  pinned.perLengthConfig = false;
  pinned.seqlen = 512;
  auto fixed = compileOk(*ctx, d128Spec(), pinned);
  CHECK((fixed != shortOne));
  CHECK(fixed->info().config == entry.config);
  CHECK((fixed->servedLengths() ==
        std::make_pair<int64_t, int64_t>(1, INT64_MAX)));
  CHECK((forLengths(*fixed, 5000, 5000) == fixed));
  KernelOptions named;
  named.config = TileConfig{"cuda_core", 32, 32, 1, 4};
  auto explicitOne = compileOk(*ctx, d128Spec(), named);
  CHECK((forLengths(*explicitOne, 100, 100) == explicitOne));
  CHECK((forLengths(*explicitOne, 100000, 100000) == explicitOne));

  // A kernel that outlives its context keeps its own config everywhere.
  ctx.reset();
  CHECK((forLengths(*kernel, 100, 100) == kernel));
  CHECK((forLengths(*kernel, 100000, 100000) == kernel));
  CHECK((forLengths(*shortOne, 5000, 5000) == shortOne));
  std::shared_ptr<const Kernel> lone;
  {
    TempDir other;
    Warnings w;
    auto c2 = makeContext(other, w);
    lone = compileOk(*c2, d128Spec());
  }
  CHECK((forLengths(*lone, 100, 100) == lone));
  CHECK(warnings.size() == 0);
}
