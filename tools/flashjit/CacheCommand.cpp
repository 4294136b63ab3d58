//===- CacheCommand.cpp - `flashjit cache list|prune|clear|path` ----------===//
// Why: operators keep a warm cache next to a deployment; this shows where
// it is, what it holds, drops what no build of this flashjit can serve
// (after an upgrade), and empties it.
#include "Commands.h"

#include "flashjit/Runtime/CacheOptions.h"
#include "flashjit/Runtime/CachePrune.h"
#include "flashjit/Runtime/KernelCache.h"

#include "llvm/Support/raw_ostream.h"
#include <nlohmann/json.hpp>

namespace cl = llvm::cl;

namespace flashjit::tools {

static cl::opt<std::string> action(cl::Positional,
                                   cl::desc("list|prune|clear|path"),
                                   cl::init("list"), cl::sub(cacheCommand));
static cl::opt<bool> json("json", cl::desc("Print JSON"),
                          cl::sub(cacheCommand), cl::cat(category));

int runCache() {
  KernelCache cache(CacheOptions::fromEnvironment());
  if (action == "path") {
    if (json)
      llvm::outs() << nlohmann::json{{"path", cache.path().str()}}.dump()
                   << "\n";
    else
      llvm::outs() << cache.path() << "\n";
    return 0;
  }
  if (action == "clear") {
    auto removed = cache.clear();
    if (!removed)
      return reportError("cache", removed.takeError());
    if (json)
      llvm::outs() << nlohmann::json{{"path", cache.path().str()},
                                     {"removed", *removed}}
                          .dump()
                   << "\n";
    else
      llvm::outs() << "removed " << *removed << " entries from "
                   << cache.path() << "\n";
    return 0;
  }
  if (action == "prune") {
    auto report = pruneCache(cache, toolchainVersions());
    if (!report)
      return reportError("cache", report.takeError());
    if (json) {
      nlohmann::json removed = nlohmann::json::array();
      for (const PruneReport::Removed &r : report->removed) {
        nlohmann::json entry = toJson(r.entry);
        entry["reason"] = r.reason;
        removed.push_back(std::move(entry));
      }
      llvm::outs() << nlohmann::json{{"path", cache.path().str()},
                                     {"removed", removed},
                                     {"kept", report->kept},
                                     {"bytes_freed", report->bytesFreed}}
                          .dump(2)
                   << "\n";
      return 0;
    }
    for (const PruneReport::Removed &r : report->removed)
      llvm::outs() << "  removed " << r.entry.key << "  "
                   << (r.entry.kernelName.empty() ? "?" : r.entry.kernelName)
                   << "  (" << r.reason << ")\n";
    llvm::outs() << "removed " << report->removed.size() << " entries ("
                 << report->bytesFreed << " B) from " << cache.path()
                 << ", kept " << report->kept << "\n";
    return 0;
  }
  if (action == "list") {
    std::vector<CacheListing> entries = cache.list();
    if (json) {
      nlohmann::json list = nlohmann::json::array();
      for (const CacheListing &e : entries)
        list.push_back(toJson(e));
      llvm::outs() << nlohmann::json{{"path", cache.path().str()},
                                     {"entries", list}}
                          .dump(2)
                   << "\n";
      return 0;
    }
    llvm::outs() << cache.path() << ": " << entries.size() << " entries\n";
    for (const CacheListing &e : entries)
      llvm::outs() << "  " << e.key << "  "
                   << (e.kernelName.empty() ? "?" : e.kernelName) << "  ptx "
                   << e.ptxBytes << " B, cubin " << e.cubinBytes << " B  "
                   << e.created << (e.valid ? "" : "  INVALID: " + e.problem)
                   << "\n";
    return 0;
  }
  return reportError("cache", llvm::createStringError(
                                  "unknown action '" + action +
                                  "': expected list, prune, clear or path"));
}

} // namespace flashjit::tools
