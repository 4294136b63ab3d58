//===- LengthClasses.h - sequence-length ranges with one config each -*- C++ -*-===//
// Why: the best tile config depends on the sequence length, but compiling
// one per length is impossible. A kernel handle serves each call with the
// config of the call's length class: the tuning database's buckets for the
// spec where it has them, the default buckets' ranges elsewhere, each
// represented by one length that the heuristic or the database answers for.
#ifndef FLASHJIT_RUNTIME_LENGTHCLASSES_H
#define FLASHJIT_RUNTIME_LENGTHCLASSES_H

#include "flashjit/Dialect/AttentionSpec.h"

#include <cstdint>
#include <vector>

namespace flashjit {

class TunedConfigs;

struct LengthClass {
  /// Lengths [first, end); the last class has end = INT64_MAX.
  int64_t first = 1;
  int64_t end = INT64_MAX;
  /// The length the class's config is chosen for (ShapeBucket::tuningSeqlen
  /// of the range: 128 for [1, 384), 512 for [384, 768), 1024 for
  /// [768, 1536), 2048 for [1536, 3072), 4096 for [3072, 8192), 16384 for
  /// [8192, inf)).
  int64_t representative = 1;

  bool contains(int64_t length) const { return length >= first && length < end; }
};

/// The classes of `spec`: the default buckets' ranges (between 1, 384, 768,
/// 1536, 3072 and 8192), for a varlen spec also 65 (the heuristic's short
/// varlen sequences, represented by 32), and the bounds of every database
/// bucket that holds the spec, so that each class lies inside one bucket or
/// none. Increasing, the first starting at 1.
std::vector<LengthClass> lengthClasses(const AttentionSpec &spec,
                                       const TunedConfigs &tuned);

/// The index of the class holding `length` (lengths below 1 fall in the
/// first).
size_t lengthClassOf(const std::vector<LengthClass> &classes, int64_t length);

/// The length of a call that picks its class: the longer of the query and
/// key lengths (the per-tile key loop and the query tiles both grow with
/// it; the database's buckets were measured with the two equal).
inline int64_t callLength(int64_t seqlenQ, int64_t seqlenK) {
  return seqlenQ > seqlenK ? seqlenQ : seqlenK;
}

} // namespace flashjit

#endif
