//===- Harness.cpp - run a kernel on fresh inputs and check it ------------===//
// Why: see Harness.h.
#include "flashjit/DevTools/Harness.h"
#include "flashjit/DevTools/DeviceWords.h"

#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/DevTools/DeviceBuffer.h"
#include "flashjit/DevTools/EventTimer.h"
#include "flashjit/DevTools/HostFloat.h"
#include "flashjit/DevTools/Reference.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <thread>

namespace flashjit {
namespace {

/// Device element offset of (b, h, s, 0) in the chosen layout.
int64_t offsetOf(Layout layout, int64_t b, int64_t h, int64_t s, int64_t H,
                 int64_t S, int64_t D) {
  return layout == Layout::BHSD ? ((b * H + h) * S + s) * D
                                : ((b * S + s) * H + h) * D;
}

TensorRef tensorRef(Layout layout, void *data, DType dtype, int64_t b,
                    int64_t h, int64_t s, int64_t d) {
  return layout == Layout::BHSD ? TensorRef::bhsd(data, dtype, b, h, s, d)
                                : TensorRef::bshd(data, dtype, b, h, s, d);
}

/// Runs work(0), ..., work(workers - 1) at once, work(0) on this thread.
void onWorkers(unsigned workers, llvm::function_ref<void(unsigned)> work) {
  std::vector<std::thread> threads;
  for (unsigned w = 1; w < workers; ++w)
    threads.emplace_back(work, w);
  work(0);
  for (std::thread &t : threads)
    t.join();
}

} // namespace

std::vector<uint16_t> makeRandomInput(std::vector<float> &host, DType dtype,
                                      Layout layout, int64_t B, int64_t H,
                                      int64_t S, int64_t D,
                                      std::mt19937_64 &rng) {
  // Each chunk of 64k elements draws from its own stream, seeded from one
  // draw of `rng` and the chunk's index, so the chunks fill on every core
  // (one sequential stream was most of a large check's host time) and the
  // values depend on the seed alone, not on the thread count.
  constexpr int64_t chunkElements = int64_t(1) << 16;
  const uint64_t base = rng();
  const int64_t elements = B * H * S * D;
  host.resize(elements);
  std::vector<uint16_t> device(elements);
  auto fillChunk = [&](int64_t chunk) {
    std::seed_seq seeds{uint32_t(base), uint32_t(base >> 32), uint32_t(chunk),
                        uint32_t(uint64_t(chunk) >> 32)};
    std::mt19937_64 stream(seeds);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t end = std::min(elements, (chunk + 1) * chunkElements);
    for (int64_t i = chunk * chunkElements; i < end; ++i) {
      const int64_t d = i % D, s = i / D % S, h = i / (D * S) % H,
                    b = i / (D * S * H);
      uint16_t bits = floatToBits(dtype, normal(stream));
      host[i] = bitsToFloat(dtype, bits);
      device[offsetOf(layout, b, h, s, H, S, D) + d] = bits;
    }
  };
  const int64_t chunks = (elements + chunkElements - 1) / chunkElements;
  // A thread for every 16 chunks (1M elements) at least: small inputs
  // stay on this thread.
  const unsigned workers = static_cast<unsigned>(std::clamp<int64_t>(
      chunks / 16, 1, std::max(1u, std::thread::hardware_concurrency())));
  onWorkers(workers, [&](unsigned w) {
    for (int64_t chunk = w; chunk < chunks; chunk += workers)
      fillChunk(chunk);
  });
  return device;
}

void RowErrors::addRow(const ReferenceRow &ref,
                       llvm::function_ref<double(int64_t)> gotAt, int64_t d,
                       float gotLse) {
  for (int64_t c = 0; c < d; ++c) {
    double diff = gotAt(c) - ref.out[c];
    errSq += diff * diff;
    refSq += ref.out[c] * ref.out[c];
    maxAbs = std::isnan(diff) || std::isnan(maxAbs)
                 ? NAN
                 : std::max(maxAbs, std::fabs(diff));
  }
  ++rows;
  // A row the reference leaves empty must have LSE -inf; a -inf where the
  // reference has keys is counted as non-finite.
  if (ref.lse == -INFINITY) {
    nonFinite += gotLse != -INFINITY;
    return;
  }
  nonFinite += gotLse == -INFINITY;
  double lseDiff = gotLse - ref.lse;
  lseErrSq += lseDiff * lseDiff;
  lseRefSq += ref.lse * ref.lse;
}

void RowErrors::add(const RowErrors &other) {
  errSq += other.errSq;
  refSq += other.refSq;
  lseErrSq += other.lseErrSq;
  lseRefSq += other.lseRefSq;
  nonFinite += other.nonFinite;
  rows += other.rows;
  maxAbs = std::isnan(other.maxAbs) || std::isnan(maxAbs)
               ? NAN
               : std::max(maxAbs, other.maxAbs);
}

void RowErrors::into(CheckReport &report) const {
  report.relError = std::sqrt(errSq / std::max(refSq, 1e-300));
  report.lseRelError = std::sqrt(lseErrSq / std::max(lseRefSq, 1e-300));
  report.maxAbsError = maxAbs;
  report.nonFinite += nonFinite;
  report.checkedRows = rows;
}

llvm::Expected<RowErrors>
compareRows(size_t count, size_t rowsPerWorker,
            llvm::function_ref<std::string(size_t, RowErrors &)> compareRow) {
  const unsigned workers = std::max(
      1u, std::min<unsigned>(std::thread::hardware_concurrency(),
                             static_cast<unsigned>(count / rowsPerWorker + 1)));
  std::vector<RowErrors> partials(workers);
  std::vector<std::string> errors(workers);
  onWorkers(workers, [&](unsigned w) {
    for (size_t i = w; i < count && errors[w].empty(); i += workers)
      errors[w] = compareRow(i, partials[w]);
  });
  RowErrors total;
  for (unsigned w = 0; w < workers; ++w) {
    if (!errors[w].empty())
      return llvm::createStringError("the reference: " + errors[w]);
    total.add(partials[w]);
  }
  return total;
}

std::vector<int64_t> rowsToCheck(int64_t seqlen, int64_t wanted,
                                 std::mt19937_64 &rng) {
  std::vector<int64_t> rows;
  if (seqlen <= wanted) {
    for (int64_t i = 0; i < seqlen; ++i)
      rows.push_back(i);
    return rows;
  }
  int64_t edge = std::min<int64_t>(8, wanted / 4);
  for (int64_t i = 0; i < edge; ++i) {
    rows.push_back(i);
    rows.push_back(seqlen - 1 - i);
  }
  std::uniform_int_distribution<int64_t> pick(0, seqlen - 1);
  while (static_cast<int64_t>(rows.size()) < wanted)
    rows.push_back(pick(rng));
  return rows;
}

double checkTolerance(DType dtype) {
  return dtype == DType::BF16 ? 1e-2 : 2e-3;
}

double checkLseTolerance(const AttentionSpec &spec) {
  // The LSE is m + log(l) in f32 from f32 scores: a score's error is that
  // of an f32 dot product of head_dim terms and l's that of an f32 sum, a
  // few 1e-7 relative for any head dim and length here; 1e-5 leaves a
  // tenfold margin. A score_mod may use approximate math (tanh.approx has
  // a relative error of 2^-11), which the LSE inherits.
  return spec.scoreMod.empty() ? 1e-5 : 1e-3;
}

int64_t rowsWithinBudget(const AttentionSpec &spec, int64_t batch,
                         int64_t seqlenQ, int64_t seqlenK, double budget,
                         int64_t minimum) {
  // Keys each row's reference visits: all, or up to its diagonal.
  double keys = double(seqlenQ) * double(seqlenK);
  if (spec.causal) {
    const double full = double(std::min(seqlenQ, seqlenK));
    keys = full * (full + 1) / 2 + double(seqlenQ - full) * double(seqlenK);
  }
  const double perHead = keys * 2.0 * double(spec.headDim);
  const double heads = double(batch) * double(spec.numHeads);
  if (perHead * heads <= budget)
    return seqlenQ;
  const double perRow = perHead / double(seqlenQ);
  int64_t rows = static_cast<int64_t>(budget / (perRow * heads));
  return std::min(seqlenQ, std::max(minimum, rows));
}

std::string CheckReport::summary() const {
  return llvm::formatv("rel_err {0:e2} (tol {1:e1}), lse_rel_err {2:e2} "
                       "(tol {3:e1}), max_abs_err {4:e2}, non-finite {5}, "
                       "rows {6}{7}",
                       relError, tolerance, lseRelError, lseTolerance,
                       maxAbsError, nonFinite, checkedRows,
                       passed ? "" : "  FAILED")
      .str();
}

llvm::Expected<CheckReport> runAndCheck(const Kernel &kernel,
                                        const CheckOptions &opt) {
  auto drvOr = CudaDriver::get();
  if (!drvOr)
    return drvOr.takeError();
  const CudaDriver &drv = *drvOr;
  if (auto ctx = drv.ensureContext(); !ctx)
    return ctx.takeError();

  const AttentionSpec &spec = kernel.spec();
  const int64_t B = opt.batch, H = spec.numHeads, Hkv = spec.numKVHeads,
                Sq = opt.seqlenQ, Sk = opt.seqlenK, D = spec.headDim;
  std::mt19937_64 rng(opt.seed);
  HostProblem host;
  host.spec = spec;
  host.batch = B;
  host.seqlenQ = Sq;
  host.seqlenK = Sk;
  host.scale = opt.scale.value_or(spec.defaultScale());
  auto qBits =
      makeRandomInput(host.q, spec.dtype, opt.layout, B, H, Sq, D, rng);
  auto kBits =
      makeRandomInput(host.k, spec.dtype, opt.layout, B, Hkv, Sk, D, rng);
  auto vBits =
      makeRandomInput(host.v, spec.dtype, opt.layout, B, Hkv, Sk, D, rng);
  auto mods = ModInterpreter::forCheck(spec, opt.captures);
  if (!mods)
    return mods.takeError();
  host.mods = mods->get();
  host.captures = opt.captures;

  DeviceBuffer q(drv), k(drv), v(drv), o(drv), lse(drv);
  for (auto [buf, bytes] :
       {std::pair{&q, qBits.size() * 2}, std::pair{&k, kBits.size() * 2},
        std::pair{&v, vBits.size() * 2}, std::pair{&o, qBits.size() * 2},
        std::pair{&lse, size_t(B * H * Sq) * 4}})
    if (auto err = buf->allocate(bytes))
      return std::move(err);
  if (auto err = FLASHJIT_CU(drv, cuMemcpyHtoD, q.ptr(), qBits.data(), q.bytes()))
    return std::move(err);
  if (auto err = FLASHJIT_CU(drv, cuMemcpyHtoD, k.ptr(), kBits.data(), k.bytes()))
    return std::move(err);
  if (auto err = FLASHJIT_CU(drv, cuMemcpyHtoD, v.ptr(), vBits.data(), v.bytes()))
    return std::move(err);
  // Poison: 0xFFFF is NaN in f16 and bf16, 0xFFFFFFFF in f32.
  if (auto err = poison({&o, &lse}))
    return std::move(err);

  ForwardArgs args;
  args.q = tensorRef(opt.layout, q.data(), spec.dtype, B, H, Sq, D);
  args.k = tensorRef(opt.layout, k.data(), spec.dtype, B, Hkv, Sk, D);
  args.v = tensorRef(opt.layout, v.data(), spec.dtype, B, Hkv, Sk, D);
  args.o = tensorRef(opt.layout, o.data(), spec.dtype, B, H, Sq, D);
  args.lse = LseRef::contiguous(static_cast<float *>(lse.data()), B, H, Sq);
  args.scale = host.scale;
  // The captured tensors and the block mask: 4-byte words in device
  // buffers that live until the checks are done.
  DeviceWords words(drv);
  if (auto err = words.uploadCaptures(spec, opt.captures, args.captures))
    return std::move(err);
  // The block mask: the caller's, or a random one of the density asked.
  HostBlockMask blockMask;
  if (spec.isBlockSparse()) {
    blockMask = opt.blockMask
                    ? *opt.blockMask
                    : HostBlockMask::random(spec, B, Sq, Sk, opt.blockDensity,
                                            /*fullLists=*/true,
                                            /*shareBatch=*/false,
                                            /*shareHeads=*/false, rng);
    host.blockMask = &blockMask;
    if (auto err = words.uploadBlockMask(blockMask, args.blockMask))
      return std::move(err);
  }
  if (auto err = kernel.forward(args))
    return std::move(err);
  if (auto err = FLASHJIT_CU(drv, cuCtxSynchronize))
    return std::move(err);

  std::vector<uint16_t> oBits(qBits.size());
  std::vector<float> lseHost(B * H * Sq);
  if (auto err = FLASHJIT_CU(drv, cuMemcpyDtoH, oBits.data(), o.ptr(), o.bytes()))
    return std::move(err);
  if (auto err = FLASHJIT_CU(drv, cuMemcpyDtoH, lseHost.data(), lse.ptr(),
                             lse.bytes()))
    return std::move(err);

  CheckReport report;
  report.tolerance = checkTolerance(spec.dtype);
  report.lseTolerance = checkLseTolerance(spec);
  for (uint16_t bits : oBits)
    if (!std::isfinite(bitsToFloat(spec.dtype, bits)))
      ++report.nonFinite;
  for (float x : lseHost)
    if (!std::isfinite(x) && !(spec.mayEmptyRows() && x == -INFINITY))
      ++report.nonFinite;

  // The rows to compare, then the float64 reference of each, on every
  // core: checking every row of a problem of millions of rows costs the
  // reference's O(rows x keys x head_dim) work.
  struct RowTask {
    int64_t b, h, row;
  };
  std::vector<RowTask> tasks;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t row : rowsToCheck(Sq, opt.rowsPerHead, rng))
        tasks.push_back({b, h, row});
  auto errors = compareRows(
      tasks.size(), 64, [&](size_t t, RowErrors &e) -> std::string {
        const auto [b, h, row] = tasks[t];
        ReferenceRow ref = referenceRow(host, b, h, row);
        if (!ref.error.empty())
          return ref.error;
        int64_t base = offsetOf(opt.layout, b, h, row, H, Sq, D);
        e.addRow(
            ref,
            [&](int64_t c) { return bitsToFloat(spec.dtype, oBits[base + c]); },
            D, lseHost[(b * H + h) * Sq + row]);
        return "";
      });
  if (!errors)
    return errors.takeError();
  errors->into(report);
  // NaN compares false, so a NaN anywhere fails these.
  report.passed = report.nonFinite == 0 &&
                  report.relError <= report.tolerance &&
                  report.lseRelError <= report.lseTolerance;

