//===- AutotuneTestUtil.h - shared checks of the autotuner tests -*- C++
//-*-===//
// Why: "every candidate reported as fitting really fits" is checked the same
// way in every test, independently of the code under test: from the device's
// documented limits, not from the autotuner's own arithmetic.
#ifndef FLASHJIT_TESTS_UNIT_AUTOTUNE_AUTOTUNETESTUTIL_H
#define FLASHJIT_TESTS_UNIT_AUTOTUNE_AUTOTUNETESTUTIL_H

#include "flashjit/Autotune/Candidates.h"
#include "flashjit/Autotune/KnownGPUs.h"

#include <doctest/doctest.h>

namespace flashjit::autotune::testing {

/// "" on success, else the message: CHECK(errorMessage(f()) == "") shows it.
inline std::string errorMessage(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string();
}

/// The template of a family the library builds.
inline const KernelTemplate &templateOf(const char *family) {
  auto tmpl = findTemplate(family);
  REQUIRE(static_cast<bool>(tmpl));
  return **tmpl;
}

inline DeviceModel knownGPU(llvm::StringRef name) {
  auto model = lookupKnownGPU(name);
  REQUIRE(static_cast<bool>(model));
  return *model;
}

/// The FlashAttention benchmark convention: hidden size 2048 split in heads.
inline AttentionSpec benchSpec(int64_t headDim, bool causal) {
  AttentionSpec spec;
  spec.headDim = headDim;
  spec.dtype = DType::BF16;
  spec.causal = causal;
  spec.numHeads = spec.numKVHeads = 2048 / headDim;
  return spec;
}

/// Whether one block and `blocks` resident blocks respect every limit of the
/// device; registers per warp are rounded to 256 as the hardware allocates
/// them, and a block's warps spread over the SM's 4 register-file quarters.
inline bool withinLimits(const TemplateResources &r, unsigned blocks,
                         const DeviceModel &d) {
  uint64_t threads = r.threadsPerBlock;
  uint64_t warps = (threads + 31) / 32;
  uint64_t regs = (r.registersPerThread + 7) / 8 * 8;
  uint64_t shared = r.sharedMemoryBytes + d.reservedSharedMemoryPerBlock;
  uint64_t warpsPerQuarter = (d.registersPerSM / 4) / (regs * 32);
  return threads >= 1 && threads <= d.maxThreadsPerBlock &&
         r.sharedMemoryBytes <= d.sharedMemoryPerBlockOptin &&
         r.registersPerThread <= d.maxRegistersPerThread &&
         regs * threads <= d.registersPerSM && blocks >= 1 &&
         blocks * shared <= d.sharedMemoryPerSM &&
         blocks * warps * 32 <= d.maxThreadsPerSM &&
         blocks <= d.maxBlocksPerSM && blocks * warps <= 4 * warpsPerQuarter;
}

/// Fitting candidates respect every limit; rejected ones break at least one
/// (or were refused by their template).
inline void
checkReportsAgainstDevice(const std::vector<CandidateReport> &reports,
                          const DeviceModel &d) {
  for (const CandidateReport &c : reports) {
    CAPTURE(c.config.canonical());
    CAPTURE(c.rejection);
    if (c.fits()) {
      CHECK(withinLimits(c.resources, c.blocksPerSM, d));
      // One more block would break a limit: blocks per SM is the maximum.
      CHECK_FALSE(withinLimits(c.resources, c.blocksPerSM + 1, d));
      CHECK(c.warpsPerSM ==
            c.blocksPerSM * ((c.resources.threadsPerBlock + 31) / 32));
    } else if (c.rejection.find("template rejects") == std::string::npos) {
      CHECK_FALSE(withinLimits(c.resources, 1, d));
    }
  }
}

} // namespace flashjit::autotune::testing

#endif
