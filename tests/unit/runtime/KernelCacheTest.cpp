//===- KernelCacheTest.cpp - the kernel cache within one process ----------===//
// Why: lookups must be fast, entries on disk must be all-or-nothing, and a
// damaged entry or an unusable directory must cost a warning and a rebuild,
// never a wrong kernel or a failure.
#include "flashjit/Runtime/KernelCache.h"
#include "flashjit/Runtime/CachePrune.h"
#include "RuntimeTestUtil.h"
#include "flashjit/Runtime/Checksum.h"

#include <chrono>
#include <doctest/doctest.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>
#include <sys/stat.h>
#include <unistd.h>

using namespace flashjit;
using namespace flashjit::test;

namespace {

/// A build callback that counts its calls and returns `entry`.
struct CountingBuild {
  CacheEntry entry;
  int calls = 0;
  llvm::Expected<CacheEntry> operator()() {
    ++calls;
    return entry;
  }
};

std::string readText(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

size_t countNames(const std::string &dir, llvm::StringRef prefix) {
  size_t n = 0;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec))
    n += llvm::sys::path::filename(it->path()).starts_with(prefix);
  return n;
}

bool sameEntry(const CacheEntry &a, const CacheEntry &b) {
  return a.ptx == b.ptx && a.cubin == b.cubin && a.info.name == b.info.name &&
         a.info.config == b.info.config &&
         a.info.threadsPerBlock == b.info.threadsPerBlock &&
         a.info.sharedMemoryBytes == b.info.sharedMemoryBytes &&
         a.info.numHeads == b.info.numHeads;
}

} // namespace

TEST_CASE("memory, then disk, then build") {
  TempDir dir;
  Warnings warnings;
  CacheKeyInputs in = sampleInputs();
  std::string key = KernelCache::makeKey(in);
  CountingBuild build{sampleEntry(1, 5000, "CUBIN-1")};

  {
    KernelCache cache(cacheOptions(dir.path(), warnings));
    CHECK(cache.path() == dir.path());
    CHECK(cache.lookup(key) == nullptr);
    auto first = cache.getOrBuild(in, build);
    REQUIRE(first);
    CHECK(sameEntry(**first, build.entry));
    auto second = cache.getOrBuild(key, in, build);
    REQUIRE(second);
    CHECK(first->get() == second->get()); // the same object from memory
    CHECK(build.calls == 1);
    CacheStats s = cache.stats();
    CHECK(s.builds == 1);
    CHECK(s.memoryHits == 1);
    CHECK(s.diskHits == 0);
  }
  CHECK(llvm::sys::fs::exists(dir / key + "/kernel.ptx"));
  CHECK(llvm::sys::fs::exists(dir / key + "/kernel.cubin"));
  CHECK(llvm::sys::fs::exists(dir / key + "/meta.json"));
  CHECK(countNames(dir.path(), ".tmp-") == 0);

  auto meta = nlohmann::json::parse(readText(dir / key + "/meta.json"));
  CHECK(meta["key"] == key);
  CHECK(meta["format"] == kCacheFormatVersion);
  CHECK(meta["inputs"]["spec"] == in.spec);
  CHECK(meta["versions"]["llvm"] == in.llvmVersion);
  CHECK(meta["kernel"]["block_m"] == 64);
  CHECK(meta["kernel"]["shared_bytes"] == 65536);
  CHECK(meta["files"]["kernel.ptx"]["bytes"] == 5000);
  CHECK(meta["files"]["kernel.cubin"]["checksum"] == checksumHex("CUBIN-1"));

  KernelCache fresh(cacheOptions(dir.path(), warnings));
  auto fromDisk = fresh.getOrBuild(in, build);
  REQUIRE(fromDisk);
  CHECK(sameEntry(**fromDisk, build.entry));
  CHECK(build.calls == 1);
  CHECK(fresh.stats().diskHits == 1);
  CHECK(fresh.stats().builds == 0);
  CHECK(warnings.size() == 0);
}

