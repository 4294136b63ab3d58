//===- HopperIR.cpp - sm_90a instructions of the wgmma kernels ------------===//
// Why: see HopperIR.h. In MLIR 22 neither nvvm.wgmma.mma_async nor
// nvgpu.warpgroup.mma takes A from registers (FA3's P V does), so every
// product is inline PTX: one block issues a product (fence, wgmmas,
// commit), another waits for it and passes the accumulators through as
// tied operands, so LLVM cannot move an accumulator access into the window
// where the tensor cores own the registers.
#include "HopperIR.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;

namespace flashjit::wgmma {

namespace {
/// Suspend-time hint of mbarrier.try_wait, in nanoseconds.
constexpr int32_t kWaitTicks = 10000000;
/// Swizzle mode field (bits 62-63) of a descriptor: 1 = 128-byte swizzle.
constexpr uint64_t kSwizzle128 = 1ull << 62;
/// Bytes between 8-row groups of a 128-byte swizzled tile.
constexpr int64_t kRowGroupBytes = 8 * 128;

/// "{$first, ..., $first+count-1}" for an inline-asm register list.
std::string operandList(int64_t first, int64_t count) {
  std::string s = "{";
  for (int64_t i = 0; i < count; ++i)
    s += (i ? ", $" : "$") + std::to_string(first + i);
  return s + "}";
}
} // namespace

HopperIR::HopperIR(OpBuilder &b, Location loc, const AttentionSpec &spec)
    : KernelIR(b, loc, spec) {
  sharedPtr = LLVM::LLVMPointerType::get(b.getContext(), /*addressSpace=*/3);
}

void HopperIR::alignSharedBase(StringRef smemName) {
  Value base = LLVM::AddressOfOp::create(b, loc, sharedPtr, smemName);
  Value baseAddress = LLVM::PtrToIntOp::create(b, loc, i32, base);
  alignedAddress = arith::AndIOp::create(
      b, loc, add(baseAddress, c32(1023)), c32(~1023));
  rootAlignedAddress = alignedAddress;
  smemAligned = LLVM::GEPOp::create(b, loc, sharedPtr, b.getI8Type(), base,
                                    ValueRange{sub(alignedAddress,
                                                   baseAddress)});
}

Value HopperIR::shared(Value offset) {
  return LLVM::GEPOp::create(b, loc, sharedPtr, b.getI8Type(), smemAligned,
                             ValueRange{offset});
}

Value HopperIR::sharedAddress(Value offset) {
  return add(alignedAddress, offset);
}

Value HopperIR::sharedPointer(Value address) {
  return LLVM::IntToPtrOp::create(b, loc, sharedPtr, address);
}

Value HopperIR::opaque(Value v) {
  bool wide = v.getType().getIntOrFloatBitWidth() == 64;
  return LLVM::InlineAsmOp::create(
             b, loc, v.getType(), ValueRange{v},
             wide ? "mov.b64 $0, $1;" : "mov.b32 $0, $1;",
             wide ? "=l,l" : "=r,r",
             /*has_side_effects=*/true, /*is_align_stack=*/false,
             LLVM::tailcallkind::TailCallKind::None,
             LLVM::AsmDialectAttr::get(b.getContext(),
                                       LLVM::AsmDialect::AD_ATT),
             /*operand_attrs=*/mlir::ArrayAttr())
      .getResult(0);
}

void HopperIR::withFreshBase(function_ref<void()> body) {
  // Copied from the base itself, not from an enclosing copy, so that the
  // enclosing copy dies before a nested loop.
  Value savedAddress = alignedAddress, savedPointer = smemAligned;
  alignedAddress = opaque(rootAlignedAddress);
  smemAligned = sharedPointer(alignedAddress);
  body();
  alignedAddress = savedAddress;
  smemAligned = savedPointer;
}

void HopperIR::barrierInit(Value bar, int64_t count) {
  NVVM::MBarrierInitOp::create(b, loc, sharedPointer(bar), c32(count),
                               /*predicate=*/Value());
}

void HopperIR::barrierExpect(Value bar, int64_t bytes) {
  asmVoid("mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r",
          {bar, c32(bytes)});
}

void HopperIR::barrierArrive(Value bar) {
  asmVoid("mbarrier.arrive.shared::cta.b64 _, [$0];", "r", {bar});
}

void HopperIR::barrierArriveCount(Value bar, Value count) {
  asmVoid("mbarrier.arrive.shared::cta.b64 _, [$0], $1;", "r,r",
          {bar, count});
}

void HopperIR::barrierWait(Value bar, Value parity) {
  NVVM::MBarrierTryWaitParityOp::create(b, loc, sharedPointer(bar), parity,
                                        c32(kWaitTicks));
}

void HopperIR::tmaLoadBox(Value tensorMap, Value dst, Value bar,
                          ValueRange coords) {
  SmallVector<Value> operands = {dst, tensorMap};
  operands.append(coords.begin(), coords.end());
  operands.push_back(bar);
  asmVoid("cp.async.bulk.tensor.4d.shared::cluster.global.tile."
          "mbarrier::complete_tx::bytes [$0], [$1, {$2, $3, $4, $5}], [$6];",
          "r,l,r,r,r,r,r", operands);
}

Value HopperIR::descriptor(Value address, Major major, int64_t panelBytes) {
  // Start address >> 4 in bits 0-13, leading byte offset >> 4 in 16-29,
  // stride byte offset >> 4 in 32-45, swizzle mode in 62-63. K-major
  // swizzled operands ignore the leading offset (1 by convention); MN-major
  // ones step by it from one 64-wide panel to the next.
  uint64_t leading = major == Major::K ? 1 : uint64_t(panelBytes) >> 4;
  uint64_t fixed = (leading << 16) | (uint64_t(kRowGroupBytes >> 4) << 32) |
                   kSwizzle128;
  Value start = arith::ExtUIOp::create(
      b, loc, i64,
      arith::AndIOp::create(b, loc, arith::ShRUIOp::create(b, loc, address,
                                                           c32(4)),
                            c32(0x3FFF)));
  return arith::OrIOp::create(b, loc, start, c64(static_cast<int64_t>(fixed)));
}

SmallVector<Value> HopperIR::asmFloats(StringRef text, StringRef inputs,
                                     ValueRange operands, int64_t outs) {
  std::string constraints;
  for (int64_t i = 0; i < outs; ++i)
    constraints += "=f,";
  constraints += inputs.str();
  SmallVector<Type> fields(outs, f32);
  auto resultType = LLVM::LLVMStructType::getLiteral(b.getContext(), fields);
  Value result = LLVM::InlineAsmOp::create(
                     b, loc, resultType, operands, text, constraints,
                     /*has_side_effects=*/true, /*is_align_stack=*/false,
                     LLVM::tailcallkind::TailCallKind::None,
                     LLVM::AsmDialectAttr::get(b.getContext(),
                                               LLVM::AsmDialect::AD_ATT),
                     /*operand_attrs=*/ArrayAttr())
                     .getResult(0);
  SmallVector<Value> floats;
  for (int64_t i = 0; i < outs; ++i)
    floats.push_back(LLVM::ExtractValueOp::create(b, loc, result, i));
  return floats;
}

StringRef HopperIR::ptxType() const {
  return spec.dtype == DType::BF16 ? "bf16" : "f16";
}

SmallVector<Value> HopperIR::waitGroups(int64_t pending, ValueRange values) {
  // The values pass through the wait as tied operands: their uses depend
  // on it, so LLVM cannot hoist one above it.
  std::string inputs;
  for (size_t i = 0; i < values.size(); ++i)
    inputs += (i ? "," : "") + std::to_string(i);
  return asmFloats(
      llvm::formatv("wgmma.wait_group.sync.aligned {0};", pending).str(),
      inputs, values, values.size());
}

void HopperIR::namedBarrierSync(Value id, int64_t threads) {
  asmVoid(llvm::formatv("bar.sync $0, {0};", threads).str(), "r", {id});
}

void HopperIR::namedBarrierArrive(Value id, int64_t threads) {
  asmVoid(llvm::formatv("bar.arrive $0, {0};", threads).str(), "r", {id});
}

SmallVector<Value> HopperIR::issueProduct(const Product &product,
                                          ValueRange acc, Value aDesc,
                                          ArrayRef<Value> aPacked,
                                          Value bDesc) {
  const bool aInRegisters = !aPacked.empty();
  const bool tied = !product.zeroFirst;
  const int64_t outs = product.n / 2, steps = product.kSteps;
  // Operands: $0..$outs-1 the results; with `tied` the accumulators in
  // (tied to the results); then A (4 packed i32 per k step, or its
  // descriptor), then B's descriptor.
  const int64_t aOp = tied ? 2 * outs : outs;
  const int64_t bOp = aInRegisters ? aOp + int64_t(aPacked.size()) : aOp + 1;
  // The predicates come from a register the asm has anyway.
  const int64_t predOp = aInRegisters ? bOp : aOp;
  std::string text = "{\n";
  if (product.zeroFirst)
    text += ".reg .pred fj_zero;\n";
  text += ".reg .pred fj_one;\n";
  if (!aInRegisters)
    text += llvm::formatv(".reg .b64 fj_da<{0}>;\n", steps).str();
  text += llvm::formatv(".reg .b64 fj_db<{0}>;\n", steps).str();
  if (product.zeroFirst)
    text += llvm::formatv("setp.ne.b64 fj_zero, ${0}, ${0};\n", predOp).str();
  text += llvm::formatv("setp.eq.b64 fj_one, ${0}, ${0};\n"
                        "wgmma.fence.sync.aligned;\n",
                        predOp)
              .str();
  for (int64_t k = 0; k < steps; ++k) {
    // Each k step gets its own descriptor registers: none is redefined
    // while a wgmma that read it may still be in flight.
    if (!aInRegisters)
      text += llvm::formatv("add.s64 fj_da{2}, ${0}, {1};\n", aOp,
                            product.aStepBytes(k) >> 4, k)
                  .str();
    text += llvm::formatv("add.s64 fj_db{2}, ${0}, {1};\n", bOp,
                          product.bStepBytes(k) >> 4, k)
                .str();
    StringRef scaleD = product.zeroFirst && k == 0 ? "fj_zero" : "fj_one";
    std::string a = aInRegisters ? operandList(aOp + 4 * k, 4)
                                 : llvm::formatv("fj_da{0}", k).str();
    std::string transposes =
        aInRegisters ? llvm::formatv("{0}", int(product.transB)).str()
                     : llvm::formatv("{0}, {1}", int(product.transA),
                                     int(product.transB))
                           .str();
    text += llvm::formatv("wgmma.mma_async.sync.aligned.m64n{0}k16.f32.{1}.{1} "
                          "{2}, {3}, fj_db{4}, {5}, 1, 1, {6};\n",
                          product.n, ptxType(), operandList(0, outs), a, k,
                          scaleD, transposes)
                .str();
  }
  text += "wgmma.commit_group.sync.aligned;\n}";
  std::string inputs;
  SmallVector<Value> operands;
  if (tied) {
    for (int64_t i = 0; i < outs; ++i)
      inputs += std::to_string(i) + ",";
    operands.append(acc.begin(), acc.end());
  }
  for (size_t i = 0; i < aPacked.size(); ++i)
    inputs += "r,";
  operands.append(aPacked.begin(), aPacked.end());
  if (!aInRegisters) {
    inputs += "l,";
    operands.push_back(aDesc);
  }
  inputs += "l";
  operands.push_back(bDesc);
  return asmFloats(text, inputs, operands, outs);
}

void HopperIR::copySwizzledRows(Value base, ValueRange strides, Value batch,
                                Value head, Value row0, Value end,
                                int64_t rows, Value dst, int64_t threads) {
  // 16-byte chunks: thread t copies chunk t % chunksPerRow of rows
  // t / chunksPerRow + i * rowsPerRound. rowsPerRound is a multiple of 8,
  // so every row of a thread has the same swizzle (row % 8).
  const int64_t chunksPerRow = spec.headDim / 8;
  const int64_t rowsPerRound = threads / chunksPerRow;
  Value tid = toI32(threadIdX());
  Value firstRow = divU(tid, chunksPerRow);
  Value chunk = remU(tid, chunksPerRow);
  Value swizzled = arith::XOrIOp::create(b, loc, remU(chunk, 8),
                                         remU(firstRow, 8));
  Value panel = divU(chunk, 8);
  Value dstBase =
      add(add(dst, mul(panel, c32(rows * kRowBytes))),
          add(mul(firstRow, c32(kRowBytes)), mul(swizzled, c32(16))));
  Value column = toI64(mul(chunk, c32(8)));
  for (int64_t i = 0; i * rowsPerRound < rows; ++i) {
    Value row = add(row0, toI64(add(firstRow, c32(i * rowsPerRound))));
    Value inRange = cmp(Pred::slt, row, end);
    Value safeRow = arith::SelectOp::create(b, loc, inRange, row, row0);
    Value src = globalAddress(
        base, elt, add(rowOffset(strides, batch, head, safeRow), column));
    Value bytes = arith::SelectOp::create(b, loc, inRange, c32(16), c32(0));
    NVVM::CpAsyncOp::create(
        b, loc, shared(add(dstBase, c32(i * rowsPerRound * kRowBytes))), src,
        /*size=*/16, NVVM::LoadCacheModifierKind::CG, bytes);
  }
}

void HopperIR::fenceProxyAsync() {
  asmVoid("fence.proxy.async.shared::cta;", "", {});
}

} // namespace flashjit::wgmma
