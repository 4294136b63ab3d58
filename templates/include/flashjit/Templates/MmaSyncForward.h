//===- MmaSyncForward.h - the tensor-core forward template (sm_80+) -*- C++ -*-===//
// Why: FlashAttention-2's kernel on the tensor cores of sm_80 and newer
// (it also runs on Hopper). Each warp owns 16 or 32 query rows; S = Q K^T and
// O += P V are mma.sync m16n8k16 with f32 accumulation, P stays in
// registers between the two products, and K/V tiles stream through two
// shared-memory buffers with cp.async while the other buffer's tile
// computes.
#ifndef FLASHJIT_TEMPLATES_MMASYNCFORWARD_H
#define FLASHJIT_TEMPLATES_MMASYNCFORWARD_H

#include "flashjit/Templates/KernelTemplate.h"

namespace flashjit {

class MmaSyncForward : public KernelTemplate {
public:
  /// Query rows of one m tile (the M of mma.sync m16n8k16); a warp owns
  /// one or two m tiles.
  static constexpr int64_t kRowsPerTile = 16;
  /// Elements of padding after each shared-memory row: rows then start 16
  /// bytes apart modulo 128, so the 8 row addresses of an ldmatrix hit
  /// distinct banks.
  static constexpr int64_t kRowPadding = 8;

  MmaSyncForward() = default;
  llvm::StringRef family() const override { return "mma_sync"; }
  int minComputeCapability() const override { return 80; }
  std::vector<int64_t> headDims() const override { return {64, 96, 128, 256}; }
  bool supportsVarlen() const override { return true; }
  llvm::Error checkConfig(const AttentionSpec &spec,
                          const TileConfig &config) const override;
  TemplateResources resources(const AttentionSpec &spec,
                              const TileConfig &config) const override;
  std::vector<TileConfig>
  candidates(const AttentionSpec &spec) const override;

protected:
  /// withSoftmax = false builds the same kernel with P = S (no mask, max,
  /// exp2, sum or rescale), wrong by design: the base of a measurement-only
  /// family (devtools/) that times what the softmax costs.
  explicit MmaSyncForward(bool withSoftmax) : WithSoftmax(withSoftmax) {}

  void emit(mlir::OpBuilder &builder, mlir::Location loc,
            const AttentionSpec &spec, const TileConfig &config,
            llvm::StringRef name, const ModRegions &mods) const override;

private:
  bool WithSoftmax = true;
};

} // namespace flashjit

#endif
