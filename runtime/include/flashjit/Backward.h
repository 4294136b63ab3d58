//===- Backward.h - the backward pass of flashjit's C++ API -------*- C++ -*-===//
// Why: training needs dQ, dK and dV. A BackwardKernel holds the three
// generated backward kernels of one AttentionSpec (MmaSyncBackward.h:
// preprocess, main, convert) and launches them on the caller's stream.
//
//   #include "flashjit/Backward.h"
//   auto fwd = ctx->compile(spec);                  // forward: O and LSE
//   auto bwd = ctx->compileBackward(spec, {});      // BackwardKernel
//   size_t bytes = (*bwd)->workspaceBytes(batch, seqlenQ);
//   ... allocate `bytes` of device memory (once; reuse it) ...
//   flashjit::BackwardArgs a;  // q, k, v, o, lse, dO -> dq, dk, dv
//   a.workspace = ws; a.workspaceBytes = bytes;
//   llvm::Error err = (*bwd)->backward(a);
//
// The workspace is the caller's: workspaceBytes() says how large it must
// be for a problem, so it can be allocated in advance (from a caching
// allocator, before graph capture) and reused by every call on one stream.
// Two calls that may run at once need two workspaces.
#ifndef FLASHJIT_BACKWARD_H
#define FLASHJIT_BACKWARD_H

#include "flashjit/FlashJIT.h"

namespace flashjit {

struct TensorMapLayout;

/// What BackwardKernel::backward takes. Shapes as in ForwardArgs: q, o,
/// dO, dq [batch, heads, seqlen_q, head_dim]; k, v, dk, dv [batch,
/// kv_heads, seqlen_k, head_dim]; lse f32 [batch, heads, seqlen_q], the
/// forward's log-sum-exp (natural log, as Kernel::forward writes it).
/// Any strides forward() accepts.
struct BackwardArgs {
  TensorRef q, k, v, o, dO;
  LseRef lse;
  TensorRef dq, dk, dv;
  /// Device memory of at least BackwardKernel::workspaceBytes(batch,
  /// seqlen_q) bytes, 256-byte aligned (cuMemAlloc's alignment); the call
  /// overwrites it.
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
  /// Softmax scale of the forward; none: 1/sqrt(head_dim).
  std::optional<double> scale;
  /// One per AttentionSpec::captures, as the forward took them (its
  /// score_mod and mask_mod read them again here).
  std::vector<CapturedRef> captures;
  /// A block-sparse spec's block mask, transposed: the backward walks the
  /// query blocks of each key block. In BlockMaskRef's four fields, i32
  /// device tensors over Nk = ceil(seqlen_k / sparseBlockN) key blocks and
  /// Mq = ceil(seqlen_q / sparseBlockM) query blocks, FlexAttention's
  /// BlockMask q_num_blocks [B or 1, H or 1, Nk], q_indices [B or 1, H or
  /// 1, Nk, Mq or more] (partial blocks: the mask_mod applies), then
  /// full_q_num_blocks and full_q_indices (optional). Key block kb of (b,
  /// h) visits query blocks qIndices[b, h, kb, 0 .. qNumBlocks[b, h, kb]),
  /// then the full ones: the transpose of the forward's lists (a block
  /// listed k times there is listed k times here). Counts are clamped to
  /// [0, Mq] and indices outside [0, Mq) name no rows, as in the forward.
  BlockMaskRef blockMask;
  /// The caller's stream (null: the legacy default stream).
  CUstream stream = nullptr;
};

/// The backward of a varlen spec (AttentionSpec::varlen) on packed
/// sequences, as VarlenForwardArgs gives the forward: `packed` holds the
/// batch-1 views of the packed tokens, q, o, dO, dq [1, heads, total_q,
/// head_dim] and k, v, dk, dv [1, kv_heads, total_k, head_dim]
/// (TensorRef::packed), lse the forward's [heads, total_q] (LseRef::packed),
/// and a workspace of workspaceBytes(1, total_q). Sequence b's query rows
/// are [cuSeqlensQ[b], cuSeqlensQ[b + 1]) and its keys [cuSeqlensK[b],
/// cuSeqlensK[b + 1]). dq rows outside every sequence get 0; dk and dv rows
/// outside every sequence are not written.
struct VarlenBackwardArgs {
  BackwardArgs packed;
  /// Device i32 [batch + 1] each, 4-byte aligned, the forward's offsets.
  const int32_t *cuSeqlensQ = nullptr, *cuSeqlensK = nullptr;
  /// Sequences (0: nothing is launched); at most 65535 (CUDA's grid z).
  int64_t batch = 0;
  /// The longest key length of the batch (as FlashAttention's
  /// max_seqlen_k): it sizes the grid; keys of a sequence past it get no
  /// gradient (their dk and dv rows are not written). At least 1.
  int64_t maxSeqlenK = 0;
};

/// How to build the backward kernels.
struct BackwardOptions {
  /// A "wgmma_bwd" (sm_90a, WgmmaBackward.h) or "mma_sync_bwd"
  /// (MmaSyncBackward.h) tile config; none: the default for the spec and
  /// the context's chip (wgmma_bwd on sm_90a at head dims 64 and 128,
  /// mma_sync_bwd elsewhere). A config of family "wgmma_bwd_det" or
  /// "mma_sync_bwd_det" asks for the deterministic kernels as
  /// `deterministic` does.
  std::optional<TileConfig> config;
  /// dQ, dK and dV bitwise reproducible run to run (same inputs, same
  /// GPU model and config): the blocks that add into one query block of
  /// the f32 dQ accumulator take turns in a fixed order instead of racing
  /// (dK and dV never leave the chip before they are final). It costs
  /// time (docs/backward.md has the measured ratio) and a little more
  /// workspace (workspaceBytes() counts it). Cached apart from the
  /// default kernels: it changes the config's family to its template's
  /// deterministic one (wgmma_bwd_det, mma_sync_bwd_det).
  bool deterministic = false;
  /// Without `config`: the sequence length the kernels are chosen for
  /// (none: 2048). The tuning database's backward bucket of that length
  /// (`flashjit autotune --backward`) gives the config where it has one,
  /// else the default for the spec and chip does.
  std::optional<int64_t> seqlen;
};

class BackwardKernel {
public:
  const AttentionSpec &spec() const { return Spec; }
  /// The main kernel's info (name, config, threads, shared memory).
  const KernelInfo &info() const { return Info; }
  /// PTX of the three kernels.
  const std::string &ptx() const { return Ptx; }
  /// Whether dQ, dK and dV are bitwise reproducible
  /// (BackwardOptions::deterministic).
  bool deterministic() const;

