// Why: compileAttention is the runtime's only door into MLIR: it must give
// PTX for every supported spec and errors (never aborts) for the rest.
#include "flashjit/Compiler/Compiler.h"
#include "flashjit/Compiler/ConfigChoice.h"
#include "flashjit/Compiler/ParserGuard.h"
#include "flashjit/Compiler/Variants.h"
#include "flashjit/Templates/KernelTemplate.h"
#include "flashjit/FlashJIT.h"

#include <doctest/doctest.h>
#include <chrono>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

using namespace flashjit;

static CompileOptions forChip(const char *chip) {
  CompileOptions o;
  o.target = llvm::cantFail(Target::parse(chip));
  return o;
}

TEST_CASE("PTX for every head dim, dtype, causality and chip") {
  for (const char *chip : {"sm_80", "sm_90a"})
    for (int64_t d : {64, 128, 256})
      for (DType dtype : {DType::F16, DType::BF16})
        for (bool causal : {false, true}) {
          AttentionSpec spec;
          spec.headDim = d;
          spec.dtype = dtype;
          spec.causal = causal;
          spec.numHeads = 4;
          spec.numKVHeads = 2;
          INFO(spec.canonical() << " " << chip);
          auto kernel = compileAttention(spec, forChip(chip));
          REQUIRE_MESSAGE(bool(kernel), llvm::toString(kernel.takeError()));
          CHECK(kernel->text.find(std::string(".target ") + chip) !=
                std::string::npos);
          CHECK(kernel->text.find(".entry " + spec.kernelName()) !=
                std::string::npos);
          CHECK(kernel->info.threadsPerBlock ==
                kernel->info.config.warps * 32);
          // Tensor cores: wgmma on sm_90a (every head dim here; the
          // persistent grid when causal, clusters of two sharing K/V
          // without a mask at head dim 128), mma.sync on sm_80 (head dims
          // 64 and 128).
          if (std::string(chip) == "sm_90a")
            CHECK(kernel->info.config.family ==
                  (spec.causal      ? "wgmma_persistent"
                   : d == 128       ? "wgmma_cluster"
                                    : "wgmma"));
          else if (d != 256)
            CHECK(kernel->info.config.family == "mma_sync");
        }
}

TEST_CASE("bad specs, chips and configs are errors") {
  AttentionSpec spec;
  spec.headDim = 72;
  auto r = compileAttention(spec, forChip("sm_80"));
  REQUIRE_FALSE(bool(r));
  CHECK(llvm::toString(r.takeError()).find("head dim 72 is not supported") !=
        std::string::npos);
  spec.headDim = 64;
  CompileOptions bad;
  bad.target.chip = "sm_100x";
  r = compileAttention(spec, bad);
  REQUIRE_FALSE(bool(r));
  CHECK(llvm::toString(r.takeError()).find("unknown arch 'sm_100x'") == 0);
  CompileOptions withConfig = forChip("sm_90a");
  withConfig.config = TileConfig{"cuda_core", 64, 32, 1, 8};
  r = compileAttention(spec, withConfig);
  REQUIRE_FALSE(bool(r));
  CHECK(llvm::toString(r.takeError()) ==
        "cuda_core with block_m 64 and head dim 64 runs 4 warps, not 8");
}

TEST_CASE("malformed MLIR and descriptions without one attention") {
  auto r = compileDescription("func.func @x(", forChip("sm_90a"));
  REQUIRE_FALSE(bool(r));
  CHECK(llvm::toString(r.takeError()).find("malformed MLIR input") == 0);
  r = compileDescription("module {}", forChip("sm_90a"));
  REQUIRE_FALSE(bool(r));
  CHECK(llvm::toString(r.takeError()).find("holds 0") != std::string::npos);
}

