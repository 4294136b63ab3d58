//===- TemplateRegistry.cpp - the list of kernel families -----------------===//
// Why: one place lists the templates, so the autotuner and the compiler see
// the same set.
#include "flashjit/Templates/CudaCoreForward.h"
#include "flashjit/Templates/KernelTemplate.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

const std::vector<const KernelTemplate *> &allTemplates() {
  static const CudaCoreForward cudaCore;
  static const std::vector<const KernelTemplate *> templates = {&cudaCore};
  return templates;
}

llvm::Expected<const KernelTemplate *> findTemplate(llvm::StringRef family) {
  std::vector<std::string> names;
  for (const KernelTemplate *t : allTemplates()) {
    if (t->family() == family)
      return t;
    names.push_back(t->family().str());
  }
  return llvm::createStringError(
      llvm::formatv("unknown kernel family '{0}': expected one of {1}",
                    family, llvm::join(names, ", "))
          .str());
}

} // namespace flashjit
