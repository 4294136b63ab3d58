//===- ConfigAttr.h - TileConfig <-> #attn.tile_config -------------*- C++ -*-===//
// Why: the tile config lives in C++ (autotuner, cache) and in the IR (tests,
// lowering); these two functions are the only bridge.
#ifndef FLASHJIT_COMPILER_CONFIGATTR_H
#define FLASHJIT_COMPILER_CONFIGATTR_H

#include "flashjit/Dialect/AttnDialect.h"
#include "flashjit/Templates/TileConfig.h"

namespace flashjit {

attn::TileConfigAttr toAttr(mlir::MLIRContext *ctx, const TileConfig &config);
TileConfig fromAttr(attn::TileConfigAttr attr);

} // namespace flashjit

#endif
