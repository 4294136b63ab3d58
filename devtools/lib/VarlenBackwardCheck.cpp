//===- VarlenBackwardCheck.cpp - check a varlen backward on fresh inputs --===//
// Why: see VarlenBackwardCheck.h.
#include "flashjit/DevTools/VarlenBackwardCheck.h"

#include "flashjit/DevTools/BackwardReference.h"
#include "flashjit/DevTools/DeviceBuffer.h"
#include "flashjit/DevTools/EventTimer.h"
#include "flashjit/DevTools/HostFloat.h"
#include "flashjit/DevTools/VarlenHarness.h"
#include "flashjit/Runtime/CudaDriver.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>

namespace flashjit {
namespace {
/// Poisoned rows after the end of dq, dk and dv: a call must leave them.
constexpr int64_t kGuardRows = 256;
} // namespace

llvm::Expected<VarlenBackwardCheckReport>
runAndCheckVarlenBackward(const Kernel &forward, const BackwardKernel &backward,
                          const VarlenBackwardCheckOptions &opt) {
  const AttentionSpec &spec = backward.spec();
  auto drvOr = backwardCheckDriver(forward, backward);
  if (!drvOr)
    return drvOr.takeError();
  const CudaDriver &drv = **drvOr;

  auto batch = packedBatch(opt.lengthsQ, opt.lengthsK);
  if (!batch)
    return batch.takeError();
  const std::vector<int64_t> &lq = batch->lengthsQ, &lk = batch->lengthsK;
  const std::vector<int32_t> &cuQ = batch->cuQ, &cuK = batch->cuK;
  const int64_t B = batch->sequences(), H = spec.numHeads,
                Hkv = spec.numKVHeads, D = spec.headDim;
  VarlenBackwardCheckReport out;
  out.sequences = B;
  out.totalQ = batch->totalQ();
  out.totalK = batch->totalK();
  out.maxSeqlenK =
      std::max<int64_t>(1, *std::max_element(lk.begin(), lk.end()));
  const int64_t Tq = out.totalQ, Tk = out.totalK;

  std::mt19937_64 rng(opt.seed);
  std::vector<float> qHost, kHost, vHost, dOHost;
  auto qBits = randomPacked(qHost, spec.dtype, Tq, H, D, rng);
  auto kBits = randomPacked(kHost, spec.dtype, Tk, Hkv, D, rng);
  auto vBits = randomPacked(vHost, spec.dtype, Tk, Hkv, D, rng);
  auto dOBits = randomPacked(dOHost, spec.dtype, Tq, H, D, rng);
  // The gradients have kGuardRows poisoned rows past their ends.
  const size_t dqWords = size_t((Tq + kGuardRows) * H * D);
  const size_t dkWords = size_t((Tk + kGuardRows) * Hkv * D);
  const size_t workspaceBytes =
      backward.workspaceBytes(1, std::max<int64_t>(Tq, 1));

  DeviceBuffer q(drv), k(drv), v(drv), o(drv), lse(drv), dO(drv), dq(drv),
      dk(drv), dv(drv), workspace(drv), cuQDev(drv), cuKDev(drv);
  for (auto [buf, bytes] :
       {std::pair{&q, qBits.size() * 2}, std::pair{&k, kBits.size() * 2},
        std::pair{&v, vBits.size() * 2}, std::pair{&o, qBits.size() * 2},
        std::pair{&lse, size_t(H * Tq) * 4}, std::pair{&dO, dOBits.size() * 2},
        std::pair{&dq, dqWords * 2}, std::pair{&dk, dkWords * 2},
        std::pair{&dv, dkWords * 2}, std::pair{&workspace, workspaceBytes},
        std::pair{&cuQDev, cuQ.size() * 4}, std::pair{&cuKDev, cuK.size() * 4}})
    if (auto err = buf->allocate(std::max<size_t>(bytes, 4)))
      return std::move(err);
  for (auto [buf, host, bytes] :
       {std::tuple{&q, (const void *)qBits.data(), qBits.size() * 2},
        std::tuple{&k, (const void *)kBits.data(), kBits.size() * 2},
        std::tuple{&v, (const void *)vBits.data(), vBits.size() * 2},
        std::tuple{&dO, (const void *)dOBits.data(), dOBits.size() * 2},
        std::tuple{&cuQDev, (const void *)cuQ.data(), cuQ.size() * 4},
        std::tuple{&cuKDev, (const void *)cuK.data(), cuK.size() * 4}})
    if (bytes > 0)
      if (auto err = FLASHJIT_CU(drv, cuMemcpyHtoD, buf->ptr(), host, bytes))
        return std::move(err);
  // Poison: 0xFFFF is NaN in f16 and bf16, 0xFFFFFFFF in f32 (the
  // workspace too: the preprocess kernel must zero the dQ accumulator).
  if (auto err = poison({&o, &lse, &dq, &dk, &dv, &workspace}))
    return std::move(err);

  const double scale = opt.scale.value_or(spec.defaultScale());
  VarlenForwardArgs fwd;
  fwd.packed.q = TensorRef::packed(q.data(), spec.dtype, Tq, H, D);
  fwd.packed.k = TensorRef::packed(k.data(), spec.dtype, Tk, Hkv, D);
  fwd.packed.v = TensorRef::packed(v.data(), spec.dtype, Tk, Hkv, D);
  fwd.packed.o = TensorRef::packed(o.data(), spec.dtype, Tq, H, D);
  fwd.packed.lse = LseRef::packed(static_cast<float *>(lse.data()), H, Tq);
  fwd.packed.scale = scale;
  fwd.cuSeqlensQ = static_cast<const int32_t *>(cuQDev.data());
  fwd.cuSeqlensK = static_cast<const int32_t *>(cuKDev.data());
  fwd.batch = B;
  fwd.maxSeqlenQ =
      std::max<int64_t>(1, *std::max_element(lq.begin(), lq.end()));
  if (auto err = forward.forwardVarlen(fwd))
    return std::move(err);

  VarlenBackwardArgs args;
  BackwardArgs &a = args.packed;
  a.q = fwd.packed.q;
  a.k = fwd.packed.k;
  a.v = fwd.packed.v;
  a.o = fwd.packed.o;
  a.lse = fwd.packed.lse;
  a.dO = TensorRef::packed(dO.data(), spec.dtype, Tq, H, D);
  a.dq = TensorRef::packed(dq.data(), spec.dtype, Tq, H, D);
  a.dk = TensorRef::packed(dk.data(), spec.dtype, Tk, Hkv, D);
  a.dv = TensorRef::packed(dv.data(), spec.dtype, Tk, Hkv, D);
  a.workspace = workspace.data();
  a.workspaceBytes = workspace.bytes();
  a.scale = scale;
  args.cuSeqlensQ = fwd.cuSeqlensQ;
  args.cuSeqlensK = fwd.cuSeqlensK;
  args.batch = B;
  args.maxSeqlenK = out.maxSeqlenK;
  if (auto err = backward.backwardVarlen(args))
    return std::move(err);
  if (auto err = FLASHJIT_CU(drv, cuCtxSynchronize))
    return std::move(err);

  std::vector<uint16_t> dqBits(dqWords), dkBits(dkWords), dvBits(dkWords);
  for (auto [bits, buf] :
       {std::pair{&dqBits, &dq}, std::pair{&dkBits, &dk},
        std::pair{&dvBits, &dv}})
    if (auto err = FLASHJIT_CU(drv, cuMemcpyDtoH, bits->data(), buf->ptr(),
                               buf->bytes()))
      return std::move(err);

  BackwardCheckReport &report = out.check;
  report.tolerance = backwardTolerance(spec.dtype);
  auto scan = [&](const std::vector<uint16_t> &bits, size_t inside) {
    for (size_t i = 0; i < bits.size(); ++i) {
      if (i >= inside)
        out.writtenOutside += bits[i] != 0xFFFF;
      else if (!std::isfinite(bitsToFloat(spec.dtype, bits[i])))
        ++report.nonFinite;
    }
  };
  scan(dqBits, size_t(Tq * H * D));
  scan(dkBits, size_t(Tk * Hkv * D));
  scan(dvBits, size_t(Tk * Hkv * D));

  // Each sequence against the reference, as a batch of one.
  AttentionSpec dense = spec;
  dense.varlen = false;
  const int64_t group = spec.groupSize();
  GradientErrorSums dqSums, dkSums, dvSums;
  std::vector<std::vector<int64_t>> checkedHeads(B);
  for (auto [b, kvh] : groupsToCheck(B, Hkv, opt.checkedGroups, rng))
    checkedHeads[b].push_back(kvh);
  for (int64_t b = 0; b < B; ++b) {
    if (checkedHeads[b].empty())
      continue;
    HostBackwardProblem host;
    host.spec = dense;
    host.batch = 1;
    host.seqlenQ = lq[b];
    host.seqlenK = lk[b];
    host.scale = scale;
    host.q = sequenceOf(qHost, cuQ[b], lq[b], H, D);
    host.dO = sequenceOf(dOHost, cuQ[b], lq[b], H, D);
    host.k = sequenceOf(kHost, cuK[b], lk[b], Hkv, D);
    host.v = sequenceOf(vHost, cuK[b], lk[b], Hkv, D);
    for (int64_t kvh : checkedHeads[b]) {
      ReferenceGradients ref = referenceGradients(host, 0, kvh);
      if (!ref.error.empty())
        return llvm::createStringError("the reference: " + ref.error);
      for (int64_t g = 0; g < group; ++g)
        for (int64_t i = 0; i < lq[b]; ++i) {
          const size_t at = size_t((g * lq[b] + i) * D);
          dqSums.addRow(spec.dtype,
                        &dqBits[((cuQ[b] + i) * H + kvh * group + g) * D],
                        &ref.dq[at], &ref.dqMagnitude[at], D,
                        report.maxAbsError);
        }
      for (int64_t j = 0; j < lk[b]; ++j) {
        const size_t base = size_t(((cuK[b] + j) * Hkv + kvh) * D);
        dkSums.addRow(spec.dtype, &dkBits[base], &ref.dk[j * D],
                      &ref.dkMagnitude[j * D], D, report.maxAbsError);
        dvSums.addRow(spec.dtype, &dvBits[base], &ref.dv[j * D],
                      &ref.dvMagnitude[j * D], D, report.maxAbsError);
      }
      ++report.checkedGroups;
    }
  }
  report.dqError = dqSums.relative();
  report.dkError = dkSums.relative();
  report.dvError = dvSums.relative();
  // NaN compares false, so a NaN anywhere fails these.
  report.passed = report.nonFinite == 0 && out.writtenOutside == 0 &&
                  report.dqError <= report.tolerance &&
                  report.dkError <= report.tolerance &&
                  report.dvError <= report.tolerance;

  if (opt.iterations > 0) {
    auto rate = timeRate(
        drv, [&] { return backward.backwardVarlen(args); }, opt.warmup,
        opt.iterations, 2.5 * varlenFlops(spec, lq, lk));
    if (!rate)
      return rate.takeError();
    report.medianMs = rate->medianMs;
    report.tflops = rate->tflops;
  }
  return out;
}

} // namespace flashjit
