//===- Launch.cpp - one kernel launch on the caller's stream --------------===//
// Why: see Launch.h.
#include "flashjit/Runtime/Launch.h"
#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/Runtime/ForwardChecks.h"

#include <algorithm>

namespace flashjit {

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
  for (unsigned c = 0; c < numCaptures; ++c) {
    p[i++] = &captures[c].data;
    for (int d = 0; d < captures[c].rank; ++d)
      p[i++] = &captures[c].strides[d];
  }
  return p;
}

llvm::Error prepareForwardLaunch(const ForwardArgs &args, double scale,
                                 const ForwardTensorMapLayouts *layouts,
                                 ForwardLaunchParams &params,
                                 int deviceOrdinal) {
  params.args = toKernelArgs(args, scale);
  params.hasTensorMaps = false;
  params.numCaptures = static_cast<unsigned>(args.captures.size());
  for (unsigned c = 0; c < params.numCaptures; ++c)
    params.captures[c] = {args.captures[c].data, args.captures[c].rank,
                          args.captures[c].strides};
  if (!layouts)
    return llvm::Error::success();
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  if (auto ctx = drv->ensureContext(deviceOrdinal); !ctx)
    return ctx.takeError();
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
  if (auto ctx = drv->ensureContext(deviceOrdinal); !ctx)
    return ctx.takeError();
  return FLASHJIT_CU(*drv, cuLaunchKernel, function, geometry.gridX,
                     geometry.gridY, geometry.gridZ, geometry.blockX, 1, 1,
                     geometry.sharedMemoryBytes, stream, params, nullptr);
}

} // namespace flashjit
