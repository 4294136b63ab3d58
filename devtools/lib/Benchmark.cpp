//===- Benchmark.cpp - check and time kernels on one shape ----------------===//
// Why: see Benchmark.h. The inputs are one flat buffer per tensor: a
// contiguous BHSD tensor of any shape with at most `Capacity` elements is a
// prefix of it, so every bucket of a dtype reuses the same data.
#include "flashjit/DevTools/Benchmark.h"

#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/DevTools/BackwardCheck.h"
#include "flashjit/DevTools/DeviceBuffer.h"
#include "flashjit/DevTools/Harness.h"
#include "flashjit/DevTools/HostFloat.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace flashjit {

Benchmark::Benchmark(const CudaDriver &drv, uint64_t seed)
    : Drv(drv), Seed(seed), Q(std::make_unique<DeviceBuffer>(drv)),
      K(std::make_unique<DeviceBuffer>(drv)),
      V(std::make_unique<DeviceBuffer>(drv)),
      O(std::make_unique<DeviceBuffer>(drv)),
      Lse(std::make_unique<DeviceBuffer>(drv)) {}

Benchmark::~Benchmark() = default;

llvm::Expected<std::unique_ptr<Benchmark>> Benchmark::create(uint64_t seed) {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  if (auto ctx = drv->ensureContext(); !ctx)
    return ctx.takeError();
  return std::unique_ptr<Benchmark>(new Benchmark(*drv, seed));
}

llvm::Error Benchmark::prepare(const AttentionSpec &spec, int64_t batch,
                               int64_t seqlen, int checkedRows) {
  const int64_t elements = batch * spec.numHeads * seqlen * spec.headDim;
  const int64_t rows = batch * spec.numHeads * seqlen;
  if (spec.dtype != InputDType || elements > Capacity) {
    Capacity = 0;
    ReferenceKey.clear();
    std::mt19937_64 rng(Seed);
    // K and V have at most as many elements as Q (KV heads <= heads).
    for (auto [host, device] :
         {std::pair{&Host.q, Q.get()}, std::pair{&Host.k, K.get()},
          std::pair{&Host.v, V.get()}}) {
      std::vector<uint16_t> bits = makeRandomInput(
          *host, spec.dtype, Layout::BHSD, 1, 1, elements, 1, rng);
      if (auto err = device->allocate(bits.size() * sizeof(uint16_t)))
        return err;
      if (auto err = FLASHJIT_CU(Drv, cuMemcpyHtoD, device->ptr(), bits.data(),
                                 device->bytes()))
        return err;
    }
    if (auto err = O->allocate(elements * sizeof(uint16_t)))
      return err;
    InputDType = spec.dtype;
    Capacity = elements;
  }
  if (static_cast<size_t>(rows) * sizeof(float) > Lse->bytes())
    if (auto err = Lse->allocate(rows * sizeof(float)))
      return err;

  std::string key = llvm::formatv("{0};b={1};s={2};rows={3}", spec.canonical(),
                                  batch, seqlen, checkedRows)
                        .str();
  if (key == ReferenceKey)
    return llvm::Error::success();
  Host.spec = spec;
  Host.batch = batch;
  Host.seqlenQ = Host.seqlenK = seqlen;
  Host.scale = spec.defaultScale();
  Rows.clear();
  std::mt19937_64 rng(Seed ^ std::hash<std::string>()(key));
  std::uniform_int_distribution<int64_t> pickBatch(0, batch - 1),
      pickHead(0, spec.numHeads - 1), pickRow(0, seqlen - 1);
  for (int i = 0; i < std::max(checkedRows, 2); ++i) {
    SampledRow r;
    if (i == 0) {
      r.batch = r.head = r.row = 0;
    } else if (i == 1) {
      r.batch = batch - 1;
      r.head = spec.numHeads - 1;
      r.row = seqlen - 1;
    } else {
      r.batch = pickBatch(rng);
      r.head = pickHead(rng);
      r.row = pickRow(rng);
    }
    r.reference = referenceRow(Host, r.batch, r.head, r.row);
    Rows.push_back(std::move(r));
  }
  ReferenceKey = key;
  return llvm::Error::success();
}

