//===- Variants.h - score_mod and mask_mod presets and builders ---*- C++ -*-===//
// Why: a variant is a few lines of description. The presets here (ALiBi,
// soft-capping, sliding window, document masking, prefix-LM) are ordinary
// mods built with MLIR builders through buildScoreMod / buildMaskMod, so a
// user reads them as examples of writing their own. Each returns the
// spec's text form (AttentionSpec::scoreMod / maskMod), which is what the
// kernel cache hashes: two identical mods share a kernel.
#ifndef FLASHJIT_COMPILER_VARIANTS_H
#define FLASHJIT_COMPILER_VARIANTS_H

#include "flashjit/Compiler/ModInterpreter.h"
#include "flashjit/Dialect/AttentionSpec.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/Error.h"
#include <functional>
#include <vector>

namespace flashjit {

/// The arguments a score_mod builder gets: the scaled score (f32), the
/// batch, head, query row and key column (index), then one tensor value
/// per AttentionSpec::captures entry (read them with tensor.extract).
struct ScoreModArgs {
  mlir::Value score, b, h, qIdx, kvIdx;
  llvm::SmallVector<mlir::Value> captures;
};
/// A mask_mod builder's arguments (no score).
struct MaskModArgs {
  mlir::Value b, h, qIdx, kvIdx;
  llvm::SmallVector<mlir::Value> captures;
};
using ScoreModBuilder = std::function<mlir::Value(
    mlir::OpBuilder &, mlir::Location, const ScoreModArgs &)>;
using MaskModBuilder = std::function<mlir::Value(
    mlir::OpBuilder &, mlir::Location, const MaskModArgs &)>;

/// Builds a score_mod for a spec with `captures` (the callback returns the
/// new f32 score) and prints it as the spec's text. The function is
/// verified: an op of the wrong type is an error here.
llvm::Expected<std::string>
buildScoreMod(const std::vector<CapturedTensor> &captures,
              const ScoreModBuilder &body);
/// The same for a mask_mod (the callback returns i1, true = keep).
llvm::Expected<std::string>
buildMaskMod(const std::vector<CapturedTensor> &captures,
             const MaskModBuilder &body);

namespace presets {
/// ALiBi (Press et al.): score + slope[h] * (kv_idx - q_idx), with the
/// slopes a captured f32 tensor [numHeads] (alibiSlopes gives the paper's).
/// Pass it at each launch. The spec must have no mods or captures yet.
llvm::Error alibi(AttentionSpec &spec);
/// 2^(-8 (h + 1) / H) for H a power of two, interleaved as in the paper
/// otherwise.
std::vector<float> alibiSlopes(int64_t numHeads);
/// Logit soft-capping (Gemma 2): cap * tanh(score / cap), cap > 0. The
/// spec may already have a mask_mod and its captures (apply the mask
/// preset first), not a score_mod.
llvm::Error softcap(AttentionSpec &spec, double cap);
/// Sliding window: keys [q_idx - left, q_idx + right] (structural: a loop
/// bound, no mod). right = 0 with causal is the usual causal window.
llvm::Error slidingWindow(AttentionSpec &spec, int64_t left, int64_t right);
/// Document masking of packed sequences: a captured i32 tensor [B, S] of
/// document ids, a key kept iff its document is the query's (both index
/// the same sequence: seqlen q = seqlen k).
llvm::Error documentMask(AttentionSpec &spec);
/// Prefix-LM: a captured i32 tensor [B] of prefix lengths; a key is kept
/// iff it is in its sequence's prefix or at or before the query (use
/// without causal: the mask is the causal part).
llvm::Error prefixLM(AttentionSpec &spec);

/// Sample host data for the presets' captured tensors, by their names: the
/// paper's ALiBi slopes, `documents` packed documents of random lengths per
/// sequence (seqlenQ must equal seqlenK), a random prefix length per
/// sequence. For `flashjit run` and the tests; a capture no preset makes
/// is an error.
llvm::Expected<std::vector<HostCapture>>
sampleCaptures(const AttentionSpec &spec, int64_t batch, int64_t seqlenQ,
               int64_t seqlenK, int64_t documents, uint64_t seed);
} // namespace presets

} // namespace flashjit

#endif
