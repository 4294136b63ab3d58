//===- TensorMapsTest.cpp - TMA tensor maps and launch parameters ---------===//
// Why: the driver answers a tensor map it cannot encode with a bare
// CUDA_ERROR_INVALID_VALUE. The layouts and the checks in front of it need
// no device, so CI holds them to KernelABI.h and to their messages, and
// holds the parameter array of a launch to the kernel's parameter order.
#include "flashjit/Runtime/TensorMaps.h"
#include "RuntimeTestUtil.h"
#include "flashjit/Runtime/ErrorCode.h"
#include "flashjit/Runtime/ForwardChecks.h"
#include "flashjit/Runtime/Launch.h"
#include "flashjit/Runtime/ModuleLoader.h"
#include "flashjit/Templates/KernelTemplate.h"

#include <dlfcn.h>
#include <doctest/doctest.h>

using namespace flashjit;
using namespace flashjit::test;

namespace {

/// A device address for the layout checks (never dereferenced).
void *deviceAddress(uintptr_t address) {
  return reinterpret_cast<void *>(address);
}

/// Q [2, 8, 100, 128] and K, V [2, 2, 300, 128] (GQA), bf16, contiguous,
/// far apart; O and LSE after them.
ForwardArgs gqaArgs() {
  ForwardArgs args;
  args.q =
      TensorRef::bhsd(deviceAddress(0x1000000), DType::BF16, 2, 8, 100, 128);
  args.k =
      TensorRef::bhsd(deviceAddress(0x2000000), DType::BF16, 2, 2, 300, 128);
  args.v =
      TensorRef::bhsd(deviceAddress(0x3000000), DType::BF16, 2, 2, 300, 128);
  args.o =
      TensorRef::bhsd(deviceAddress(0x4000000), DType::BF16, 2, 8, 100, 128);
  args.lse = LseRef::contiguous(static_cast<float *>(deviceAddress(0x5000000)),
                                2, 8, 100);
  return args;
}

AttentionSpec gqaSpec() {
  AttentionSpec spec;
  spec.headDim = 128;
  spec.numHeads = 8;
  spec.numKVHeads = 2;
  return spec;
}

/// The error of `layout`, "" when it has none.
std::string errorOf(llvm::Expected<TensorMapLayout> layout) {
  return layout ? std::string() : llvm::toString(layout.takeError());
}

/// K's layout in a wgmma kernel with boxes of 64 x `rows`, after `change`.
template <typename Change>
std::string kLayoutError(Change change, unsigned rows = 128,
                         unsigned cols = 64) {
  TensorRef k = gqaArgs().k;
  change(k);
  return errorOf(tensorMapLayout(k, "K", rows, cols, "wgmma"));
}

bool driverLoadable() {
  void *h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h)
    ::dlclose(h);
  return h != nullptr;
}

} // namespace

