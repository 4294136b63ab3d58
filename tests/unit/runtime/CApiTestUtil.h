//===- CApiTestUtil.h - DLTensors for the C API tests -----------*- C++ -*-===//
// Why: the C API tests (forward, backward, decode, varlen) call
// libflashjit.so as another language would, on DLTensors over fake device
// addresses that no check reads, in contexts with memory-only caches; they
// describe them the same way.
#ifndef FLASHJIT_TESTS_UNIT_RUNTIME_CAPITESTUTIL_H
#define FLASHJIT_TESTS_UNIT_RUNTIME_CAPITESTUTIL_H

#include "flashjit/flashjit.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"

#include <dlfcn.h>
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace flashjit::test {

inline bool has(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

inline std::string lastError() { return flashjit_last_error(); }

/// A fresh directory, removed with everything in it.
struct TempDir {
  llvm::SmallString<128> path;
  TempDir() {
    if (llvm::sys::fs::createUniqueDirectory("flashjit-capi", path))
      path.clear();
  }
  ~TempDir() {
    if (!path.empty())
      llvm::sys::fs::remove_directories(path, /*IgnoreErrors=*/true);
  }
};

/// Whether the CUDA driver library loads (a GPU may still be absent).
inline bool driverLoadable() {
  void *h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h)
    ::dlclose(h);
  return h != nullptr;
}

/// A DLTensor over a fake device address, with its own shape and
/// (row-major) strides, or none (NULL strides: row-major).
struct Tensor {
  std::vector<int64_t> shape, strides;
  DLTensor dl{};

  Tensor(uintptr_t address, std::vector<int64_t> extents, DLDataType dtype,
         bool withStrides = true)
      : shape(std::move(extents)) {
    strides.assign(shape.size(), 1);
    for (size_t i = shape.size() - 1; i-- > 0;)
      strides[i] = strides[i + 1] * shape[i + 1];
    dl.data = reinterpret_cast<void *>(address);
    dl.device = {kDLCUDA, 0};
    dl.ndim = static_cast<int32_t>(shape.size());
    dl.dtype = dtype;
    dl.shape = shape.data();
    dl.strides = withStrides ? strides.data() : nullptr;
    dl.byte_offset = 0;
  }
  Tensor(const Tensor &) = delete;
};

/// A row-major DLTensor with NULL strides.
struct FakeTensor : Tensor {
  FakeTensor(uintptr_t address, std::vector<int64_t> extents, DLDataType type)
      : Tensor(address, std::move(extents), type, /*withStrides=*/false) {}
};

constexpr DLDataType kBF16{kDLBfloat, 16, 1};
constexpr DLDataType kF16{kDLFloat, 16, 1};
constexpr DLDataType kF32{kDLFloat, 32, 1};
constexpr DLDataType kI32{kDLInt, 32, 1};

/// q, k, v, o [2, 4, 40, 64] and lse [2, 4, 40] at distinct fake addresses,
/// matching the spec from smallSpec().
struct Args {
  Tensor q, k, v, o, lse;
  explicit Args(DLDataType dtype = kBF16, int64_t kvHeads = 2)
      : q(0x10000000, {2, 4, 40, 64}, dtype),
        k(0x20000000, {2, kvHeads, 40, 64}, dtype),
        v(0x30000000, {2, kvHeads, 40, 64}, dtype),
        o(0x40000000, {2, 4, 40, 64}, dtype),
        lse(0x50000000, {2, 4, 40}, kF32) {}
};

inline flashjit_attention_spec_t smallSpec() {
  flashjit_attention_spec_t spec;
  flashjit_attention_spec_init(&spec);
  spec.head_dim = 64;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  return spec;
}

/// A context with a memory-only cache, destroyed with the fixture, for
/// `chip` (null: the device's, or sm_90a without one).
struct Ctx {
  flashjit_context_t ctx = nullptr;
  explicit Ctx(const char *chip = nullptr) {
    REQUIRE(flashjit_context_create(0, "", chip, &ctx) == FLASHJIT_STATUS_OK);
  }
  ~Ctx() { flashjit_context_destroy(ctx); }
  Ctx(const Ctx &) = delete;
};

} // namespace flashjit::test

#endif
