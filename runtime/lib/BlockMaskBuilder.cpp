//===- BlockMaskBuilder.cpp - a block mask built on the caller's stream ---===//
// Why: see BlockMaskBuilder in FlashJIT.h. The checks and the launch of
// the block-mask kernel (templates/BlockMaskKernel.h), beside Kernel's.
#include "flashjit/FlashJIT.h"

#include "flashjit/Runtime/ErrorCode.h"
#include "flashjit/Runtime/ForwardChecks.h"
#include "flashjit/Runtime/Launch.h"
#include "flashjit/Runtime/ModuleLoader.h"
#include "flashjit/Templates/BlockMaskKernel.h"

namespace flashjit {

BlockMaskBuilder::BlockMaskBuilder(AttentionSpec spec, KernelInfo info,
                                   std::string ptx,
                                   std::unique_ptr<LoadedModule> module,
                                   std::string deviceError)
    : Spec(std::move(spec)), Info(std::move(info)), Ptx(std::move(ptx)),
      Module(std::move(module)), DeviceError(std::move(deviceError)) {}

BlockMaskBuilder::~BlockMaskBuilder() = default;

std::array<int64_t, 2> BlockMaskBuilder::blockCounts(const AttentionSpec &spec,
                                                     int64_t seqlenQ,
                                                     int64_t seqlenK) {
  if (!spec.isBlockSparse())
    return {0, 0};
  return {(seqlenQ + spec.sparseBlockM - 1) / spec.sparseBlockM,
          (seqlenK + spec.sparseBlockN - 1) / spec.sparseBlockN};
}

llvm::Error BlockMaskBuilder::check(const BlockMaskBuildArgs &args) const {
  if (auto err = checkBlockMaskOutput(Spec, args.blockMask, args.seqlenQ,
                                      args.seqlenK))
    return withCode(ErrorCode::InvalidArgument, std::move(err));
  if (auto err = checkCaptures(Spec, args.captures))
    return withCode(ErrorCode::InvalidArgument, std::move(err));
  return llvm::Error::success();
}

llvm::Error BlockMaskBuilder::build(const BlockMaskBuildArgs &args) const {
  if (auto err = check(args))
    return err;
  if (!Module)
    return makeError(ErrorCode::NoDevice, "cannot launch " + Info.name +
                                              ": no GPU is available (" +
                                              DeviceError + ")");
  BlockMaskLaunchParams params;
  params.seqlenQ = static_cast<int32_t>(args.seqlenQ);
  params.seqlenK = static_cast<int32_t>(args.seqlenK);
  params.variant.fill(args.captures, args.blockMask);
  auto pointers = params.pointers();
  LaunchGeometry geometry = blockMaskGeometry(
      Spec, args.blockMask.kvNumBlocks.shape[0],
      args.blockMask.kvNumBlocks.shape[1], args.seqlenQ);
  return withCode(ErrorCode::LaunchError,
                  launch(Module->function(), geometry, pointers.data(),
                         args.stream, Module->deviceOrdinal()));
}

} // namespace flashjit