TEST_CASE("a contiguous tensor's map: dims innermost first, byte strides") {
  TensorRef q = gqaArgs().q;
  auto layout = tensorMapLayout(q, "Q", 128, 64, "wgmma");
  REQUIRE_MESSAGE(bool(layout), errorOf(std::move(layout)));
  CHECK(layout->base == q.data);
  CHECK(layout->dataType == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  CHECK(layout->dims == std::array<cuuint64_t, 4>{128, 100, 8, 2});
  CHECK(layout->byteStrides ==
        std::array<cuuint64_t, 3>{256, 100 * 256, 8 * 100 * 256});
  CHECK(layout->box == std::array<cuuint32_t, 4>{64, 128, 1, 1});

  q.dtype = DType::F16;
  auto f16 = tensorMapLayout(q, "Q", 128, 64, "wgmma");
  REQUIRE(bool(f16));
  CHECK(f16->dataType == CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
}

TEST_CASE("a BSHD tensor keeps its own strides, head stride below the row's") {
  TensorRef k =
      TensorRef::bshd(deviceAddress(0x2000000), DType::BF16, 2, 2, 300, 128);
  auto layout = tensorMapLayout(k, "K", 64, 64, "wgmma");
  REQUIRE_MESSAGE(bool(layout), errorOf(std::move(layout)));
  CHECK(layout->dims == std::array<cuuint64_t, 4>{128, 300, 2, 2});
  CHECK(layout->byteStrides ==
        std::array<cuuint64_t, 3>{2 * 256, 256, 300 * 2 * 256});
}

TEST_CASE("Q gets block_m boxes; K and V block_n boxes and their kv heads; "
          "O its store boxes") {
  TensorMapBoxes boxes;
  boxes.qRows = 128;
  boxes.kvRows = 176;
  boxes.oRows = 64;
  auto layouts = forwardTensorMapLayouts(gqaArgs(), boxes, "wgmma");
  REQUIRE_MESSAGE(bool(layouts), llvm::toString(layouts.takeError()));
  CHECK(layouts->q.base == deviceAddress(0x1000000));
  CHECK(layouts->q.dims == std::array<cuuint64_t, 4>{128, 100, 8, 2});
  CHECK(layouts->q.box == std::array<cuuint32_t, 4>{64, 128, 1, 1});
  for (const TensorMapLayout *kv : {&layouts->k, &layouts->v}) {
    CHECK(kv->dims == std::array<cuuint64_t, 4>{128, 300, 2, 2});
    CHECK(kv->byteStrides ==
          std::array<cuuint64_t, 3>{256, 300 * 256, 2 * 300 * 256});
    CHECK(kv->box == std::array<cuuint32_t, 4>{64, 176, 1, 1});
  }
  CHECK(layouts->k.base == deviceAddress(0x2000000));
  CHECK(layouts->v.base == deviceAddress(0x3000000));
  CHECK(layouts->o.base == deviceAddress(0x4000000));
  CHECK(layouts->o.dims == std::array<cuuint64_t, 4>{128, 100, 8, 2});
  CHECK(layouts->o.box == std::array<cuuint32_t, 4>{64, 64, 1, 1});

  ForwardArgs bad = gqaArgs();
  bad.v.strides[2] = 136 + 4; // 280-byte rows
  CHECK(llvm::toString(forwardTensorMapLayouts(bad, boxes, "wgmma").takeError())
            .find("loads V with TMA") != std::string::npos);
  ForwardArgs badO = gqaArgs();
  badO.o.data = static_cast<char *>(badO.o.data) + 2; // not 16-byte aligned
  CHECK(llvm::toString(
            forwardTensorMapLayouts(badO, boxes, "wgmma").takeError())
            .find("the wgmma kernel stores O with TMA, which needs a 16-byte "
                  "aligned base address") != std::string::npos);
}

TEST_CASE("what the driver cannot encode is an error that says what to do") {
  CHECK(kLayoutError([](TensorRef &k) { k.strides[2] = 50; }) ==
        "the wgmma kernel loads K with TMA, which needs 16-byte aligned row "
        "strides: K's row stride is 100 bytes; pass a contiguous tensor or a "
        "config of family mma_sync");
  std::string base = kLayoutError(
      [](TensorRef &k) { k.data = static_cast<char *>(k.data) + 8; });
  CHECK(base.rfind("the wgmma kernel loads K with TMA, which needs a 16-byte "
                   "aligned base address: K starts at 0x",
                   0) == 0);
  CHECK(base.find("2000008; pass a 16-byte aligned tensor or a config of "
                  "family mma_sync") != std::string::npos);
  CHECK(kLayoutError([](TensorRef &k) { k.strides[1] += 4; }) ==
        "the wgmma kernel loads K with TMA, which needs 16-byte aligned head "
        "strides: K's head stride is 76808 bytes; pass a contiguous tensor or "
        "a config of family mma_sync");
  CHECK(kLayoutError([](TensorRef &k) { k.strides[0] = int64_t(1) << 39; }) ==
        "the wgmma kernel loads K with TMA, which needs batch strides below "
        "2^40 bytes: K's batch stride is 1099511627776 bytes; pass a "
        "contiguous tensor or a config of family mma_sync");
  CHECK(kLayoutError(
            [](TensorRef &k) { k.strides[0] = (int64_t(1) << 39) - 8; }) == "");
  CHECK(kLayoutError([](TensorRef &k) { k.strides[1] = -38400; }) ==
        "the wgmma kernel loads K with TMA, which needs non-negative head "
        "strides: K's head stride is -38400 elements; pass a contiguous "
        "tensor or a config of family mma_sync");
  CHECK(kLayoutError([](TensorRef &k) { k.strides[3] = 2; }) ==
        "the wgmma kernel loads K with TMA, which needs unit stride along "
        "head_dim: K's head-dim stride is 2; pass a tensor with contiguous "
        "rows or a config of family mma_sync");
  CHECK(kLayoutError([](TensorRef &k) { k.shape[3] = 20; }) ==
        "the wgmma kernel loads K with TMA, which needs rows of a "
        "multiple of 16 bytes: K's head dim 20 makes rows of 40 bytes; "
        "use a head dim that is a multiple of 8 or a config of family "
        "mma_sync");
  CHECK(kLayoutError([](TensorRef &k) { k.shape[2] = 0; }) ==
        "the wgmma kernel loads K with TMA, which needs extents from 1 to "
        "2^32: K's shape is [2, 2, 0, 128]; pass a tensor with every extent "
        "in that range or a config of family mma_sync");
  CHECK(kLayoutError([](TensorRef &k) {
          k.shape[0] = (int64_t(1) << 32) + 1;
        }).find("extents from 1 to 2^32") != std::string::npos);
  CHECK(kLayoutError([](TensorRef &k) { k.shape[0] = int64_t(1) << 32; }) ==
        "");
}

TEST_CASE("box rows must be 1 to 256, box columns fill at most the swizzle") {
  auto none = [](TensorRef &) {};
  CHECK(kLayoutError(none, 1) == "");
  CHECK(kLayoutError(none, 256) == "");
  CHECK(kLayoutError(none, 257) ==
        "the wgmma kernel loads K with TMA, which needs boxes of 1 to 256 "
        "rows: the config's boxes of K have 257 rows; pick a config whose "
        "blocks have 1 to 256 rows or a config of family mma_sync");
  CHECK(kLayoutError(none, 0).find("have 0 rows") != std::string::npos);
  CHECK(kLayoutError(none, 128, 8) == "");
  CHECK(kLayoutError(none, 128, 72) ==
        "the wgmma kernel loads K with TMA, which needs box rows of 16 to 128 "
        "bytes (the swizzle span), a multiple of 16: the wgmma template asks "
        "for boxes of 72 columns (144 bytes), a flashjit bug; pick a config "
        "of family mma_sync");
  CHECK(kLayoutError(none, 128, 12).find("(24 bytes)") != std::string::npos);
  CHECK(kLayoutError(none, 128, 0).find("(0 bytes)") != std::string::npos);
}

TEST_CASE("launch geometry: a block per tile, or a persistent grid") {
  KernelInfo info;
  info.config = TileConfig{"wgmma", 128, 176, 2, 12};
  info.threadsPerBlock = 384;
  info.sharedMemoryBytes = 200000;
  info.numHeads = 16;
  // 300 rows: 3 query blocks of 128, for each of 16 heads and 2 sequences.
  LaunchGeometry perTile = forwardGeometry(info, 2, 300);
  CHECK(perTile.gridX == 3);
  CHECK(perTile.gridY == 16);
  CHECK(perTile.gridZ == 2);
  CHECK(perTile.blockX == 384);
  CHECK(perTile.sharedMemoryBytes == 200000);
  // Persistent: the resident blocks, or fewer when there are fewer tiles.
  LaunchGeometry persistent = forwardGeometry(info, 2, 300, 132);
  CHECK(persistent.gridX == 96);
  CHECK(persistent.gridY == 1);
  CHECK(persistent.gridZ == 1);
  CHECK(persistent.blockX == 384);
  CHECK(forwardGeometry(info, 8, 4096, 132).gridX == 132);
  CHECK(forwardGeometry(info, 1, 1, 132).gridX == 16); // one per head
  // Clusters of two take two query blocks of one head at once: a whole
  // number of clusters, no more than the tiles of two query blocks.
  KernelInfo clustered = info;
  clustered.config.family = "wgmma_cluster";
  CHECK(forwardGeometry(clustered, 2, 300, 132).gridX == 128); // 2 x 16 x 2
  CHECK(forwardGeometry(clustered, 8, 4096, 132).gridX == 132);
  CHECK(forwardGeometry(clustered, 8, 4096, 131).gridX == 130);
  CHECK(forwardGeometry(clustered, 1, 1, 132).gridX == 32); // one per head
  CHECK(forwardGeometry(clustered, 1, 300, 132).gridY == 1);
}

TEST_CASE("the launch's parameter array: kernel parameters, then the maps") {
  ForwardLaunchParams params;
  ForwardArgs args = gqaArgs();
  REQUIRE_FALSE(bool(prepareForwardLaunch(args, 0.125, nullptr, params)));
  CHECK(params.args.q == args.q.data);
  CHECK(params.args.seqlenK == 300);
  CHECK(params.args.batch == args.q.shape[0]);
  CHECK(params.args.paramPointers().back() == &params.args.tileCounter);
  CHECK(params.args.tileCounter == nullptr); // only a persistent Kernel sets it
  CHECK(params.args.kStrides == std::array<int64_t, 3>{76800, 38400, 128});
  CHECK_FALSE(params.hasTensorMaps);

  auto kernelParams = params.args.paramPointers();
  auto pointers = params.pointers();
  static_assert(pointers.size() == ForwardKernelArgs::kNumParams +
                                       kNumTensorMaps + kMaxCaptures * 5 + 4 * 5 +
                                       3 + 2 + 2);
  for (unsigned i = 0; i < ForwardKernelArgs::kNumParams; ++i)
    CHECK(pointers[i] == kernelParams[i]);
  for (unsigned i = ForwardKernelArgs::kNumParams; i < pointers.size(); ++i)
    CHECK(pointers[i] == nullptr);

  params.hasTensorMaps = true;
  pointers = params.pointers();
  unsigned first = ForwardKernelArgs::kNumParams;
  CHECK(pointers[first] == &params.maps.q);
  CHECK(pointers[first + 1] == &params.maps.k);
  CHECK(pointers[first + 2] == &params.maps.v);
  CHECK(pointers[first + 3] == &params.maps.o);
  for (unsigned i = first; i < pointers.size(); ++i)
    CHECK(reinterpret_cast<uintptr_t>(pointers[i]) % 64 == 0);

  // A paged varlen launch: the offsets (the key counts second), then the
  // block table and its row length.
  params.hasTensorMaps = false;
  params.variant.varlen = params.variant.paged = true;
  pointers = params.pointers();
  CHECK(pointers[first] == &params.variant.cuSeqlens[0]);
  CHECK(pointers[first + 1] == &params.variant.cuSeqlens[1]);
  CHECK(pointers[first + 2] == &params.variant.blockTable);
  CHECK(pointers[first + 3] == &params.variant.maxPages);
  CHECK(pointers[first + 4] == nullptr);

  // A block-sparse persistent launch: the block mask's lists (a pointer
  // and 3 or 4 strides each), then the tile order and its two strides.
  params.variant.varlen = params.variant.paged = false;
  params.variant.hasBlockMask = true;
  for (unsigned l = 0; l < 4; ++l)
    params.variant.blockMask[l].rank = l % 2 == 0 ? 3 : 4;
  params.variant.hasTileOrder = true;
  pointers = params.pointers();
  CHECK(pointers[first] == &params.variant.blockMask[0].data);
  CHECK(pointers[first + 18] == &params.variant.tileOrder);
  CHECK(pointers[first + 19] == &params.variant.tileOrderStrides[0]);
  CHECK(pointers[first + 20] == &params.variant.tileOrderStrides[1]);
  CHECK(pointers[first + 21] == nullptr);
}

TEST_CASE("the tile-order launch's parameters: seqlens, the lists, the order") {
  TileOrderLaunchParams params;
  params.lists.hasBlockMask = true;
  for (unsigned l = 0; l < 4; ++l)
    params.lists.blockMask[l].rank = l % 2 == 0 ? 3 : 4;
  auto pointers = params.pointers();
  CHECK(pointers[0] == &params.seqlenQ);
  CHECK(pointers[1] == &params.seqlenK);
  CHECK(pointers[2] == &params.lists.blockMask[0].data);
  CHECK(pointers[6] == &params.lists.blockMask[1].data);
  CHECK(pointers[20] == &params.order);
  static_assert(pointers.size() == 21);
}

TEST_CASE("encoding tensor maps without a driver says so") {
  if (driverLoadable()) {
    MESSAGE("libcuda.so.1 is loadable here: driver-absent check skipped");
    return;
  }
  TensorMapBoxes boxes;
  boxes.qRows = boxes.kvRows = 128;
  boxes.oRows = 64;
  auto layouts = forwardTensorMapLayouts(gqaArgs(), boxes, "wgmma");
  REQUIRE(bool(layouts));
  ForwardLaunchParams params;
  std::string why =
      errorText(prepareForwardLaunch(gqaArgs(), 0.125, &*layouts, params));
  CHECK(why.rfind("no CUDA driver (libcuda.so.1) found", 0) == 0);
}

TEST_CASE("a kernel takes the tensor maps its template names for its config") {
  AttentionSpec spec = gqaSpec();
  for (const KernelTemplate *tmpl : allTemplates()) {
    std::vector<TileConfig> configs = tmpl->candidates(spec);
    if (configs.empty())
      continue;
    KernelInfo info;
    info.name = "k";
    info.config = configs.front();
    Kernel kernel(spec, info, "", nullptr, "no GPU here");
    auto expected = tmpl->tensorMapBoxes(spec, info.config);
    INFO(info.config.canonical());
    REQUIRE(kernel.tensorMapBoxes().has_value() == expected.has_value());
    if (expected) {
      CHECK(kernel.tensorMapBoxes()->qRows == expected->qRows);
      CHECK(kernel.tensorMapBoxes()->kvRows == expected->kvRows);
      CHECK(kernel.tensorMapBoxes()->oRows == expected->oRows);
      CHECK(kernel.tensorMapBoxes()->cols == expected->cols);
    }
    CHECK(kernel.persistent() == tmpl->persistent());
  }

  KernelInfo info;
  info.name = "flashjit_fwd";
  info.config.family = "no_such_family";
  Kernel unknown(spec, info, "", nullptr, "no GPU here");
  CHECK_FALSE(unknown.tensorMapBoxes().has_value());
}

TEST_CASE("a kernel without a device checks, then says it cannot launch") {
  KernelInfo info;
  info.name = "flashjit_fwd";
  info.config.family = "mma_sync";
  Kernel kernel(gqaSpec(), info, "", nullptr, "no GPU here");
  ForwardArgs args = gqaArgs();
  CHECK(errorText(kernel.check(args)) == "");
  ForwardLaunchParams params;
  ErrorParts noDevice = takeErrorParts(kernel.prepareLaunch(args, params));
  CHECK(noDevice.code == ErrorCode::NoDevice);
  CHECK(noDevice.message ==
        "cannot launch flashjit_fwd: no GPU is available (no GPU here)");
  CHECK(takeErrorParts(kernel.forward(args)).code == ErrorCode::NoDevice);

  args.k.strides[2] = 100; // checked before the device is asked for
  CHECK(takeErrorParts(kernel.forward(args)).code ==
        ErrorCode::InvalidArgument);
}
