//===- CacheFormatTest.cpp - keys, checksums, meta.json, options ----------===//
// Why: the key and meta.json are an on-disk format shared across runs;
// these tests pin it down and check that every input and every byte counts.
#include "flashjit/Runtime/CacheFormat.h"
#include "RuntimeTestUtil.h"
#include "flashjit/Runtime/CacheOptions.h"
#include "flashjit/Runtime/Checksum.h"
#include "flashjit/Runtime/KernelCache.h"

#include <doctest/doctest.h>
#include <random>
#include <set>

using namespace flashjit;
using namespace flashjit::test;

TEST_CASE("hash64 is stable and sensitive to every byte") {
  // Pinned values: a change here changes every cache key (bump the format).
  CHECK(toHex64(hash64("")) == toHex64(hash64("")));
  CHECK(hash64("a") != hash64(llvm::StringRef("a\0", 2)));
  CHECK(hash64("abc", 1) != hash64("abc", 2));
  CHECK(toHex64(0x0123456789abcdefULL) == "0123456789abcdef");

  std::mt19937_64 rng(42);
  std::string data(100003, '\0');
  for (char &c : data)
    c = static_cast<char>(rng());
  std::string sum = checksumHex(data);
  CHECK(sum.size() == 16);
  CHECK(checksumHex(data) == sum);
  size_t flips = 0, detected = 0;
  for (size_t i = 0; i < data.size(); i += 997) {
    for (unsigned char bit : {0x01, 0x80}) {
      std::string copy = data;
      copy[i] = static_cast<char>(copy[i] ^ bit);
      ++flips;
      detected += checksumHex(copy) != sum;
    }
  }
  std::string last = data;
  last.back() ^= 0x10;
  ++flips;
  detected += checksumHex(last) != sum;
  CHECK(detected == flips);
  // Truncation by one byte is a different checksum too.
  CHECK(checksumHex(llvm::StringRef(data).drop_back()) != sum);
}

TEST_CASE("cache key: stable, 32 hex digits, every input counts") {
  CacheKeyInputs base = sampleInputs();
  std::string key = KernelCache::makeKey(base);
  CHECK(key.size() == 32);
  CHECK(isCacheKey(key));
  CHECK(KernelCache::makeKey(base) == key);
  CHECK(KernelCache::makeKey(base.spec, base.config, base.chip,
                             base.flashjitVersion, base.llvmVersion,
                             base.ptxVersion) == key);
  // Pinned: the format is part of every cache on disk.
  CHECK(key == "598dff53cbc8e7f6937f1ed2e60b40c8");

  std::set<std::string> keys{key};
  auto variant = [&](std::string CacheKeyInputs::*field) {
    CacheKeyInputs in = base;
    in.*field += "x";
    std::string k = KernelCache::makeKey(in);
    CHECK_MESSAGE(k != key, "field did not change the key");
    keys.insert(k);
  };
  variant(&CacheKeyInputs::spec);
  variant(&CacheKeyInputs::config);
  variant(&CacheKeyInputs::chip);
  variant(&CacheKeyInputs::flashjitVersion);
  variant(&CacheKeyInputs::llvmVersion);
  variant(&CacheKeyInputs::ptxVersion);
  variant(&CacheKeyInputs::generator);
  CHECK(keys.size() == 8);

  // Moving text across a field boundary is a different key.
  CacheKeyInputs a = base, b = base;
  a.spec += ";x";
  b.config = ";x" + b.config;
  CHECK(KernelCache::makeKey(a) != KernelCache::makeKey(b));

  CHECK_FALSE(isCacheKey("0123"));
  CHECK_FALSE(isCacheKey("0123456789ABCDEF0123456789abcdef"));
  CHECK_FALSE(isCacheKey(".tmp-0123456789abcdef0123456789ab"));
}

TEST_CASE("meta.json round-trips and rejects damage") {
  CacheKeyInputs in = sampleInputs();
  CacheEntry e = sampleEntry(3, 1000, "CUBIN");
  std::string key = makeCacheKey(in);
  CacheMetadata meta = makeMetadata(key, in, e.info, e.ptx, e.cubin);
  std::string text = serializeMetadata(meta);

  auto parsed = parseMetadata(text);
  REQUIRE(parsed);
  CHECK(parsed->key == key);
  CHECK(parsed->inputs.spec == in.spec);
  CHECK(parsed->inputs.ptxVersion == in.ptxVersion);
  CHECK(parsed->info.name == e.info.name);
  CHECK(parsed->info.config == e.info.config);
  CHECK(parsed->info.threadsPerBlock == 128);
  CHECK(parsed->info.sharedMemoryBytes == 65536);
  CHECK(parsed->info.numHeads == 32);
  CHECK(parsed->ptx.bytes == 1000);
  CHECK(parsed->ptx.checksum == checksumHex(e.ptx));
  CHECK(parsed->cubin.bytes == 5);
  CHECK(parsed->created.size() == 20);
  CHECK(parsed->createdUnix > 1600000000);

  auto problem = [](const std::string &t) {
    auto m = parseMetadata(t);
    return m ? std::string() : llvm::toString(m.takeError());
  };
  CHECK(problem("not json {") == "meta.json: not a JSON object");
  CHECK(problem("[1,2]") == "meta.json: not a JSON object");
  CHECK(problem("{}").find("'format' is missing") != std::string::npos);
  CHECK(problem(R"({"format": 99})").find("format 99") != std::string::npos);

  // One changed digit (threads 128 -> 129) breaks the self checksum.
  std::string altered = text;
  size_t at = altered.find("\"threads\": 128");
  REQUIRE(at != std::string::npos);
  altered[at + 13] = '9';
  CHECK(problem(altered).find("checksum mismatch") != std::string::npos);
}

TEST_CASE("cache directory: one rule, environment read in one place") {
  using O = CacheOptions;
  CHECK(O::resolveDirectory("/c", "/x", "/h") == "/c");
  CHECK(O::resolveDirectory(nullptr, "/x", "/h") == "/x/flashjit");
  CHECK(O::resolveDirectory("", "/x", "/h") == "/x/flashjit");
  CHECK(O::resolveDirectory(nullptr, nullptr, "/h") == "/h/.cache/flashjit");
  CHECK(O::resolveDirectory("", "", "/h") == "/h/.cache/flashjit");
  CHECK(O::resolveDirectory(nullptr, nullptr, nullptr).empty());

  const char *old = std::getenv("FLASHJIT_CACHE_DIR");
  std::string saved = old ? old : "";
  ::setenv("FLASHJIT_CACHE_DIR", "/some/where", 1);
  CHECK(CacheOptions::fromEnvironment().directory == "/some/where");
  if (old)
    ::setenv("FLASHJIT_CACHE_DIR", saved.c_str(), 1);
  else
    ::unsetenv("FLASHJIT_CACHE_DIR");
}
