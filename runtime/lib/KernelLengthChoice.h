//===- KernelLengthChoice.h - a spec's kernels per length class -*- C++ -*-===//
// Why: one Kernel handle serves every sequence length with the config of
// the call's length class. Kernel.cpp picks a class's kernel per call;
// Context.cpp makes the choice, fills it and detaches it when it goes.
#ifndef FLASHJIT_RUNTIME_LIB_KERNELLENGTHCHOICE_H
#define FLASHJIT_RUNTIME_LIB_KERNELLENGTHCHOICE_H

#include "flashjit/FlashJIT.h"
#include "flashjit/Runtime/LengthClasses.h"

#include <memory>
#include <mutex>
#include <vector>

namespace flashjit {

/// The kernels of one spec's length classes, made by one Context. The
/// kernels point to it and it holds them: the Context breaks the cycle
/// when it goes (detach), after which every kernel serves all lengths.
struct Kernel::LengthChoice {
  AttentionSpec spec;
  std::vector<LengthClass> classes;
  std::mutex mutex;
  /// Null once the Context is gone.
  Context *owner = nullptr;
  std::vector<std::shared_ptr<const Kernel>> kernels;

  std::shared_ptr<const Kernel> built(size_t index) {
    std::lock_guard<std::mutex> lock(mutex);
    return kernels[index];
  }
  void detach() {
    std::lock_guard<std::mutex> lock(mutex);
    owner = nullptr;
    for (auto &kernel : kernels)
      kernel.reset();
  }
};

} // namespace flashjit

#endif
