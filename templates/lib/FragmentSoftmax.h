//===- FragmentSoftmax.h - online softmax on tensor-core fragments -*- C++ -*-===//
// Why: mma.sync m16n8k16 and wgmma m64nNk16 leave the scores in the same
// per-thread layout, so the mask, the online softmax (running max and sum,
// P packed for the next product, O rescaled) and the epilogue (O / l and
// the log-sum-exp) are written once here for both tensor-core templates.
#ifndef FLASHJIT_TEMPLATES_FRAGMENTSOFTMAX_H
#define FLASHJIT_TEMPLATES_FRAGMENTSOFTMAX_H

#include "KernelIR.h"
#include "ScoreMods.h"

#include <cassert>
#include <optional>

namespace flashjit {

/// One thread's rows of a score tile in the accumulator layout of mma.sync
/// m16n8k16 (and of each warp of wgmma m64nNk16): for m tile mt and n8 tile
/// nt, element (mt * nTiles + nt) * 4 + r holds row half r / 2 (row g or
/// g + 8 of the m16 tile, g = lane / 4) and column nt * 8 + 2 (lane % 4) +
/// r % 2. Running max and sum are indexed mt * 2 + h (row half h); the max
/// is kept unscaled, the sum per thread (reduced across the quad once, at
/// the end).
///
/// update() takes each row's max over the tile (the running max). Where
/// the caller can take the tile again, updateWithinBound() skips the max:
/// it takes P against the max as it stands, a reference that a row's
/// scores may outgrow, as long as every P stays at most maxProbability()
/// (its thread's sum of the tile's P shows it). O and l share the
/// reference, so O / l is the same softmax. A tile past the bound, or a
/// row with no reference yet, goes through update() instead.
class FragmentSoftmax {
public:
  static constexpr int64_t kAccPerTile = 4;
  /// The largest P updateWithinBound() lets through: 2^15 for f16 (P is
  /// rounded to f16 for P V, whose largest value is 65504), 2^64 for bf16
  /// (the sums and O stay far inside f32 for any length). A row's later
  /// scores must outgrow its first tile's max by 15 or 64 (log2, after the
  /// scale) to pass it, so the max is taken on about one tile per row
  /// unless the scores spread very wide (a bound as low as 2^8 sends many
  /// tiles back to the max once scores spread wider than N(0,1) inputs
  /// give).
  float maxProbability() const;

  FragmentSoftmax(KernelIR &ir, int64_t mTiles, int64_t nTiles)
      : ir(ir), mTiles(mTiles), nTiles(nTiles) {}

  /// Stage the mask_mod's key-column reads through this warp's shared
  /// `scratch` (4 bytes per column of a `blockN`-wide tile; IndexStaging)
  /// in readMaskAhead, one mTiles = 1 fragment per warp.
  void stageColumnReads(mlir::Value scratch, mlir::Value lane,
                        int64_t blockN) {
    staging = IndexStaging{scratch, lane, blockN, {}};
  }

  /// Takes every tile's P against a reference fixed for the kernel where
  /// the score_mod bounds the scores (ScoreMods::scoreInterval): the
  /// interval's middle, as long as P = 2^((score - middle) log2(e)) (the
  /// score in natural units: what the score_mod returns) stays within
  /// [2^-b, 2^b] over the whole interval, b = 64 for bf16 and
  /// 14 for f16 (P is rounded to f16 for P V: a normal number, at most
  /// maxProbability()). update() then takes no row max and rescale()
  /// leaves O alone, and a caller needs no vote on the bound; masked
  /// scores (-inf) give P = 0 as before. Returns whether it does.
  bool fixReference(ScoreMods &mods);
  bool hasFixedReference() const { return static_cast<bool>(fixedMax); }
  /// With a fixed reference, `eighths` of every 8 P of a row are computed
  /// on the FMA units (KernelIR::exp2OnFmaUnits) instead of ex2.approx,
  /// spread evenly over the row: where the special-function unit bounds
  /// the tile. The fixed reference keeps P's exponent within the range
  /// that computation takes.
  void shareExp2WithFmaUnits(int64_t eighths) {
    assert(eighths >= 0 && eighths <= 8 && (fixedMax || eighths == 0));
    exp2EighthsOnFma = eighths;
  }

  int64_t rowStates() const { return mTiles * 2; }
  int64_t scoreAt(int64_t mt, int64_t nt) const {
    return (mt * nTiles + nt) * kAccPerTile;
  }

  /// The score_mod (on every tile), then the masks: scores at or past
  /// seqlenK, right of their row's causal or window bound, left of its
  /// window, or dropped by the mask_mod become -inf. The selects run only
  /// on a tile that needs them: one that crosses the sequence end or a
  /// bound of some row in [firstRow, lastRow] (the rows of the threads that
  /// branch together), or any tile where a mask_mod applies. n0 is the
  /// tile's first column, blockN its width, quadCol 2 (lane % 4),
  /// rowOf(mt, h) the query row of a row half, rowOf(0, 0) + 16 mt + 8 h
  /// (the accumulator fragment's rows; the mods see them so).
  void mask(llvm::MutableArrayRef<mlir::Value> s, mlir::Value n0,
            int64_t blockN, mlir::Value firstRow, mlir::Value lastRow,
            mlir::Value quadCol, const ScoreRules &rules,
            llvm::function_ref<mlir::Value(int64_t, int64_t)> rowOf);

