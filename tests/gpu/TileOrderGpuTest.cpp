//===- TileOrderGpuTest.cpp - the block-sparse tile order on the GPU ------===//
// Why: a persistent block-sparse kernel takes its query blocks in the order
// its tile-order kernel writes (TileOrderKernel.h). A wrong order that is
// still a permutation leaves every output right and only the speed wrong,
// which no forward check sees; so the order itself is checked here against
// the host's sort of the same lists, on shared and per-(batch, head) lists,
// with and without full lists, mask blocks coarser than the tile, odd
// lengths. The forward kernels that read it are checked by the variants
// tests (every block-sparse case runs wgmma_persistent); here, their order
// buffers under CUDA graph capture.
#include "GpuProblem.h"

#include "flashjit/DevTools/DeviceWords.h"
#include "flashjit/DevTools/HostBlockMask.h"
#include "flashjit/Runtime/Launch.h"
#include "flashjit/Runtime/ModuleLoader.h"
#include "flashjit/Runtime/ScopedContext.h"
#include "flashjit/Templates/TileOrderKernel.h"

#include <algorithm>
#include <cstring>
#include <numeric>

using namespace flashjit;
using namespace flashjit::test;

namespace {
/// The order of one list row as the kernel must write it: query blocks of
/// `blockM` rows by 3 x partial + 2 x full listed blocks (counts clamped to
/// [0, key blocks]), descending, ties by query block.
std::vector<int32_t> hostOrder(const AttentionSpec &spec,
                               const HostBlockMask &mask, int64_t b, int64_t h,
                               int64_t seqlenQ, int64_t seqlenK,
                               int64_t blockM) {
  const int64_t blocks = (seqlenQ + blockM - 1) / blockM;
  const int64_t keyBlocks =
      (seqlenK + spec.sparseBlockN - 1) / spec.sparseBlockN;
  auto clamp = [&](int32_t n) {
    return std::min<int64_t>(std::max<int32_t>(n, 0), keyBlocks);
  };
  std::vector<int64_t> key(blocks);
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t row = (b * mask.heads + h) * mask.queryBlocks +
                        i * blockM / spec.sparseBlockM;
    key[i] = 3 * clamp(mask.kvNumBlocks[row]) +
             (mask.hasFullLists() ? 2 * clamp(mask.fullKvNumBlocks[row]) : 0);
  }
  std::vector<int32_t> order(blocks);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t x, int32_t y) { return key[x] > key[y]; });
  return order;
}
} // namespace

TEST_CASE("the tile order: each list row's query blocks, most listed blocks "
          "first") {
  if (!hasPersistentFamily())
    return;
  struct Case {
    int64_t sparseBlock, batch, seqlenQ, seqlenK;
    bool fullLists, shareBatch, shareHeads;
    double density;
  };
  const Case cases[] = {
      {128, 2, 4097, 4097, true, false, false, 0.4},
      {128, 2, 16384, 16384, true, true, true, 0.3},
      {256, 1, 1000, 4097, false, false, true, 0.5},
      {128, 3, 1, 300, true, true, false, 1.0},
      {128, 1, 9000, 2000, true, false, false, 0.0},
  };
  const CudaDriver &drv = gpuDriver();
  std::mt19937_64 rng(freshSeed());
  for (const Case &c : cases) {
    AttentionSpec spec;
    spec.headDim = 128;
    spec.numHeads = 4;
    spec.numKVHeads = 2;
    spec.sparseBlockM = spec.sparseBlockN = c.sparseBlock;
    CAPTURE(c.sparseBlock);
    CAPTURE(c.seqlenQ);
    CAPTURE(c.seqlenK);
    CAPTURE(c.shareHeads);
    auto kernel = compileFamily(spec, "wgmma_persistent");
    REQUIRE(kernel);
    const KernelInfo &info = kernel->info();
    REQUIRE(usesTileOrder(spec, info.config));
    HostBlockMask mask =
        HostBlockMask::random(spec, c.batch, c.seqlenQ, c.seqlenK, c.density,
                              c.fullLists, c.shareBatch, c.shareHeads, rng);
    auto scope = llvm::cantFail(ScopedContext::enterDevice(drv, 0));
    auto module = LoadedModule::load(info, kernel->ptx(), "", 0);
    REQUIRE_MESSAGE(bool(module), llvm::toString(module.takeError()));
    CUfunction sort = nullptr;
    CU_OK(drv.cuModuleGetFunction(&sort, module->module(),
                                  tileOrderKernelName(info.name).c_str()));
    DeviceWords words(drv);
    BlockMaskRef lists;
    REQUIRE_FALSE(bool(words.uploadBlockMask(mask, lists)));
    const int64_t rowElements =
        tileOrderRowElements(c.seqlenQ, info.config.blockM);
    DeviceBuffer order(drv);
    REQUIRE_FALSE(bool(order.allocate(mask.batch * mask.heads * rowElements *
                                      sizeof(int32_t))));
    REQUIRE_FALSE(bool(order.poison()));
    TileOrderLaunchParams params;
    params.seqlenQ = static_cast<int32_t>(c.seqlenQ);
    params.seqlenK = static_cast<int32_t>(c.seqlenK);
    params.lists.fill({}, lists);
    params.order = order.data();
    auto pointers = params.pointers();
    REQUIRE_FALSE(bool(launchInCurrentContext(
        drv, sort, tileOrderGeometry(mask.batch, mask.heads), pointers.data(),
        nullptr)));
    CU_OK(drv.cuCtxSynchronize());
    std::vector<int32_t> got(mask.batch * mask.heads * rowElements);
    CU_OK(drv.cuMemcpyDtoH(got.data(), order.ptr(), got.size() * 4));
    for (int64_t b = 0; b < mask.batch; ++b)
      for (int64_t h = 0; h < mask.heads; ++h) {
        std::vector<int32_t> want = hostOrder(spec, mask, b, h, c.seqlenQ,
                                              c.seqlenK, info.config.blockM);
        auto first = got.begin() + (b * mask.heads + h) * rowElements;
        std::vector<int32_t> row(first, first + want.size());
        INFO("list row (" << b << ", " << h << ")");
        CHECK(row == want);
      }
  }
}

