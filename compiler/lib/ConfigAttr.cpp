//===- ConfigAttr.cpp - TileConfig <-> #attn.tile_config ------------------===//
// Why: keep the field-by-field copy in one place.
#include "flashjit/Compiler/ConfigAttr.h"

namespace flashjit {

attn::TileConfigAttr toAttr(mlir::MLIRContext *ctx, const TileConfig &c) {
  return attn::TileConfigAttr::get(ctx, c.family, c.blockM, c.blockN,
                                   c.stages, c.warps);
}

TileConfig fromAttr(attn::TileConfigAttr a) {
  return TileConfig{a.getFamily().str(), a.getBlockM(), a.getBlockN(),
                    a.getStages(), a.getWarps()};
}

} // namespace flashjit
