//===- WgmmaTurns.h - consumers taking turns at the tensor cores -*- C++ -*-===//
// Why: two wgmma consumer warpgroups issue their products in turns
// (ping-pong), so that one's softmax and epilogue run under the other's
// products; the turns are named barriers that every consumer step passes
// through, kept apart from the steps themselves (WgmmaConsumer.cpp).
#ifndef FLASHJIT_TEMPLATES_WGMMATURNS_H
#define FLASHJIT_TEMPLATES_WGMMATURNS_H

#include "HopperIR.h"

namespace flashjit::wgmma {

/// Consumer c issues its products only after c - 1 (cyclic) issued theirs.
/// Named barrier 1 + c admits consumer c (its 128 threads wait, the
/// previous consumer's 128 arrive); the last consumer opens the first turn,
/// every turn ends with an arrive, and the first consumer takes the last
/// consumer's final one before it exits (finish), so every barrier ends
/// balanced. In a persistent kernel the turns run on across tiles. Only
/// two consumers take turns; with one or three, each call does nothing.
class ConsumerTurns {
public:
  /// Consumer `consumer` (i32) of `consumers`; the last one opens the
  /// first turn here.
  ConsumerTurns(HopperIR &ir, Value consumer, int64_t consumers);
  /// Waits for this consumer's turn, before it issues its products.
  void begin();
  /// Hands the turn to the next consumer, once its products are issued.
  void end();
  /// Before the consumer exits: the first consumer takes the last
  /// consumer's final arrive (it cannot know a turn is its last).
  void finish();

private:
  HopperIR &ir;
  Value consumer, myTurn, nextTurn;
  bool on;
  static constexpr int64_t kThreads = 2 * kWarpgroupThreads;
};

} // namespace flashjit::wgmma

#endif