TEST_CASE("a block-sparse persistent kernel in CUDA graphs: its order "
          "buffer per captured launch") {
  // Direct launches on the capture stream and replays of two graphs on
  // other streams, all at once, on two block masks of different skew: every
  // output must equal the direct launch's of its mask bit for bit (the
  // order changes which SM takes a tile, not a tile's arithmetic), and the
  // direct launch's is checked by the variants tests.
  if (!hasPersistentFamily())
    return;
  AttentionSpec spec;
  spec.headDim = 128;
  spec.numHeads = 4;
  spec.numKVHeads = 2;
  spec.sparseBlockM = spec.sparseBlockN = 128;
  auto kernel = compileFamily(spec, "wgmma_persistent");
  REQUIRE(kernel);
  const CudaDriver &drv = gpuDriver();
  const DriverExtras &x = driverExtras();
  auto scope = llvm::cantFail(ScopedContext::enterDevice(drv, 0));
  const int64_t batch = 2, seqlen = 3000, d = spec.headDim;
  std::mt19937_64 rng(freshSeed());
  auto randomBf16 = [&](DeviceBuffer &buffer, size_t count) {
    std::uniform_int_distribution<int> pick(-64, 64);
    std::vector<uint16_t> bits(count);
    for (uint16_t &v : bits) {
      float f = pick(rng) / 32.0f;
      uint32_t word;
      std::memcpy(&word, &f, 4);
      v = static_cast<uint16_t>(word >> 16);
    }
    REQUIRE_FALSE(bool(buffer.allocate(count * 2)));
    CU_OK(drv.cuMemcpyHtoD(buffer.ptr(), bits.data(), count * 2));
  };
  DeviceBuffer q(drv), k(drv), v(drv);
  randomBf16(q, batch * spec.numHeads * seqlen * d);
  randomBf16(k, batch * spec.numKVHeads * seqlen * d);
  randomBf16(v, batch * spec.numKVHeads * seqlen * d);
  DeviceWords words(drv);
  BlockMaskRef masks[2];
  HostBlockMask hostMasks[2] = {
      HostBlockMask::random(spec, batch, seqlen, seqlen, 0.3, true, false,
                            false, rng),
      HostBlockMask::random(spec, batch, seqlen, seqlen, 0.7, true, true, true,
                            rng)};
  for (int m = 0; m < 2; ++m)
    REQUIRE_FALSE(bool(words.uploadBlockMask(hostMasks[m], masks[m])));
  struct Output {
    explicit Output(const CudaDriver &drv) : o(drv), lse(drv) {}
    DeviceBuffer o, lse;
  };
  auto argsFor = [&](Output &out, int m, CUstream stream) {
    ForwardArgs a;
    a.q =
        TensorRef::bhsd(q.data(), DType::BF16, batch, spec.numHeads, seqlen, d);
    a.k = TensorRef::bhsd(k.data(), DType::BF16, batch, spec.numKVHeads, seqlen,
                          d);
    a.v = TensorRef::bhsd(v.data(), DType::BF16, batch, spec.numKVHeads, seqlen,
                          d);
    a.o = TensorRef::bhsd(out.o.data(), DType::BF16, batch, spec.numHeads,
                          seqlen, d);
    a.lse = LseRef::contiguous(static_cast<float *>(out.lse.data()), batch,
                               spec.numHeads, seqlen);
    a.blockMask = masks[m];
    a.stream = stream;
    return a;
  };
  auto newOutput = [&] {
    auto out = std::make_unique<Output>(drv);
    REQUIRE_FALSE(
        bool(out->o.allocate(batch * spec.numHeads * seqlen * d * 2)));
    REQUIRE_FALSE(bool(out->lse.allocate(batch * spec.numHeads * seqlen * 4)));
    return out;
  };
  auto poisonOn = [&](Output &out, CUstream s) {
    CU_OK(x.memsetAsync(out.o.ptr(), 0xFF, out.o.bytes(), s));
    CU_OK(x.memsetAsync(out.lse.ptr(), 0xFF, out.lse.bytes(), s));
  };
  auto bytesOf = [&](const Output &out) {
    std::vector<uint8_t> host(out.o.bytes() + out.lse.bytes());
    CU_OK(drv.cuMemcpyDtoH(host.data(), out.o.ptr(), out.o.bytes()));
    CU_OK(drv.cuMemcpyDtoH(host.data() + out.o.bytes(), out.lse.ptr(),
                           out.lse.bytes()));
    return host;
  };
  CUstream capture = nullptr;
  CU_OK(drv.cuStreamCreate(&capture, CU_STREAM_NON_BLOCKING));
  // The expected outputs, and the capture stream's own buffers, from
  // direct launches before any capture.
  std::vector<uint8_t> want[2];
  auto direct = newOutput();
  for (int m = 0; m < 2; ++m) {
    poisonOn(*direct, capture);
    REQUIRE_FALSE(bool(kernel->forward(argsFor(*direct, m, capture))));
    CU_OK(drv.cuCtxSynchronize());
    want[m] = bytesOf(*direct);
  }
  std::vector<std::unique_ptr<Output>> graphOut;
  CUgraph graphs[2];
  CUgraphExec execs[2];
  CUstream replay[2];
  for (int g = 0; g < 2; ++g) {
    CU_OK(drv.cuStreamCreate(&replay[g], CU_STREAM_NON_BLOCKING));
    graphOut.push_back(newOutput());
    CU_OK(x.beginCapture(capture, CU_STREAM_CAPTURE_MODE_GLOBAL));
    poisonOn(*graphOut[g], capture);
    llvm::Error err = kernel->forward(argsFor(*graphOut[g], g, capture));
    CUresult ended = x.endCapture(capture, &graphs[g]);
    REQUIRE_MESSAGE(!err, llvm::toString(std::move(err)));
    CU_OK(ended);
    CU_OK(x.instantiate(&execs[g], graphs[g], 0));
  }
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    const int directMask = round % 2;
    for (int g = 0; g < 2; ++g)
      CU_OK(x.graphLaunch(execs[g], replay[g]));
    poisonOn(*direct, capture);
    REQUIRE_FALSE(bool(kernel->forward(argsFor(*direct, directMask, capture))));
    CU_OK(drv.cuCtxSynchronize());
    for (int g = 0; g < 2; ++g) {
      INFO("graph " << g);
      CHECK(bytesOf(*graphOut[g]) == want[g]);
    }
    INFO("direct launch, mask " << directMask);
    CHECK(bytesOf(*direct) == want[directMask]);
  }
  for (int g = 0; g < 2; ++g) {
    (void)x.graphExecDestroy(execs[g]);
    (void)x.graphDestroy(graphs[g]);
    (void)drv.cuStreamDestroy(replay[g]);
  }
  (void)drv.cuStreamDestroy(capture);
}
