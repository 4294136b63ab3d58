// Why: the single tablegen entry point for the attn dialect.
include "flashjit/Dialect/AttnBase.td"
include "flashjit/Dialect/AttnAttrs.td"
include "flashjit/Dialect/AttnOps.td"
