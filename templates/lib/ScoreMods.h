//===- ScoreMods.h - score_mod and mask_mod placed in a kernel ----*- C++ -*-===//
// Why: every kernel family has one place where a score exists in a
// register with its (batch, head, query row, key column). The mods of the
// description are cloned there from the attn op's regions, so every family
// gets every mod from this one building block: arith ops are cloned as
// they are (index as i32), math ops and f32 division become the fast NVVM
// forms the softmax uses (ex2.approx, lg2.approx, tanh.approx, div.full;
// the CUDA toolkit's libdevice is not linked at run time), and
// tensor.extract of a captured tensor becomes a global load through the
// pointer and strides the launch passes (KernelABI.h); in the wgmma kernels
// a mask_mod's reads of the key column alone are loaded once per column
// and warp and shared through shared memory (IndexStaging), as the
// backward's reads of the query alone.
#ifndef FLASHJIT_TEMPLATES_SCOREMODS_H
#define FLASHJIT_TEMPLATES_SCOREMODS_H

#include "KernelIR.h"
#include "flashjit/Templates/KernelTemplate.h"

#include <optional>

namespace flashjit {

class ScoreMods;

/// A query or key index handed to a mod. `value` (i32 or i64) is what the
/// mod sees, clamped by the caller to the sequence so that captured
/// tensors are read in bounds. Where the caller knows it, the unclamped
/// index is `base + offset` (base i32, offset a constant): a mod that
/// converts an index sum to float (ALiBi's kv - q) then gets it from
/// per-tile conversions of the bases plus a constant, instead of one
/// int-to-float conversion per score (a quarter-rate instruction, as
/// costly as the softmax's exp2). The clamp only changes indices of
/// scores that are masked or never stored.
struct ModIndex {
  ModIndex(mlir::Value value) : value(value) {}
  ModIndex(mlir::Value value, mlir::Value base, int64_t offset)
      : value(value), base(base), offset(offset) {}
  mlir::Value value;
  mlir::Value base = {};
  int64_t offset = 0;
};

/// The mask_mod's reads of captured tensors for one tile, issued before the
/// tile's scores land (ScoreMods::readMaskAhead), so that their latency
/// hides behind the S product instead of following it (a document mask
/// reads one id per key column of a partial tile). A read's value is kept
/// per row slot and column slot of the thread's scores it depends on (-1:
/// it does not depend on that index).
struct ModReads {
  struct Key {
    mlir::Operation *read;
    int64_t rowSlot, columnSlot;
  };
  llvm::SmallVector<Key> keys;
  llvm::SmallVector<mlir::Value> values;
  /// The value read ahead for `read` at the slots (those it does not
  /// depend on are ignored), or null.
  mlir::Value lookup(mlir::Operation *read, int64_t rowSlot,
                     int64_t columnSlot) const;
};

/// Where a warp stages the mask_mod's reads that depend on one index
/// alone, the one that varies along the thread's slots (the forward's key
/// column: a document mask's id per key; the backward's query, its S^T
/// having queries for columns), ScoreMods::readMaskAhead: each lane reads
/// indices lane, lane + 32, ... of the tile once into the warp's
/// `scratch` (shared memory, 4 bytes per index of the tile), and each
/// thread takes its slots from there, where it would otherwise issue one
/// global read, with its address arithmetic, per slot (the 8 lanes of a
/// column read the same id).
struct IndexStaging {
  /// This warp's scratch (a shared-memory pointer) and the lane (i32).
  mlir::Value scratch, lane;
  /// The tile's extent along the staged index, and the offset of each slot
  /// of the thread from the tile's first index (i32; 2 (lane % 4) + its
  /// n8 tile's and element's).
  int64_t extent = 0;
  llvm::SmallVector<mlir::Value> slotOffsets;
  /// Stage reads of the query index (row slots) instead of the key's
  /// (column slots).
  bool queries = false;
};

/// What masks and modifies one tile's scores beyond their values: the
/// sequences (i64), the diagonal offset of the causal mask and the window
/// (KernelIR::diagonalOffset), the mods (null: none), the tile's batch
/// and head (i64), and whether the mask_mod applies on this tile (i1, a
/// block-sparse mask's partial block; null: on every tile), and the
/// mask_mod's reads where they were issued ahead (null: read in place).
struct ScoreRules {
  mlir::Value seqlenQ, seqlenK, diagonal;
  ScoreMods *mods = nullptr;
  mlir::Value batch, head;
  mlir::Value maskModOn = {};
  const ModReads *reads = nullptr;
};

/// The interval [lo, hi] (natural units: what the score_mod returns)
/// that holds every score a score_mod can yield, whatever its arguments.
struct ScoreInterval {
  double lo, hi;
};

/// The score_mod region's interval where its ops bound it (a tanh, an
/// exponential, constants and the arithmetic of bounded values: soft-capping
/// gives [-cap, cap]); nullopt where its result can be unbounded
/// (ScoreModRange.cpp).
std::optional<ScoreInterval> scoreModInterval(mlir::Region &scoreMod);

class ScoreMods {
public:
  /// `toNatural` and `fromNatural` (f32) convert the family's scores to
  /// the natural scaled score a score_mod takes (scale * q . k) and back:
  /// a family that keeps q . k passes scale and 1 / scale.
  ScoreMods(KernelIR &ir, const ModRegions &mods, const ForwardParams &p,
            mlir::Value toNatural, mlir::Value fromNatural);
  /// For a family whose scores are q . k (the tensor-core ones): the
  /// factors are scale and 1 / scale, from the launch's scale * log2(e).
  static ScoreMods onDotProducts(KernelIR &ir, const ModRegions &mods,
                                 const ForwardParams &p);
  /// For a family whose scores are scale * q . k * log2(e) (Q pre-scaled
  /// into base 2): the factors are ln 2 and log2(e).
  static ScoreMods onBase2Scores(KernelIR &ir, const ModRegions &mods,
                                 const ForwardParams &p);

