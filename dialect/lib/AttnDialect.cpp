//===- AttnDialect.cpp - dialect registration and attributes --------------===//
// Why: registers the attn ops and attributes with MLIR and checks the tile
// configuration attribute wherever it appears.
#include "flashjit/Dialect/AttnDialect.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace flashjit::attn;

#include "flashjit/Dialect/AttnDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "flashjit/Dialect/AttnAttrs.cpp.inc"

void AttnDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "flashjit/Dialect/AttnOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "flashjit/Dialect/AttnAttrs.cpp.inc"
      >();
}

LogicalResult
TileConfigAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                       StringRef family, int64_t blockM, int64_t blockN,
                       int64_t stages, int64_t warps) {
  if (family.empty())
    return emitError() << "tile_config needs a kernel family";
  // Whole m16 and k16 steps; each template asks for more (a power of two,
  // whole warpgroups, ...).
  if (blockM < 16 || blockM > 256 || blockM % 16 != 0)
    return emitError() << "tile_config block_m must be a multiple of 16 in "
                          "[16, 256], got "
                       << blockM;
  if (blockN < 16 || blockN > 256 || blockN % 16 != 0)
    return emitError() << "tile_config block_n must be a multiple of 16 in "
                          "[16, 256], got "
                       << blockN;
  if (stages < 1 || stages > 8)
    return emitError() << "tile_config stages must be in [1, 8], got "
                       << stages;
  if (warps < 1 || warps > 32)
    return emitError() << "tile_config warps must be in [1, 32], got "
                       << warps;
  return success();
}
