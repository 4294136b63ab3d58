//===- Passes.h - flashjit's passes -----------------------------*- C++ -*-===//
// Why: declarations generated from Passes.td, plus the dialects they need.
#ifndef FLASHJIT_COMPILER_PASSES_H
#define FLASHJIT_COMPILER_PASSES_H

#include "flashjit/Dialect/AttnDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace flashjit {

#define GEN_PASS_DECL
#include "flashjit/Compiler/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "flashjit/Compiler/Passes.h.inc"

} // namespace flashjit

#endif
