// Why: the spec, dtype and target parsers are what stands between user
// input and LLVM (which aborts on bad chips): every rejection is tested.
#include "flashjit/Dialect/AttentionSpec.h"
#include "flashjit/Templates/Target.h"

#include <doctest/doctest.h>

using namespace flashjit;

static std::string errorOf(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string();
}

TEST_CASE("spec validation") {
  AttentionSpec spec;
  CHECK(errorOf(spec.validate()).empty());
  spec.headDim = 100;
  CHECK(errorOf(spec.validate()).find("unsupported head dim 100") == 0);
  spec.headDim = 512;
  CHECK(errorOf(spec.validate()).find("unsupported head dim 512") == 0);
  spec.headDim = 64;
  spec.numHeads = 6;
  spec.numKVHeads = 4;
  CHECK(errorOf(spec.validate()) ==
        "heads (6) must be a multiple of kv heads (4) for grouped-query "
        "attention");
  spec.numKVHeads = 0;
  CHECK(errorOf(spec.validate()).find("must be at least 1") !=
        std::string::npos);
}

TEST_CASE("canonical text and kernel names differ for every field") {
  AttentionSpec a;
  AttentionSpec b = a;
  b.causal = true;
  AttentionSpec c = a;
  c.dtype = DType::F16;
  AttentionSpec d = a;
  d.numKVHeads = 1;
  d.numHeads = 2;
  CHECK(a.canonical() != b.canonical());
  CHECK(a.canonical() != c.canonical());
  CHECK(a.canonical() != d.canonical());
  CHECK(b.kernelName() == "flashjit_fwd_d128_bf16_causal_h1_kv1");
}

TEST_CASE("dtype parsing") {
  CHECK(*parseDType("bf16") == DType::BF16);
  CHECK(*parseDType("f16") == DType::F16);
  auto bad = parseDType("f32");
  REQUIRE_FALSE(bool(bad));
  CHECK(errorOf(bad.takeError()) == "unknown dtype 'f32': expected f16 or bf16");
}

TEST_CASE("targets: names, PTX features, compute capabilities") {
  auto t = Target::parse("sm_90a");
  REQUIRE(bool(t));
  CHECK(t->ptxFeatures() == "+ptx80");
  CHECK(t->archSpecific);
  CHECK(Target::parse("sm_80")->ptxFeatures() == "+ptx70");
  auto bad = Target::parse("sm_70");
  REQUIRE_FALSE(bool(bad));
  CHECK(errorOf(bad.takeError()).find("unknown arch 'sm_70'") == 0);
  CHECK(Target::fromComputeCapability(9, 0)->chip == "sm_90a");
  CHECK(Target::fromComputeCapability(8, 6)->chip == "sm_86");
  CHECK(Target::fromComputeCapability(12, 0)->chip == "sm_90");
  auto old = Target::fromComputeCapability(7, 5);
  REQUIRE_FALSE(bool(old));
  CHECK(errorOf(old.takeError()).find("needs 8.0") != std::string::npos);
}

TEST_CASE("block-sparse specs: sizes checked, a kernel of their own") {
  AttentionSpec dense;
  AttentionSpec sparse = dense;
  sparse.sparseBlockM = sparse.sparseBlockN = 128;
  CHECK(errorOf(sparse.validate()).empty());
  CHECK(sparse.isBlockSparse());
  CHECK(sparse.mayEmptyRows());
  CHECK_FALSE(sparse.isPlain());
  CHECK(sparse.canonical() != dense.canonical());
  CHECK(sparse.canonical().find(";sparse=128x128") != std::string::npos);
  AttentionSpec coarser = sparse;
  coarser.sparseBlockN = 256;
  CHECK(coarser.kernelName() != sparse.kernelName());
  for (auto [m, n] : {std::pair<int64_t, int64_t>{128, 0}, {100, 128},
                      {8192, 128}, {-128, 128}}) {
    AttentionSpec bad = dense;
    bad.sparseBlockM = m;
    bad.sparseBlockN = n;
    CHECK(errorOf(bad.validate()).find("multiples of 16 from 16 to 4096") !=
          std::string::npos);
  }
}
