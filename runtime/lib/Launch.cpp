//===- Launch.cpp - one kernel launch on the caller's stream --------------===//
// Why: see Launch.h.
#include "flashjit/Runtime/Launch.h"
#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/Runtime/ForwardChecks.h"
#include "flashjit/Runtime/ScopedContext.h"

#include <algorithm>

namespace flashjit {

void VariantLaunchParams::fill(llvm::ArrayRef<CapturedRef> given,
                               const BlockMaskRef &mask) {
  numCaptures = static_cast<unsigned>(
      std::min<size_t>(given.size(), kMaxCaptures));
  for (unsigned c = 0; c < numCaptures; ++c)
    captures[c] = {given[c].data, given[c].rank, given[c].strides};
  // The block mask's batch and head dimensions of size 1 serve every
  // sequence and head: stride 0. Without full lists, a null pointer.
  hasBlockMask = mask.kvNumBlocks.data != nullptr;
  auto lists = mask.lists();
  for (unsigned l = 0; l < 4; ++l) {
    Capture &c = blockMask[l];
    c.data = lists[l]->data;
    c.rank = l % 2 == 0 ? 3 : 4;
    c.strides = lists[l]->strides;
    for (int d = 0; d < 2; ++d)
      if (lists[l]->shape[d] == 1)
        c.strides[d] = 0;
  }
}

unsigned VariantLaunchParams::appendPointers(void **p, unsigned i) {
  auto add = [&](Capture &c) {
    p[i++] = &c.data;
    for (int d = 0; d < c.rank; ++d)
      p[i++] = &c.strides[d];
  };
  for (unsigned c = 0; c < numCaptures; ++c)
    add(captures[c]);
  if (hasBlockMask)
    for (Capture &c : blockMask)
      add(c);
  if (hasTileOrder) {
    p[i++] = &tileOrder;
    p[i++] = &tileOrderStrides[0];
    p[i++] = &tileOrderStrides[1];
  }
  if (varlen)
    for (const void *&offsets : cuSeqlens)
      p[i++] = &offsets;
  if (paged) {
    p[i++] = &blockTable;
    p[i++] = &maxPages;
  }
  return i;
}

std::array<void *, ForwardLaunchParams::kMaxParams>
ForwardLaunchParams::pointers() {
  std::array<void *, kMaxParams> p{};
  auto kernelParams = args.paramPointers();
  std::copy(kernelParams.begin(), kernelParams.end(), p.begin());
  unsigned i = ForwardKernelArgs::kNumParams;
  if (hasTensorMaps) {
    p[i++] = &maps.q;
    p[i++] = &maps.k;
    p[i++] = &maps.v;
    p[i++] = &maps.o;
  }
  variant.appendPointers(p.data(), i);
  return p;
}

std::array<void *, BlockMaskLaunchParams::kMaxParams>
BlockMaskLaunchParams::pointers() {
  std::array<void *, kMaxParams> p{};
  p[0] = &seqlenQ;
  p[1] = &seqlenK;
  variant.appendPointers(p.data(), 2);
  return p;
}

std::array<void *, TileOrderLaunchParams::kMaxParams>
TileOrderLaunchParams::pointers() {
  std::array<void *, kMaxParams> p{};
  p[0] = &seqlenQ;
  p[1] = &seqlenK;
  unsigned i = lists.appendPointers(p.data(), 2);
  p[i] = &order;
  return p;
}

llvm::Error prepareForwardLaunch(const ForwardArgs &args, double scale,
                                 const ForwardTensorMapLayouts *layouts,
                                 ForwardLaunchParams &params,
                                 int deviceOrdinal) {
  params.args = toKernelArgs(args, scale);
  params.hasTensorMaps = false;
  params.variant.fill(args.captures, args.blockMask);
  if (!layouts)
    return llvm::Error::success();
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  auto scope = ScopedContext::enterDevice(*drv, deviceOrdinal);
  if (!scope)
    return scope.takeError();
  if (llvm::Error err = encodeTensorMaps(*drv, *layouts, params.maps))
    return err;
  params.hasTensorMaps = true;
  return llvm::Error::success();
}

llvm::Error validateGeometry(const LaunchGeometry &g) {
  auto bad = [](const char *what, unsigned value, const char *limit) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "invalid launch: %s is %u, must be %s", what,
                                   value, limit);
  };
  if (g.gridX == 0)
    return bad("grid x (query blocks)", g.gridX, "at least 1");
  if (g.gridY == 0 || g.gridY > 65535)
    return bad("grid y (heads)", g.gridY, "in [1, 65535]");
  if (g.gridZ == 0 || g.gridZ > 65535)
    return bad("grid z (batch)", g.gridZ, "in [1, 65535]");
  if (g.blockX == 0 || g.blockX > 1024)
    return bad("threads per block", g.blockX, "in [1, 1024]");
  return llvm::Error::success();
}

llvm::Error launch(CUfunction function, const LaunchGeometry &geometry,
                   void **params, CUstream stream, int deviceOrdinal) {
  if (llvm::Error err = validateGeometry(geometry))
    return err;
  if (!function)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "invalid launch: no kernel function");
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  auto scope = ScopedContext::enterDevice(*drv, deviceOrdinal);
  if (!scope)
    return scope.takeError();
  return launchInCurrentContext(*drv, function, geometry, params, stream);
}

llvm::Error launchInCurrentContext(const CudaDriver &drv, CUfunction function,
                                   const LaunchGeometry &geometry,
                                   void **params, CUstream stream) {
  if (llvm::Error err = validateGeometry(geometry))
    return err;
  if (!function)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "invalid launch: no kernel function");
  return FLASHJIT_CU(drv, cuLaunchKernel, function, geometry.gridX,
                     geometry.gridY, geometry.gridZ, geometry.blockX, 1, 1,
                     geometry.sharedMemoryBytes, stream, params, nullptr);
}

} // namespace flashjit