  /// Issues the mask_mod's captured-tensor reads of the tile at n0 for
  /// the thread's rows and columns (ScoreMods::readMaskAhead), on a block
  /// mask's tiles only where the mask_mod applies. A caller that does this
  /// before it waits for the scores passes the result as rules.reads to
  /// mask().
  ModReads readMaskAhead(mlir::Value n0, mlir::Value quadCol,
                         const ScoreRules &rules,
                         llvm::function_ref<mlir::Value(int64_t, int64_t)>
                             rowOf);

  struct Update {
    /// New max and running sum per row half, the factor alpha = 2^(old max
    /// - new max) (scaled) that the old sum and O take, and P in f32, in
    /// the scores' layout.
    llvm::SmallVector<mlir::Value> max, sum, alpha, probs;
    /// updateWithinBound(): whether some row of this thread outgrew the
    /// bound (i1); the step is then void.
    mlir::Value outgrown;
  };
  /// One tile's online-softmax step: p = 2^(s c - m c) with c = scale *
  /// log2(e) > 0 folded into one multiply-add per score. The row max is
  /// reduced as a tree, the sum in a few interleaved chains (its order
  /// differs from a left fold only in rounding). With a fixed reference
  /// (fixReference), m is the reference and `max` is not read.
  Update update(mlir::ValueRange s, mlir::ValueRange max,
                mlir::ValueRange sum, mlir::Value scaleLog2);
  /// The step against `max` as it stands, with no row max: max unchanged,
  /// alpha 1, and `outgrown` set where one of the thread's rows summed to
  /// more than maxProbability() (or to NaN: the reference is -inf) in this
  /// tile.
  Update updateWithinBound(mlir::ValueRange s, mlir::ValueRange max,
                           mlir::ValueRange sum, mlir::Value scaleLog2);
  /// P rounded to the element type and packed in pairs, the A operand of
  /// the next product: packed[(mt * nTiles + nt) * 2 + h]. Apart from
  /// update() so that a pipelined kernel can round P once the registers of
  /// the previous P are free.
  llvm::SmallVector<mlir::Value> pack(mlir::ValueRange probs);

  /// O accumulators (mTiles x dTiles n8 tiles, same layout) times alpha,
  /// computed only when some row of the warp moved its max (one vote, a
  /// warp-uniform branch); after the first tiles that is rare. With a
  /// fixed reference, O as it is.
  llvm::SmallVector<mlir::Value> rescale(mlir::ValueRange acc,
                                         mlir::ValueRange alpha);

  /// Epilogue, first half: O = acc / l rounded and packed in pairs
  /// (packed[(mt * dTiles + dt) * 2 + h], in the accumulators' layout), and
  /// the log-sum-exp written by the first thread of each quad for rows
  /// below seqlenQ.
  llvm::SmallVector<mlir::Value>
  finish(const ForwardParams &p, const BlockCoordinates &at,
         mlir::ValueRange max, mlir::ValueRange sum, mlir::ValueRange acc,
         mlir::Value quadCol,
         llvm::function_ref<mlir::Value(int64_t, int64_t)> rowOf);
  /// Epilogue: finish(), then the pairs stored straight to global memory,
  /// rows below seqlenQ.
  void store(const ForwardParams &p, const BlockCoordinates &at,
             mlir::ValueRange max, mlir::ValueRange sum,
             mlir::ValueRange acc, mlir::Value quadCol,
             llvm::function_ref<mlir::Value(int64_t, int64_t)> rowOf);

private:
  KernelIR &ir;
  std::optional<IndexStaging> staging;
  const int64_t mTiles, nTiles;
  /// The fixed reference in the family's units (fixReference), or null.
  mlir::Value fixedMax;
  /// shareExp2WithFmaUnits().
  int64_t exp2EighthsOnFma = 0;
  /// Set by mask() with a fixed reference: the masked scores are still to
  /// be multiplied by it (ScoreMods::score's factorOut), which
  /// exponentiate() folds into its multiply-add.
  mlir::Value scoreFactor;
  /// P = 2^(s c - m c) for the scores of row state `row` (mt * 2 + h) into
  /// `probs`, with c = `scaleLog2` and `negShift` = -m c; returns the P
  /// summed in a few chains.
  llvm::SmallVector<mlir::Value>
  exponentiate(mlir::ValueRange s, int64_t row, mlir::Value scaleLog2,
               mlir::Value negShift, llvm::SmallVector<mlir::Value> &probs);
};

} // namespace flashjit

#endif
