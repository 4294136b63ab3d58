//===- VarlenHarness.cpp - check a varlen kernel on fresh inputs ----------===//
// Why: see VarlenHarness.h.
#include "flashjit/DevTools/VarlenHarness.h"

#include "flashjit/DevTools/DeviceBuffer.h"
#include "flashjit/DevTools/EventTimer.h"
#include "flashjit/DevTools/HostFloat.h"
#include "flashjit/DevTools/Reference.h"
#include "flashjit/Runtime/CudaDriver.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace flashjit {
namespace {

/// Poisoned rows after the end of O and LSE: a launch must leave them.
constexpr int64_t kGuardRows = 256;

/// Whether query row `row` of a sequence of `lq` x `lk` keeps no key.
bool emptyRow(const AttentionSpec &spec, int64_t row, int64_t lq,
              int64_t lk) {
  if (lk == 0)
    return true;
  if (!spec.causal)
    return false;
  const int64_t diagonal =
      spec.causalAlign == CausalAlign::BottomRight ? lk - lq : 0;
  return row + diagonal < 0;
}

/// A paged KV cache holding packed keys: the sequences' pages in a
/// shuffled pool with spare pages, the block table and the key counts.
struct PagedCache {
  std::vector<uint16_t> k, v;
  std::vector<int32_t> table, kvLens;
  int64_t pages = 0, maxPages = 0;
};

PagedCache pageKeys(const std::vector<uint16_t> &kBits,
                    const std::vector<uint16_t> &vBits, DType dtype,
                    llvm::ArrayRef<int32_t> cuK, int64_t pageSize,
                    int64_t rowWords, std::mt19937_64 &rng) {
  const int64_t B = cuK.size() - 1;
  PagedCache c;
  int64_t used = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t pages = (cuK[b + 1] - cuK[b] + pageSize - 1) / pageSize;
    used += pages;
    c.maxPages = std::max(c.maxPages, pages + 1);
  }
  c.pages = used + B + 2;
  std::vector<int32_t> order(c.pages);
  for (int64_t i = 0; i < c.pages; ++i)
    order[i] = static_cast<int32_t>(i);
  std::shuffle(order.begin(), order.end(), rng);
  // Unused pages are NaN (0xFFFF in f16 and bf16); a sequence's last page
  // holds finite values past its keys, as the contract asks.
  const size_t poolWords = size_t(c.pages * pageSize * rowWords);
  c.k.assign(poolWords, 0xFFFF);
  c.v.assign(poolWords, 0xFFFF);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  c.table.assign(size_t(B * c.maxPages), 0);
  c.kvLens.resize(B);
  int64_t next = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t length = cuK[b + 1] - cuK[b];
    c.kvLens[b] = static_cast<int32_t>(length);
    const int64_t pages = (length + pageSize - 1) / pageSize;
    for (int64_t slot = 0; slot < c.maxPages; ++slot) {
      int32_t &entry = c.table[b * c.maxPages + slot];
      if (slot >= pages) {
        // Never read for a key: out of range, either way.
        entry = slot % 2 ? -1 : static_cast<int32_t>(c.pages + slot);
        continue;
      }
      entry = order[next++];
      for (int64_t r = 0; r < pageSize; ++r) {
        const int64_t key = slot * pageSize + r;
        for (int64_t w = 0; w < rowWords; ++w) {
          const size_t to = size_t((entry * pageSize + r) * rowWords + w);
          if (key < length) {
            const size_t from = size_t((cuK[b] + key) * rowWords + w);
            c.k[to] = kBits[from];
            c.v[to] = vBits[from];
          } else {
            c.k[to] = floatToBits(dtype, normal(rng));
            c.v[to] = floatToBits(dtype, normal(rng));
          }
        }
      }
    }
  }
  return c;
}

} // namespace

