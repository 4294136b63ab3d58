//===- CudaCoreForward.h - the CUDA-core forward template ---------*- C++ -*-===//
// Why: the first, portable kernel family: FlashAttention-2's algorithm on
// plain f32 FMAs. Each query row is owned by D/32 adjacent threads that each
// hold 32 columns of Q and of the accumulator in registers; K and V tiles
// stream through shared memory. It runs on any sm_80+ GPU and is the
// reference the tensor-core templates are measured against.
#ifndef FLASHJIT_TEMPLATES_CUDACOREFORWARD_H
#define FLASHJIT_TEMPLATES_CUDACOREFORWARD_H

#include "flashjit/Templates/KernelTemplate.h"

namespace flashjit {

class CudaCoreForward final : public KernelTemplate {
public:
  /// Head-dim columns each thread owns.
  static constexpr int64_t kSliceWidth = 32;
  /// Elements between the starts of two slices of a K/V row in shared
  /// memory: 32 used and 8 of padding that spread the slices over the banks.
  static constexpr int64_t kSharedSliceStride = 40;

  llvm::StringRef family() const override { return "cuda_core"; }
  int minComputeCapability() const override { return 80; }
  std::vector<int64_t> headDims() const override { return {32, 64, 128, 256}; }
  llvm::Error checkConfig(const AttentionSpec &spec,
                          const TileConfig &config) const override;
  TemplateResources resources(const AttentionSpec &spec,
                              const TileConfig &config) const override;
  std::vector<TileConfig>
  candidates(const AttentionSpec &spec) const override;

protected:
  void emit(mlir::OpBuilder &builder, mlir::Location loc,
            const AttentionSpec &spec, const TileConfig &config,
            llvm::StringRef name, const ModRegions &mods) const override;
};

} // namespace flashjit

#endif