llvm::Expected<BenchmarkResult>
Benchmark::run(const Kernel &kernel, int64_t batch, int64_t seqlen,
               const BenchmarkOptions &options) {
  const AttentionSpec &spec = kernel.spec();
  if (batch < 1 || seqlen < 1)
    return llvm::createStringError("batch and seqlen must be at least 1");
  if (auto err = prepare(spec, batch, seqlen, options.checkedRows))
    return std::move(err);
  const int64_t H = spec.numHeads, Hkv = spec.numKVHeads, D = spec.headDim;
  const int64_t elements = batch * H * seqlen * D;
  const int64_t rows = batch * H * seqlen;

  ForwardArgs args;
  args.q = TensorRef::bhsd(Q->data(), spec.dtype, batch, H, seqlen, D);
  args.k = TensorRef::bhsd(K->data(), spec.dtype, batch, Hkv, seqlen, D);
  args.v = TensorRef::bhsd(V->data(), spec.dtype, batch, Hkv, seqlen, D);
  args.o = TensorRef::bhsd(O->data(), spec.dtype, batch, H, seqlen, D);
  args.lse =
      LseRef::contiguous(static_cast<float *>(Lse->data()), batch, H, seqlen);
  args.stream = options.timing.stream;

  // Poison (0xFF.. is NaN in f16, bf16 and f32), run once, read back.
  if (auto err = FLASHJIT_CU(Drv, cuMemsetD8, O->ptr(), 0xFF,
                             elements * sizeof(uint16_t)))
    return std::move(err);
  if (auto err =
          FLASHJIT_CU(Drv, cuMemsetD8, Lse->ptr(), 0xFF, rows * sizeof(float)))
    return std::move(err);
  if (auto err = kernel.forward(args))
    return std::move(err);
  if (auto err = FLASHJIT_CU(Drv, cuCtxSynchronize))
    return std::move(err);
  OutBits.resize(elements);
  OutLse.resize(rows);
  if (auto err = FLASHJIT_CU(Drv, cuMemcpyDtoH, OutBits.data(), O->ptr(),
                             elements * sizeof(uint16_t)))
    return std::move(err);
  if (auto err = FLASHJIT_CU(Drv, cuMemcpyDtoH, OutLse.data(), Lse->ptr(),
                             rows * sizeof(float)))
    return std::move(err);

  int64_t nonFinite = 0;
  for (uint16_t bits : OutBits)
    if (!std::isfinite(bitsToFloat(spec.dtype, bits)))
      ++nonFinite;
  for (float x : OutLse)
    if (!std::isfinite(x))
      ++nonFinite;
  double errSq = 0, refSq = 0, lseErrSq = 0, lseRefSq = 0;
  for (const SampledRow &r : Rows) {
    int64_t base = ((r.batch * H + r.head) * seqlen + r.row) * D;
    for (int64_t c = 0; c < D; ++c) {
      double diff =
          bitsToFloat(spec.dtype, OutBits[base + c]) - r.reference.out[c];
      errSq += diff * diff;
      refSq += r.reference.out[c] * r.reference.out[c];
    }
    double lseDiff =
        OutLse[(r.batch * H + r.head) * seqlen + r.row] - r.reference.lse;
    lseErrSq += lseDiff * lseDiff;
    lseRefSq += r.reference.lse * r.reference.lse;
  }
  BenchmarkResult result;
  result.relError = std::sqrt(errSq / std::max(refSq, 1e-300));
  result.lseRelError = std::sqrt(lseErrSq / std::max(lseRefSq, 1e-300));
  double tolerance = checkTolerance(spec.dtype);
  // NaN compares false: a NaN error fails too.
  if (nonFinite > 0 || !(result.relError <= tolerance) ||
      !(result.lseRelError <= tolerance))
    return llvm::createStringError(
        llvm::formatv("wrong results: relative error {0:e2}, LSE relative "
                      "error {1:e2} (tolerance {2:e1}), {3} non-finite "
                      "outputs",
                      result.relError, result.lseRelError, tolerance, nonFinite)
            .str());

  auto timing = timeLaunches(
      Drv, [&] { return kernel.forward(args); }, options.timing);
  if (!timing)
    return timing.takeError();
  result.medianMs = timing->medianMs;
  result.launchesPerSample = timing->launchesPerSample;
  result.tflops = forwardFlops(spec, batch, seqlen, seqlen) /
                  (result.medianMs * 1e-3) / 1e12;
  return result;
}

