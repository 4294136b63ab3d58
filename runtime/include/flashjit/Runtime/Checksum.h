//===- Checksum.h - fast non-cryptographic hashes of text ---------*- C++
//-*-===//
// Why: the kernel cache names entries by a 128-bit hash of their inputs and
// guards each file with a 64-bit checksum. Neither needs to resist an
// attacker (the cache directory is the user's own); both must be stable
// across runs and builds, fast on megabyte PTX, and catch any changed byte.
#ifndef FLASHJIT_RUNTIME_CHECKSUM_H
#define FLASHJIT_RUNTIME_CHECKSUM_H

#include "llvm/ADT/StringRef.h"
#include <array>
#include <cstdint>
#include <string>

namespace flashjit {

/// 64-bit hash of `data`, seeded. Stable across platforms of either byte
/// order. Any change of a single byte changes the result.
uint64_t hash64(llvm::StringRef data, uint64_t seed = 0);

/// 128-bit hash: two hash64 passes with independent seeds.
std::array<uint64_t, 2> hash128(llvm::StringRef data);

/// 16 lower-case hex digits, most significant first.
std::string toHex64(uint64_t value);

/// The checksum stored in cache metadata: toHex64(hash64(data)).
std::string checksumHex(llvm::StringRef data);

/// 32 lower-case hex digits of hash128(data).
std::string hash128Hex(llvm::StringRef data);

} // namespace flashjit

#endif
