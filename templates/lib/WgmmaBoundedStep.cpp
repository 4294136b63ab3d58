//===- WgmmaBoundedStep.cpp - a tile's softmax against the max as it stands ===//
// Why: after a row's first tile the wgmma consumers take P against the max
// as it stands, with no row max (FragmentSoftmax::updateWithinBound), and
// take S again with the max only where a row of the warpgroup outgrew the
// bound. This file holds that step and its warpgroup vote;
// WgmmaConsumer.cpp runs it in its software pipeline.
#include "WgmmaBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;

namespace flashjit::wgmma {

FragmentSoftmax::Update Builder::boundedStep(
    ArrayRef<Value> s, FragmentSoftmax &sm, ValueRange max, ValueRange sum,
    Value scaleLog2, Value consumer, Value &outgrew,
    function_ref<void(SmallVector<Value> &)> mask,
    function_ref<FragmentSoftmax::Update(SmallVector<Value> &)> withMax,
    function_ref<SmallVector<Value>()> scoresAgain) {
  if (sm.hasFixedReference()) {
    SmallVector<Value> held(s);
    return withMax(held);
  }
  const int64_t rows = sm.rowStates();
  SmallVector<Type> types(s.size() + 3 * rows, f32);
  auto values = [&](const FragmentSoftmax::Update &u) {
    SmallVector<Value> values(u.probs);
    llvm::append_range(values, u.max);
    llvm::append_range(values, u.sum);
    llvm::append_range(values, u.alpha);
    return values;
  };
  // The values of the bounded step, then (with `outgrew`) its vote.
  auto bounded = [&](SmallVector<Value> scores) {
    mask(scores);
    FragmentSoftmax::Update fast =
        sm.updateWithinBound(scores, max, sum, scaleLog2);
    Value vote = warpgroupAny(fast.outgrown, consumer);
    SmallVector<Value> r = ifElse(
        types, vote,
        [&] {
          SmallVector<Value> again = scoresAgain();
          return values(withMax(again));
        },
        [&] { return values(fast); });
    if (outgrew)
      r.push_back(arith::ExtUIOp::create(b, loc, i32, vote));
    return r;
  };
  SmallVector<Value> r;
  if (!outgrew) {
    r = bounded(SmallVector<Value>(s));
  } else {
    SmallVector<Type> withVote(types);
    withVote.push_back(i32);
    r = ifElse(
        withVote, outgrew,
        [&] {
          SmallVector<Value> held(s);
          SmallVector<Value> r = values(withMax(held));
          r.push_back(c32(1));
          return r;
        },
        [&] { return bounded(SmallVector<Value>(s)); });
    outgrew = cmp(Pred::ne, r.pop_back_val(), c32(0));
  }
  FragmentSoftmax::Update u;
  u.probs.assign(r.begin(), r.begin() + s.size());
  u.max.assign(r.begin() + s.size(), r.begin() + s.size() + rows);
  u.sum.assign(r.begin() + s.size() + rows, r.begin() + s.size() + 2 * rows);
  u.alpha.assign(r.begin() + s.size() + 2 * rows, r.end());
  return u;
}

} // namespace flashjit::wgmma
