//===- MeasurementTemplates.h - kernel families for measurement only -*- C++ -*-===//
// Why: some kernels compute something else on purpose, to time a part of
// a real kernel (mma_sync without its softmax). They must never reach a
// user: libflashjit.so does not know them, and only programs that link the
// developer tools (`flashjit`, the tests) register them, by calling
// registerMeasurementTemplates() before they compile anything.
#ifndef FLASHJIT_DEVTOOLS_MEASUREMENTTEMPLATES_H
#define FLASHJIT_DEVTOOLS_MEASUREMENTTEMPLATES_H

namespace flashjit {

/// Registers the measurement-only families with the template registry
/// (registerMeasurementTemplate, TemplateRegistration.h), once; later calls do
/// nothing. "mma_sync_nosoftmax": the mma_sync kernel with P = S (no mask,
/// max, exp2, sum or rescale), wrong by design, to time what the softmax
/// costs. Built only when a config names it.
void registerMeasurementTemplates();

} // namespace flashjit

#endif
