//===- DecodeCombineKernel.cpp - merges the splits of Flash-Decoding ------===//
// Why: the split kernel leaves, per (sequence, head, token), one normalized
// partial O and one base-2 LSE per split. The exact result is their
// average weighted by 2^(lse_s - lse), lse = log2 sum_s 2^lse_s: one warp
// per row finds the max and the sum over the splits (lanes stride the
// splits, then shuffles), then walks the splits, eight at a time, adding
// its head_dim / 32 columns of each partial O (one 16- or 8-byte load per
// lane and split), and writes O in the element type and the LSE in
// natural log.
#include "DecodeBuilder.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace flashjit::decode {

void Builder::emitCombineKernel(StringRef name) {
  OpBuilder::InsertionGuard funcGuard(b);
  SmallVector<Type> argTypes(4, globalPtr);
  argTypes.append(6, i64);
  argTypes.append({i32, i32});
  gpu::GPUFuncOp func =
      beginKernel(name, argTypes, static_cast<int64_t>(kDecodeCombineThreads));
  ValueRange args = func.getBody().front().getArguments();
  Value oPartial = args[0], lsePartial = args[1], o = args[2], lse = args[3];
  SmallVector<Value, 3> oStrides(args.begin() + 4, args.begin() + 7);
  SmallVector<Value, 3> lseStrides(args.begin() + 7, args.begin() + 10);
  Value rows = arith::ExtSIOp::create(b, loc, i64, args[10]);
  Value numSplits = arith::ExtSIOp::create(b, loc, i64, args[11]);

  const float negInf = -std::numeric_limits<float>::infinity();
  const float posInf = std::numeric_limits<float>::infinity();
  const int64_t perLane = d / 32;
  tid = threadIdX();
  Value lane = remU(tid, 32), warp = divU(tid, 32);
  Value blockX = toI64(gpu::BlockIdOp::create(b, loc, gpu::Dimension::x));
  Value row = add(mul(blockX, c64(kDecodeCombineThreads / 32)), warp);
  auto inRange =
      scf::IfOp::create(b, loc, cmp(Pred::slt, row, rows), /*withElse=*/false);
  b.setInsertionPoint(inRange.thenBlock()->getTerminator());

  Value token = remU(row, dspec.qLen);
  Value head = remU(divU(row, dspec.qLen), dspec.numHeads);
  Value batch = divU(row, dspec.qLen * dspec.numHeads);
  Value first = mul(row, numSplits); // this row's first partial
  auto lseOf = [&](Value s) {
    return loadF32(globalAddress(lsePartial, f32, add(first, s)));
  };
  // Lanes stride the splits: max, then the sum of 2^(lse_s - max).
  auto laneLoop = [&](Value init,
                      function_ref<Value(Value, Value)> step) -> Value {
    auto loop = scf::ForOp::create(
        b, loc, toIndex(lane), toIndex(numSplits), cIdx(32), ValueRange{init},
        [&](OpBuilder &, Location, Value s, ValueRange carried) {
          scf::YieldOp::create(b, loc, step(carried[0], lseOf(toI64(s))));
        });
    return loop.getResult(0);
  };
  Value max = shuffleXorReduce(
      laneLoop(cF32(negInf), [&](Value m, Value x) { return maxF(m, x); }), 32,
      /*isMax=*/true);
  Value empty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, max,
                                      cF32(negInf));
  Value shift = arith::SelectOp::create(b, loc, empty, cF32(0.0f), max);
  Value sum = shuffleXorReduce(
      laneLoop(cF32(0.0f),
               [&](Value acc, Value x) -> Value {
                 return arith::AddFOp::create(
                     b, loc, acc,
                     exp2(arith::SubFOp::create(b, loc, x, shift)));
               }),
      32, /*isMax=*/false);
  Value lse2 = arith::AddFOp::create(b, loc, shift, log2(sum));
  // With no key in any split every weight is 2^(-inf - inf) = 0.
  Value weightShift =
      arith::SelectOp::create(b, loc, empty, cF32(posInf), lse2);

  // O = sum_s 2^(lse_s - lse) O_s over this lane's columns, kUnroll
  // splits per step with every load issued before the first use: a loop
  // of one split per step waits out an L2 round trip per split. Splits
  // past the last read the last one with weight 0.
  constexpr int64_t kUnroll = 8;
  auto vecType = VectorType::get({perLane}, f32);
  Value column = mul(lane, c64(perLane));
  Value lastSplit = sub(numSplits, c64(1));
  SmallVector<Value> init(perLane, cF32(0.0f));
  auto loop = scf::ForOp::create(
      b, loc, cIdx(0), toIndex(numSplits), cIdx(kUnroll), init,
      [&](OpBuilder &, Location, Value sIndex, ValueRange acc) {
        Value s0 = toI64(sIndex);
        SmallVector<Value> lses, partials, inRange;
        for (int64_t u = 0; u < kUnroll; ++u) {
          Value s = add(s0, c64(u));
          inRange.push_back(cmp(Pred::slt, s, numSplits));
          Value clamped = minS(s, lastSplit);
          lses.push_back(lseOf(clamped));
          partials.push_back(LLVM::LoadOp::create(
              b, loc, vecType,
              globalAddress(oPartial, f32,
                            add(mul(add(first, clamped), c64(d)), column)),
              /*alignment=*/perLane * 4));
        }
        SmallVector<Value> next(acc.begin(), acc.end());
        for (int64_t u = 0; u < kUnroll; ++u) {
          Value weight = arith::SelectOp::create(
              b, loc, inRange[u],
              exp2(arith::SubFOp::create(b, loc, lses[u], weightShift)),
              cF32(0.0f));
          for (int64_t c = 0; c < perLane; ++c) {
            Value x = vector::ExtractOp::create(b, loc, partials[u], c);
            next[c] = LLVM::FMAOp::create(b, loc, x, weight, next[c]);
          }
        }
        scf::YieldOp::create(b, loc, next);
      });
  Value oRow = add(add(mul(batch, oStrides[0]), mul(token, oStrides[1])),
                   add(mul(head, oStrides[2]), column));
  for (int64_t c = 0; c < perLane; c += 2)
    LLVM::StoreOp::create(
        b, loc, packPair(loop.getResult(c), loop.getResult(c + 1)),
        globalAddress(o, elt, add(oRow, c64(c))), /*alignment=*/4);
  auto owner = scf::IfOp::create(b, loc, cmp(Pred::eq, lane, c64(0)),
                                 /*withElse=*/false);
  b.setInsertionPoint(owner.thenBlock()->getTerminator());
  Value natural = arith::SelectOp::create(
      b, loc, empty, cF32(negInf),
      arith::MulFOp::create(b, loc, lse2, cF32(static_cast<float>(M_LN2))));
  storeF32(natural, globalAddress(lse, f32,
                                  add(add(mul(batch, lseStrides[0]),
                                          mul(head, lseStrides[1])),
                                      mul(token, lseStrides[2]))));
  b.setInsertionPointAfter(inRange);
  gpu::ReturnOp::create(b, loc);
}

} // namespace flashjit::decode

