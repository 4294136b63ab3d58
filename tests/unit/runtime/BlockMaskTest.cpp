//===- BlockMaskTest.cpp - the block-mask kernel without a GPU -------------===//
// Why: the lists a block-mask kernel writes are checked on the GPU against
// HostBlockMask::fromMask; that host classification, the output checks and
// the compile path are pure logic and are tested here, where CI runs.
#include "RuntimeTestUtil.h"

#include "flashjit/Compiler/Variants.h"
#include "flashjit/FlashJIT.h"
#include "flashjit/Runtime/ErrorCode.h"
#include "flashjit/Runtime/ForwardChecks.h"
#include "flashjit/DevTools/HostBlockMask.h"

#include <doctest/doctest.h>

using namespace flashjit;
using namespace flashjit::test;

namespace {
AttentionSpec sparseSpec(bool causal) {
  AttentionSpec spec;
  spec.headDim = 64;
  spec.numHeads = spec.numKVHeads = 2;
  spec.causal = causal;
  spec.sparseBlockM = spec.sparseBlockN = 16;
  return spec;
}

AttentionSpec denseSpec() {
  AttentionSpec spec = sparseSpec(false);
  spec.sparseBlockM = spec.sparseBlockN = 0;
  return spec;
}

ErrorCode codeOf(llvm::Error err) { return takeErrorParts(std::move(err)).code; }

/// The `i`-th list (partial or full) of row `row` as a vector.
std::vector<int32_t> listOf(const std::vector<int32_t> &counts,
                            const std::vector<int32_t> &indices,
                            int64_t columns, int64_t row) {
  return std::vector<int32_t>(indices.begin() + row * columns,
                              indices.begin() + row * columns + counts[row]);
}

/// A list as the C API's DLTensor-free CapturedRef over `words`.
CapturedRef i32Ref(std::vector<int32_t> &words, std::vector<int64_t> shape) {
  return CapturedRef::contiguous(words.data(), CaptureDType::I32, shape);
}
} // namespace

TEST_CASE("host block mask: causal blocks are full below the diagonal, "
          "partial on it, absent above") {
  AttentionSpec spec = sparseSpec(true);
  // 40 x 40: three blocks of 16 (the last one 8 long, so never full).
  auto mask = HostBlockMask::fromMask(spec, {}, 1, 1, 40, 40,
                                      /*fullLists=*/true);
  REQUIRE(static_cast<bool>(mask));
  CHECK(mask->queryBlocks == 3);
  CHECK(mask->indexColumns == 3);
  using V = std::vector<int32_t>;
  CHECK(listOf(mask->kvNumBlocks, mask->kvIndices, 3, 0) == V{0});
  CHECK(listOf(mask->fullKvNumBlocks, mask->fullKvIndices, 3, 0) == V{});
  CHECK(listOf(mask->kvNumBlocks, mask->kvIndices, 3, 1) == V{1});
  CHECK(listOf(mask->fullKvNumBlocks, mask->fullKvIndices, 3, 1) == V{0});
  CHECK(listOf(mask->kvNumBlocks, mask->kvIndices, 3, 2) == V{0, 1, 2});
  CHECK(listOf(mask->fullKvNumBlocks, mask->fullKvIndices, 3, 2) == V{});
  // Past each count: -1.
  CHECK(mask->kvIndices[1] == -1);

  // Without full lists every kept block is partial.
  auto partialOnly =
      HostBlockMask::fromMask(spec, {}, 1, 1, 40, 40, false);
  REQUIRE(static_cast<bool>(partialOnly));
  CHECK(!partialOnly->hasFullLists());
  CHECK(listOf(partialOnly->kvNumBlocks, partialOnly->kvIndices, 3, 1) ==
        V{0, 1});
}

TEST_CASE("host block mask: a document mask_mod through the interpreter") {
  AttentionSpec spec = sparseSpec(false);
  REQUIRE(!presets::documentMask(spec));
  // Two sequences of 32: the first one document, the second two of 16.
  HostCapture docs;
  docs.shape = {2, 32};
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 32; ++i)
      docs.values.push_back(b == 0 ? 0 : i / 16);
  auto mask = HostBlockMask::fromMask(spec, {docs}, 2, 1, 32, 32,
                                      true);
  REQUIRE(static_cast<bool>(mask));
  using V = std::vector<int32_t>;
  // Sequence 0: everything full.
  CHECK(listOf(mask->fullKvNumBlocks, mask->fullKvIndices, 2, 0) == V{0, 1});
  CHECK(listOf(mask->kvNumBlocks, mask->kvIndices, 2, 0) == V{});
  // Sequence 1: each block sees its own document only.
  CHECK(listOf(mask->fullKvNumBlocks, mask->fullKvIndices, 2, 2) == V{0});
  CHECK(listOf(mask->fullKvNumBlocks, mask->fullKvIndices, 2, 3) == V{1});
  CHECK(listOf(mask->kvNumBlocks, mask->kvIndices, 2, 3) == V{});

  // A mask_mod reading past its captured tensor is an error, not a crash.
  auto tooLong = HostBlockMask::fromMask(spec, {docs}, 2, 1, 48,
                                         48, true);
  CHECK(!tooLong);
  if (!tooLong)
    llvm::consumeError(tooLong.takeError());
}

