//===- TunedConfigsTest.cpp - reading the tuning database at run time -----===//
// Why: a deployment must never fail because of its tuning database: a
// stale, corrupt or missing one is dropped with exactly one warning (or
// none, where no database was asked for), and a good one answers by bucket.
#include "RuntimeTestUtil.h"

#include "flashjit/Runtime/DeviceInfo.h"
#include "flashjit/Runtime/TunedConfigs.h"

#include <doctest/doctest.h>

#include <cstdlib>

using namespace flashjit;
using namespace flashjit::test;
using autotune::GpuIdentity;
using autotune::TuningDatabase;
using autotune::TuningEntry;

namespace {

TuningDatabase database(const GpuIdentity &gpu) {
  TuningDatabase db(gpu, autotune::builtFlashjitVersion().str());
  TuningEntry mid;
  mid.bucket = {128, DType::BF16, false, 1024, 4096};
  mid.config = {"cuda_core", 64, 32, 1, 8};
  mid.tflops = 20;
  TuningEntry longer = mid;
  longer.bucket = {128, DType::BF16, false, 4096, std::nullopt};
  longer.config = {"cuda_core", 32, 64, 1, 4};
  REQUIRE(errorText(db.upsert(mid)) == "");
  REQUIRE(errorText(db.upsert(longer)) == "");
  return db;
}

struct Opened {
  TunedConfigs table;
  std::vector<std::string> warnings;
};

Opened openTable(const DatabaseLocation &location, const GpuIdentity &gpu) {
  Opened out;
  out.table = TunedConfigs::open(
      location, gpu, autotune::builtFlashjitVersion(),
      [&](llvm::StringRef message) { out.warnings.push_back(message.str()); });
  return out;
}

} // namespace

TEST_CASE("a matching database answers by bucket, silently") {
  TempDir dir;
  std::string path = dir / "db.json";
  REQUIRE(errorText(database(sampleGpu()).save(path)) == "");
  Opened o = openTable({path, true}, sampleGpu());
  CHECK(o.warnings.empty());
  CHECK(o.table.path() == path);
  REQUIRE(o.table.size() == 2);
  auto mid = o.table.find(d128Spec(), 2048);
  REQUIRE(mid.has_value());
  CHECK(o.table.entry(*mid).config.canonical() == "cuda_core:m64:n32:s1:w8");
  auto longer = o.table.find(d128Spec(), 100000);
  REQUIRE(longer.has_value());
  CHECK(o.table.entry(*longer).config.blockM == 32);
  CHECK_FALSE(o.table.find(d128Spec(), 512).has_value());
  AttentionSpec causal = d128Spec();
  causal.causal = true;
  CHECK_FALSE(o.table.find(causal, 2048).has_value());
}

TEST_CASE("a stale database is ignored with one warning naming why") {
  TempDir dir;
  std::string path = dir / "db.json";
  REQUIRE(errorText(database(sampleGpu()).save(path)) == "");
  GpuIdentity newDriver = sampleGpu();
  newDriver.driver = "590.10";
  Opened o = openTable({path, true}, newDriver);
  CHECK(o.table.size() == 0);
  CHECK(o.table.path().empty());
  CHECK_FALSE(o.table.find(d128Spec(), 2048).has_value());
  REQUIRE(o.warnings.size() == 1);
  CHECK(o.warnings[0].find("ignoring tuning database '" + path + "'") == 0);
  CHECK(o.warnings[0].find("driver 580.159.04 differs from 590.10") !=
        std::string::npos);
  CHECK(o.warnings[0].find("using the heuristic's tile configs") !=
        std::string::npos);

  TuningDatabase older = database(sampleGpu());
  older.flashjitVersion = "0.0.1";
  REQUIRE(errorText(older.save(path)) == "");
  Opened o2 = openTable({path, false}, sampleGpu());
  REQUIRE(o2.warnings.size() == 1);
  CHECK(o2.warnings[0].find("flashjit 0.0.1 differs") != std::string::npos);
}

