//===- RuntimeTestUtil.h - fixtures shared by the runtime tests ---*- C++
//-*-===//
// Why: every cache and tuning test needs a fresh directory, sample inputs,
// entries and specs, and a place to collect warnings; writing them once
// keeps the tests short.
#ifndef FLASHJIT_TESTS_UNIT_RUNTIME_RUNTIMETESTUTIL_H
#define FLASHJIT_TESTS_UNIT_RUNTIME_RUNTIMETESTUTIL_H

#include "flashjit/Autotune/TuningDatabase.h"
#include "flashjit/FlashJIT.h"
#include "flashjit/Runtime/KernelCache.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace flashjit::test {

/// mkdtemp under $TMPDIR (or /tmp), removed with everything in it.
class TempDir {
public:
  TempDir() {
    const char *base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base && *base ? base : "/tmp") + "/flashjit-rt-XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (::mkdtemp(buffer.data()))
      Path = buffer.data();
  }
  ~TempDir() {
    if (!Path.empty())
      llvm::sys::fs::remove_directories(Path, /*IgnoreErrors=*/true);
  }
  const std::string &path() const { return Path; }
  std::string operator/(const std::string &name) const {
    return Path + "/" + name;
  }

private:
  std::string Path;
};

/// Warnings a cache gave, shared with the options' callback.
struct Warnings {
  std::shared_ptr<std::mutex> mutex = std::make_shared<std::mutex>();
  std::shared_ptr<std::vector<std::string>> lines =
      std::make_shared<std::vector<std::string>>();
  size_t size() const {
    std::lock_guard<std::mutex> guard(*mutex);
    return lines->size();
  }
  std::string text() const {
    std::lock_guard<std::mutex> guard(*mutex);
    std::string all;
    for (const std::string &l : *lines)
      all += l + "\n";
    return all;
  }
};

/// A warning callback that appends to `warnings`.
inline std::function<void(llvm::StringRef)> warningSink(Warnings &warnings) {
  auto mutex = warnings.mutex;
  auto lines = warnings.lines;
  return [mutex, lines](llvm::StringRef message) {
    std::lock_guard<std::mutex> guard(*mutex);
    lines->push_back(message.str());
  };
}

/// Options for a cache in `dir` whose warnings land in `warnings`.
inline CacheOptions cacheOptions(const std::string &dir, Warnings &warnings) {
  CacheOptions options;
  options.directory = dir;
  options.onWarning = warningSink(warnings);
  return options;
}

/// A context for sm_90a (no GPU needed) with its kernel cache in `dir`;
/// its warnings and the cache's land in `warnings`.
inline llvm::Expected<std::unique_ptr<Context>>
sm90aContext(const TempDir &dir, Warnings &warnings) {
  ContextOptions options;
  options.chip = "sm_90a";
  options.cache = cacheOptions(dir / "cache", warnings);
  options.onWarning = warningSink(warnings);
  return Context::create(options);
}

/// Writes `text` to `path`, replacing it.
inline bool writeText(const std::string &path, llvm::StringRef text) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return false;
  os << text;
  return true;
}

/// The GPU the tuning tests build for, as a tuning database names it.
inline autotune::GpuIdentity sampleGpu() {
  return {"NVIDIA H100 80GB HBM3", 9, 0, "580.159.04"};
}

/// bf16, head dim 128, 16 heads: a spec in the database's d128 buckets.
inline AttentionSpec d128Spec() {
  AttentionSpec spec;
  spec.headDim = 128;
  spec.numHeads = spec.numKVHeads = 16;
  return spec;
}

/// Inputs of a kernel; `variant` changes the spec text.
inline CacheKeyInputs sampleInputs(int variant = 0) {
  CacheKeyInputs in;
  in.spec =
      "fwd;d=128;dtype=bf16;causal=1;hq=32;hkv=" + std::to_string(8 + variant);
  in.config = "cuda_core:m64:n32:s1:w4";
  in.chip = "sm_90a";
  in.flashjitVersion = "0.1.0";
  in.llvmVersion = "22.1.0";
  in.ptxVersion = "80";
  return in;
}

/// A kernel whose PTX is `ptxBytes` bytes of text that depends on `seed`.
inline CacheEntry sampleEntry(int seed = 0, size_t ptxBytes = 4096,
                              std::string cubin = "") {
  CacheEntry e;
  e.info.name = "flashjit_fwd_" + std::to_string(seed);
  e.info.config.family = "cuda_core";
  e.info.config.blockM = 64;
  e.info.config.blockN = 32;
  e.info.config.stages = 2;
  e.info.config.warps = 4;
  e.info.threadsPerBlock = 128;
  e.info.sharedMemoryBytes = 65536;
  e.info.numHeads = 32;
  std::string line = "// kernel " + std::to_string(seed) +
                     " mma.sync.aligned.m16n8k16.row.col.f32.bf16\n";
  while (e.ptx.size() < ptxBytes)
    e.ptx += line;
  e.ptx.resize(ptxBytes);
  e.cubin = std::move(cubin);
  return e;
}

/// "" for success, else the message (and the error is consumed).
inline std::string errorText(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string();
}

/// A context building for an H100 (no GPU needed) with kernels cached in
/// `dir`, the tuning database `database` (empty: the default path) and
/// its warnings collected.
inline std::unique_ptr<Context> makeContext(const TempDir &dir,
                                            Warnings &warnings,
                                            const std::string &database = "") {
  ContextOptions options;
  options.chip = "sm_90a";
  options.cache = cacheOptions(dir / "cache", warnings);
  options.tuning.database = database;
  options.tuning.gpu = sampleGpu();
  options.onWarning = warningSink(warnings);
  auto ctx = Context::create(options);
  REQUIRE_MESSAGE(static_cast<bool>(ctx),
                  (ctx ? "" : llvm::toString(ctx.takeError())));
  return std::move(*ctx);
}

inline std::shared_ptr<const Kernel>
compileOk(Context &ctx, const AttentionSpec &spec,
          const KernelOptions &options = {}) {
  auto kernel = ctx.compile(spec, options);
  REQUIRE_MESSAGE(static_cast<bool>(kernel),
                  (kernel ? "" : llvm::toString(kernel.takeError())));
  return *kernel;
}

} // namespace flashjit::test

#endif
