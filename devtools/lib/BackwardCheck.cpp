//===- BackwardCheck.cpp - run the backward on fresh inputs, check it -----===//
// Why: see BackwardCheck.h.
#include "flashjit/DevTools/BackwardCheck.h"

#include "flashjit/DevTools/BackwardReference.h"
#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/DevTools/DeviceBuffer.h"
#include "flashjit/DevTools/DeviceWords.h"
#include "flashjit/DevTools/EventTimer.h"
#include "flashjit/DevTools/HostFloat.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

namespace flashjit {
namespace {

/// Device element offset of (b, h, s, 0) of a [B, H, S, D] tensor.
int64_t elementOffset(Layout layout, int64_t b, int64_t h, int64_t s,
                      int64_t H, int64_t S, int64_t D) {
  return layout == Layout::BHSD ? ((b * H + h) * S + s) * D
                                : ((b * S + s) * H + h) * D;
}

TensorRef viewOf(Layout layout, const DeviceBuffer &buffer, DType dtype,
                 int64_t b, int64_t h, int64_t s, int64_t d) {
  return layout == Layout::BHSD
             ? TensorRef::bhsd(buffer.data(), dtype, b, h, s, d)
             : TensorRef::bshd(buffer.data(), dtype, b, h, s, d);
}

} // namespace

std::vector<std::pair<int64_t, int64_t>>
groupsToCheck(int64_t batch, int64_t kvHeads, int64_t count,
              std::mt19937_64 &rng) {
  const int64_t all = batch * kvHeads;
  std::set<int64_t> picked;
  if (count < 0)
    return {};
  if (count == 0 || count >= all) {
    for (int64_t g = 0; g < all; ++g)
      picked.insert(g);
  } else {
    picked.insert(0);
    if (count > 1)
      picked.insert(all - 1);
    std::uniform_int_distribution<int64_t> any(0, all - 1);
    while (static_cast<int64_t>(picked.size()) < count)
      picked.insert(any(rng));
  }
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t g : picked)
    out.push_back({g / kvHeads, g % kvHeads});
  return out;
}

double backwardTolerance(DType dtype) { return 2 * checkTolerance(dtype); }

llvm::Expected<const CudaDriver *>
backwardCheckDriver(const Kernel &forward, const BackwardKernel &backward) {
  const AttentionSpec &spec = backward.spec();
  if (forward.spec().canonical() != spec.canonical())
    return llvm::createStringError(
        "the forward and backward kernels are of different specs: " +
        forward.spec().canonical() + " and " + spec.canonical());
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  if (auto ctx = drv->ensureContext(); !ctx)
    return ctx.takeError();
  return &*drv;
}

double GradientErrorSums::relative() const {
  const double denominator =
      refSq > 0x1p-80 * magSq ? refSq : std::max(magSq, 1e-300);
  return std::sqrt(errSq / denominator);
}

void GradientErrorSums::addRow(DType dtype, const uint16_t *bits,
                               const double *ref, const double *magnitude,
                               int64_t columns, double &maxAbsError) {
  for (int64_t c = 0; c < columns; ++c) {
    double diff = bitsToFloat(dtype, bits[c]) - ref[c];
    errSq += diff * diff;
    refSq += ref[c] * ref[c];
    magSq += magnitude[c] * magnitude[c];
    maxAbsError =
        std::isnan(diff) ? NAN : std::max(maxAbsError, std::fabs(diff));
  }
}

std::string BackwardCheckReport::summary() const {
  std::string repeats =
      repeatsCompared == 0
          ? ""
          : llvm::formatv(", bitwise equal in {0} of {1} repeated runs",
                          repeatsCompared - repeatsDiffering, repeatsCompared)
                .str();
  return llvm::formatv("dq_rel_err {0:e2}, dk_rel_err {1:e2}, dv_rel_err "
                       "{2:e2} (tol {3:e1}), max_abs_err {4:e2}, non-finite "
                       "{5}, kv groups {6}{7}{8}",
                       dqError, dkError, dvError, tolerance, maxAbsError,
                       nonFinite, checkedGroups, repeats,
                       passed ? "" : "  FAILED")
      .str();
}

