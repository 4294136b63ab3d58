//===- WgmmaInstructions.cpp - Hopper instructions of the wgmma kernel ----===//
// Why: the pieces the kernel is made of, each emitted one way: mbarriers,
// TMA tile loads and stores, the shared-memory matrix descriptors of 128-byte swizzled
// tiles, and the two wgmma sequences. In MLIR 22 neither
// nvvm.wgmma.mma_async nor nvgpu.warpgroup.mma takes A from registers (FA3's
// P V does), so both products are inline PTX: one
// block issues a product (fence, wgmmas, commit), another waits for it and
// passes the accumulators through as tied operands, so LLVM cannot move an
// accumulator access into the window where the tensor cores own the
// registers.
#include "WgmmaBuilder.h"

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

Value Builder::shared(Value offset) {
  return LLVM::GEPOp::create(b, loc, sharedPtr, b.getI8Type(), smemAligned,
                             ValueRange{offset});
}

Value Builder::sharedAddress(Value offset) {
  return add(alignedAddress, offset);
}

Value Builder::sharedPointer(Value address) {
  return LLVM::IntToPtrOp::create(b, loc, sharedPtr, address);
}

Value Builder::opaque(Value v) {
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

void Builder::withFreshBase(function_ref<void()> body) {
  // Copied from the base itself, not from an enclosing copy, so that the
  // enclosing copy dies before a nested loop.
  Value savedAddress = alignedAddress, savedPointer = smemAligned;
  alignedAddress = opaque(rootAlignedAddress);
  smemAligned = sharedPointer(alignedAddress);
  body();
  alignedAddress = savedAddress;
  smemAligned = savedPointer;
}

void Builder::barrierInit(Value bar, int64_t count) {
  NVVM::MBarrierInitOp::create(b, loc, sharedPointer(bar), c32(count),
                               /*predicate=*/Value());
}

void Builder::barrierExpect(Value bar, int64_t bytes) {
  asmVoid("mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r",
          {bar, c32(bytes)});
}

void Builder::barrierArrive(Value bar) {
  asmVoid("mbarrier.arrive.shared::cta.b64 _, [$0];", "r", {bar});
}

void Builder::barrierArriveCount(Value bar, Value count) {
  asmVoid("mbarrier.arrive.shared::cta.b64 _, [$0], $1;", "r,r",
          {bar, count});
}

void Builder::barrierWait(Value bar, Value parity) {
  NVVM::MBarrierTryWaitParityOp::create(b, loc, sharedPointer(bar), parity,
                                        c32(kWaitTicks));
}

void Builder::tmaLoad(Value tensorMap, Value dst, Value bar,
                      ValueRange coords, bool toCluster) {
  // dst and bar are this block's shared::cta addresses, which are its own
  // shared::cluster addresses; multicast, each block of the mask receives
  // the box at the same offsets of its own shared memory.
  SmallVector<Value> operands = {dst, tensorMap};
  operands.append(coords.begin(), coords.end());
  operands.push_back(bar);
  const char *load = "cp.async.bulk.tensor.4d.shared::cluster.global.tile."
                     "mbarrier::complete_tx::bytes";
  if (!toCluster) {
    asmVoid(std::string(load) + " [$0], [$1, {$2, $3, $4, $5}], [$6];",
            "r,l,r,r,r,r,r", operands);
    return;
  }
  operands.push_back(LLVM::ConstantOp::create(
      b, loc, b.getI16Type(),
      b.getI16IntegerAttr((1 << WgmmaForward::kClusterSize) - 1)));
  asmVoid(std::string(load) +
              ".multicast::cluster [$0], [$1, {$2, $3, $4, $5}], [$6], $7;",
          "r,l,r,r,r,r,r,h", operands);
}

void Builder::tmaLoadTile(Value tensorMap, int64_t dstOffset,
                          Value dynamicOffset, Value bar, Value row0,
                          Value head, Value batch, int64_t rows) {
  const int64_t panels = d / WgmmaForward::kPanelCols;
  // With multicast this block loads rows [rank * share, (rank + 1) *
  // share) of the tile for the whole cluster.
  if (multicast) {
    const int64_t share = rows / WgmmaForward::kClusterSize;
    Value rank = clusterRank();
    dynamicOffset = add(dynamicOffset, mul(rank, c32(share * kRowBytes)));
    row0 = add(row0, toI64(mul(rank, c32(share))));
  }
  for (int64_t panel = 0; panel < panels; ++panel) {
    Value dst = sharedAddress(
        add(dynamicOffset, c32(dstOffset + panel * rows * kRowBytes)));
    SmallVector<Value> coords = {c32(panel * WgmmaForward::kPanelCols),
                                 toI32(row0), toI32(head), toI32(batch)};
    tmaLoad(tensorMap, dst, bar, coords, /*toCluster=*/multicast);
  }
}

Value Builder::clusterRank() { return NVVM::ClusterId::create(b, loc, i32); }

void Builder::barrierArriveInCluster(Value bar, Value rank) {
  asmVoid("{\n\t.reg .b32 remote;\n\t"
          "mapa.shared::cluster.u32 remote, $0, $1;\n\t"
          "mbarrier.arrive.shared::cluster.b64 _, [remote];\n\t}",
          "r,r", {bar, rank});
}

void Builder::clusterSync() {
  NVVM::ClusterArriveOp::create(b, loc, /*aligned=*/UnitAttr());
  NVVM::ClusterWaitOp::create(b, loc, /*aligned=*/UnitAttr());
}

void Builder::tmaStore(Value tensorMap, Value src, ValueRange coords) {
  NVVM::CpAsyncBulkTensorSharedCTAToGlobalOp::create(
      b, loc, tensorMap, src, coords, /*l2CacheHint=*/Value(),
      NVVM::TMAStoreModeAttr::get(b.getContext(), NVVM::TMAStoreMode::TILE),
      /*predicate=*/Value());
}

Value Builder::consumerRows(Value consumer, int64_t panel) {
  Value rows = mul(consumer, c32(WgmmaForward::kRowsPerWarpgroup * 128));
  return panel == 0 ? rows : add(c32(panel * cfg.blockM * 128), rows);
}

Value Builder::descriptor(Value address, Major major, int64_t panelBytes) {
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

SmallVector<Value> Builder::asmFloats(StringRef text, StringRef inputs,
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

StringRef Builder::ptxType() const {
  return spec.dtype == DType::BF16 ? "bf16" : "f16";
}

SmallVector<Value> Builder::issueScores(Value qDesc, Value kDesc) {
  const int64_t n = cfg.blockN, outs = n / 2;
  const int64_t steps = d / 16;
  // Operands: $0..$outs-1 the scores, then the Q and K descriptors.
  const int64_t qOp = outs, kOp = outs + 1;
  // Each k step gets its own descriptor registers: none is redefined
  // while a wgmma that read it may still be in flight.
  std::string text = llvm::formatv("{\n.reg .pred fj_zero;\n.reg .pred fj_one;\n"
                                   ".reg .b64 fj_da<{0}>;\n.reg .b64 fj_db<{0}>;\n",
                                   steps)
                         .str();
  text += llvm::formatv("setp.ne.b64 fj_zero, ${0}, ${0};\n"
                        "setp.eq.b64 fj_one, ${0}, ${0};\n"
                        "wgmma.fence.sync.aligned;\n",
                        qOp)
              .str();
  const int64_t panelCols = WgmmaForward::kPanelCols;
  for (int64_t ks = 0; ks < steps; ++ks) {
    // k step ks: 32 bytes into a 128-byte row, in panel ks / 4.
    int64_t within = (ks % (panelCols / 16)) * 32;
    int64_t panel = ks / (panelCols / 16);
    int64_t qStep = (panel * cfg.blockM * 128 + within) >> 4;
    int64_t kStep = (panel * n * 128 + within) >> 4;
    text += llvm::formatv("add.s64 fj_da{4}, ${0}, {1};\n"
                          "add.s64 fj_db{4}, ${2}, {3};\n",
                          qOp, qStep, kOp, kStep, ks)
                .str();
    text += llvm::formatv("wgmma.mma_async.sync.aligned.m64n{0}k16.f32.{1}.{1} "
                          "{2}, fj_da{4}, fj_db{4}, {3}, 1, 1, 0, 0;\n",
                          n, ptxType(), operandList(0, outs),
                          ks == 0 ? "fj_zero" : "fj_one", ks)
                .str();
  }
  text += "wgmma.commit_group.sync.aligned;\n}";
  return asmFloats(text, "l,l", ValueRange{qDesc, kDesc}, outs);
}

SmallVector<Value> Builder::issueAccumulate(ValueRange o,
                                            ArrayRef<Value> pPacked,
                                            Value vDesc) {
  const int64_t outs = d / 2, steps = cfg.blockN / 16;
  // Operands: $0..$outs-1 O out; $outs..$2outs-1 O in (tied); then the
  // packed P (4 per k step); then the V descriptor.
  const int64_t pOp = 2 * outs, vOp = 2 * outs + pPacked.size();
  std::string text = llvm::formatv("{\n.reg .pred fj_one;\n.reg .b64 fj_db<{0}>;\n",
                                   steps)
                         .str();
  text += llvm::formatv("setp.eq.b64 fj_one, ${0}, ${0};\n"
                        "wgmma.fence.sync.aligned;\n",
                        vOp)
              .str();
  for (int64_t kk = 0; kk < steps; ++kk) {
    // k step kk: 16 key rows of 128 bytes further into each panel.
    text += llvm::formatv("add.s64 fj_db{2}, ${0}, {1};\n", vOp,
                          (kk * 16 * 128) >> 4, kk)
                .str();
    text += llvm::formatv("wgmma.mma_async.sync.aligned.m64n{0}k16.f32.{1}.{1} "
                          "{2}, {3}, fj_db{4}, fj_one, 1, 1, 1;\n",
                          d, ptxType(), operandList(0, outs),
                          operandList(pOp + 4 * kk, 4), kk)
                .str();
  }
  text += "wgmma.commit_group.sync.aligned;\n}";
  std::string inputs;
  for (int64_t i = 0; i < outs; ++i)
    inputs += std::to_string(i) + ","; // O in, tied to O out
  for (size_t i = 0; i < pPacked.size(); ++i)
    inputs += "r,";
  inputs += "l";
  SmallVector<Value> operands(o.begin(), o.end());
  operands.append(pPacked.begin(), pPacked.end());
  operands.push_back(vDesc);
  return asmFloats(text, inputs, operands, outs);
}

SmallVector<Value> Builder::waitGroups(int64_t pending, ValueRange values) {
  // The values pass through the wait as tied operands: their uses depend
  // on it, so LLVM cannot hoist one above it.
  std::string inputs;
  for (size_t i = 0; i < values.size(); ++i)
    inputs += (i ? "," : "") + std::to_string(i);
  return asmFloats(
      llvm::formatv("wgmma.wait_group.sync.aligned {0};", pending).str(),
      inputs, values, values.size());
}

void Builder::asmVoid(StringRef text, StringRef constraints,
                      ValueRange operands) {
  LLVM::InlineAsmOp::create(
      b, loc, /*res=*/Type(), operands, text, constraints,
      /*has_side_effects=*/true, /*is_align_stack=*/false,
      LLVM::tailcallkind::TailCallKind::None,
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
      /*operand_attrs=*/ArrayAttr());
}

Value Builder::warpgroupAny(Value flag, Value consumer) {
  Value any = LLVM::InlineAsmOp::create(
                  b, loc, i32,
                  ValueRange{arith::ExtUIOp::create(b, loc, i32, flag),
                             voteBarrier(consumer)},
                  llvm::formatv("{\n\t.reg .pred p;\n\t"
                                "setp.ne.b32 p, $1, 0;\n\t"
                                "bar.red.or.pred p, $2, {0}, p;\n\t"
                                "selp.b32 $0, 1, 0, p;\n\t}",
                                kWarpgroupThreads)
                      .str(),
                  "=r,r,r", /*has_side_effects=*/true,
                  /*is_align_stack=*/false,
                  LLVM::tailcallkind::TailCallKind::None,
                  LLVM::AsmDialectAttr::get(b.getContext(),
                                            LLVM::AsmDialect::AD_ATT),
                  /*operand_attrs=*/ArrayAttr())
                  .getResult(0);
  // Every thread holds the same value; read from lane 0, ptxas knows it.
  any = gpu::ShuffleOp::create(b, loc, any, 0, 32, gpu::ShuffleMode::IDX)
            .getShuffleResult();
  return cmp(Pred::ne, any, c32(0));
}

void Builder::namedBarrierSync(Value id, int64_t threads) {
  asmVoid(llvm::formatv("bar.sync $0, {0};", threads).str(), "r", {id});
}

void Builder::namedBarrierArrive(Value id, int64_t threads) {
  asmVoid(llvm::formatv("bar.arrive $0, {0};", threads).str(), "r", {id});
}

} // namespace flashjit::wgmma
