//===- WgmmaForward.cpp - IR builder of the wgmma template ----------------===//
// Why: emits the Hopper FlashAttention forward kernel (FlashAttention-3's
// structure) as a gpu.func of upstream dialects plus inline PTX for wgmma.
//
// Three grids (WgmmaForward.h): one block per tile of block_m query rows
// of one (batch, head) (family wgmma), or persistent (wgmma_persistent):
// one block per SM looping over tiles from the launch's counter
// (WgmmaPersistent.cpp), so one tile's epilogue overlaps the next tile's
// loads and no block waits to be launched; or persistent in clusters of two
// (wgmma_cluster, no mask): the blocks of a cluster take adjacent query
// blocks of one head in a fixed order, each loads half of every K/V tile's
// rows into both (TMA multicast), and a slot is free once the consumers of
// both blocks have released it (each warp arrives on the slot's barrier in
// both blocks).
//
// Roles: warpgroup 0 is the producer (WgmmaProducer.cpp). It gives
// registers back (setmaxnreg) and one of its threads issues every load.
// Per tile: the first K tile, then each consumer's 64 rows of Q
// (persistent: once that consumer has stored the last tile's O from them,
// with the tile's coordinates in a small shared record), then the K and V
// tiles, each once the consumers have released its slot of the ring, each
// completing on its own mbarrier. Warpgroups 1..C are the consumers
// (WgmmaConsumer.cpp), 64 query rows each, with the registers the producer
// gave up; each warp's wgmma accumulators have mma.sync's layout, so the
// mask and online softmax are FragmentSoftmax's. The ring position runs on
// across a persistent block's tiles.
//
// The consumers' software pipeline, the bound tile's half-width step and
// the slots' release are WgmmaConsumer.cpp's.
//
// Varlen (AttentionSpec::varlen; per-tile and persistent grids): the
// tensor maps span the packed tensors (batch 1); a block reads its
// sequence's rows from the sequence's first row (ForwardParams::qRowBase,
// kRowBase). The persistent producer takes numbers of the packed
// sequences' query blocks (KernelIR::varlenBlock: a search over the
// offsets, gaps between sequences passed over) and writes the sequence
// into the consumers' tile record; each role narrows a copy of the
// parameters to it per tile. Rows read past
// the sequence's end are the next sequence's: K/V columns past its length
// are masked like the zeros past a dense sequence, Q rows past it are
// computed and dropped, and O goes out through bounded stores
// (FragmentSoftmax::store), since a TMA store would write the next
// sequence's rows.
//
// Epilogue (WgmmaEpilogue.cpp): each consumer writes O / l into its own
// rows of the Q tile (its last product has read them) in the 128-byte
// swizzled layout of a TMA box, and one of its threads stores them with TMA
// (one box per 64-column panel; rows past seqlenQ are dropped by the
// store); persistent, it waits until the store has read them and hands the
// rows back to the producer.
// A persistent kernel with room for it (WgmmaForward::stagesOutputApart)
// stages O in a buffer of its own instead: each consumer hands its Q rows
// back as soon as its last S has landed, and waits for its last store only
// before it next writes the buffer. With room for a second Q tile as well
// (SharedLayout::qBuffers), tiles alternate between two Q slots per
// consumer, each with its own barriers and record, and the producer loads
// a tile's Q before its first K, while the consumers still work on the
// tile before.
// Three persistent consumers without a mask skip a tile whose rows all lie
// past seqlenQ (Builder::skipsIdleRows): the producer arrives on each K/V
// slot's empty barrier for them as it loads the slot.
//
// Shared layout (WgmmaForward::sharedLayout), from a 1024-byte aligned base
// (the 128-byte swizzle pattern repeats every 1024 bytes): the Q tile (or two),
// `stages` K tiles, `stages` V tiles, the O buffer when staged apart (laid
// out as the Q tile), the mbarriers, then the consumers' tile records
// (WgmmaBuilder.h). A tile of R rows is stored as head_dim / 64 panels of R
// rows x 128 bytes, each written by TMA boxes with 128-byte swizzle. Rows
// past the sequence end arrive as zeros (TMA's out-of-bounds fill) and the
// mask sets their scores to -inf.
#include "WgmmaBuilder.h"

#include "FragmentSoftmax.h"
#include "ScoreMods.h"
#include "flashjit/Templates/TileOrderKernel.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>
#include <optional>

using namespace mlir;