llvm::Expected<BackwardCheckReport>
runAndCheckBackward(const Kernel &forward, const BackwardKernel &backward,
                    const BackwardCheckOptions &opt) {
  const AttentionSpec &spec = backward.spec();
  auto drvOr = backwardCheckDriver(forward, backward);
  if (!drvOr)
    return drvOr.takeError();
  const CudaDriver &drv = **drvOr;

  const int64_t B = opt.batch, H = spec.numHeads, Hkv = spec.numKVHeads,
                Sq = opt.seqlenQ, Sk = opt.seqlenK, D = spec.headDim;
  std::mt19937_64 rng(opt.seed);
  HostBackwardProblem host;
  host.spec = spec;
  host.batch = B;
  host.seqlenQ = Sq;
  host.seqlenK = Sk;
  host.scale = opt.scale.value_or(spec.defaultScale());
  auto qBits = makeRandomInput(host.q, spec.dtype, opt.layout, B, H, Sq, D, rng);
  auto kBits =
      makeRandomInput(host.k, spec.dtype, opt.layout, B, Hkv, Sk, D, rng);
  auto vBits =
      makeRandomInput(host.v, spec.dtype, opt.layout, B, Hkv, Sk, D, rng);
  auto dOBits =
      makeRandomInput(host.dO, spec.dtype, opt.layout, B, H, Sq, D, rng);
  auto mods = ModInterpreter::forCheck(spec, opt.captures);
  if (!mods)
    return mods.takeError();
  host.mods = mods->get();
  host.captures = opt.captures;

  const size_t qBytes = qBits.size() * 2, kvBytes = kBits.size() * 2;
  const size_t workspaceBytes = backward.workspaceBytes(B, Sq);
  DeviceBuffer q(drv), k(drv), v(drv), o(drv), lse(drv), dO(drv), dq(drv),
      dk(drv), dv(drv), workspace(drv);
  for (auto [buf, bytes] :
       {std::pair{&q, qBytes}, std::pair{&k, kvBytes}, std::pair{&v, kvBytes},
        std::pair{&o, qBytes}, std::pair{&lse, size_t(B * H * Sq) * 4},
        std::pair{&dO, qBytes}, std::pair{&dq, qBytes},
        std::pair{&dk, kvBytes}, std::pair{&dv, kvBytes},
        std::pair{&workspace, workspaceBytes}})
    if (auto err = buf->allocate(bytes))
      return std::move(err);
  for (auto [buf, bits] : {std::pair{&q, &qBits}, std::pair{&k, &kBits},
                           std::pair{&v, &vBits}, std::pair{&dO, &dOBits}})
    if (auto err = FLASHJIT_CU(drv, cuMemcpyHtoD, buf->ptr(), bits->data(),
                               buf->bytes()))
      return std::move(err);
  // Poison: 0xFFFF is NaN in f16 and bf16, 0xFFFFFFFF in f32 (the
  // workspace too: the preprocess kernel must zero the dQ accumulator and
  // the deterministic mode's turn counters).
  if (auto err = poison({&o, &lse, &dq, &dk, &dv, &workspace}))
    return std::move(err);

  DeviceWords words(drv);
  std::vector<CapturedRef> captures;
  if (auto err = words.uploadCaptures(spec, opt.captures, captures))
    return std::move(err);
  // The block mask (the caller's or a random one): its lists for the
  // forward, their transpose for the backward.
  HostBlockMask blockMask;
  BlockMaskRef forwardLists, backwardLists;
  if (spec.isBlockSparse()) {
    blockMask = opt.blockMask
                    ? *opt.blockMask
                    : HostBlockMask::random(spec, B, Sq, Sk, opt.blockDensity,
                                            /*fullLists=*/true,
                                            /*shareBatch=*/false,
                                            /*shareHeads=*/false, rng);
    host.blockMask = &blockMask;
    const int64_t keyBlocks = (Sk + spec.sparseBlockN - 1) / spec.sparseBlockN;
    if (auto err = words.uploadBlockMask(blockMask, forwardLists))
      return std::move(err);
    if (auto err =
            words.uploadBlockMask(blockMask.transposed(keyBlocks),
                                  backwardLists))
      return std::move(err);
  }

  ForwardArgs fwd;
  fwd.captures = captures;
  fwd.blockMask = forwardLists;
  fwd.q = viewOf(opt.layout, q, spec.dtype, B, H, Sq, D);
  fwd.k = viewOf(opt.layout, k, spec.dtype, B, Hkv, Sk, D);
  fwd.v = viewOf(opt.layout, v, spec.dtype, B, Hkv, Sk, D);
  fwd.o = viewOf(opt.layout, o, spec.dtype, B, H, Sq, D);
  fwd.lse = LseRef::contiguous(static_cast<float *>(lse.data()), B, H, Sq);
  fwd.scale = host.scale;
  if (auto err = forward.forward(fwd))
    return std::move(err);

  BackwardArgs args;
  args.q = fwd.q;
  args.k = fwd.k;
  args.v = fwd.v;
  args.o = fwd.o;
  args.lse = fwd.lse;
  args.dO = viewOf(opt.layout, dO, spec.dtype, B, H, Sq, D);
  args.dq = viewOf(opt.layout, dq, spec.dtype, B, H, Sq, D);
  args.dk = viewOf(opt.layout, dk, spec.dtype, B, Hkv, Sk, D);
  args.dv = viewOf(opt.layout, dv, spec.dtype, B, Hkv, Sk, D);
  args.workspace = workspace.data();
  args.workspaceBytes = workspace.bytes();
  args.scale = host.scale;
  args.captures = captures;
  args.blockMask = backwardLists;
  if (auto err = backward.backward(args))
    return std::move(err);
  if (auto err = FLASHJIT_CU(drv, cuCtxSynchronize))
    return std::move(err);

  std::vector<uint16_t> dqBits(qBits.size()), dkBits(kBits.size()),
      dvBits(kBits.size());
  auto readGradients = [&](std::vector<uint16_t> &dqTo,
                           std::vector<uint16_t> &dkTo,
                           std::vector<uint16_t> &dvTo) -> llvm::Error {
    for (auto [bits, buf] :
         {std::pair{&dqTo, &dq}, std::pair{&dkTo, &dk}, std::pair{&dvTo, &dv}})
      if (auto err = FLASHJIT_CU(drv, cuMemcpyDtoH, bits->data(), buf->ptr(),
                                 buf->bytes()))
        return err;
    return llvm::Error::success();
  };
  if (auto err = readGradients(dqBits, dkBits, dvBits))
    return std::move(err);

  BackwardCheckReport report;
  // Each repeat runs on freshly poisoned gradients and workspace and must
  // give the first call's bits.
  for (int r = 0; r < opt.repeats; ++r) {
    if (auto err = poison({&dq, &dk, &dv, &workspace}))
      return std::move(err);
    if (auto err = backward.backward(args))
      return std::move(err);
    if (auto err = FLASHJIT_CU(drv, cuCtxSynchronize))
      return std::move(err);
    std::vector<uint16_t> dqAgain(dqBits.size()), dkAgain(dkBits.size()),
        dvAgain(dvBits.size());
    if (auto err = readGradients(dqAgain, dkAgain, dvAgain))
      return std::move(err);
    ++report.repeatsCompared;
    if (dqAgain != dqBits || dkAgain != dkBits || dvAgain != dvBits)
      ++report.repeatsDiffering;
  }
  report.tolerance = backwardTolerance(spec.dtype);
  for (const auto *bits : {&dqBits, &dkBits, &dvBits})
    for (uint16_t x : *bits)
      if (!std::isfinite(bitsToFloat(spec.dtype, x)))
        ++report.nonFinite;

  GradientErrorSums dqSums, dkSums, dvSums;
  auto compare = [&](GradientErrorSums &sums,
                     const std::vector<uint16_t> &bits, int64_t base,
                     const double *ref, const double *mag) {
    sums.addRow(spec.dtype, &bits[base], ref, mag, D, report.maxAbsError);
  };
  const int64_t group = spec.groupSize();
  for (auto [b, kvh] : groupsToCheck(B, Hkv, opt.checkedGroups, rng)) {
    ReferenceGradients ref = referenceGradients(host, b, kvh);
    if (!ref.error.empty())
      return llvm::createStringError("the reference's mods: " + ref.error);
    for (int64_t g = 0; g < group; ++g)
      for (int64_t i = 0; i < Sq; ++i)
        compare(dqSums, dqBits,
                elementOffset(opt.layout, b, kvh * group + g, i, H, Sq, D),
                &ref.dq[(g * Sq + i) * D], &ref.dqMagnitude[(g * Sq + i) * D]);
    for (int64_t j = 0; j < Sk; ++j) {
      int64_t base = elementOffset(opt.layout, b, kvh, j, Hkv, Sk, D);
      compare(dkSums, dkBits, base, &ref.dk[j * D], &ref.dkMagnitude[j * D]);
      compare(dvSums, dvBits, base, &ref.dv[j * D], &ref.dvMagnitude[j * D]);
    }
    ++report.checkedGroups;
  }
  report.dqError = dqSums.relative();
  report.dkError = dkSums.relative();
  report.dvError = dvSums.relative();
  // NaN compares false, so a NaN anywhere fails these.
  report.passed = report.nonFinite == 0 && report.repeatsDiffering == 0 &&
                  report.dqError <= report.tolerance &&
                  report.dkError <= report.tolerance &&
                  report.dvError <= report.tolerance;

  if (opt.iterations > 0) {
    // Plain attention by the FlashAttention convention (the backward 2.5x
    // the forward); a window counts the scores it leaves, a block mask the
    // pairs it lists.
    const double flops =
        spec.isBlockSparse()
            ? 4.0 * D * listedPairs(spec, blockMask, B, Sq, Sk)
            : computedFlops(spec, B, Sq, Sk);
    auto rate = timeRate(
        drv, [&] { return backward.backward(args); }, opt.warmup,
        opt.iterations, 2.5 * flops);
    if (!rate)
      return rate.takeError();
    report.medianMs = rate->medianMs;
    report.tflops = rate->tflops;
  }
  return report;
}

} // namespace flashjit