TEST_CASE("a dense array of index is an error, not a parser crash") {
  // MLIR 22's parser segfaults on `array<index`, also through a type
  // alias; checkParserSafe stops it first, outside string literals and
  // comments only.
  for (const char *text :
       {"func.func @f() attributes {a = array<index>} { return }",
        "module attributes {a = array <\n // a comment\n index: 1>} {}",
        "func.func @f() attributes {a = array<index"}) {
    auto r = compileDescription(text, forChip("sm_90a"));
    REQUIRE_FALSE(bool(r));
    std::string message = llvm::toString(r.takeError());
    CHECK(message.find("malformed MLIR input") == 0);
    CHECK(message.find("array<index") != std::string::npos);
  }
  CHECK_FALSE(bool(checkParserSafe("x = \"array<index\" // array<index", "t")));
  CHECK_FALSE(bool(checkParserSafe("!foo.array<index> #x.array<index>", "t")));
  CHECK_FALSE(bool(checkParserSafe("a = array<i64: 1, 2>", "t")));
  CHECK_FALSE(bool(checkParserSafe("a = array<f32: 0.5> b = array<i1>", "t")));
  CHECK_FALSE(bool(checkParserSafe("a = array<si8> b = array<bf16>", "t")));
  auto alias = compileDescription(
      "!t = index\nfunc.func @f() attributes {a = array<!t: 1>} { return }",
      forChip("sm_90a"));
  REQUIRE_FALSE(bool(alias));
  CHECK(llvm::toString(alias.takeError()).find("`array<!t`") !=
        std::string::npos);
  // Split where MLIR's lexer splits: a NUL byte is a blank, a carriage
  // return ends a comment, a number or `!0` ends before the letters.
  CHECK(bool(checkParserSafe(std::string("a = array\0<!t: 1>", 17), "t")));
  CHECK(bool(checkParserSafe("// c\ra = array<index>", "t")));
  CHECK(bool(checkParserSafe("a = 1.array<index>", "t")));
  CHECK(bool(checkParserSafe("a = !0array<index>", "t")));
  CHECK_FALSE(bool(checkParserSafe("a = 0x1array<index>", "t")));
  CHECK(bool(checkParserSafe("a = array<indexed>", "t")));
  CHECK(bool(checkParserSafe("a = array<", "t")));
  llvm::Error err = checkParserSafe("a = array< index>", "score_mod");
  REQUIRE(bool(err));
  CHECK(llvm::toString(std::move(err)).find("score_mod: ") == 0);
}

TEST_CASE("a fresh MLIR context per kernel gives the same PTX") {
  // The shared context is replaced every few kernels (it keeps what it
  // interns); nothing may outlive it. With one kernel per context, every
  // kind of compile, and a failed one between them, gives the PTX it gives
  // in a long-lived context (ASan in the sanitizer build checks that
  // nothing reads a freed context).
  AttentionSpec spec;
  spec.headDim = 64;
  spec.numHeads = 4;
  spec.causal = true;
  spec.scoreMod = "func.func @score_mod(%s: f32, %b: index, %h: index, "
                  "%q: index, %kv: index) -> f32 {\n"
                  "  %c = arith.constant 0.5 : f32\n"
                  "  %o = arith.mulf %s, %c : f32\n  return %o : f32\n}\n";
  AttentionSpec sparse = spec;
  sparse.scoreMod.clear();
  sparse.sparseBlockM = sparse.sparseBlockN = 128;
  auto compileAll = [&]() {
    std::vector<std::string> ptx;
    auto keep = [&](llvm::Expected<CompiledKernel> k) {
      REQUIRE_MESSAGE(bool(k), llvm::toString(k.takeError()));
      ptx.push_back(k->text);
    };
    keep(compileAttention(spec, forChip("sm_90a")));
    auto bad = compileDescription("func.func @f() { %x = arith.bogus }",
                                  forChip("sm_90a"));
    CHECK_FALSE(bool(bad));
    llvm::consumeError(bad.takeError());
    keep(compileAttention(spec, forChip("sm_80")));
    keep(compileBackward(spec, forChip("sm_80")));
    keep(compileBlockMaskKernel(sparse, forChip("sm_90a")));
    DecodeSpec decode;
    decode.headDim = 128;
    decode.numHeads = 8;
    decode.numKVHeads = 2;
    keep(compileDecodeKernel(decode, forChip("sm_90a")));
    return ptx;
  };
  std::vector<std::string> shared = compileAll();
  setKernelsPerContext(1);
  std::vector<std::string> fresh = compileAll();
  setKernelsPerContext(32);
  REQUIRE(shared.size() == fresh.size());
  for (size_t i = 0; i < shared.size(); ++i)
    CHECK(shared[i] == fresh[i]);
}

TEST_CASE("context without a GPU: compiles, caches, refuses to launch") {
  char dir[] = "/tmp/flashjit-ctx-test-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  ContextOptions options;
  options.chip = "sm_90a";
  options.cache.directory = dir;
  auto ctx = Context::create(options);
  REQUIRE(bool(ctx));
  AttentionSpec spec;
  spec.headDim = 64;
  auto kernel = (*ctx)->compile(spec);
  REQUIRE_MESSAGE(bool(kernel), llvm::toString(kernel.takeError()));
  CHECK((*kernel)->ptx().find(".entry") != std::string::npos);

  // The in-memory hit: the hot path of every forward() in a runtime.
  const int hits = 200000;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < hits; ++i)
    REQUIRE(bool((*ctx)->compile(spec)));
  double ns = std::chrono::duration<double, std::nano>(
                  std::chrono::steady_clock::now() - t0)
                  .count() /
              hits;
  MESSAGE("in-memory kernel hit: " << ns << " ns");
  CHECK(ns < 2000);

  if (!(*ctx)->device()) {
    ForwardArgs args; // all null: the checks speak first
    llvm::Error err = (*kernel)->forward(args);
    REQUIRE(bool(err));
    CHECK(llvm::toString(std::move(err)) == "q is a null pointer");
  }
  std::string cleanup = std::string("rm -rf ") + dir;
  (void)std::system(cleanup.c_str());
}

