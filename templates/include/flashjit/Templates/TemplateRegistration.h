//===- TemplateRegistration.h - families registered at run time --*- C++ -*-===//
// Why: a kernel family that computes something else on purpose, to time a
// part of a real kernel, must never be offered to a user. Such families are
// not in allTemplates(): programs that want them (the developer tools)
// register them here, and from then on findTemplate and lookupTemplate
// find them by name, so a config can name them. Nothing in libflashjit.so
// registers one.
#ifndef FLASHJIT_TEMPLATES_TEMPLATEREGISTRATION_H
#define FLASHJIT_TEMPLATES_TEMPLATEREGISTRATION_H

namespace flashjit {

class KernelTemplate;

/// Makes `tmpl` (measurementOnly(), with a family name no other template
/// has, alive until the program ends) findable by its family name. Never a
/// candidate of the heuristic or the tuner. Safe to call from any thread;
/// a family registered twice is kept once.
void registerMeasurementTemplate(const KernelTemplate &tmpl);

} // namespace flashjit

#endif
