//===- TuningDatabaseTest.cpp - the tuning database and shape buckets -----===//
// Why: the database is read at every compile of a tuned deployment and
// written by `flashjit autotune`; a bad file must be reported with its path
// and the field to fix, a stale one detected, and a save must leave either
// the old file or the new one, never a half-written one.
#include "AutotuneTestUtil.h"

#include "flashjit/Autotune/TuningDatabase.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

using namespace flashjit;
using namespace flashjit::autotune;
using flashjit::autotune::testing::errorMessage;
using nlohmann::json;

namespace {

/// A fresh folder, removed with its contents at the end of the test.
struct TempDir {
  llvm::SmallString<128> path;
  TempDir() {
    REQUIRE_FALSE(
        llvm::sys::fs::createUniqueDirectory("flashjit-autotune", path));
  }
  ~TempDir() { llvm::sys::fs::remove_directories(path); }
  std::string file(llvm::StringRef name) const {
    llvm::SmallString<128> out(path);
    llvm::sys::path::append(out, name);
    return std::string(out);
  }
};

void writeFile(const std::string &path, llvm::StringRef text) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  REQUIRE_FALSE(ec);
  os << text;
}

template <typename T> std::string errorOf(llvm::Expected<T> value) {
  REQUIRE_FALSE(static_cast<bool>(value));
  return llvm::toString(value.takeError());
}

GpuIdentity h100() { return {"NVIDIA H100 80GB HBM3", 9, 0, "580.159.04"}; }

AttentionSpec spec(int64_t headDim, bool causal) {
  AttentionSpec s;
  s.headDim = headDim;
  s.causal = causal;
  return s;
}

TuningDatabase sampleDatabase() {
  TuningDatabase db(h100(), "0.1.0");
  TuningEntry shortSeq;
  shortSeq.bucket = {128, DType::BF16, true, 1, 1024};
  shortSeq.config = {"cuda_core", 64, 32, 1, 8};
  shortSeq.tflops = 41.5;
  shortSeq.heuristicTflops = 38.25;
  shortSeq.failed.push_back(
      {{"cuda_core", 128, 64, 1, 16}, "too many resources requested"});
  TuningEntry longSeq;
  longSeq.bucket = {128, DType::BF16, true, 4096, std::nullopt};
  longSeq.config = {"cuda_core", 128, 16, 1, 16};
  longSeq.tflops = 55;
  REQUIRE(errorMessage(db.upsert(shortSeq)) == "");
  REQUIRE(errorMessage(db.upsert(longSeq)) == "");
  return db;
}

/// The error of loading a database whose JSON is `j`.
std::string loadError(const TempDir &dir, const json &j) {
  std::string path = dir.file("db.json");
  writeFile(path, j.dump(2));
  std::string message = errorOf(TuningDatabase::load(path));
  CHECK(message.find("tuning database '" + path + "': wrong schema: ") == 0);
  return message;
}

} // namespace

TEST_CASE("default buckets: 6 seqlen ranges x d64/d128 x causal x bf16") {
  std::vector<ShapeBucket> buckets = defaultBuckets();
  REQUIRE(buckets.size() == 24);
  CHECK(buckets[0].describe() == "d64 bf16 seqlen [1, 384)");
  CHECK(buckets[5].describe() == "d64 bf16 seqlen [8192, inf)");
  CHECK(buckets[11].describe() == "d64 bf16 causal seqlen [8192, inf)");
  CHECK(buckets[23].describe() == "d128 bf16 causal seqlen [8192, inf)");
  // Each range measured at a length of the benchmark's (16k for the
  // unbounded one), 128 below them.
  const int64_t measured[] = {128, 512, 1024, 2048, 4096, 16384};
  for (size_t i = 0; i < 6; ++i)
    CHECK(buckets[i].tuningSeqlen() == measured[i]);
  CHECK(errorMessage(checkBuckets(buckets)) == "");
  for (const ShapeBucket &b : buckets)
    CHECK(b.contains(spec(b.headDim, b.causal), b.tuningSeqlen()));
}