  if (opt.iterations > 0) {
    // Plain attention counts by the FlashAttention convention; a variant
    // counts the scores its causal mask, window and block mask leave (a
    // mask_mod's own drops are not known here).
    double flops = spec.isBlockSparse()
                       ? 4.0 * D * listedPairs(spec, blockMask, B, Sq, Sk)
                       : computedFlops(spec, B, Sq, Sk);
    auto rate = timeRate(
        drv, [&] { return kernel.forward(args); }, opt.warmup, opt.iterations,
        flops);
    if (!rate)
      return rate.takeError();
    report.medianMs = rate->medianMs;
    report.tflops = rate->tflops;
  }
  return report;
}

} // namespace flashjit

namespace flashjit {

llvm::Expected<HostBlockMask>
buildBlockMaskOnGpu(const BlockMaskBuilder &builder,
                    llvm::ArrayRef<HostCapture> captures, int64_t batch,
                    int64_t heads, int64_t seqlenQ, int64_t seqlenK,
                    bool fullLists) {
  auto driver = CudaDriver::get();
  if (!driver)
    return driver.takeError();
  const CudaDriver &drv = *driver;
  const AttentionSpec &spec = builder.spec();
  auto [queryBlocks, keyBlocks] =
      BlockMaskBuilder::blockCounts(spec, seqlenQ, seqlenK);
  HostBlockMask mask;
  mask.batch = batch;
  mask.heads = heads;
  mask.queryBlocks = queryBlocks;
  mask.indexColumns = keyBlocks;
  const size_t counts = static_cast<size_t>(batch * heads * queryBlocks);
  const size_t indices = counts * static_cast<size_t>(keyBlocks);

  BlockMaskBuildArgs args;
  args.seqlenQ = seqlenQ;
  args.seqlenK = seqlenK;
  DeviceWords words(drv);
  if (auto err = words.uploadCaptures(spec, captures, args.captures))
    return std::move(err);
  // The lists, poisoned with -1 (0xFFFFFFFF): an entry the kernel does
  // not write stays -1, which a forward kernel skips.
  std::vector<int32_t> poison(indices, -1);
  std::vector<int32_t> *values[] = {&mask.kvNumBlocks, &mask.kvIndices,
                                    &mask.fullKvNumBlocks,
                                    &mask.fullKvIndices};
  auto lists = args.blockMask.lists();
  for (unsigned l = 0; l < (fullLists ? 4u : 2u); ++l) {
    const bool isIndices = l % 2 == 1;
    auto ref = words.upload(poison.data(), isIndices ? indices : counts,
                            CaptureDType::I32,
                            isIndices ? mask.indexShape() : mask.countShape());
    if (!ref)
      return ref.takeError();
    *lists[l] = *ref;
    values[l]->resize(isIndices ? indices : counts);
  }
  if (auto err = builder.build(args))
    return std::move(err);
  if (auto err = FLASHJIT_CU(drv, cuCtxSynchronize))
    return std::move(err);
  for (unsigned l = 0; l < (fullLists ? 4u : 2u); ++l)
    if (auto err = FLASHJIT_CU(drv, cuMemcpyDtoH, values[l]->data(),
                               reinterpret_cast<CUdeviceptr>(lists[l]->data),
                               values[l]->size() * 4))
      return std::move(err);
  return mask;
}

} // namespace flashjit
