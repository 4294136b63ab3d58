//===- MeasurementTemplatesTest.cpp - families only the tools know --------===//
// Why: a kernel that is wrong by design (mma_sync without its softmax) may
// exist only where a program asks for it: the template registry must not
// know it until the developer tools register it, and afterwards only a
// config that names it builds it, never the heuristic or the tuner.
#include "flashjit/Autotune/Candidates.h"
#include "flashjit/Autotune/KnownGPUs.h"
#include "flashjit/DevTools/MeasurementTemplates.h"
#include "flashjit/FlashJIT.h"
#include "flashjit/Templates/KernelTemplate.h"

#include "doctest/doctest.h"
#include "llvm/Support/Error.h"

#include <string>

using namespace flashjit;

namespace {

bool anyMeasurementOnly() {
  for (const KernelTemplate *t : allTemplates())
    if (t->measurementOnly())
      return true;
  return false;
}

AttentionSpec benchSpec() {
  AttentionSpec spec;
  spec.headDim = 128;
  spec.numHeads = 16;
  spec.numKVHeads = 16;
  return spec;
}

} // namespace

// One test case: registration is for the whole process, so the order of
// the checks matters.
TEST_CASE("mma_sync_nosoftmax: unknown until registered, then built only "
          "when named") {
  const char *family = "mma_sync_nosoftmax";
  CHECK(lookupTemplate(family) == nullptr);
  auto unknown = findTemplate(family);
  REQUIRE_FALSE(static_cast<bool>(unknown));
  CHECK(llvm::toString(unknown.takeError()).find("unknown kernel family") !=
        std::string::npos);
  CHECK_FALSE(anyMeasurementOnly());

  registerMeasurementTemplates();
  registerMeasurementTemplates(); // a second call adds nothing
  const KernelTemplate *tmpl = lookupTemplate(family);
  REQUIRE(tmpl != nullptr);
  CHECK(tmpl->family() == family);
  CHECK(tmpl->measurementOnly());
  auto found = findTemplate(family);
  REQUIRE(static_cast<bool>(found));
  CHECK(*found == tmpl);
  // Never listed, so never a candidate of the heuristic or the tuner.
  CHECK_FALSE(anyMeasurementOnly());
  auto h100 = autotune::lookupKnownGPU("h100");
  REQUIRE(static_cast<bool>(h100));
  auto set = autotune::enumerateCandidates(benchSpec(), *h100, {});
  REQUIRE(static_cast<bool>(set));
  CHECK_FALSE(set->candidates.empty());
  for (const autotune::CandidateReport &c : set->candidates)
    CHECK(c.config.family != family);

  // A config that names it builds it, under a key of its own.
  ContextOptions options;
  options.chip = "sm_90a";
  options.cache.directory = "";
  auto ctx = Context::create(options);
  REQUIRE(static_cast<bool>(ctx));
  auto config = TileConfig::parse("mma_sync_nosoftmax:m128:n64:s2:w4");
  REQUIRE(static_cast<bool>(config));
  auto kernel = (*ctx)->compile(benchSpec(), *config);
  REQUIRE_MESSAGE(static_cast<bool>(kernel),
                  (kernel ? "" : llvm::toString(kernel.takeError())));
  CHECK((*kernel)->info().config.family == family);
  auto full = (*ctx)->compile(benchSpec(),
                              TileConfig{"mma_sync", 128, 64, 2, 4});
  REQUIRE(static_cast<bool>(full));
  // Without the softmax the kernel has no exp2.
  CHECK((*full)->ptx().find("ex2.approx") != std::string::npos);
  CHECK((*kernel)->ptx().find("ex2.approx") == std::string::npos);
}
