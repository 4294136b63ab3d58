//===- KernelCacheProcessTest.cpp - the cache across processes ------------===//
// Why: the cache directory is shared by every process of a user (and a
// fleet's deployment). These tests run real processes (fork): two compiling
// one key at once, and one dying between writing an entry and publishing it.
#include "RuntimeTestUtil.h"
#include "flashjit/Runtime/Checksum.h"
#include "flashjit/Runtime/FileLock.h"
#include "flashjit/Runtime/KernelCache.h"

#include <atomic>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <fstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace flashjit;
using namespace flashjit::test;

namespace {

std::string readText(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void appendLine(const std::string &path, const std::string &line) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    std::string text = line + "\n";
    (void)!::write(fd, text.data(), text.size());
    ::close(fd);
  }
}

/// Waits for `pid`; its exit status, or -1 if it did not exit normally.
int waitExit(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
    return -1;
  return WEXITSTATUS(status);
}

} // namespace

TEST_CASE("two processes compiling one key: one builds, both get it") {
  TempDir dir, scratch;
  CacheKeyInputs in = sampleInputs();
  std::string key = KernelCache::makeKey(in);
  CacheEntry expected = sampleEntry(11, 100000, "CUBIN-11");
  std::string buildLog = scratch / "builds";

  // Both children block on the pipe until the parent closes it, so they
  // start their lookups together.
  int gate[2];
  REQUIRE(::pipe(gate) == 0);
  pid_t children[2];
  for (int i = 0; i < 2; ++i) {
    children[i] = ::fork();
    REQUIRE(children[i] >= 0);
    if (children[i] == 0) {
      ::close(gate[1]);
      char c;
      (void)!::read(gate[0], &c, 1);
      CacheOptions options;
      options.directory = dir.path();
      KernelCache cache(options);
      auto e = cache.getOrBuild(in, [&]() -> llvm::Expected<CacheEntry> {
        appendLine(buildLog, std::to_string(::getpid()));
        ::usleep(400 * 1000); // slow enough for the other to arrive
        return expected;
      });
      if (!e) {
        llvm::consumeError(e.takeError());
        ::_exit(2);
      }
      CacheStats s = cache.stats();
      appendLine(scratch / ("result-" + std::to_string(i)),
                 checksumHex((*e)->ptx) + " " + checksumHex((*e)->cubin) + " " +
                     (*e)->info.name + " builds=" + std::to_string(s.builds) +
                     " disk=" + std::to_string(s.diskHits));
      ::_exit(0);
    }
  }
  ::close(gate[0]);
  ::close(gate[1]);
  CHECK(waitExit(children[0]) == 0);
  CHECK(waitExit(children[1]) == 0);

  std::string builds = readText(buildLog);
  CHECK(std::count(builds.begin(), builds.end(), '\n') == 1);
  std::string r0 = readText(scratch / "result-0");
  std::string r1 = readText(scratch / "result-1");
  MESSAGE("child 0: " << r0 << "child 1: " << r1);
  std::string want = checksumHex(expected.ptx) + " " +
                     checksumHex(expected.cubin) + " " + expected.info.name;
  CHECK(r0.rfind(want, 0) == 0);
  CHECK(r1.rfind(want, 0) == 0);
  // One built, the other waited on the lock and read the result.
  bool split = (r0.find("builds=1 disk=0") != std::string::npos &&
                r1.find("builds=0 disk=1") != std::string::npos) ||
               (r1.find("builds=1 disk=0") != std::string::npos &&
                r0.find("builds=0 disk=1") != std::string::npos);
  CHECK(split);

  Warnings warnings;
  KernelCache cache(cacheOptions(dir.path(), warnings));
  auto listed = cache.list();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].key == key);
  CHECK(listed[0].valid);
  size_t others = 0;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir.path(), ec), end;
       it != end && !ec; it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    others += name != key && name != key + ".lock";
  }
  CHECK(others == 0);
}

TEST_CASE("a crash between writing and publishing leaves no visible entry") {
  TempDir dir;
  CacheKeyInputs in = sampleInputs();
  std::string key = KernelCache::makeKey(in);
  CacheEntry entry = sampleEntry(12, 50000, "CUBIN-12");

  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    CacheOptions options;
    options.directory = dir.path();
    options.beforePublish = [](llvm::StringRef) { ::_exit(42); };
    KernelCache cache(options);
    auto e = cache.getOrBuild(
        in, [&]() -> llvm::Expected<CacheEntry> { return entry; });
    llvm::consumeError(e.takeError());
    ::_exit(0); // not reached if the hook ran
  }
  REQUIRE(waitExit(child) == 42);

  // Its files are all there, but under a temporary name.
  size_t temps = 0;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir.path(), ec), end;
       it != end && !ec; it.increment(ec))
    temps += llvm::sys::path::filename(it->path()).starts_with(".tmp-" + key);
  CHECK(temps == 1);
  CHECK_FALSE(llvm::sys::fs::exists(dir / key));

  Warnings warnings;
  KernelCache cache(cacheOptions(dir.path(), warnings));
  CHECK(cache.lookup(key) == nullptr);
  CHECK(cache.list().empty());
  int calls = 0;
  auto e = cache.getOrBuild(in, [&]() -> llvm::Expected<CacheEntry> {
    ++calls;
    return entry;
  });
  REQUIRE(e);
  CHECK(calls == 1); // the dead process held the lock; the kernel freed it
  CHECK((*e)->cubin == "CUBIN-12");
  CHECK(warnings.size() == 0);
  auto removed = cache.clear();
  REQUIRE(removed);
  CHECK(*removed == 2);
}

TEST_CASE("FileLock excludes other holders and is freed on release") {
  TempDir dir;
  std::string path = dir / "k.lock";
  auto first = FileLock::acquire(path);
  REQUIRE(first);
  auto second = FileLock::tryAcquire(path);
  REQUIRE(second);
  CHECK_FALSE(second->has_value());

  // A waiter in another thread gets it once the first lets go.
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    auto lock = FileLock::acquire(path);
    got = static_cast<bool>(lock);
    if (!lock)
      llvm::consumeError(lock.takeError());
  });
  ::usleep(50 * 1000);
  CHECK_FALSE(got);
  first->unlinkAndRelease();
  waiter.join();
  CHECK(got);

  auto bad = FileLock::acquire(dir / "no/such/dir/k.lock");
  REQUIRE_FALSE(bad);
  std::string why = llvm::toString(bad.takeError());
  CHECK(why.find("cannot create lock file") != std::string::npos);
  CHECK(why.find("no/such/dir/k.lock") != std::string::npos);
}
