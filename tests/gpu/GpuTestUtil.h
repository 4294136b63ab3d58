//===- GpuTestUtil.h - shared pieces of the GPU tests ---------------*- C++ -*-===//
// Why: every GPU test needs the one context (device opened once, kernels
// compiled once) and fresh seeds.
#ifndef FLASHJIT_TESTS_GPU_GPUTESTUTIL_H
#define FLASHJIT_TESTS_GPU_GPUTESTUTIL_H

#include "flashjit/FlashJIT.h"
#include "flashjit/DevTools/Harness.h"

#include <doctest/doctest.h>
#include <random>

namespace flashjit::test {

/// The process's context on device 0 (created by GpuMain before the tests).
Context &gpuContext();

/// What `flashjit-gpu-tests --fault-child` runs instead of the tests
/// (PersistentGpuTest.cpp): its exit code.
int runFaultChild();

/// A seed that differs on every call and every run.
inline uint64_t freshSeed() {
  static std::mt19937_64 rng(std::random_device{}());
  return rng();
}

inline std::string describe(const AttentionSpec &spec,
                            const CheckOptions &o) {
  return spec.canonical() + " b=" + std::to_string(o.batch) +
         " sq=" + std::to_string(o.seqlenQ) +
         " sk=" + std::to_string(o.seqlenK) +
         (o.layout == Layout::BSHD ? " bshd" : " bhsd") +
         " seed=" + std::to_string(o.seed) +
         (o.scale ? " scale=" + std::to_string(*o.scale) : "");
}

} // namespace flashjit::test

#endif