namespace flashjit::wgmma {

Builder::Builder(OpBuilder &b, Location loc, const AttentionSpec &spec,
                 const TileConfig &config, bool persistent, bool multicast)
    : HopperIR(b, loc, spec), cfg(config), persistent(persistent),
      multicast(multicast),
      layout(WgmmaForward::sharedLayout(spec, config, persistent)),
      outputApart(layout.outputApart),
      skipsIdleRows(persistent && !multicast && outputApart && !spec.varlen &&
                    config.blockM / WgmmaForward::kRowsPerWarpgroup == 3 &&
                    !spec.hasStructuralMask()),
      d(spec.headDim),
      consumers(config.blockM / WgmmaForward::kRowsPerWarpgroup),
      threads(config.warps * 32), stages(config.stages),
      qBuffers(layout.qBuffers), qSlots(consumers * layout.qBuffers),
      qBytes(config.blockM * spec.headDim * dtypeBytes(spec.dtype)),
      kvTileBytes(config.blockN * spec.headDim * dtypeBytes(spec.dtype)) {}

void Builder::build(StringRef name, const ModRegions &modRegions) {
  mods = modRegions;
  std::string smemName = (name + "_smem").str();
  LLVM::GlobalOp::create(b, loc, LLVM::LLVMArrayType::get(b.getI8Type(), 0),
                         /*isConstant=*/false, LLVM::Linkage::External,
                         smemName, Attribute(), /*alignment=*/1024,
                         /*addrSpace=*/3);
  OpBuilder::InsertionGuard funcGuard(b);
  takesTileOrder = usesTileOrder(spec, cfg);
  ForwardParams p = beginForwardKernel(name, threads, /*withTensorMaps=*/true);
  // One block per SM (two with one consumer): ptxas then caps registers at
  // entry, which setmaxnreg needs to take effect.
  b.getInsertionBlock()->getParentOp()->setAttr(
      "nvvm.minctasm",
      b.getI32IntegerAttr(WgmmaForward::blocksPerSM(consumers)));
  if (multicast)
    b.getInsertionBlock()->getParentOp()->setAttr(
        NVVM::NVVMDialect::getClusterDimAttrName(),
        b.getDenseI32ArrayAttr(
            {static_cast<int32_t>(WgmmaForward::kClusterSize), 1, 1}));

  // Varlen: the block's sequence, or nothing past its last query block
  // (every thread of the block alike, before any barrier). A persistent
  // block finds each tile's sequence instead (varlenBlock).
  scf::IfOp varlenGuard;
  if (spec.varlen && !persistent)
    varlenGuard = beginVarlenSequence(p, blockCoordinates(), cfg.blockM);

  // The dynamic shared base, rounded up to 1024 bytes (resources() counts
  // the slack).
  alignSharedBase(smemName);

  Value tid = toI32(gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x));

  // Barriers: set up by one thread, visible to the copy engine and to every
  // thread (with multicast: of the cluster) before any use. A K/V slot is
  // free once the consumers of every block that receives it released it.
  const int64_t blocksSharingKV = multicast ? WgmmaForward::kClusterSize : 1;
  {
    OpBuilder::InsertionGuard g(b);
    auto first = scf::IfOp::create(b, loc, cmp(Pred::eq, tid, c32(0)),
                                   /*withElse=*/false);
    b.setInsertionPoint(first.thenBlock()->getTerminator());
    // Q-empty: every thread of the consumer arrives (storeOutput), so each
    // thread's own reads of the tile record and writes of its Q rows are
    // released to the producer by its own arrive, not through a named
    // barrier and another thread's arrive (racecheck does not compose those).
    for (int64_t q = 0; q < qSlots; ++q) {
      barrierInit(qFull(c32(q)), 1);
      barrierInit(qEmpty(c32(q)), kWarpgroupThreads);
    }
    for (int64_t s = 0; s < stages; ++s)
      for (int64_t kind = 0; kind < 4; ++kind)
        barrierInit(slotBarrier(2 * qSlots + kind * stages, c32(s)),
                    kind < 2 ? 1
                             : consumers * WgmmaForward::kWarpsPerWarpgroup *
                                   blocksSharingKV);
    NVVM::FenceMbarrierInitOp::create(b, loc);
  }
  if (multicast)
    clusterSync();
  else
    gpu::BarrierOp::create(b, loc);

  // The warpgroup index, broadcast from lane 0: ptxas then knows it is
  // warp-uniform, so the role branches stay uniform and the wgmma
  // descriptors computed inside them live in uniform registers. Derived
  // from the thread index directly, every branch on it is divergent to
  // ptxas, descriptors go through R2UR into the same uniform registers, and
  // ptxas waits for each wgmma before the next may start.
  Value warpgroup =
      gpu::ShuffleOp::create(b, loc, divU(tid, kWarpgroupThreads), 0, 32,
                             gpu::ShuffleMode::IDX)
          .getShuffleResult();
  auto roles = scf::IfOp::create(b, loc, cmp(Pred::eq, warpgroup, c32(0)),
                                 /*withElse=*/true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(roles.thenBlock()->getTerminator());
    emitProducer(p, tid);
  }
  b.setInsertionPoint(roles.elseBlock()->getTerminator());
  emitConsumer(p, tid, warpgroup);
  b.setInsertionPointAfter(roles);
  // A block of a cluster stays until the others are done: they may still
  // arrive on its barriers.
  if (multicast)
    clusterSync();
  if (varlenGuard)
    b.setInsertionPointAfter(varlenGuard);
  gpu::ReturnOp::create(b, loc);
}

Value Builder::slotBarrier(int64_t first, Value slot) {
  return sharedAddress(
      add(c32(layout.barriers + 8 * first), mul(slot, c32(8))));
}

KvTileRange Builder::kvTiles(const ForwardParams &p,
                             const BlockCoordinates &at) {
  return kvTileRange(p, at.batch, at.head, mul(at.queryBlock, c64(cfg.blockM)),
                     cfg.blockM, cfg.blockN);
}

} // namespace flashjit::wgmma

namespace flashjit {

void WgmmaForward::emit(OpBuilder &builder, Location loc,
                        const AttentionSpec &spec, const TileConfig &config,
                        StringRef name, const ModRegions &mods) const {
  wgmma::Builder(builder, loc, spec, config, persistent(),
                 Kind == Grid::Cluster)
      .build(name, mods);
  if (usesTileOrder(spec, config))
    buildTileOrderKernel(builder, loc, spec, config.blockM,
                         tileOrderKernelName(name));
}

} // namespace flashjit
