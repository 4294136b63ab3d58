//===- AttnAttrs.td - tile configuration attribute ----------*- tablegen -*-===//
// Why: the autotuner's choice is written on the IR, so it can be tested per
// GPU without a GPU and becomes part of the cache key.
#ifndef FLASHJIT_DIALECT_ATTN_ATTRS
#define FLASHJIT_DIALECT_ATTN_ATTRS

include "flashjit/Dialect/AttnBase.td"

def Attn_TileConfigAttr : Attn_Attr<"TileConfig", "tile_config"> {
  let summary = "Tile sizes and kernel family chosen for one attention";
  let description = [{
    `family` names the kernel template that lowers the attention
    (`cuda_core`, later `sm80_mma`, `sm90_wgmma`); `block_m` query rows and
    `block_n` key/value rows form one tile; `stages` is the depth of the
    shared-memory pipeline for K/V tiles and `warps` the warps per block.

    Example:
    ```mlir
    #attn.tile_config<family = "cuda_core", block_m = 64, block_n = 32,
                      stages = 1, warps = 8>
    ```
  }];
  let parameters = (ins
    StringRefParameter<"kernel family">:$family,
    "int64_t":$block_m,
    "int64_t":$block_n,
    "int64_t":$stages,
    "int64_t":$warps);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif
