//===- DecodeHarness.cpp - run a decode kernel and check it ---------------===//
// Why: see DecodeHarness.h.
#include "flashjit/DevTools/DecodeHarness.h"

#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/DevTools/DecodeReference.h"
#include "flashjit/DevTools/DeviceBuffer.h"
#include "flashjit/DevTools/EventTimer.h"
#include "flashjit/DevTools/Harness.h"
#include "flashjit/DevTools/HostFloat.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>

namespace flashjit {

std::string DecodeCheckReport::summary() const {
  return llvm::formatv("rel err {0:e2} (lse {1:e2}, max abs {2:e2}, tol "
                       "{3:e1}), non-finite {4}, rows {5}, splits {6}: {7}",
                       relError, lseRelError, maxAbsError, tolerance, nonFinite,
                       checkedRows, numSplits, passed ? "PASS" : "FAIL")
      .str();
}

namespace {
constexpr uint16_t kNanBits = 0xFFFF; // NaN in f16 and bf16

/// Uploads `words` into a fresh buffer.
template <typename T>
llvm::Error upload(const CudaDriver &drv, DeviceBuffer &buffer,
                   const std::vector<T> &host) {
  if (auto err = buffer.allocate(host.size() * sizeof(T)))
    return err;
  if (host.empty())
    return llvm::Error::success();
  return FLASHJIT_CU(drv, cuMemcpyHtoD, buffer.ptr(), host.data(),
                     host.size() * sizeof(T));
}

/// A fresh buffer of `bytes`, filled with 0xFF bytes (DeviceBuffer::poison).
llvm::Error allocatePoisoned(DeviceBuffer &buffer, size_t bytes) {
  if (auto err = buffer.allocate(bytes))
    return err;
  return buffer.poison();
}
} // namespace

llvm::Expected<DecodeCheckReport>
runDecodeAndCheck(const DecodeKernel &kernel, const DecodeCheckOptions &opt) {
  const DecodeKernel *one = &kernel;
  auto reports = runDecodeVariants({one}, opt);
  if (!reports)
    return reports.takeError();
  return std::move(reports->front());
}

llvm::Expected<std::vector<DecodeCheckReport>>
runDecodeVariants(llvm::ArrayRef<const DecodeKernel *> kernels,
                  const DecodeCheckOptions &opt,
                  llvm::ArrayRef<int64_t> splitsPerKernel) {
  auto drvOr = CudaDriver::get();
  if (!drvOr)
    return drvOr.takeError();
  const CudaDriver &drv = *drvOr;
  if (kernels.empty())
    return llvm::createStringError("no decode kernel to run");
  if (!splitsPerKernel.empty() && splitsPerKernel.size() != kernels.size())
    return llvm::createStringError("give one split count per kernel, or none");
  for (const DecodeKernel *k : kernels) {
    const DecodeSpec &a = k->spec(), &z = kernels.front()->spec();
    if (a.headDim != z.headDim || a.dtype != z.dtype ||
        a.numHeads != z.numHeads || a.numKVHeads != z.numKVHeads ||
        a.qLen != z.qLen || a.causal != z.causal || a.pageSize != z.pageSize)
      return llvm::createStringError(
          "the decode kernels of one run compute the same problem; " +
          a.canonical() + " differs from " + z.canonical() +
          " beyond its tile");
  }
  const DecodeKernel &firstKernel = *kernels.front();
  if (auto ctx = drv.ensureContext(); !ctx)
    return ctx.takeError();
  const DecodeSpec &s = firstKernel.spec();
  const int64_t B = opt.batch, d = s.headDim;
  if (B < 1 || opt.kvLens.empty() ||
      (opt.kvLens.size() != 1 && int64_t(opt.kvLens.size()) != B))
    return llvm::createStringError(
        "give one KV length, or one per sequence of the batch");
  HostDecodeProblem p;
  p.spec = s;
  p.batch = B;
  p.scale = opt.scale.value_or(s.defaultScale());
  int64_t longest = 0;
  for (int64_t i = 0; i < B; ++i) {
    int64_t len = opt.kvLens.size() == 1 ? opt.kvLens[0] : opt.kvLens[i];
    if (len < 0)
      return llvm::createStringError("KV lengths must be at least 0");
    p.kvLens.push_back(static_cast<int32_t>(len));
    longest = std::max(longest, len);
  }
  std::mt19937_64 rng(opt.seed);
  // Normal samples drawn once, picked by a fast generator: caches of
  // several GB fill in seconds.
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> samples(1 << 16);
  for (uint16_t &x : samples)
    x = floatToBits(s.dtype, normal(rng));
  const uint64_t base = rng();
  // One splitmix64 stream per filled row block, so that threads fill the
  // cache in parallel and the values depend on the seed alone.
  struct Stream {
    const std::vector<uint16_t> &samples;
    uint64_t state;
    uint16_t operator()() {
      state += 0x9E3779B97F4A7C15ull;
      uint64_t z = state;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return samples[(z ^ (z >> 31)) & 0xFFFF];
    }
  };
  auto streamOf = [&](uint64_t item) {
    return Stream{samples, base ^ (item * 0xD1B54A32D192ED03ull)};
  };
  Stream qStream = streamOf(~0ull);
  auto randomBits = [&]() { return qStream(); };
  const unsigned fillThreads =
      std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
  // fn(item) for items [0, n) over fillThreads threads.
  auto parallelFor = [&](int64_t n, const std::function<void(int64_t)> &fn) {
    std::vector<std::thread> pool;
    std::atomic<int64_t> next{0};
    for (unsigned t = 0; t < fillThreads; ++t)
      pool.emplace_back([&] {
        for (int64_t i = next++; i < n; i = next++)
          fn(i);
      });
    for (std::thread &th : pool)
      th.join();
  };

  // Q; the cache with every row past a sequence's length NaN.
  p.q.resize(B * s.qLen * s.numHeads * d);
  for (uint16_t &x : p.q)
    x = randomBits();
  const int64_t rowElems = s.numKVHeads * d;
  if (s.paged()) {
    p.maxPages = std::max<int64_t>((longest + s.pageSize - 1) / s.pageSize, 1);
    p.capacity = p.maxPages * s.pageSize;
    std::vector<int64_t> used(B);
    int64_t total = 0;
    for (int64_t i = 0; i < B; ++i)
      total += used[i] = (p.kvLens[i] + s.pageSize - 1) / s.pageSize;
    // A few spare pages (NaN) that no sequence owns, all shuffled.
    p.pages = total + 3;
    std::vector<int32_t> order(p.pages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    p.blockTable.assign(B * p.maxPages, order[p.pages - 1]);
    p.k.assign(p.pages * s.pageSize * rowElems, kNanBits);
    p.v.assign(p.k.size(), kNanBits);
    int64_t next = 0;
    std::vector<std::pair<int64_t, int64_t>> owned; // (sequence, page slot)
    for (int64_t i = 0; i < B; ++i)
      for (int64_t j = 0; j < used[i]; ++j) {
        p.blockTable[i * p.maxPages + j] = order[next++];
        owned.push_back({i, j});
      }
    parallelFor(int64_t(owned.size()), [&](int64_t item) {
      auto [i, j] = owned[item];
      const int64_t page = p.blockTable[i * p.maxPages + j];
      Stream bits = streamOf(item);
      for (int64_t r = 0; r < s.pageSize; ++r) {
        if (j * s.pageSize + r >= p.kvLens[i])
          break;
        int64_t at = (page * s.pageSize + r) * rowElems;
        for (int64_t e = 0; e < rowElems; ++e) {
          p.k[at + e] = bits();
          p.v[at + e] = bits();
        }
      }
    });
  } else {
    p.capacity = std::max<int64_t>((longest + 63) / 64 * 64, 64);
    p.headMajor = opt.kvHeadMajor;
    p.k.assign(B * p.capacity * rowElems, kNanBits);
    p.v.assign(p.k.size(), kNanBits);
    parallelFor(B * s.numKVHeads, [&](int64_t item) {
      const int64_t i = item / s.numKVHeads, h = item % s.numKVHeads;
      Stream bits = streamOf(item);
      for (int64_t r = 0; r < p.kvLens[i]; ++r) {
        int64_t at = p.headMajor
                         ? ((i * s.numKVHeads + h) * p.capacity + r) * d
                         : ((i * p.capacity + r) * s.numKVHeads + h) * d;
        for (int64_t e = 0; e < d; ++e) {
          p.k[at + e] = bits();
          p.v[at + e] = bits();
        }
      }
    });
  }

  DeviceBuffer q(drv), k(drv), v(drv), o(drv), lse(drv), lens(drv), table(drv),
      workspace(drv);
  if (auto err = upload(drv, q, p.q))
    return std::move(err);
  if (auto err = upload(drv, k, p.k))
    return std::move(err);
  if (auto err = upload(drv, v, p.v))
    return std::move(err);
  if (auto err = upload(drv, lens, p.kvLens))
    return std::move(err);
  if (auto err = upload(drv, table, p.blockTable))
    return std::move(err);
  const int64_t outElems = B * s.qLen * s.numHeads * d;
  const int64_t lseElems = B * s.numHeads * s.qLen;
  if (auto err = allocatePoisoned(o, outElems * 2))
    return std::move(err);
  if (auto err = allocatePoisoned(lse, lseElems * 4))
    return std::move(err);

  DecodeArgs args;
  args.q = decodeTensor(q.data(), s.dtype, B, s.qLen, s.numHeads, d);
  args.o = decodeTensor(o.data(), s.dtype, B, s.qLen, s.numHeads, d);
  if (s.paged()) {
    args.k =
        decodeTensor(k.data(), s.dtype, p.pages, s.pageSize, s.numKVHeads, d);
    args.v =
        decodeTensor(v.data(), s.dtype, p.pages, s.pageSize, s.numKVHeads, d);
    args.blockTable = static_cast<const int32_t *>(table.data());
    args.maxPages = p.maxPages;
  } else {
    args.k = decodeTensor(k.data(), s.dtype, B, p.capacity, s.numKVHeads, d);
    args.v = decodeTensor(v.data(), s.dtype, B, p.capacity, s.numKVHeads, d);
    if (p.headMajor)
      for (TensorRef *t : {&args.k, &args.v})
        t->strides = {s.numKVHeads * p.capacity * d, d, p.capacity * d, 1};
  }
  args.lse = LseRef::contiguous(static_cast<float *>(lse.data()), B, s.numHeads,
                                s.qLen);
  args.kvLens = static_cast<const int32_t *>(lens.data());
  args.maxKvLen = opt.maxKvLenHint ? std::max<int64_t>(longest, 1) : 0;
  args.numSplits = opt.numSplits;
  args.scale = p.scale;
  unsigned threads = opt.referenceThreads
                         ? opt.referenceThreads
                         : std::max(1u, std::thread::hardware_concurrency());
  const int64_t allRows = B * s.numHeads * s.qLen;
  std::vector<int64_t> rows;
  if (opt.maxCheckedRows > 0 && opt.maxCheckedRows < allRows) {
    std::uniform_int_distribution<int64_t> pick(0, allRows - 1);
    for (int64_t i = 0; i < opt.maxCheckedRows; ++i)
      rows.push_back(pick(rng));
  } else {
    for (int64_t i = 0; i < allRows; ++i)
      rows.push_back(i);
  }
  std::vector<DecodeReferenceRow> ref = decodeReference(p, rows, threads);

  std::vector<DecodeCheckReport> reports;
  for (size_t variant = 0; variant < kernels.size(); ++variant) {
  const DecodeKernel &kernel = *kernels[variant];
  args.numSplits =
      splitsPerKernel.empty() ? opt.numSplits : splitsPerKernel[variant];
  // Fresh poison for every kernel: nothing a previous one wrote passes.
  if (auto err = poison({&o, &lse}))
    return std::move(err);
  DecodeCheckReport report;
  report.numSplits = kernel.splitsFor(args);
  if (opt.callerWorkspace) {
    size_t bytes = kernel.workspaceBytes(B, report.numSplits);
    if (auto err = allocatePoisoned(workspace, std::max<size_t>(bytes, 16)))
      return std::move(err);
    args.workspace = workspace.data();
    args.workspaceBytes = bytes;
  }
  if (auto err = kernel.decode(args))
    return std::move(err);
  if (auto err = FLASHJIT_CU(drv, cuCtxSynchronize))
    return std::move(err);
  std::vector<uint16_t> gotO(outElems);
  std::vector<float> gotLse(lseElems);
  if (auto err =
          FLASHJIT_CU(drv, cuMemcpyDtoH, gotO.data(), o.ptr(), gotO.size() * 2))
    return std::move(err);
  if (auto err = FLASHJIT_CU(drv, cuMemcpyDtoH, gotLse.data(), lse.ptr(),
                             gotLse.size() * 4))
    return std::move(err);

  // Every output is scanned for NaN; all rows, or a sample, are compared.
  for (uint16_t bits : gotO)
    if (!std::isfinite(bitsToFloat(s.dtype, bits)))
      ++report.nonFinite;
  for (float l : gotLse)
    if (std::isnan(l) || l == INFINITY)
      ++report.nonFinite;
  double errSq = 0, refSq = 0, lseErrSq = 0, lseRefSq = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t t = rows[i] % s.qLen;
    const int64_t h = (rows[i] / s.qLen) % s.numHeads;
    const int64_t b = rows[i] / (s.qLen * s.numHeads);
    const DecodeReferenceRow &r = ref[i];
    const uint16_t *row = &gotO[((b * s.qLen + t) * s.numHeads + h) * d];
    for (int64_t c = 0; c < d; ++c) {
      double x = bitsToFloat(s.dtype, row[c]);
      if (!std::isfinite(x))
        continue;
      double e = x - r.out[c];
      errSq += e * e;
      refSq += r.out[c] * r.out[c];
      report.maxAbsError = std::max(report.maxAbsError, std::fabs(e));
    }
    double l = gotLse[(b * s.numHeads + h) * s.qLen + t];
    bool refEmpty = std::isinf(r.lse);
    if (std::isnan(l) || l == INFINITY)
      continue; // counted above
    if (std::isinf(l) != refEmpty) {
      ++report.nonFinite;
    } else if (!refEmpty) {
      lseErrSq += (l - r.lse) * (l - r.lse);
      lseRefSq += r.lse * r.lse;
    }
    ++report.checkedRows;
  }
  report.relError = refSq > 0 ? std::sqrt(errSq / refSq) : std::sqrt(errSq);
  report.lseRelError =
      lseRefSq > 0 ? std::sqrt(lseErrSq / lseRefSq) : std::sqrt(lseErrSq);
  report.tolerance = checkTolerance(s.dtype);
  report.passed = report.nonFinite == 0 &&
                  report.relError <= report.tolerance &&
                  report.lseRelError <= report.tolerance;

  for (int32_t len : p.kvLens)
    report.kvBytes +=
        2.0 * std::min<int64_t>(len, p.capacity) * s.numKVHeads * d * 2;
  if (opt.iterations > 0) {
    TimingOptions timing;
    timing.warmup = opt.warmup;
    timing.iterations = opt.iterations;
    // Back-to-back launches per sample, as the peers are timed: a step of
    // a few microseconds is not measured with one launch between events.
    timing.minSampleMs = 10;
    auto measured = timeLaunches(
        drv, [&] { return kernel.decode(args); }, timing);
    if (!measured)
      return measured.takeError();
    report.medianMs = measured->medianMs;
    report.gbPerSecond = report.kvBytes / (report.medianMs * 1e-3) / 1e9;
  }
  reports.push_back(report);
  }
  return reports;
}

} // namespace flashjit
