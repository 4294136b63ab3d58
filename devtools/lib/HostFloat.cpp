//===- HostFloat.cpp - f16 and bf16 conversions ---------------------------===//
// Why: see HostFloat.h. Written from the IEEE 754 binary16 and bfloat16
// layouts: sign, exponent, mantissa; round to nearest, ties to even.
#include "flashjit/DevTools/HostFloat.h"

#include <cmath>
#include <cstring>

namespace flashjit {

static uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
static float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t floatToBF16(float value) {
  uint32_t u = bitsOf(value);
  if (std::isnan(value))
    return static_cast<uint16_t>((u >> 16) | 0x40); // quiet NaN
  uint32_t roundingBias = 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>((u + roundingBias) >> 16);
}

float bf16ToFloat(uint16_t bits) { return floatOf(uint32_t(bits) << 16); }

uint16_t floatToF16(float value) {
  uint32_t u = bitsOf(value);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  uint32_t absBits = u & 0x7FFFFFFF;
  if (absBits > 0x7F800000) // NaN
    return sign | 0x7E00;
  if (absBits >= 0x477FF000) // rounds to >= 65520: infinity
    return sign | 0x7C00;
  if (absBits < 0x38800000) { // below the smallest normal half (2^-14)
    // Subnormal: value / 2^-24, rounded to nearest even.
    float magnitude = floatOf(absBits);
    float scaled = magnitude * 16777216.0f; // 2^24
    float rounded = std::nearbyint(scaled);
    return sign | static_cast<uint16_t>(rounded);
  }
  uint32_t mantissa = absBits & 0x7FFFFF;
  int32_t exponent = int32_t(absBits >> 23) - 127 + 15;
  uint32_t half = (uint32_t(exponent) << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1)))
    ++half; // may carry into the exponent, which is still correct
  return sign | static_cast<uint16_t>(half);
}

float f16ToFloat(uint16_t bits) {
  uint32_t sign = uint32_t(bits & 0x8000) << 16;
  uint32_t exponent = (bits >> 10) & 0x1F;
  uint32_t mantissa = bits & 0x3FF;
  if (exponent == 0) {
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31)
    return floatOf(sign | 0x7F800000 | (mantissa << 13));
  return floatOf(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

} // namespace flashjit