TEST_CASE("bucket lists: empty, empty axes, bad ranges, overlaps") {
  std::string empty = llvm::toString(checkBuckets({}));
  CHECK(empty.find("the bucket list is empty") == 0);

  BucketAxes axes = defaultBucketAxes();
  axes.headDims.clear();
  CHECK(errorOf(makeBuckets(axes)) == "no head dim to tune: give at least one");
  axes = defaultBucketAxes();
  axes.seqlenStarts.clear();
  CHECK(errorOf(makeBuckets(axes)).find("no sequence-length range") == 0);
  axes = defaultBucketAxes();
  axes.seqlenStarts = {1, 4096, 1024};
  CHECK(errorOf(makeBuckets(axes)).find("increasing") != std::string::npos);
  axes = defaultBucketAxes();
  axes.headDims = {64, 100};
  CHECK(errorOf(makeBuckets(axes)).find("unsupported head dim 100") !=
        std::string::npos);

  ShapeBucket a{64, DType::BF16, false, 1, 2048};
  ShapeBucket b{64, DType::BF16, false, 1024, std::nullopt};
  ShapeBucket otherDtype{64, DType::F16, false, 1024, std::nullopt};
  CHECK(llvm::toString(checkBuckets({a, b})).find("overlaps") !=
        std::string::npos);
  CHECK(errorMessage(checkBuckets({a, otherDtype})) == "");
  ShapeBucket inverted{64, DType::BF16, false, 4096, 1024};
  CHECK(llvm::toString(checkBuckets({inverted})).find("range is empty") !=
        std::string::npos);
}

TEST_CASE("save, load and lookup round-trip") {
  TempDir dir;
  // The folder does not exist yet: save creates it.
  std::string path = defaultDatabasePath(dir.path, "NVIDIA H100 80GB HBM3");
  CHECK(llvm::StringRef(path).ends_with("/tuning/nvidia-h100-80gb-hbm3.json"));
  TuningDatabase db = sampleDatabase();
  REQUIRE(errorMessage(db.save(path)) == "");

  auto loaded = TuningDatabase::load(path);
  REQUIRE_MESSAGE(static_cast<bool>(loaded),
                  (loaded ? "" : llvm::toString(loaded.takeError())));
  CHECK(loaded->toJson() == db.toJson());
  CHECK(loaded->gpu.name == "NVIDIA H100 80GB HBM3");
  CHECK(loaded->gpu.ccMajor == 9);
  CHECK(loaded->flashjitVersion == "0.1.0");
  REQUIRE(loaded->entries.size() == 2);
  CHECK(loaded->entries[0].heuristicTflops == 38.25);
  CHECK_FALSE(loaded->entries[1].heuristicTflops.has_value());
  REQUIRE(loaded->entries[0].failed.size() == 1);
  CHECK(loaded->entries[0].failed[0].error == "too many resources requested");

  json j = db.toJson();
  CHECK(j["format"] == 1);
  CHECK(j["gpu"]["cc"] == "9.0");
  CHECK(j["entries"][1]["bucket"]["seqlen_max"].is_null());
  CHECK(j["entries"][0]["config"]["block_m"] == 64);

  auto shortHit = loaded->lookup(spec(128, true), 1000);
  REQUIRE(shortHit.has_value());
  CHECK(shortHit->canonical() == "cuda_core:m64:n32:s1:w8");
  auto longHit = loaded->lookup(spec(128, true), 100000);
  REQUIRE(longHit.has_value());
  CHECK(longHit->blockM == 128);
  CHECK_FALSE(loaded->lookup(spec(128, true), 2048).has_value()); // no bucket
  CHECK_FALSE(loaded->lookup(spec(128, false), 1000).has_value());
  CHECK_FALSE(loaded->lookup(spec(64, true), 1000).has_value());
  AttentionSpec f16 = spec(128, true);
  f16.dtype = DType::F16;
  CHECK_FALSE(loaded->lookup(f16, 1000).has_value());

  // Saving again replaces the file and leaves no temporary behind.
  db.entries[0].tflops = 42;
  REQUIRE(errorMessage(db.save(path)) == "");
  auto again = TuningDatabase::load(path);
  REQUIRE(static_cast<bool>(again));
  CHECK(again->entries[0].tflops == 42);
  std::error_code ec;
  int files = 0;
  for (llvm::sys::fs::directory_iterator
           it(llvm::sys::path::parent_path(path), ec),
       end;
       it != end && !ec; it.increment(ec))
    ++files;
  CHECK(files == 1);
}

TEST_CASE("upsert replaces the same bucket and refuses overlaps") {
  TuningDatabase db = sampleDatabase();
  TuningEntry replacement = db.entries[0];
  replacement.config.blockN = 64;
  REQUIRE(errorMessage(db.upsert(replacement)) == "");
  CHECK(db.entries.size() == 2);
  CHECK(db.entries[0].config.blockN == 64);
  TuningEntry overlapping = db.entries[0];
  overlapping.bucket.seqlenMax = 8192;
  CHECK(llvm::toString(db.upsert(overlapping)).find("overlaps") !=
        std::string::npos);
}