namespace {
/// True when the current CUDA context no longer works: a kernel fault is
/// sticky, every later call fails, so nothing more can be measured.
bool contextBroken(const CudaDriver &drv) {
  return drv.cuCtxSynchronize() != CUDA_SUCCESS;
}

/// A candidate's failure `message`: fatal when the CUDA context no longer
/// works after it.
llvm::Error measurementFailure(std::string message) {
  auto drv = CudaDriver::get();
  if (!drv) {
    llvm::consumeError(drv.takeError());
    return llvm::make_error<autotune::FatalMeasurementError>(message);
  }
  if (contextBroken(*drv))
    return llvm::make_error<autotune::FatalMeasurementError>(
        message + " (the CUDA context is unusable after it)");
  return llvm::createStringError(message);
}
} // namespace

llvm::Expected<autotune::Measurement>
measureCandidate(Context &ctx, Benchmark &bench,
                 const autotune::BucketPlan &plan, const TileConfig &config,
                 const BenchmarkOptions &options) {
  auto kernel = ctx.compile(plan.spec, config);
  llvm::Expected<BenchmarkResult> result =
      kernel ? bench.run(**kernel, plan.batch, plan.seqlen, options)
             : llvm::Expected<BenchmarkResult>(llvm::createStringError(
                   "does not build: " + llvm::toString(kernel.takeError())));
  if (result)
    return autotune::Measurement{result->medianMs, result->tflops};
  return measurementFailure(llvm::toString(result.takeError()));
}

llvm::Expected<autotune::Measurement>
measureBackwardCandidate(Context &ctx, const autotune::BucketPlan &plan,
                         const TileConfig &config,
                         const BenchmarkOptions &options, uint64_t seed) {
  auto forward = ctx.compile(plan.spec);
  if (!forward)
    return measurementFailure("the forward does not build: " +
                              llvm::toString(forward.takeError()));
  BackwardOptions backwardOptions;
  backwardOptions.config = config;
  auto backward = ctx.compileBackward(plan.spec, backwardOptions);
  if (!backward)
    return measurementFailure("does not build: " +
                              llvm::toString(backward.takeError()));
  // Checked against float64 at an odd length of at most 385 (two KV
  // groups: the reference of a long sequence would take longer than the
  // timing), then timed on the plan's shape with every output scanned for
  // NaN.
  auto run = [&](const BackwardCheckOptions &o)
      -> llvm::Expected<BackwardCheckReport> {
    auto report = runAndCheckBackward(**forward, **backward, o);
    if (!report)
      return measurementFailure(llvm::toString(report.takeError()));
    if (!report->passed)
      return measurementFailure("wrong results: " + report->summary());
    return report;
  };
  BackwardCheckOptions check;
  check.seed = seed;
  check.batch = 1;
  check.seqlenQ = check.seqlenK = std::min<int64_t>(plan.seqlen | 1, 385);
  check.checkedGroups = 2;
  if (auto checked = run(check); !checked)
    return checked.takeError();
  BackwardCheckOptions timed;
  timed.seed = seed + 1;
  timed.batch = plan.batch;
  timed.seqlenQ = timed.seqlenK = plan.seqlen;
  timed.checkedGroups = -1;
  timed.warmup = options.timing.warmup;
  timed.iterations = options.timing.iterations;
  auto report = run(timed);
  if (!report)
    return report.takeError();
  return autotune::Measurement{report->medianMs, report->tflops};
}

} // namespace flashjit
