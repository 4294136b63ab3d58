//===- Harness.cpp - run a kernel on fresh inputs and check it ------------===//
// Why: see Harness.h.
#include "flashjit/Runtime/Harness.h"

#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/Runtime/DeviceBuffer.h"
#include "flashjit/Runtime/EventTimer.h"
#include "flashjit/Runtime/HostFloat.h"
#include "flashjit/Runtime/Reference.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <random>

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

/// Rows of one head to compare: all, or the first and last few and a
/// random sample between.
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
} // namespace

std::vector<uint16_t> makeRandomInput(std::vector<float> &host, DType dtype,
                                      Layout layout, int64_t B, int64_t H,
                                      int64_t S, int64_t D,
                                      std::mt19937_64 &rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  host.resize(B * H * S * D);
  std::vector<uint16_t> device(host.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t d = 0; d < D; ++d) {
          uint16_t bits = floatToBits(dtype, normal(rng));
          host[((b * H + h) * S + s) * D + d] = bitsToFloat(dtype, bits);
          device[offsetOf(layout, b, h, s, H, S, D) + d] = bits;
        }
  return device;
}

double checkTolerance(DType dtype) {
  return dtype == DType::BF16 ? 1e-2 : 2e-3;
}

std::string CheckReport::summary() const {
  return llvm::formatv("rel_err {0:e2} (tol {1:e1}), lse_rel_err {2:e2}, "
                       "max_abs_err {3:e2}, non-finite {4}, rows {5}{6}",
                       relError, tolerance, lseRelError, maxAbsError,
                       nonFinite, checkedRows, passed ? "" : "  FAILED")
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
  if (auto err = FLASHJIT_CU(drv, cuMemsetD8, o.ptr(), 0xFF, o.bytes()))
    return std::move(err);
  if (auto err = FLASHJIT_CU(drv, cuMemsetD8, lse.ptr(), 0xFF, lse.bytes()))
    return std::move(err);

  ForwardArgs args;
  args.q = tensorRef(opt.layout, q.data(), spec.dtype, B, H, Sq, D);
  args.k = tensorRef(opt.layout, k.data(), spec.dtype, B, Hkv, Sk, D);
  args.v = tensorRef(opt.layout, v.data(), spec.dtype, B, Hkv, Sk, D);
  args.o = tensorRef(opt.layout, o.data(), spec.dtype, B, H, Sq, D);
  args.lse = LseRef::contiguous(static_cast<float *>(lse.data()), B, H, Sq);
  args.scale = host.scale;
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
  for (uint16_t bits : oBits)
    if (!std::isfinite(bitsToFloat(spec.dtype, bits)))
      ++report.nonFinite;
  for (float x : lseHost)
    if (!std::isfinite(x))
      ++report.nonFinite;

  double errSq = 0, refSq = 0, lseErrSq = 0, lseRefSq = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t row : rowsToCheck(Sq, opt.rowsPerHead, rng)) {
        ReferenceRow ref = referenceRow(host, b, h, row);
        int64_t base = offsetOf(opt.layout, b, h, row, H, Sq, D);
        for (int64_t c = 0; c < D; ++c) {
          double got = bitsToFloat(spec.dtype, oBits[base + c]);
          double diff = got - ref.out[c];
          errSq += diff * diff;
          refSq += ref.out[c] * ref.out[c];
          report.maxAbsError = std::max(report.maxAbsError, std::fabs(diff));
          if (std::isnan(diff))
            report.maxAbsError = NAN;
        }
        double lseDiff = lseHost[(b * H + h) * Sq + row] - ref.lse;
        lseErrSq += lseDiff * lseDiff;
        lseRefSq += ref.lse * ref.lse;
        ++report.checkedRows;
      }
  report.relError = std::sqrt(errSq / std::max(refSq, 1e-300));
  report.lseRelError = std::sqrt(lseErrSq / std::max(lseRefSq, 1e-300));
  // NaN compares false, so a NaN anywhere fails these.
  report.passed = report.nonFinite == 0 &&
                  report.relError <= report.tolerance &&
                  report.lseRelError <= report.tolerance;

  if (opt.iterations > 0) {
    TimingOptions timingOptions;
    timingOptions.warmup = opt.warmup;
    timingOptions.iterations = opt.iterations;
    auto timing = timeLaunches(
        drv, [&] { return kernel.forward(args); }, timingOptions);
    if (!timing)
      return timing.takeError();
    report.medianMs = timing->medianMs;
    report.tflops =
        forwardFlops(spec, B, Sq, Sk) / (report.medianMs * 1e-3) / 1e12;
  }
  return report;
}

} // namespace flashjit