TEST_CASE("unreadable files and bad JSON are clear errors") {
  TempDir dir;
  std::string missing = dir.file("absent.json");
  std::string message = errorOf(TuningDatabase::load(missing));
  CHECK(message.find("tuning database '" + missing + "': cannot be read: ") ==
        0);
  CHECK(errorOf(TuningDatabase::load(dir.path)).find("cannot be read") !=
        std::string::npos);

  std::string corrupt = dir.file("corrupt.json");
  writeFile(corrupt, "{\n  \"format\": 1,\n  \"entries\": [\n");
  message = errorOf(TuningDatabase::load(corrupt));
  MESSAGE(message);
  CHECK(message.find("tuning database '" + corrupt +
                     "': is not valid JSON: "
                     "parse error at line 4") == 0);
  CHECK(message.find("delete it or run `flashjit autotune --replace`") !=
        std::string::npos);

  writeFile(corrupt, "");
  CHECK(errorOf(TuningDatabase::load(corrupt)).find("is not valid JSON") !=
        std::string::npos);
}

TEST_CASE("wrong schemas name the field") {
  TempDir dir;
  const json good = sampleDatabase().toJson();
  struct Case {
    const char *what;
    std::function<void(json &)> edit;
    const char *expected;
  };
  const Case cases[] = {
      {"not an object", [](json &j) { j = json::array(); },
       "the top level: expected an object, got array []"},
      {"newer format", [](json &j) { j["format"] = 2; },
       "format: format 2 is not the format 1 this flashjit reads"},
      {"no format", [](json &j) { j.erase("format"); },
       "format: missing field"},
      {"no driver", [](json &j) { j["gpu"].erase("driver"); },
       "gpu.driver: missing field"},
      {"bad cc", [](json &j) { j["gpu"]["cc"] = "sm_90"; },
       "gpu.cc: compute capability 'sm_90' is not of the form"},
      {"entries not a list", [](json &j) { j["entries"] = json::object(); },
       "entries: expected an array, got object {}"},
      {"block_m a string",
       [](json &j) { j["entries"][1]["config"]["block_m"] = "64"; },
       "entries[1].config.block_m: expected an integer from 1 to 1024, got "
       "string \"64\""},
      {"no family", [](json &j) { j["entries"][0]["config"].erase("family"); },
       "entries[0].config.family: missing field"},
      {"bad dtype", [](json &j) { j["entries"][0]["bucket"]["dtype"] = "f8"; },
       "entries[0].bucket.dtype: unknown dtype 'f8'"},
      {"empty range",
       [](json &j) { j["entries"][0]["bucket"]["seqlen_max"] = 1; },
       "entries[0].bucket.seqlen_max: expected an integer from 2"},
      {"tflops missing", [](json &j) { j["entries"][0].erase("tflops"); },
       "entries[0].tflops: missing field"},
      {"failed error missing",
       [](json &j) { j["entries"][0]["failed"][0].erase("error"); },
       "entries[0].failed[0].error: missing field"},
      {"overlapping buckets",
       [](json &j) { j["entries"][1]["bucket"]["seqlen_min"] = 512; },
       "entries: bucket 1 (d128 bf16 causal seqlen [512, inf)) overlaps "
       "bucket 0"},
  };
  for (const Case &c : cases) {
    CAPTURE(c.what);
    json j = good;
    c.edit(j);
    std::string message = loadError(dir, j);
    CHECK_MESSAGE(message.find(c.expected) != std::string::npos, message);
  }
}

TEST_CASE("stale databases are detected with the reason") {
  TuningDatabase db = sampleDatabase();
  CHECK_FALSE(db.isStaleFor(h100(), "0.1.0").has_value());

  GpuIdentity newDriver = h100();
  newDriver.driver = "590.10";
  auto reason = db.isStaleFor(newDriver, "0.1.0");
  REQUIRE(reason.has_value());
  CHECK(*reason ==
        "driver 580.159.04 differs from 590.10; run `flashjit autotune` again");

  GpuIdentity h200{"NVIDIA H200", 9, 0, "580.159.04"};
  reason = db.isStaleFor(h200, "0.2.0");
  REQUIRE(reason.has_value());
  CHECK(reason->find("it was tuned on the 'NVIDIA H100 80GB HBM3', this GPU "
                     "is the 'NVIDIA H200'") == 0);
  CHECK(reason->find("flashjit 0.1.0 differs from 0.2.0") != std::string::npos);

  GpuIdentity a100{"NVIDIA H100 80GB HBM3", 8, 0, "580.159.04"};
  reason = db.isStaleFor(a100, "0.1.0");
  REQUIRE(reason.has_value());
  CHECK(reason->find("compute capability 9.0 differs from 8.0") == 0);
}

