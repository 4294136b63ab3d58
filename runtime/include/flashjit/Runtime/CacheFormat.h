//===- CacheFormat.h - the key and metadata of one cache entry ----*- C++
//-*-===//
// Why: the cache key and meta.json are a format that outlives one build of
// flashjit (entries are reused across runs and processes), so both are
// defined here, apart from the directory logic, and versioned.
#ifndef FLASHJIT_RUNTIME_CACHEFORMAT_H
#define FLASHJIT_RUNTIME_CACHEFORMAT_H

#include "flashjit/Templates/KernelABI.h"

#include "llvm/Support/Error.h"
#include <cstdint>
#include <string>

namespace flashjit {

/// Bumped whenever the layout or meta.json changes; entries of another
/// format are treated as corrupt (removed and rebuilt).
constexpr int kCacheFormatVersion = 1;

/// File names inside an entry directory.
constexpr const char *kPtxFileName = "kernel.ptx";
constexpr const char *kCubinFileName = "kernel.cubin";
constexpr const char *kMetaFileName = "meta.json";

/// Everything that determines the generated code. Each part is canonical
/// text produced elsewhere (AttentionSpec::canonical, TileConfig::canonical,
/// Target::chip, ToolchainVersions, Target::ptxVersion).
struct CacheKeyInputs {
  std::string spec;
  std::string config;
  std::string chip;
  std::string flashjitVersion;
  std::string llvmVersion;
  std::string ptxVersion;
  /// The generator's identity (generatorId() in Compiler.h); empty only
  /// in tests that pin keys.
  std::string generator;
};

/// 32 lower-case hex digits: a 128-bit hash of all inputs, each
/// length-prefixed so that no two different input tuples share a text.
std::string makeCacheKey(const CacheKeyInputs &inputs);

/// True if `name` has the shape of a key (32 lower-case hex digits).
bool isCacheKey(llvm::StringRef name);

/// Size and checksum of one file of an entry.
struct CacheFileInfo {
  uint64_t bytes = 0;
  std::string checksum; ///< checksumHex of the contents
};

/// The contents of meta.json.
struct CacheMetadata {
  std::string key;
  CacheKeyInputs inputs;
  KernelInfo info;
  CacheFileInfo ptx, cubin;
  int64_t createdUnix = 0;
  std::string created; ///< ISO 8601 UTC, e.g. "2025-01-31T12:00:00Z"
};

/// Fills key-independent fields for an entry written now.
CacheMetadata makeMetadata(llvm::StringRef key, const CacheKeyInputs &inputs,
                           const KernelInfo &info, llvm::StringRef ptx,
                           llvm::StringRef cubin);

/// meta.json text. It carries a checksum of its own fields, so a changed
/// byte anywhere in it is detected by parseMetadata.
std::string serializeMetadata(const CacheMetadata &meta);

/// Parses and checks meta.json text: JSON syntax, format version, every
/// field present with its type, its own checksum, and that its key is the
/// hash of its inputs. The error says what is wrong.
llvm::Expected<CacheMetadata> parseMetadata(llvm::StringRef text);

} // namespace flashjit

#endif
