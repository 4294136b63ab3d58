//===- AttnDialect.h - the attn dialect --------------------------*- C++ -*-===//
// Why: one header that brings in the dialect, its attributes and ops.
#ifndef FLASHJIT_DIALECT_ATTNDIALECT_H
#define FLASHJIT_DIALECT_ATTNDIALECT_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "flashjit/Dialect/AttentionSpec.h"

#include "flashjit/Dialect/AttnDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "flashjit/Dialect/AttnAttrs.h.inc"

#define GET_OP_CLASSES
#include "flashjit/Dialect/AttnOps.h.inc"

#endif