TEST_CASE("database paths and the built version") {
  CHECK(sanitizeGpuName("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3");
  CHECK(sanitizeGpuName("NVIDIA A100-SXM4-80GB") == "nvidia-a100-sxm4-80gb");
  CHECK(sanitizeGpuName("  ../Tesla T4/ ") == "tesla-t4");
  CHECK(sanitizeGpuName("") == "gpu");
  CHECK(defaultDatabasePath("/var/cache/flashjit", "Tesla T4") ==
        "/var/cache/flashjit/tuning/tesla-t4.json");
  CHECK_FALSE(builtFlashjitVersion().empty());
  CHECK(builtFlashjitVersion() != "unknown");
}

TEST_CASE("replace drops every overlapping entry, whatever its range") {
  TuningDatabase db = sampleDatabase();
  TuningEntry wide;
  wide.bucket = {128, DType::BF16, true, 512, 8192};
  wide.config = {"cuda_core", 32, 16, 1, 4};
  wide.tflops = 10;
  // [512, 8192) overlaps both [1, 1024) and [4096, inf).
  CHECK(db.replace(wide) == 2);
  REQUIRE(db.entries.size() == 1);
  CHECK(db.entries[0].bucket == wide.bucket);
  TuningEntry other;
  other.bucket = {64, DType::BF16, true, 1, std::nullopt};
  other.config = wide.config;
  CHECK(db.replace(other) == 0);
  CHECK(db.entries.size() == 2);
}

TEST_CASE("filtering buckets by their description") {
  std::vector<ShapeBucket> all = defaultBuckets();
  auto causal128 = filterBuckets(all, {"d128 bf16 causal"});
  REQUIRE(static_cast<bool>(causal128));
  REQUIRE(causal128->size() == 6);
  for (const ShapeBucket &b : *causal128)
    CHECK((b.headDim == 128 && b.causal));
  // Patterns are alternatives.
  auto two = filterBuckets(all, {"d64 bf16 seqlen [1, 384)",
                                 "d128 bf16 causal seqlen [8192, inf)"});
  REQUIRE(static_cast<bool>(two));
  CHECK(two->size() == 2);
  auto unfiltered = filterBuckets(all, {});
  REQUIRE(static_cast<bool>(unfiltered));
  CHECK(unfiltered->size() == all.size());

  std::string message = errorOf(filterBuckets(all, {"d256", "d32 "}));
  CHECK(message.find("the bucket list is empty: no bucket matches 'd256', "
                     "'d32 ' (the buckets are: d64 bf16 seqlen [1, 384); ") ==
        0);
}

TEST_CASE("backward entries: their own list, round-trip and lookup") {
  TuningDatabase db = sampleDatabase();
  TuningEntry backward;
  backward.bucket = {128, DType::BF16, true, 768, 3072};
  backward.config = {"wgmma_bwd", 64, 128, 3, 8};
  backward.tflops = 470;
  backward.heuristicTflops = 455;
  CHECK(db.replaceBackward(backward) == 0);
  // Another measurement over the same lengths supersedes it.
  backward.bucket = {128, DType::BF16, true, 1536, 8192};
  backward.config = {"wgmma_bwd", 64, 128, 1, 8};
  CHECK(db.replaceBackward(backward) == 1);
  REQUIRE(db.backwardEntries.size() == 1);
  // The forward's entries are untouched and answer only forward lookups.
  CHECK(db.entries.size() == 2);

  json j = db.toJson();
  REQUIRE(j.contains("backward_entries"));
  CHECK(j["backward_entries"][0]["config"]["stages"] == 1);
  auto loaded = TuningDatabase::fromJson(j);
  REQUIRE_MESSAGE(static_cast<bool>(loaded),
                  (loaded ? "" : llvm::toString(loaded.takeError())));
  CHECK(loaded->toJson() == j);
  auto hit = loaded->lookupBackward(spec(128, true), 2048);
  REQUIRE(hit.has_value());
  CHECK(hit->canonical() == "wgmma_bwd:m64:n128:s1:w8");
  CHECK_FALSE(loaded->lookupBackward(spec(128, true), 1000).has_value());
  CHECK_FALSE(loaded->lookupBackward(spec(128, false), 2048).has_value());
  CHECK(loaded->lookup(spec(128, true), 2048) != hit);

  // A database without backward entries writes no field, and reads back.
  CHECK_FALSE(sampleDatabase().toJson().contains("backward_entries"));
  // A wrong schema names the field.
  json bad = j;
  bad["backward_entries"] = 3;
  auto refused = TuningDatabase::fromJson(bad);
  REQUIRE_FALSE(static_cast<bool>(refused));
  CHECK(llvm::toString(refused.takeError()).find("backward_entries") !=
        std::string::npos);
  bad = j;
  bad["backward_entries"].push_back(bad["backward_entries"][0]);
  refused = TuningDatabase::fromJson(bad);
  REQUIRE_FALSE(static_cast<bool>(refused));
  CHECK(llvm::toString(refused.takeError()).find("overlap") !=
        std::string::npos);
}