TEST_CASE("a failing build is returned unchanged and not cached") {
  TempDir dir;
  Warnings warnings;
  KernelCache cache(cacheOptions(dir.path(), warnings));
  int calls = 0;
  auto failed =
      cache.getOrBuild(sampleInputs(), [&]() -> llvm::Expected<CacheEntry> {
        ++calls;
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "head dim 7 is not a multiple of 8");
      });
  REQUIRE_FALSE(failed);
  CHECK(llvm::toString(failed.takeError()) ==
        "head dim 7 is not a multiple of 8");
  CHECK(cache.list().empty());
  CountingBuild build{sampleEntry()};
  CHECK(cache.getOrBuild(sampleInputs(), build));
  CHECK(build.calls == 1);

  // A key that is not the key of its inputs is a caller bug, reported.
  auto wrong = cache.getOrBuild(std::string(32, 'a'), sampleInputs(), build);
  REQUIRE_FALSE(wrong);
  CHECK(llvm::toString(wrong.takeError()).find("not the key of its inputs") !=
        std::string::npos);
}

TEST_CASE("leftover temporary directories are never loaded") {
  TempDir dir;
  Warnings warnings;
  CacheKeyInputs in = sampleInputs();
  std::string key = KernelCache::makeKey(in);
  CountingBuild build{sampleEntry(2)};
  {
    KernelCache cache(cacheOptions(dir.path(), warnings));
    REQUIRE(cache.getOrBuild(in, build));
  }
  // A complete entry that never got renamed into place, as a crash leaves.
  std::string tmp = dir / (".tmp-" + key + "-999-deadbeef");
  REQUIRE(::rename((dir / key).c_str(), tmp.c_str()) == 0);

  KernelCache cache(cacheOptions(dir.path(), warnings));
  CHECK(cache.lookup(key) == nullptr);
  CHECK(cache.list().empty());
  REQUIRE(cache.getOrBuild(in, build));
  CHECK(build.calls == 2);
  CHECK(warnings.size() == 0);
  auto listed = cache.list();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].valid);

  auto removed = cache.clear();
  REQUIRE(removed);
  CHECK(*removed == 2); // the entry and the stray temporary directory
  CHECK(countNames(dir.path(), "") == 0);
}

TEST_CASE("a damaged entry is detected, warned about, rebuilt, then good") {
  TempDir dir;
  CacheKeyInputs in = sampleInputs();
  std::string key = KernelCache::makeKey(in);
  std::string entry = dir / key;
  CountingBuild build{sampleEntry(4, 20000, "CUBIN-4")};
  {
    Warnings none;
    KernelCache cache(cacheOptions(dir.path(), none));
    REQUIRE(cache.getOrBuild(in, build));
  }

  std::string expectWord;
  SUBCASE("truncated kernel.ptx") {
    std::string ptx = readText(entry + "/kernel.ptx");
    writeText(entry + "/kernel.ptx", ptx.substr(0, ptx.size() / 2));
    expectWord = "truncated";
  }
  SUBCASE("a flipped byte in kernel.ptx") {
    std::string ptx = readText(entry + "/kernel.ptx");
    ptx[ptx.size() / 3] ^= 0x20;
    writeText(entry + "/kernel.ptx", ptx);
    expectWord = "kernel.ptx does not match its checksum";
  }
  SUBCASE("a flipped byte in kernel.cubin") {
    std::string cubin = readText(entry + "/kernel.cubin");
    cubin[0] ^= 0x01;
    writeText(entry + "/kernel.cubin", cubin);
    expectWord = "kernel.cubin does not match its checksum";
  }
  SUBCASE("garbage meta.json") {
    writeText(entry + "/meta.json", "\x7f"
                                    "ELF garbage {{{");
    expectWord = "not a JSON object";
  }
  SUBCASE("meta.json edited") {
    std::string meta = readText(entry + "/meta.json");
    size_t at = meta.find("\"warps\": 4");
    REQUIRE(at != std::string::npos);
    meta[at + 9] = '8';
    writeText(entry + "/meta.json", meta);
    expectWord = "checksum mismatch";
  }
  SUBCASE("meta.json missing") {
    REQUIRE(::unlink((entry + "/meta.json").c_str()) == 0);
    expectWord = "meta.json";
  }
  SUBCASE("kernel.cubin missing") {
    REQUIRE(::unlink((entry + "/kernel.cubin").c_str()) == 0);
    expectWord = "kernel.cubin";
  }

  Warnings warnings;
  KernelCache cache(cacheOptions(dir.path(), warnings));
  CHECK(cache.lookup(key) == nullptr); // never loaded, even by lookup
  auto listed = cache.list();
  REQUIRE(listed.size() == 1);
  CHECK_FALSE(listed[0].valid);
  CHECK(listed[0].problem.find(expectWord) != std::string::npos);

  auto rebuilt = cache.getOrBuild(in, build);
  REQUIRE(rebuilt);
  CHECK(sameEntry(**rebuilt, build.entry));
  CHECK(build.calls == 2);
  CHECK(cache.stats().corruptEntries == 1);
  REQUIRE(warnings.size() == 1);
  std::string text = warnings.text();
  CHECK(text.find("corrupt") != std::string::npos);
  CHECK(text.find(expectWord) != std::string::npos);
  CHECK(text.find(entry) != std::string::npos);
  CHECK(countNames(dir.path(), ".t") == 0); // no temp or trash left

  Warnings after;
  KernelCache again(cacheOptions(dir.path(), after));
  auto good = again.getOrBuild(in, build);
  REQUIRE(good);
  CHECK(sameEntry(**good, build.entry));
  CHECK(again.stats().diskHits == 1);
  CHECK(build.calls == 2);
  CHECK(after.size() == 0);
}