namespace flashjit {

llvm::Error buildDecodeKernels(mlir::OpBuilder &builder, mlir::Location loc,
                               const DecodeSpec &spec, int ptxVersion,
                               int computeCapability) {
  if (auto err = spec.validate())
    return err;
  if (spec.copyMode == 2 && (computeCapability < 90 || ptxVersion < 80))
    return llvm::createStringError(
        "bulk K/V copies (copy mode 2) need sm_90 or newer and PTX ISA 8.0; "
        "use copy mode 0 or 1 for sm_" +
        std::to_string(computeCapability));
  const AttentionSpec attention = spec.attentionSpec();
  const DecodeTiling tiling = decodeTiling(spec);
  const TileConfig config = tiling.config(spec);
  decode::Builder kernels(builder, loc, spec, attention, config, tiling);
  if (ptxVersion < 74)
    kernels.l2PrefetchBytes = 0;
  kernels.bulk = decodeUsesBulkCopy(spec, computeCapability) &&
                 computeCapability >= 90 && ptxVersion >= 80;
  if (kernels.bulk && tiling.swizzledRows)
    return llvm::createStringError(
        "internal error: bulk K/V copies need the padded shared rows "
        "(DecodeTiling::swizzledRows)");
  kernels.evictFirst =
      decodeUsesEvictFirst(spec, computeCapability) && ptxVersion >= 74;
  kernels.emitSplitKernel(spec.kernelName());
  kernels.emitCombineKernel(spec.kernelName() + "_combine");
  return llvm::Error::success();
}

} // namespace flashjit