std::vector<uint16_t> randomPacked(std::vector<float> &values, DType dtype,
                                   int64_t tokens, int64_t heads, int64_t d,
                                   std::mt19937_64 &rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> bits(static_cast<size_t>(tokens * heads * d));
  values.resize(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    bits[i] = floatToBits(dtype, normal(rng));
    values[i] = bitsToFloat(dtype, bits[i]);
  }
  return bits;
}

std::vector<float> sequenceOf(const std::vector<float> &packed, int64_t first,
                              int64_t length, int64_t heads, int64_t d) {
  std::vector<float> out(static_cast<size_t>(heads * length * d));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t s = 0; s < length; ++s)
      std::memcpy(&out[(h * length + s) * d],
                  &packed[((first + s) * heads + h) * d], d * sizeof(float));
  return out;
}

std::vector<int32_t> cumulativeOffsets(llvm::ArrayRef<int64_t> lengths) {
  std::vector<int32_t> offsets(lengths.size() + 1, 0);
  for (size_t b = 0; b < lengths.size(); ++b)
    offsets[b + 1] = offsets[b] + static_cast<int32_t>(lengths[b]);
  return offsets;
}

llvm::Expected<PackedBatch> packedBatch(llvm::ArrayRef<int64_t> lengthsQ,
                                        llvm::ArrayRef<int64_t> lengthsK) {
  llvm::ArrayRef<int64_t> keys = lengthsK.empty() ? lengthsQ : lengthsK;
  if (lengthsQ.empty() || keys.size() != lengthsQ.size())
    return llvm::createStringError(
        llvm::formatv("{0} query lengths and {1} key lengths: give one of "
                      "each per sequence, at least one sequence",
                      lengthsQ.size(), keys.size())
            .str());
  PackedBatch batch;
  batch.lengthsQ.assign(lengthsQ.begin(), lengthsQ.end());
  batch.lengthsK.assign(keys.begin(), keys.end());
  batch.cuQ = cumulativeOffsets(lengthsQ);
  batch.cuK = cumulativeOffsets(keys);
  return batch;
}

llvm::Expected<std::vector<int64_t>> parseVarlenLengths(llvm::StringRef text) {
  llvm::SmallVector<llvm::StringRef> parts;
  text.split(parts, ',');
  std::vector<int64_t> lengths;
  for (llvm::StringRef part : parts) {
    int64_t n = 0;
    if (part.trim().getAsInteger(10, n) || n < 0)
      return llvm::createStringError(
          llvm::formatv("bad sequence length '{0}' in '{1}': expected a "
                        "comma list of lengths of 0 or more, e.g. 17,0,1000",
                        part, text)
              .str());
    lengths.push_back(n);
  }
  return lengths;
}

double varlenFlops(const AttentionSpec &spec, llvm::ArrayRef<int64_t> lq,
                   llvm::ArrayRef<int64_t> lk) {
  AttentionSpec dense = spec;
  dense.varlen = false;
  double flops = 0;
  for (size_t i = 0; i < lq.size(); ++i)
    flops += computedFlops(dense, 1, lq[i], lk[i]);
  return flops;
}

