//===- Checksum.cpp - fast non-cryptographic hashes of text ---------------===//
// Why: hashing text is simple enough to own; this keeps the
// cache key format under our control instead of tied to a library version.
//
// The hash reads 8 bytes at a time. Each step is a bijection of the state
// for a fixed input word and of the input word for a fixed state, so a
// change confined to one word always changes the final value; the
// finalizer spreads every input bit over the whole output.
#include "flashjit/Runtime/Checksum.h"

namespace flashjit {
namespace {

constexpr uint64_t kMulA = 0x9e3779b97f4a7c15ULL; // 2^64 / golden ratio
constexpr uint64_t kMulB = 0xc2b2ae3d27d4eb4fULL; // odd, dense bit pattern
constexpr uint64_t kMulC = 0x165667b19e3779f9ULL; // odd, dense bit pattern

inline uint64_t rotl(uint64_t x, unsigned r) {
  return (x << r) | (x >> (64 - r));
}

/// Reads 8 bytes as little-endian regardless of the host.
inline uint64_t readWord(const unsigned char *p) {
  uint64_t w = 0;
  for (unsigned i = 0; i < 8; ++i)
    w |= static_cast<uint64_t>(p[i]) << (8 * i);
  return w;
}

/// A bijective scramble of one 64-bit value (xor-shift-multiply rounds).
inline uint64_t scramble(uint64_t x) {
  x ^= x >> 31;
  x *= kMulB;
  x ^= x >> 29;
  x *= kMulC;
  x ^= x >> 32;
  return x;
}

inline uint64_t step(uint64_t state, uint64_t word) {
  state ^= scramble(word);
  return rotl(state, 27) * kMulA + kMulC;
}

} // namespace

uint64_t hash64(llvm::StringRef data, uint64_t seed) {
  const auto *p = reinterpret_cast<const unsigned char *>(data.data());
  size_t n = data.size();
  uint64_t state = scramble(seed ^ kMulB) ^ (static_cast<uint64_t>(n) * kMulA);
  for (; n >= 8; n -= 8, p += 8)
    state = step(state, readWord(p));
  // The tail word carries its length so "a" and "a\0" differ.
  uint64_t tail = static_cast<uint64_t>(n) << 56;
  for (size_t i = 0; i < n; ++i)
    tail |= static_cast<uint64_t>(p[i]) << (8 * i);
  state = step(state, tail);
  return scramble(state);
}

std::array<uint64_t, 2> hash128(llvm::StringRef data) {
  return {hash64(data, 0x6a09e667f3bcc908ULL),
          hash64(data, 0xbb67ae8584caa73bULL)};
}

std::string toHex64(uint64_t value) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4)
    out[i] = kDigits[value & 0xf];
  return out;
}

std::string checksumHex(llvm::StringRef data) { return toHex64(hash64(data)); }

std::string hash128Hex(llvm::StringRef data) {
  std::array<uint64_t, 2> h = hash128(data);
  return toHex64(h[0]) + toHex64(h[1]);
}

} // namespace flashjit
