//===- AttnBase.td - the attn dialect and its op base ------*- tablegen -*-===//
// Why: every attn op shares one base class so dialect-wide traits live in
// one place.
#ifndef FLASHJIT_DIALECT_ATTN_BASE
#define FLASHJIT_DIALECT_ATTN_BASE

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Attn_Dialect : Dialect {
  let name = "attn";
  let cppNamespace = "::flashjit::attn";
  let summary = "Descriptions of exact attention for flashjit to compile";
  let description = [{
    The `attn` dialect describes one attention computation,
    O = softmax(scale * Q K^T [+ score_mod] [masked]) V, together with the
    tile configuration that a kernel template will use for it. It is the
    input of flashjit's pipeline: passes lower it to a tiled GPU kernel and
    then to PTX.
  }];
  let useDefaultAttributePrinterParser = 1;
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::tensor::TensorDialect"];
}

class Attn_Op<string mnemonic, list<Trait> traits = []>
    : Op<Attn_Dialect, mnemonic, traits>;

class Attn_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Attn_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

#endif