TEST_CASE("the lists a block-mask kernel writes are checked first") {
  AttentionSpec spec = sparseSpec(true);
  std::vector<int32_t> counts(2 * 3, 0), indices(2 * 3 * 3, 0),
      fullCounts(2 * 3, 0), fullIndices(2 * 3 * 3, 0);
  BlockMaskRef mask;
  mask.kvNumBlocks = i32Ref(counts, {1, 2, 3});
  mask.kvIndices = i32Ref(indices, {1, 2, 3, 3});
  CHECK(errorText(checkBlockMaskOutput(spec, mask, 40, 40)).empty());
  // Shared by every head.
  BlockMaskRef shared = mask;
  shared.kvNumBlocks = i32Ref(counts, {1, 1, 3});
  shared.kvIndices = i32Ref(indices, {1, 1, 3, 3});
  CHECK(errorText(checkBlockMaskOutput(spec, shared, 40, 40)).empty());

  CHECK(errorText(checkBlockMaskOutput(denseSpec(), mask,
                                       40, 40))
            .find("block-sparse") != std::string::npos);
  CHECK(errorText(checkBlockMaskOutput(spec, BlockMaskRef(), 40, 40))
            .find("needs kv_num_blocks") != std::string::npos);
  CHECK(errorText(checkBlockMaskOutput(spec, mask, 0, 40))
            .find("seqlens must be") != std::string::npos);
  // Query blocks of another length.
  CHECK(errorText(checkBlockMaskOutput(spec, mask, 80, 40))
            .find("has shape") != std::string::npos);
  // Heads neither the kernel's nor 1.
  BlockMaskRef threeHeads = mask;
  threeHeads.kvNumBlocks.shape[1] = 3;
  CHECK(errorText(checkBlockMaskOutput(spec, threeHeads, 40, 40))
            .find("3 heads") != std::string::npos);
  // Lists that disagree on the heads (each alone would do).
  BlockMaskRef disagree = mask;
  disagree.kvIndices = i32Ref(indices, {1, 1, 3, 3});
  CHECK(errorText(checkBlockMaskOutput(spec, disagree, 40, 40))
            .find("agree") != std::string::npos);
  // Overlapping lists.
  BlockMaskRef overlap = mask;
  overlap.fullKvNumBlocks = i32Ref(counts, {1, 2, 3});
  overlap.fullKvIndices = i32Ref(fullIndices, {1, 2, 3, 3});
  CHECK(errorText(checkBlockMaskOutput(spec, overlap, 40, 40))
            .find("overlaps") != std::string::npos);
  BlockMaskRef aliased = mask;
  aliased.kvIndices.strides = {9, 9, 3, 0};
  CHECK(errorText(checkBlockMaskOutput(spec, aliased, 40, 40))
            .find("share memory") != std::string::npos);
}

TEST_CASE("a context compiles the block-mask kernel once and caches it") {
  TempDir dir;
  Warnings warnings;
  auto ctx = sm90aContext(dir, warnings);
  REQUIRE(static_cast<bool>(ctx));

  AttentionSpec spec = sparseSpec(true);
  REQUIRE(!presets::documentMask(spec));
  auto builder = (*ctx)->blockMaskBuilder(spec);
  REQUIRE_MESSAGE(static_cast<bool>(builder),
                  (builder ? "" : llvm::toString(builder.takeError())));
  CHECK((*builder)->info().config.family == "block_mask");
  CHECK((*builder)->info().threadsPerBlock == 128);
  CHECK((*builder)->ptx().find("bar.red.or.pred") != std::string::npos);
  CHECK((*builder)->ptx().find((*builder)->info().name) != std::string::npos);
  // The same object from memory.
  auto again = (*ctx)->blockMaskBuilder(spec);
  REQUIRE(static_cast<bool>(again));
  CHECK(again->get() == builder->get());

  // A dense spec has no block mask.
  auto dense = (*ctx)->blockMaskBuilder(denseSpec());
  REQUIRE(!dense);
  CHECK(codeOf(dense.takeError()) == ErrorCode::InvalidArgument);

  // Bad lists are refused before the device is needed; good ones reach
  // the launch, which needs a GPU (none here, or one: both are errors
  // only when there is none).
  std::vector<int32_t> counts(2 * 3, 0), indices(2 * 3 * 3, 0);
  BlockMaskBuildArgs args;
  args.seqlenQ = args.seqlenK = 40;
  args.blockMask.kvNumBlocks = i32Ref(counts, {1, 2, 3});
  args.blockMask.kvIndices = i32Ref(indices, {1, 2, 3, 3});
  CHECK(errorText((*builder)->check(args)).find("captured tensors") !=
        std::string::npos);
  std::vector<int32_t> docs(40, 0);
  args.captures.push_back(i32Ref(docs, {1, 40}));
  CHECK(errorText((*builder)->check(args)).empty());
  if (!(*ctx)->device()) {
    llvm::Error err = (*builder)->build(args);
    REQUIRE(static_cast<bool>(err));
    CHECK(codeOf(std::move(err)) == ErrorCode::NoDevice);
  }
}