TEST_CASE("an unusable directory warns once and the cache keeps working") {
  TempDir dir;
  Warnings warnings;
  // Below a regular file: fails for root too, unlike chmod.
  writeText(dir / "file", "not a directory");
  std::string bad = dir / "file/cache";
  KernelCache cache(cacheOptions(bad, warnings));
  CountingBuild build{sampleEntry(5)};
  for (int variant = 0; variant < 3; ++variant) {
    auto e = cache.getOrBuild(sampleInputs(variant), build);
    REQUIRE(e);
    CHECK(sameEntry(**e, build.entry));
  }
  CHECK(cache.getOrBuild(sampleInputs(0), build));
  CHECK(build.calls == 3);
  CHECK(cache.stats().memoryHits == 1);
  CHECK_FALSE(cache.diskEnabled());
  REQUIRE(warnings.size() == 1);
  std::string text = warnings.text();
  CHECK(text.find(bad) != std::string::npos);
  CHECK(text.find("memory only") != std::string::npos);
  // The cubin goes into the memory entry; nothing is written.
  std::string key1 = KernelCache::makeKey(sampleInputs(1));
  CHECK(errorText(cache.storeCubin(key1, "C")) == "");
  REQUIRE(cache.lookup(key1));
  CHECK(cache.lookup(key1)->cubin == "C");
  CHECK(cache.list().empty());
  auto cleared = cache.clear();
  REQUIRE(cleared);
  CHECK(*cleared == 0);
  CHECK(cache.lookup(key1) == nullptr);
  CHECK(warnings.size() == 1);
}

TEST_CASE("a directory that reads but cannot be written keeps serving reads") {
  TempDir dir;
  Warnings warnings;
  CacheKeyInputs in = sampleInputs();
  std::string key = KernelCache::makeKey(in);
  CountingBuild build{sampleEntry(6)};
  {
    KernelCache cache(cacheOptions(dir.path(), warnings));
    REQUIRE(cache.getOrBuild(in, build));
  }
  // A directory where another key's lock file belongs makes writes fail
  // (works as root, unlike a read-only mode).
  CacheKeyInputs other = sampleInputs(1);
  std::string otherKey = KernelCache::makeKey(other);
  REQUIRE(::mkdir((dir / otherKey + ".lock").c_str(), 0755) == 0);

  KernelCache cache(cacheOptions(dir.path(), warnings));
  auto built = cache.getOrBuild(other, build);
  REQUIRE(built);
  CHECK(build.calls == 2);
  CHECK_FALSE(cache.diskWritable());
  CHECK(cache.diskEnabled());
  REQUIRE(warnings.size() == 1);
  CHECK(warnings.text().find("cannot be written") != std::string::npos);
  CHECK(warnings.text().find(otherKey + ".lock") != std::string::npos);
  // The existing entry is still read from disk.
  auto old = cache.getOrBuild(in, build);
  REQUIRE(old);
  CHECK(cache.stats().diskHits == 1);
  CHECK(build.calls == 2);
  CHECK(warnings.size() == 1);
}

