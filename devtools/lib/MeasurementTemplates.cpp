//===- MeasurementTemplates.cpp - kernel families for measurement only ----===//
// Why: see MeasurementTemplates.h. The no-softmax kernel is the mma_sync
// template's own builder with its softmax step left out, so the time it
// saves is exactly the softmax's share of that kernel.
#include "flashjit/DevTools/MeasurementTemplates.h"

#include "flashjit/Templates/KernelTemplate.h"
#include "flashjit/Templates/MmaSyncForward.h"
#include "flashjit/Templates/TemplateRegistration.h"

namespace flashjit {
namespace {

class MmaSyncNoSoftmax final : public MmaSyncForward {
public:
  MmaSyncNoSoftmax() : MmaSyncForward(/*withSoftmax=*/false) {}
  llvm::StringRef family() const override { return "mma_sync_nosoftmax"; }
  bool measurementOnly() const override { return true; }
};

} // namespace

void registerMeasurementTemplates() {
  static const bool registered = [] {
    static const MmaSyncNoSoftmax noSoftmax;
    registerMeasurementTemplate(noSoftmax);
    return true;
  }();
  (void)registered;
}

} // namespace flashjit
