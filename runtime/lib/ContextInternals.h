//===- ContextInternals.h - what a Context keeps, for its files -*- C++ -*-===//
// Why: a Context's methods live in Context.cpp (the forward's configs and
// kernels) and ContextBackwardDecode.cpp (the backward's and decode's);
// both use its kernel table, its record of warnings given, and the rules
// for the length hint and tuned entries declared here.
#ifndef FLASHJIT_RUNTIME_LIB_CONTEXTINTERNALS_H
#define FLASHJIT_RUNTIME_LIB_CONTEXTINTERNALS_H

#include "KernelLengthChoice.h"
#include "LoadOrBuild.h"

#include "flashjit/Autotune/TuningDatabase.h"
#include "flashjit/Backward.h"
#include "flashjit/Decode.h"
#include "flashjit/FlashJIT.h"

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>

namespace flashjit {

/// Kernels already handed out, by the fields of the spec, its variant
/// (canonical text; empty for plain attention) and the slot of the request
/// (a tuned entry, the heuristic, or a named config): the hot path (no
/// string formatting for plain specs and the first two slots, one map
/// lookup under a mutex).
struct Context::KernelTable {
  using Key = std::tuple<int64_t, int, bool, int64_t, int64_t, std::string,
                         int64_t, int64_t, std::string>;
  /// `length`: the representative of the length class a heuristic choice
  /// was made for (0 where the length does not matter).
  static Key keyOf(const AttentionSpec &s, int64_t slot, int64_t length,
                   std::string config) {
    return {s.headDim,
            static_cast<int>(s.dtype),
            s.causal,
            s.numHeads,
            s.numKVHeads,
            s.isPlain() ? std::string() : s.canonical(),
            slot,
            length,
            std::move(config)};
  }
  std::mutex mutex;
  /// Pinned kernels (a named config or family, or perLengthConfig off).
  std::map<Key, std::shared_ptr<const Kernel>> bySpec;
  /// Each spec's kernels per length class.
  std::map<Key, std::shared_ptr<Kernel::LengthChoice>> byLength;
  /// Block-mask kernels, by the spec's canonical text.
  std::map<std::string, std::shared_ptr<const BlockMaskBuilder>> builders;
  /// Backward kernels, by the spec's and the config's canonical text.
  std::map<std::string, std::shared_ptr<const BackwardKernel>> backwards;
  /// Decode kernels, by the decode spec's canonical text.
  std::map<std::string, std::shared_ptr<const DecodeKernel>> decoders;

  /// The kernel of `key` in `table` (one of the maps above): the one
  /// handed out before, else `make()`'s, built without the lock held (it
  /// may compile for a second or ask for other kernels); when two threads
  /// make one at once, both get the first one kept.
  template <typename T>
  llvm::Expected<std::shared_ptr<const T>>
  memoized(std::map<std::string, std::shared_ptr<const T>> &table,
           const std::string &key,
           llvm::function_ref<llvm::Expected<std::shared_ptr<const T>>()>
               make) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (auto it = table.find(key); it != table.end())
        return it->second;
    }
    auto made = make();
    if (!made)
      return made.takeError();
    std::lock_guard<std::mutex> lock(mutex);
    return table.try_emplace(key, std::move(*made)).first->second;
  }
};

struct Context::WarnedEntries {
  std::mutex mutex;
  /// Entries of Tuned (forward and backward), by address.
  std::set<const void *> entries;
  /// Whether `entry` is warned about for the first time.
  bool first(const void *entry) {
    std::lock_guard<std::mutex> lock(mutex);
    return entries.insert(entry).second;
  }
};

/// The seqlen that picks a bucket when the caller gives none: the
/// heuristic's hint, so both answer for the same size.
int64_t defaultSeqlen();

/// The config of `entry`, a tuning database's (at `path`) entry of the
/// bucket a request falls in, unless `unbuildable` says it cannot be built
/// here: then none, and `why` says so. `kind` names the entries in the
/// texts ("" for the forward's, "backward " for the backward's).
std::optional<ResolvedConfig>
tunedEntryConfig(llvm::StringRef path, const autotune::TuningEntry &entry,
                 llvm::Error unbuildable, llvm::StringRef kind,
                 std::string &why);

} // namespace flashjit

#endif