TEST_CASE("storeCubin replaces the cubin atomically and keeps the entry") {
  TempDir dir;
  Warnings warnings;
  CacheKeyInputs in = sampleInputs();
  std::string key = KernelCache::makeKey(in);
  CountingBuild build{sampleEntry(7, 3000, "")};
  std::string created;
  {
    KernelCache cache(cacheOptions(dir.path(), warnings));
    auto e = cache.getOrBuild(in, build);
    REQUIRE(e);
    CHECK((*e)->cubin.empty());
    created = cache.list().at(0).created;
    REQUIRE(errorText(cache.storeCubin(key, "LINKED-CUBIN")) == "");
    auto updated = cache.lookup(key);
    REQUIRE(updated);
    CHECK(updated->cubin == "LINKED-CUBIN");
    CHECK((*e)->cubin.empty()); // holders of the old entry are unaffected
  }
  KernelCache fresh(cacheOptions(dir.path(), warnings));
  auto e = fresh.lookup(key);
  REQUIRE(e);
  CHECK(e->cubin == "LINKED-CUBIN");
  CHECK(e->ptx == build.entry.ptx);
  auto listed = fresh.list();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].valid);
  CHECK(listed[0].cubinBytes == 12);
  CHECK(listed[0].created == created);
  CHECK(countNames(dir.path(), ".t") == 0);
  CHECK(warnings.size() == 0);

  CHECK(errorText(fresh.storeCubin(std::string(32, 'f'), "X"))
            .find("no such entry") != std::string::npos);
}

TEST_CASE("list and clear") {
  TempDir dir;
  Warnings warnings;
  KernelCache cache(cacheOptions(dir.path(), warnings));
  for (int v = 0; v < 3; ++v) {
    CountingBuild build{sampleEntry(v, 100 + v, "C")};
    REQUIRE(cache.getOrBuild(sampleInputs(v), build));
  }
  std::string broken = KernelCache::makeKey(sampleInputs(2));
  writeText(dir / broken + "/kernel.ptx", "x");
  auto listed = cache.list();
  REQUIRE(listed.size() == 3);
  size_t valid = 0;
  for (const CacheListing &l : listed) {
    valid += l.valid;
    CHECK(isCacheKey(l.key));
    CHECK(l.kernelName.rfind("flashjit_fwd_", 0) == 0);
    CHECK(l.cubinBytes == 1);
    CHECK(toJson(l)["key"] == l.key);
  }
  CHECK(valid == 2);
  CHECK(toJson(cache.stats())["builds"] == 3);

  auto removed = cache.clear();
  REQUIRE(removed);
  CHECK(*removed == 3);
  CHECK(cache.list().empty());
  CHECK(countNames(dir.path(), "") == 0); // lock files went too
  CHECK(cache.lookup(broken) == nullptr);
}