llvm::Expected<VarlenCheckReport>
runAndCheckVarlen(const Kernel &kernel, const VarlenCheckOptions &opt) {
  auto drvOr = CudaDriver::get();
  if (!drvOr)
    return drvOr.takeError();
  const CudaDriver &drv = *drvOr;
  if (auto ctx = drv.ensureContext(); !ctx)
    return ctx.takeError();

  const AttentionSpec &spec = kernel.spec();
  auto batch = packedBatch(opt.lengthsQ, opt.lengthsK);
  if (!batch)
    return batch.takeError();
  const std::vector<int64_t> &lq = batch->lengthsQ, &lk = batch->lengthsK;
  const std::vector<int32_t> &cuQ = batch->cuQ, &cuK = batch->cuK;
  const int64_t B = batch->sequences(), H = spec.numHeads,
                Hkv = spec.numKVHeads, D = spec.headDim;
  VarlenCheckReport out;
  out.sequences = B;
  out.totalQ = batch->totalQ();
  out.totalK = batch->totalK();
  out.maxSeqlenQ = std::max<int64_t>(1, *std::max_element(lq.begin(), lq.end()));
  const int64_t Tq = out.totalQ, Tk = out.totalK;

  std::mt19937_64 rng(opt.seed);
  std::vector<float> qHost, kHost, vHost;
  auto qBits = randomPacked(qHost, spec.dtype, Tq, H, D, rng);
  auto kBits = randomPacked(kHost, spec.dtype, Tk, Hkv, D, rng);
  auto vBits = randomPacked(vHost, spec.dtype, Tk, Hkv, D, rng);
  const size_t oWords = size_t((Tq + kGuardRows) * H * D);
  const size_t lseWords = size_t(H * Tq + kGuardRows);

  // Paged: K and V move to a pool, cuKDev holds the key counts.
  PagedCache paged;
  const std::vector<uint16_t> *kUp = &kBits, *vUp = &vBits;
  const std::vector<int32_t> *keysUp = &cuK;
  if (spec.paged()) {
    paged = pageKeys(kBits, vBits, spec.dtype, cuK, spec.pageSize, Hkv * D,
                     rng);
    kUp = &paged.k;
    vUp = &paged.v;
    keysUp = &paged.kvLens;
    out.poolPages = paged.pages;
    out.maxPages = paged.maxPages;
  }
  DeviceBuffer q(drv), k(drv), v(drv), o(drv), lse(drv), cuQDev(drv),
      cuKDev(drv), tableDev(drv);
  for (auto [buf, bytes] :
       {std::pair{&q, qBits.size() * 2}, std::pair{&k, kUp->size() * 2},
        std::pair{&v, vUp->size() * 2}, std::pair{&o, oWords * 2},
        std::pair{&lse, lseWords * 4}, std::pair{&cuQDev, cuQ.size() * 4},
        std::pair{&cuKDev, keysUp->size() * 4},
        std::pair{&tableDev, paged.table.size() * 4}})
    if (auto err = buf->allocate(bytes))
      return std::move(err);
  for (auto [buf, host] :
       {std::pair{&q, (const void *)qBits.data()},
        std::pair{&k, (const void *)kUp->data()},
        std::pair{&v, (const void *)vUp->data()},
        std::pair{&cuQDev, (const void *)cuQ.data()},
        std::pair{&cuKDev, (const void *)keysUp->data()},
        std::pair{&tableDev, (const void *)paged.table.data()}})
    if (buf->bytes() > 0)
      if (auto err =
              FLASHJIT_CU(drv, cuMemcpyHtoD, buf->ptr(), host, buf->bytes()))
        return std::move(err);
  // Poison: 0xFFFF is NaN in f16 and bf16, 0xFFFFFFFF in f32.
  if (auto err = poison({&o, &lse}))
    return std::move(err);

  VarlenForwardArgs args;
  args.packed.q = TensorRef::packed(q.data(), spec.dtype, Tq, H, D);
  const int64_t kRows = spec.paged() ? paged.pages * spec.pageSize : Tk;
  args.packed.k = TensorRef::packed(k.data(), spec.dtype, kRows, Hkv, D);
  args.packed.v = TensorRef::packed(v.data(), spec.dtype, kRows, Hkv, D);
  args.packed.o = TensorRef::packed(o.data(), spec.dtype, Tq, H, D);
  args.packed.lse = LseRef::packed(static_cast<float *>(lse.data()), H, Tq);
  args.packed.scale = opt.scale.value_or(spec.defaultScale());
  args.cuSeqlensQ = static_cast<const int32_t *>(cuQDev.data());
  if (spec.paged()) {
    args.kvLens = static_cast<const int32_t *>(cuKDev.data());
    args.blockTable = static_cast<const int32_t *>(tableDev.data());
    args.maxPages = paged.maxPages;
  } else {
    args.cuSeqlensK = static_cast<const int32_t *>(cuKDev.data());
  }
  args.batch = B;
  args.maxSeqlenQ = out.maxSeqlenQ;
  if (auto err = kernel.forwardVarlen(args))
    return std::move(err);
  if (auto err = FLASHJIT_CU(drv, cuCtxSynchronize))
    return std::move(err);

  std::vector<uint16_t> oBits(oWords);
  std::vector<float> lseHost(lseWords);
  if (auto err =
          FLASHJIT_CU(drv, cuMemcpyDtoH, oBits.data(), o.ptr(), o.bytes()))
    return std::move(err);
  if (auto err = FLASHJIT_CU(drv, cuMemcpyDtoH, lseHost.data(), lse.ptr(),
                             lse.bytes()))
    return std::move(err);

  CheckReport &report = out.check;
  report.tolerance = checkTolerance(spec.dtype);
  report.lseTolerance = checkLseTolerance(spec);
  for (size_t i = size_t(Tq * H * D); i < oWords; ++i)
    out.writtenOutside += oBits[i] != 0xFFFF;
  for (size_t i = size_t(Tq * H); i < lseWords; ++i) {
    uint32_t word;
    std::memcpy(&word, &lseHost[i], 4);
    out.writtenOutside += word != 0xFFFFFFFFu;
  }
  // Every packed row belongs to a sequence: all of O is written; an LSE of
  // -inf only on a row that keeps no key.
  for (size_t i = 0; i < size_t(Tq * H * D); ++i)
    if (!std::isfinite(bitsToFloat(spec.dtype, oBits[i])))
      ++report.nonFinite;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = 0; r < lq[b]; ++r) {
        float x = lseHost[h * Tq + cuQ[b] + r];
        if (!std::isfinite(x) &&
            !(x == -INFINITY && emptyRow(spec, r, lq[b], lk[b])))
          ++report.nonFinite;
      }

  // Each sequence against the reference, as a batch of one.
  AttentionSpec dense = spec;
  dense.varlen = false;
  RowErrors total;
  for (int64_t b = 0; b < B; ++b) {
    if (lq[b] == 0)
      continue;
    HostProblem host;
    host.spec = dense;
    host.batch = 1;
    host.seqlenQ = lq[b];
    host.seqlenK = lk[b];
    host.scale = *args.packed.scale;
    host.q = sequenceOf(qHost, cuQ[b], lq[b], H, D);
    host.k = sequenceOf(kHost, cuK[b], lk[b], Hkv, D);
    host.v = sequenceOf(vHost, cuK[b], lk[b], Hkv, D);
    struct Task {
      int64_t h, row;
    };
    std::vector<Task> tasks;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t row : rowsToCheck(lq[b], opt.rowsPerSequence, rng))
        tasks.push_back({h, row});
    auto errors = compareRows(
        tasks.size(), 16, [&](size_t t, RowErrors &e) -> std::string {
          const auto [h, row] = tasks[t];
          ReferenceRow ref = referenceRow(host, 0, h, row);
          if (!ref.error.empty())
            return ref.error;
          const size_t base = size_t(((cuQ[b] + row) * H + h) * D);
          e.addRow(
              ref,
              [&](int64_t c) {
                return bitsToFloat(spec.dtype, oBits[base + c]);
              },
              D, lseHost[h * Tq + cuQ[b] + row]);
          return "";
        });
    if (!errors)
      return errors.takeError();
    total.add(*errors);
  }
  total.into(report);
  // NaN compares false, so a NaN anywhere fails these.
  report.passed = report.nonFinite == 0 && out.writtenOutside == 0 &&
                  report.checkedRows > 0 &&
                  report.relError <= report.tolerance &&
                  report.lseRelError <= report.lseTolerance;

  if (opt.iterations > 0) {
    auto rate = timeRate(
        drv, [&] { return kernel.forwardVarlen(args); }, opt.warmup,
        opt.iterations, varlenFlops(spec, lq, lk));
    if (!rate)
      return rate.takeError();
    report.medianMs = rate->medianMs;
    report.tflops = rate->tflops;
  }
  return out;
}

} // namespace flashjit
