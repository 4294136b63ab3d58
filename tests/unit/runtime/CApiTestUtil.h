//===- CApiTestUtil.h - DLTensors for the C API tests -----------*- C++ -*-===//
// Why: the C API tests (decode, varlen) call libflashjit.so as another
// language would, on DLTensors over fake device addresses that no check
// reads; they describe them the same way.
#ifndef FLASHJIT_TESTS_UNIT_RUNTIME_CAPITESTUTIL_H
#define FLASHJIT_TESTS_UNIT_RUNTIME_CAPITESTUTIL_H

#include "flashjit/flashjit.h"

#include <cstdint>
#include <string>
#include <vector>

namespace flashjit::test {

inline bool has(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

/// A row-major DLTensor over a fake device address.
struct FakeTensor {
  std::vector<int64_t> shape;
  DLTensor dl{};
  FakeTensor(uintptr_t address, std::vector<int64_t> extents, DLDataType type)
      : shape(std::move(extents)) {
    dl.data = reinterpret_cast<void *>(address);
    dl.device = {kDLCUDA, 0};
    dl.ndim = static_cast<int32_t>(shape.size());
    dl.dtype = type;
    dl.shape = shape.data();
    dl.strides = nullptr;
  }
  FakeTensor(const FakeTensor &) = delete;
};

constexpr DLDataType kBF16{kDLBfloat, 16, 1};
constexpr DLDataType kF32{kDLFloat, 32, 1};
constexpr DLDataType kI32{kDLInt, 32, 1};

} // namespace flashjit::test

#endif