  /// Bytes of workspace one call on `batch` sequences of `seqlenQ` query
  /// rows needs: 4 * batch * heads * seqlen_q * (head_dim + 1), rounded up
  /// to 256-byte parts (BackwardWorkspaceLayout); deterministic, 4 bytes
  /// more per block_m query rows of each (batch, head). A varlen spec's
  /// call takes workspaceBytes(1, total query rows), which counts block_m
  /// rows more per head.
  size_t workspaceBytes(int64_t batch, int64_t seqlenQ) const;

  /// Checks every argument (the forward's checks for q, k, v, o and lse;
  /// dO, dq, dk and dv against them; outputs that overlap each other or an
  /// input; the workspace), then runs preprocess, main and convert on
  /// args.stream. A failed check launches nothing.
  llvm::Error backward(const BackwardArgs &args) const;
  /// The checks of backward() alone (no device needed).
  llvm::Error check(const BackwardArgs &args) const;
  /// A varlen spec's backward (VarlenBackwardArgs): the checks of
  /// backward() on the packed views, then those of the offsets and the
  /// batch; the kernels run on args.packed.stream. backward() refuses a
  /// varlen kernel and this refuses the others.
  llvm::Error backwardVarlen(const VarlenBackwardArgs &args) const;
  /// The checks of backwardVarlen() alone (no device needed).
  llvm::Error checkVarlen(const VarlenBackwardArgs &args) const;

  BackwardKernel(AttentionSpec spec, KernelInfo info, std::string ptx,
                 std::unique_ptr<LoadedModule> module,
                 std::string deviceError);
  ~BackwardKernel();

private:
  AttentionSpec Spec;
  KernelInfo Info;
  std::string Ptx;
  /// Null when there is no GPU; DeviceError then says why.
  std::unique_ptr<LoadedModule> Module;
  std::string DeviceError;
  /// The preprocess and convert kernels of Module (the main one is
  /// Module->function()).
  CUfunction Preprocess = nullptr, Convert = nullptr;
  /// backward() and backwardVarlen() after their checks: the three
  /// launches, over the packed sequences of `varlen` when given.
  /// mapLayouts: the two TMA maps of a wgmma kernel (null otherwise).
  llvm::Error launchAll(const BackwardArgs &args,
                        const TensorMapLayout *mapLayouts,
                        const VarlenBackwardArgs *varlen) const;
};

} // namespace flashjit

#endif