TEST_CASE("a corrupt or unreadable database is ignored with one warning") {
  TempDir dir;
  std::string path = dir / "db.json";
  REQUIRE(writeText(path, "{ \"format\": 1, "));
  Opened corrupt = openTable({path, true}, sampleGpu());
  CHECK(corrupt.table.size() == 0);
  REQUIRE(corrupt.warnings.size() == 1);
  CHECK(corrupt.warnings[0].find("ignoring tuning database '" + path +
                                 "': is not valid JSON") == 0);

  REQUIRE(writeText(path, "{\"format\": 1}"));
  Opened schema = openTable({path, false}, sampleGpu());
  REQUIRE(schema.warnings.size() == 1);
  CHECK(schema.warnings[0].find("wrong schema") != std::string::npos);

  // A path under a regular file cannot be read (not "missing").
  REQUIRE(writeText(dir / "file", "x"));
  std::string under = dir / "file/db.json";
  Opened unreadable = openTable({under, false}, sampleGpu());
  REQUIRE(unreadable.warnings.size() == 1);
  CHECK(unreadable.warnings[0].find("cannot be read") != std::string::npos);
}

TEST_CASE("a missing database: silent by default, a warning when named") {
  TempDir dir;
  Opened byDefault = openTable({dir / "tuning/gpu.json", false}, sampleGpu());
  CHECK(byDefault.warnings.empty());
  CHECK(byDefault.table.size() == 0);
  Opened named = openTable({dir / "shipped.json", true}, sampleGpu());
  REQUIRE(named.warnings.size() == 1);
  CHECK(named.warnings[0] == "tuning database '" + dir / "shipped.json" +
                                 "' does not exist; using the heuristic's "
                                 "tile configs");
  Opened none = openTable({"", false}, sampleGpu());
  CHECK(none.warnings.empty());
}

TEST_CASE("where the database is: named file, folder per GPU, default") {
  TempDir dir;
  std::string gpu = "NVIDIA H100 80GB HBM3";
  DatabaseLocation file = locateDatabase(dir / "db.json", "/cache", gpu);
  CHECK(file.path == dir / "db.json");
  CHECK(file.namedFile);
  DatabaseLocation folder = locateDatabase(dir.path(), "/cache", gpu);
  CHECK(folder.path == dir / "nvidia-h100-80gb-hbm3.json");
  CHECK_FALSE(folder.namedFile);
  DatabaseLocation fallback = locateDatabase("", "/cache", gpu);
  CHECK(fallback.path == "/cache/tuning/nvidia-h100-80gb-hbm3.json");
  CHECK_FALSE(fallback.namedFile);
  CHECK(locateDatabase("", "", gpu).path.empty());

  ::setenv("FLASHJIT_TUNING_DB", "/opt/app/tuning.json", 1);
  CHECK(TuningOptions::fromEnvironment().database == "/opt/app/tuning.json");
  ::unsetenv("FLASHJIT_TUNING_DB");
  CHECK(TuningOptions::fromEnvironment().database.empty());
  CHECK(TuningOptions::fromEnvironment().enabled);
}

TEST_CASE("the GPU identity: driver release from procfs, else CUDA version") {
  CHECK(parseDriverRelease("NVRM version: NVIDIA UNIX x86_64 Kernel Module  "
                           "535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
                           "GCC version:  gcc version 12.2.0\n") ==
        "535.104.05");
  CHECK(parseDriverRelease("NVRM version: NVIDIA UNIX Open Kernel Module for "
                           "x86_64  580.159.04  Release Build  "
                           "(dvs-builder@U16)  Tue Jan 6 2026\n") ==
        "580.159.04");
  CHECK(parseDriverRelease("").empty());
  CHECK(parseDriverRelease("garbage 1.2\n").empty());

  DeviceInfo info;
  info.name = "NVIDIA H200";
  info.computeMajor = 9;
  info.computeMinor = 0;
  info.driverVersionText = "13.0";
  CHECK(gpuIdentity(info).driver == "CUDA 13.0");
  info.driverRelease = "580.159.04";
  GpuIdentity id = gpuIdentity(info);
  CHECK(id.name == "NVIDIA H200");
  CHECK(id.ccMajor == 9);
  CHECK(id.ccMinor == 0);
  CHECK(id.driver == "580.159.04");
}
