//===- HostFloat.h - f16 and bf16 on the host -----------------------*- C++ -*-===//
// Why: inputs are made and outputs read on the CPU; these conversions
// (round to nearest even, NaN and infinity kept) are all that needs.
#ifndef FLASHJIT_DEVTOOLS_HOSTFLOAT_H
#define FLASHJIT_DEVTOOLS_HOSTFLOAT_H

#include "flashjit/Dialect/AttentionSpec.h"
#include <cstdint>

namespace flashjit {

uint16_t floatToBF16(float value);
float bf16ToFloat(uint16_t bits);
uint16_t floatToF16(float value);
float f16ToFloat(uint16_t bits);

inline uint16_t floatToBits(DType dtype, float value) {
  return dtype == DType::BF16 ? floatToBF16(value) : floatToF16(value);
}
inline float bitsToFloat(DType dtype, uint16_t bits) {
  return dtype == DType::BF16 ? bf16ToFloat(bits) : f16ToFloat(bits);
}

} // namespace flashjit

#endif