  /// Lets LLVM fuse a float multiply and add of a mod (and of the score's
  /// conversion to and from the natural units) into one fma, as the
  /// softmax's own arithmetic is: one rounding fewer, one instruction per
  /// score fewer.
  static void allowContraction(mlir::Operation *op);

  bool hasScoreMod() const { return mods.scoreMod != nullptr; }
  /// The score_mod's interval (scoreModInterval); nullopt without a
  /// score_mod.
  std::optional<ScoreInterval> scoreInterval() const {
    return mods.scoreMod ? scoreModInterval(*mods.scoreMod) : std::nullopt;
  }
  /// `natural` (natural units) in the family's units (f32).
  mlir::Value inFamilyUnits(float natural);
  bool hasMaskMod() const { return mods.maskMod != nullptr; }

  /// The score_mod of a score in the family's units; indices are i32 or
  /// i64 (narrowed: the mods' index is 32-bit) and clamped by the caller
  /// to the sequences (a captured tensor is read at them).
  /// With `factorOut`, a positive factor still pending on the result
  /// (soft-cap's cap, and the units' fromNatural) may come back apart, for
  /// the caller to fold into a multiply of its own: the score is then the
  /// value returned times *factorOut (f32, the same for every score).
  /// *factorOut stays null where the score comes back formed.
  mlir::Value score(mlir::Value s, mlir::Value batch, mlir::Value head,
                    ModIndex row, ModIndex column,
                    mlir::Value *factorOut = nullptr);
  /// d score_mod / d score (f32) at a score in the family's units, from
  /// the score_grad region (ModRegions::scoreGrad), for the backward pass:
  /// the units scale the score and its mod alike, so the factor is the
  /// natural one. Indices as score()'s.
  mlir::Value scoreGradient(mlir::Value s, mlir::Value batch,
                            mlir::Value head, ModIndex row, ModIndex column);
  /// The mask_mod: i1, true where the score is kept. With `appliesHere`
  /// (i1, ScoreRules::maskModOn), true too where it is false. With
  /// `reads`, the captured tensors are not read here: their values come
  /// from readMaskAhead at the score's row and column slots.
  mlir::Value keep(mlir::Value batch, mlir::Value head, ModIndex row,
                   ModIndex column, mlir::Value appliesHere = {},
                   const ModReads *reads = nullptr, int64_t rowSlot = -1,
                   int64_t columnSlot = -1);
  /// Issues every captured-tensor read of the mask_mod for the thread's
  /// rows (one ModIndex per row slot) and columns (per column slot): each
  /// read once per slot combination it depends on. The values of reads
  /// that depend on neither are kept at slots -1.
  /// With `staging`, a read that depends on the staged index alone goes
  /// through the warp's shared scratch (IndexStaging): `first` (i64) is
  /// then the tile's first index along it and `last` (i32) the sequence's
  /// last.
  ModReads readMaskAhead(mlir::Value batch, mlir::Value head,
                         llvm::ArrayRef<ModIndex> rows,
                         llvm::ArrayRef<ModIndex> columns,
                         const IndexStaging *staging = nullptr,
                         mlir::Value first = {}, mlir::Value last = {});
  /// `read()`'s reads where `appliesHere` (i1; a block mask's partial
  /// tile) holds, zeros in their place elsewhere: a full tile reads
  /// nothing. Null `appliesHere`: read().
  ModReads readWhere(mlir::Value appliesHere,
                     llvm::function_ref<ModReads()> read);

private:
  /// The values of `read` (one that depends on the staged index alone) at
  /// the thread's slots, through the warp's scratch (IndexStaging); `other`
  /// is the index the read does not depend on.
  llvm::SmallVector<mlir::Value>
  stageRead(mlir::Operation *read, mlir::Value batch, mlir::Value head,
            ModIndex other, const IndexStaging &staging, mlir::Value first,
            mlir::Value last);
  /// Clones `region`'s ops (ScoreModInline.cpp) with its leading block
  /// arguments bound to `fixed` (index arguments given as i32 or i64) and
  /// returns the clones of `want` (values of the region; none: the
  /// yielded one).
  /// `reads`: values of the region's captured-tensor reads issued ahead,
  /// at `rowSlot` and `columnSlot`.
  /// With `argScale`, the first argument is `fixed[0]` times `argScale`
  /// (f32, the same for every score: the unit conversion): multiplies of
  /// it by constants gather into that factor and the product is formed
  /// where an op needs it (soft-cap's score * scale / cap is one multiply,
  /// not two). With `resultScale`, the yielded value may come back as a
  /// product still to form: the value returned times *resultScale (null:
  /// formed).
  llvm::SmallVector<mlir::Value>
  inlineRegion(mlir::Region &region, llvm::ArrayRef<ModIndex> fixed,
               llvm::ArrayRef<mlir::Value> want = {},
               const ModReads *reads = nullptr, int64_t rowSlot = -1,
               int64_t columnSlot = -1, mlir::Value argScale = {},
               mlir::Value *resultScale = nullptr);
  /// Which of the query and key indices a captured-tensor read of the
  /// mask_mod depends on.
  struct ReadDependence {
    bool row = false, column = false;
  };
  ReadDependence dependenceOf(mlir::Operation *read) const;
  /// Whether `factor`, a product of a region's pending factors, is known
  /// to be positive: constants above 0 and the unit conversions (the
  /// launch checks scale > 0).
  bool knownPositive(mlir::Value factor) const;

  KernelIR &ir;
  ModRegions mods;
  const ForwardParams &p;
  mlir::Value toNatural, fromNatural;
};

} // namespace flashjit

#endif
