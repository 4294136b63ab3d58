//===- AttachTileConfig.cpp - the autotuner's choice onto the IR ----------===//
// Why: configuration is a stage of its own (IREE's habit): the choice is
// written on the op, so tests check it per GPU and the lowering just reads
// it.
#include "flashjit/Compiler/ConfigAttr.h"
#include "flashjit/Compiler/ConfigChoice.h"
#include "flashjit/Compiler/Passes.h"

using namespace mlir;

namespace flashjit {
#define GEN_PASS_DEF_ATTACHTILECONFIG
#include "flashjit/Compiler/Passes.h.inc"

namespace {
struct AttachTileConfigPass
    : impl::AttachTileConfigBase<AttachTileConfigPass> {
  using Base::Base;

  void runOnOperation() override {
    auto target = Target::parse(chip);
    if (!target) {
      getOperation().emitError(llvm::toString(target.takeError()));
      return signalPassFailure();
    }
    WalkResult result = getOperation().walk([&](attn::AttentionOp op) {
      if (op.getConfigAttr())
        return WalkResult::advance();
      auto choice = chooseTileConfig(op.getSpec(), *target, device);
      if (!choice) {
        op.emitOpError(llvm::toString(choice.takeError()));
        return WalkResult::interrupt();
      }
      op.setConfigAttr(toAttr(op.getContext(), *choice));
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};
} // namespace
} // namespace flashjit
