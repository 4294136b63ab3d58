//===- LengthClasses.cpp - sequence-length ranges with one config each ----===//
// Why: the class boundaries are the union of the default buckets' and the
// tuning database's, so a class never straddles a tuned bucket's
// edge and the database, where it answers, answers for the whole class.
// Varlen specs add the heuristic's short-sequence bound, so that a batch
// of short sequences is served by the config chosen for short sequences.
#include "flashjit/Runtime/LengthClasses.h"

#include "flashjit/Autotune/Heuristic.h"
#include "flashjit/Autotune/ShapeBuckets.h"
#include "flashjit/Runtime/TunedConfigs.h"

#include <algorithm>
#include <climits>
#include <set>

namespace flashjit {


std::vector<LengthClass> lengthClasses(const AttentionSpec &spec,
                                       const TunedConfigs &tuned) {
  // The default buckets' ranges (around 512, 1k, 2k, 4k and 16k,
  // so the length where the heuristic's choice changes,
  // HeuristicOptions::shortSeqlen, sits inside one), refined by the
  // database's.
  std::set<int64_t> starts;
  for (int64_t start : autotune::defaultBucketAxes().seqlenStarts)
    starts.insert(std::max<int64_t>(start, 1));
  starts.insert(1);
  // The heuristic ranks the TMA families last for varlen sequences up to
  // shortVarlenSeqlen; the first default range's representative (128)
  // lies above it, so without this class no varlen kernel would get that
  // choice.
  if (spec.varlen)
    starts.insert(autotune::HeuristicOptions().shortVarlenSeqlen + 1);
  for (size_t i = 0; i < tuned.size(); ++i) {
    const autotune::ShapeBucket &bucket = tuned.entry(i).bucket;
    if (!bucket.contains(spec, bucket.seqlenMin))
      continue;
    starts.insert(std::max<int64_t>(bucket.seqlenMin, 1));
    if (bucket.seqlenMax)
      starts.insert(std::max<int64_t>(*bucket.seqlenMax, 1));
  }
  std::vector<LengthClass> classes;
  for (auto it = starts.begin(); it != starts.end(); ++it) {
    LengthClass c;
    c.first = *it;
    auto next = std::next(it);
    autotune::ShapeBucket range;
    range.seqlenMin = c.first;
    if (next != starts.end()) {
      c.end = *next;
      range.seqlenMax = c.end;
    }
    c.representative = range.tuningSeqlen();
    classes.push_back(c);
  }
  return classes;
}

size_t lengthClassOf(const std::vector<LengthClass> &classes, int64_t length) {
  auto it = std::upper_bound(
      classes.begin(), classes.end(), length,
      [](int64_t len, const LengthClass &c) { return len < c.first; });
  return it == classes.begin() ? 0 : size_t(it - classes.begin()) - 1;
}

} // namespace flashjit
