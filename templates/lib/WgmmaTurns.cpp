//===- WgmmaTurns.cpp - consumers taking turns at the tensor cores --------===//
// Why: the ping-pong turns of two wgmma consumers (WgmmaTurns.h).
#include "WgmmaTurns.h"

using namespace mlir;

namespace flashjit::wgmma {

ConsumerTurns::ConsumerTurns(HopperIR &ir, Value consumer, int64_t consumers)
    : ir(ir), consumer(consumer), on(consumers == 2) {
  Value isLastConsumer = ir.cmp(arith::CmpIPredicate::eq, consumer,
                                ir.c32(consumers - 1));
  myTurn = ir.add(consumer, ir.c32(1));
  nextTurn = ir.add(ir.remU(ir.add(consumer, ir.c32(1)), consumers),
                    ir.c32(1));
  if (on)
    ir.ifThen(isLastConsumer,
              [&] { ir.namedBarrierArrive(ir.c32(1), kThreads); });
}

void ConsumerTurns::begin() {
  if (on)
    ir.namedBarrierSync(myTurn, kThreads);
}

void ConsumerTurns::end() {
  if (on)
    ir.namedBarrierArrive(nextTurn, kThreads);
}

void ConsumerTurns::finish() {
  if (on)
    ir.ifThen(ir.cmp(arith::CmpIPredicate::eq, consumer, ir.c32(0)),
              [&] { ir.namedBarrierSync(myTurn, kThreads); });
}

} // namespace flashjit::wgmma