TEST_CASE("tile configs parse back from their canonical text") {
  TileConfig config{"mma_sync", 128, 48, 1, 4};
  auto parsed = TileConfig::parse(config.canonical());
  REQUIRE_MESSAGE(bool(parsed), llvm::toString(parsed.takeError()));
  CHECK(*parsed == config);
  for (const char *bad : {"", "mma_sync", ":m1:n1:s1:w1", "x:m1:n1:s1",
                          "x:m1:n1:s1:w1:z", "x:n1:m1:s1:w1", "x:m-1:n1:s1:w1",
                          "x:m1:n1:s1:wq"}) {
    auto r = TileConfig::parse(bad);
    CHECK_FALSE(bool(r));
    if (!r)
      CHECK(llvm::toString(r.takeError()).find("malformed tile config") == 0);
  }
}


TEST_CASE("a known GPU newer than the target picks among the target's "
          "templates") {
  // An H100 context asked for sm_80 kernels: no wgmma family.
  auto sm80 = Target::parse("sm_80");
  REQUIRE(static_cast<bool>(sm80));
  AttentionSpec spec;
  auto config = chooseTileConfig(spec, *sm80, "NVIDIA H100 80GB HBM3");
  REQUIRE_MESSAGE(static_cast<bool>(config),
                  (config ? "" : llvm::toString(config.takeError())));
  CHECK(config->family.rfind("wgmma", 0) == std::string::npos);
  CompileOptions options;
  options.target = *sm80;
  options.config = *config;
  auto compiled = compileAttention(spec, options);
  CHECK(static_cast<bool>(compiled));
  if (!compiled)
    llvm::consumeError(compiled.takeError());
}

// The presets' score_mods as the heuristic reads them (ScoreModCost.cpp):
// soft-cap's tanh is an operation of the special-function unit, ALiBi's
// products are not; at head dim 128 without a causal mask soft-cap
// compiles on three softmax warpgroups, with a causal mask on two, and
// ALiBi as a dense kernel would.
TEST_CASE("the soft-cap preset compiles on three softmax warpgroups at head "
          "dim 128 without a right bound") {
  auto make = [](bool causal, bool softcap) {
    AttentionSpec spec;
    spec.headDim = 128;
    spec.causal = causal;
    spec.numHeads = 4;
    spec.numKVHeads = 2;
    llvm::Error err =
        softcap ? presets::softcap(spec, 30.0) : presets::alibi(spec);
    REQUIRE_MESSAGE(!err, llvm::toString(std::move(err)));
    return spec;
  };
  CHECK(scoreModSpecialFunctions(make(false, true)) == 1);
  CHECK(scoreModSpecialFunctions(make(false, false)) == 0);
  struct Case {
    bool causal, softcap;
    const char *config;
  };
  const Case cases[] = {
      {false, true, "wgmma_persistent:m192:n80:s2:w16"},
      {true, true, "wgmma_persistent:m128:n128:s2:w12"},
      {false, false, "wgmma_cluster:m128:n160:s2:w12"},
  };
  for (const Case &c : cases) {
    AttentionSpec spec = make(c.causal, c.softcap);
    INFO(spec.canonical());
    auto kernel = compileAttention(spec, forChip("sm_90a"));
    REQUIRE_MESSAGE(bool(kernel), llvm::toString(kernel.takeError()));
    CHECK(kernel->info.config.canonical() == c.config);
    CHECK((kernel->text.find("tanh.approx.f32") != std::string::npos) ==
          c.softcap);
  }
}

TEST_CASE("a block mask made with a mask_mod takes larger L2 sections") {
  // The persistent kernel divides its section's K/V rows by seqlen_k to
  // get the heads per section: 8 MiB of rows (16384 at head dim 128, bf16,
  // MHA) for block lists alone, 32 MiB (65536) where a mask_mod made them
  // (PersistentTiles.cpp).
  auto sectionRows = [](bool maskMod) {
    AttentionSpec spec;
    spec.headDim = 128;
    spec.numHeads = spec.numKVHeads = 16;
    spec.sparseBlockM = spec.sparseBlockN = 128;
    if (maskMod) {
      llvm::Error err = presets::documentMask(spec);
      REQUIRE_MESSAGE(!err, llvm::toString(std::move(err)));
    }
    INFO(spec.canonical());
    auto kernel = compileAttention(spec, forChip("sm_90a"));
    REQUIRE_MESSAGE(bool(kernel), llvm::toString(kernel.takeError()));
    REQUIRE(kernel->info.config.family == "wgmma_persistent");
    const std::string &ptx = kernel->text;
    for (const char *rows : {"16384", "65536"})
      if (ptx.find(std::string(", ") + rows + ", %r") != std::string::npos)
        return std::string(rows);
    return std::string("none");
  };
  CHECK(sectionRows(false) == "16384");
  CHECK(sectionRows(true) == "65536");
}