TEST_CASE("prune drops what another toolchain wrote and damaged entries") {
  TempDir dir;
  Warnings warnings;
  KernelCache cache(cacheOptions(dir.path(), warnings));
  ToolchainVersions now{"0.1.0", "22.1.0", "g-now"};
  // Entries of this build (two chips), of an older flashjit, another LLVM
  // and an older generator; one of this build's is then damaged.
  std::vector<CacheKeyInputs> inputs;
  for (int v = 0; v < 6; ++v) {
    CacheKeyInputs in = sampleInputs(v);
    in.generator = "g-now";
    inputs.push_back(in);
  }
  inputs[1].chip = "sm_80";
  inputs[2].flashjitVersion = "0.0.9";
  inputs[3].llvmVersion = "21.1.0";
  inputs[4].generator = "g-old";
  for (int v = 0; v < 6; ++v) {
    CountingBuild build{sampleEntry(v, 100, "C")};
    REQUIRE(cache.getOrBuild(inputs[v], build));
  }
  const std::string damaged = KernelCache::makeKey(inputs[5]);
  writeText(dir / damaged + "/kernel.ptx", "x");

  auto listed = cache.list();
  REQUIRE(listed.size() == 6);
  for (const CacheListing &l : listed)
    if (l.key == KernelCache::makeKey(inputs[3]))
      CHECK(toJson(l)["llvm"] == "21.1.0");

  auto report = pruneCache(cache, now);
  REQUIRE_MESSAGE(bool(report), llvm::toString(report.takeError()));
  CHECK(report->kept == 2);
  REQUIRE(report->removed.size() == 4);
  CHECK(report->bytesFreed == 4 * 101);
  std::set<std::string> reasons;
  for (const auto &r : report->removed)
    reasons.insert(r.reason.substr(0, r.reason.find(' ')));
  CHECK(reasons == std::set<std::string>{"damaged:", "flashjit", "LLVM",
                                         "generator"});
  std::set<std::string> left;
  for (const CacheListing &l : cache.list())
    left.insert(l.key);
  CHECK(left == std::set<std::string>{KernelCache::makeKey(inputs[0]),
                                      KernelCache::makeKey(inputs[1])});
  CHECK(countNames(dir.path(), damaged) == 0); // its lock file went too
  // Gone from memory too: a lookup builds again.
  CountingBuild again{sampleEntry(2, 100, "C")};
  REQUIRE(cache.getOrBuild(inputs[2], again));
  CHECK(again.calls == 1);
  // Pruning again removes nothing new but the entry just rebuilt.
  auto second = pruneCache(cache, now);
  REQUIRE(bool(second));
  CHECK(second->removed.size() == 1);
  CHECK(second->kept == 2);
}

TEST_CASE("memory hits cost well under 2 microseconds") {
  TempDir dir;
  Warnings warnings;
  KernelCache cache(cacheOptions(dir.path(), warnings));
  CacheKeyInputs in = sampleInputs();
  std::string key = KernelCache::makeKey(in);
  CountingBuild build{sampleEntry(8, 200000)};
  REQUIRE(cache.getOrBuild(key, in, build));

  constexpr int kHits = 100000;
  using Clock = std::chrono::steady_clock;
  size_t sink = 0;
  auto start = Clock::now();
  for (int i = 0; i < kHits; ++i) {
    auto e = cache.getOrBuild(key, in, build);
    sink += e ? (*e)->ptx.size() : 0;
  }
  double keyed =
      std::chrono::duration<double, std::nano>(Clock::now() - start).count() /
      kHits;
  start = Clock::now();
  for (int i = 0; i < kHits; ++i) {
    auto e = cache.getOrBuild(in, build);
    sink += e ? (*e)->ptx.size() : 0;
  }
  double hashed =
      std::chrono::duration<double, std::nano>(Clock::now() - start).count() /
      kHits;
  MESSAGE("memory hit, key given: " << keyed
                                    << " ns; key hashed from inputs: " << hashed
                                    << " ns (mean of " << kHits << ")");
  CHECK(sink == size_t(2) * kHits * 200000);
  CHECK(build.calls == 1);
  CHECK(keyed < 2000.0);
  CHECK(hashed < 2000.0);
}

TEST_CASE("a warm disk hit costs under 5 milliseconds") {
  TempDir dir;
  Warnings warnings;
  CacheKeyInputs in = sampleInputs();
  // Sizes of a real forward kernel: a few hundred KB of PTX and cubin.
  CountingBuild build{sampleEntry(9, 400000, std::string(300000, 'c'))};
  {
    KernelCache cache(cacheOptions(dir.path(), warnings));
    REQUIRE(cache.getOrBuild(in, build));
  }
  KernelCache fresh(cacheOptions(dir.path(), warnings));
  auto start = std::chrono::steady_clock::now();
  auto e = fresh.getOrBuild(in, build);
  double ms = std::chrono::duration<double, std::milli>(
                  std::chrono::steady_clock::now() - start)
                  .count();
  REQUIRE(e);
  MESSAGE("disk hit (fresh cache, 400 KB PTX + 300 KB cubin): " << ms << " ms");
  CHECK(build.calls == 1);
  CHECK(fresh.stats().diskHits == 1);
  CHECK(ms < 5.0);
}
