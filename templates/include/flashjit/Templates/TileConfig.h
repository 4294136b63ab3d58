//===- TileConfig.h - tile sizes of one kernel ------------------*- C++ -*-===//
// Why: the autotuner, the compiler and the cache all speak of the same
// handful of numbers; this is their plain C++ form (the IR form is
// #attn.tile_config).
#ifndef FLASHJIT_TEMPLATES_TILECONFIG_H
#define FLASHJIT_TEMPLATES_TILECONFIG_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>

namespace flashjit {

struct TileConfig {
  /// Kernel template that lowers the attention ("cuda_core", ...).
  std::string family;
  int64_t blockM = 64; ///< query rows per thread block
  int64_t blockN = 32; ///< key/value rows per tile
  int64_t stages = 1;  ///< shared-memory buffers for K/V tiles
  int64_t warps = 4;   ///< warps per thread block

  /// "cuda_core:m64:n32:s1:w8", stable: part of the cache key.
  std::string canonical() const;
  /// The inverse of canonical(); an error names what is malformed. Whether
  /// a template can build it is the template's question (checkConfig).
  static llvm::Expected<TileConfig> parse(llvm::StringRef text);
  bool operator==(const TileConfig &o) const {
    return family == o.family && blockM == o.blockM && blockN == o.blockN &&
           stages == o.stages && warps == o.warps;
  }
  bool operator!=(const TileConfig &o) const { return !(*this == o); }
};

/// What a user asked for on a command line or through the C API: a whole
/// config ("mma_sync:m128:n48:s1:w4"), a family whose heuristic choice to
/// build ("mma_sync"), or (empty text) neither.
struct ConfigRequest {
  std::optional<TileConfig> config;
  std::optional<std::string> family;

  /// Text with a ':' is a whole config (malformed: an error); other
  /// non-empty text a family name, checked when it is used.
  static llvm::Expected<ConfigRequest> parse(llvm::StringRef text);
};

} // namespace flashjit

#endif
