// Why: the decode entries of the tuning database (DecodeTuning.h) key the
// runtime's per-launch dispatch; these tests check, without a GPU, that
// buckets cover their ranges without overlap, that entries survive the
// database's JSON and bad ones are errors naming the field, and that the
// candidates start with the default and respect the chip.
#include "flashjit/Autotune/DecodeTuning.h"
#include "flashjit/Autotune/TuningDatabase.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

using namespace flashjit;
using namespace flashjit::autotune;

TEST_CASE("decode buckets: the default grid, disjoint, covering") {
  DecodeBucket problem;
  std::vector<DecodeBucket> buckets = defaultDecodeBuckets(problem);
  REQUIRE(buckets.size() == 12);
  for (size_t i = 0; i < buckets.size(); ++i)
    for (size_t j = 0; j < buckets.size(); ++j)
      CHECK(buckets[i].overlaps(buckets[j]) == (i == j));
  DecodeSpec spec = problem.spec();
  for (int64_t batch : {1, 3, 4, 8, 63, 64, 1000})
    for (int64_t kv : {1, 4095, 4096, 32767, 32768, 1 << 20}) {
      int hits = 0;
      for (const DecodeBucket &b : buckets)
        hits += b.contains(spec, batch, kv);
      CHECK(hits == 1);
    }
  // Another problem is never contained.
  DecodeSpec paged = spec;
  paged.pageSize = 16;
  for (const DecodeBucket &b : buckets)
    CHECK_FALSE(b.contains(paged, 1, 1000));
  // The measured shape lies in the bucket.
  for (const DecodeBucket &b : buckets) {
    INFO(b.describe());
    CHECK(b.contains(spec, b.tuningBatch(), b.tuningKvLen()));
  }
  CHECK_FALSE(bool(makeDecodeBuckets(problem, {}, {1})));
  auto bad = makeDecodeBuckets(problem, {1, 8, 4}, {1});
  REQUIRE_FALSE(bool(bad));
  CHECK(llvm::toString(bad.takeError()).find("increase") != std::string::npos);
}

TEST_CASE("decode entries: through the database's JSON and back") {
  TuningDatabase db(GpuIdentity{"NVIDIA H100 80GB HBM3", 9, 0, "580"}, "1.0");
  DecodeTuningEntry e;
  e.bucket.batchMin = 4;
  e.bucket.batchMax = 16;
  e.bucket.kvMin = 32768;
  e.config = {64, 2, 0, 2, 1, 2};
  e.gbps = 3000;
  e.defaultGbps = 2900;
  CHECK(db.replaceDecode(e) == 0);
  DecodeTuningEntry wider = e;
  wider.bucket.batchMin = 1;
  CHECK(db.replaceDecode(wider) == 1); // supersedes the overlapping one
  db.replaceDecode(e);
  auto back = TuningDatabase::fromJson(db.toJson());
  REQUIRE_MESSAGE(bool(back), llvm::toString(back.takeError()));
  REQUIRE(back->decodeEntries.size() == 1);
  CHECK(back->decodeEntries[0].bucket == e.bucket);
  CHECK(back->decodeEntries[0].config == e.config);
  CHECK(back->decodeEntries[0].gbps == 3000);
  CHECK(back->decodeEntries[0].defaultGbps == 2900);
  // A database without decode entries writes none (files of older
  // flashjits read the same).
  TuningDatabase plain(db.gpu, "1.0");
  CHECK_FALSE(plain.toJson().contains("decode_entries"));
  // Bad fields are errors that name them.
  nlohmann::json j = db.toJson();
  j["decode_entries"][0]["config"]["copy_mode"] = 7;
  auto badMode = TuningDatabase::fromJson(j);
  REQUIRE_FALSE(bool(badMode));
  CHECK(llvm::toString(badMode.takeError()).find("copy_mode") !=
        std::string::npos);
  j = db.toJson();
  nlohmann::json twin = j["decode_entries"][0];
  j["decode_entries"].push_back(twin);
  auto overlap = TuningDatabase::fromJson(j);
  REQUIRE_FALSE(bool(overlap));
  CHECK(llvm::toString(overlap.takeError()).find("overlaps") !=
        std::string::npos);
  j = db.toJson();
  j["decode_entries"][0]["config"]["block_n"] = 32; // 8 keys per warp
  auto badTile = TuningDatabase::fromJson(j);
  REQUIRE_FALSE(bool(badTile));
  CHECK(llvm::toString(badTile.takeError()).find("decode_entries[0].config") !=
        std::string::npos);
}

TEST_CASE("decode candidates: the default first, bulk copies on sm_90") {
  DecodeBucket b;
  b.batchMin = 1;
  b.batchMax = 4;
  auto hopper = decodeCandidates(b, 90, 227 * 1024);
  REQUIRE_FALSE(hopper.empty());
  CHECK(hopper.front() == DecodeTunedConfig{});
  bool bulk = false, waves = false;
  for (const DecodeTunedConfig &c : hopper) {
    DecodeSpec s = c.applied(b.spec());
    llvm::Error err = s.validate();
    CHECK_FALSE(bool(err));
    llvm::consumeError(std::move(err));
    CHECK(decodeTiling(s).sharedBytes(s) <= 227u * 1024);
    bulk = bulk || c.copyMode == 2;
    waves = waves || c.splitWaves == 2;
  }
  CHECK(bulk);
  CHECK(waves); // batch 1 leaves the split to the rule
  for (const DecodeTunedConfig &c : decodeCandidates(b, 80, 163 * 1024))
    CHECK(c.copyMode != 2);
  // Less shared memory: fewer candidates, all fitting.
  for (const DecodeTunedConfig &c : decodeCandidates(b, 86, 99 * 1024)) {
    DecodeSpec s = c.applied(b.spec());
    CHECK(decodeTiling(s).sharedBytes(s) <= 99u * 1024);
  }
}
