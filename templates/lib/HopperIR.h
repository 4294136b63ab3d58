//===- HopperIR.h - sm_90a pieces shared by the wgmma kernels ----*- C++ -*-===//
// Why: the forward's wgmma kernels (WgmmaBuilder.h) and the backward's
// (backward/WgmmaBackwardMain.cpp) are made of the same Hopper pieces: a
// 1024-aligned shared buffer addressed in 32 bits, mbarriers, named
// barriers, descriptors of 128-byte swizzled tiles and warpgroup products
// (wgmma) issued and waited for through inline PTX. They live here once;
// each kernel's builder derives from this class.
#ifndef FLASHJIT_TEMPLATES_HOPPERIR_H
#define FLASHJIT_TEMPLATES_HOPPERIR_H

#include "KernelIR.h"

#include "llvm/ADT/STLFunctionalExtras.h"

namespace flashjit::wgmma {

namespace LLVM = mlir::LLVM;
using Pred = mlir::arith::CmpIPredicate;
using mlir::ArrayRef;
using mlir::Location;
using mlir::OpBuilder;
using mlir::SmallVector;
using mlir::StringRef;
using mlir::Type;
using mlir::Value;
using mlir::ValueRange;
using llvm::function_ref;

/// Threads of one warpgroup.
constexpr int64_t kWarpgroupThreads = 128;
/// Bytes of one 128-byte swizzled shared row (64 two-byte elements).
constexpr int64_t kRowBytes = 128;

/// How a wgmma operand tile sits in shared memory: 128-byte swizzled rows,
/// in panels of 64 columns, each panel rows * 128 bytes.
enum class Major {
  /// The reduction dimension is contiguous (Q and K for S = Q K^T).
  K,
  /// The M or N dimension is contiguous (V for O += P V, rows are keys).
  MN,
};

class HopperIR : public KernelIR {
public:
  HopperIR(OpBuilder &b, Location loc, const AttentionSpec &spec);

  /// One warpgroup product D (m64 x n, f32) of `kSteps` k16 steps, issued
  /// as one wgmma group (fence, wgmmas, commit). A comes from registers
  /// (four packed i32 per k step, the accumulator layout of an earlier
  /// product) or from shared memory (a descriptor); B from shared memory.
  struct Product {
    int64_t n = 0, kSteps = 0;
    /// Operands in shared memory that are MN-major (Major::MN); transA
    /// only for A in shared memory.
    bool transA = false, transB = false;
    /// Byte offset of k step k from the operand's descriptor address (a
    /// multiple of 16).
    function_ref<int64_t(int64_t)> aStepBytes, bStepBytes;
    /// The first step overwrites D (no accumulators in); otherwise every
    /// step adds to `acc`.
    bool zeroFirst = true;
  };
  /// The results are valid only after waitGroups.
  SmallVector<Value> issueProduct(const Product &product, ValueRange acc,
                                  Value aDesc, ArrayRef<Value> aPacked,
                                  Value bDesc);
  /// Waits until at most `pending` wgmma groups are in flight; `values`
  /// (registers of the completed groups) come back usable.
  SmallVector<Value> waitGroups(int64_t pending, ValueRange values);
  /// The shared-memory matrix descriptor of a 128-byte swizzled operand at
  /// byte address `address` (i32, 1024-aligned pattern): for K-major the
  /// 8-row groups are 1024 bytes apart; for MN-major also, and the 64-wide
  /// panels `panelBytes` apart.
  Value descriptor(Value address, Major major, int64_t panelBytes);
  /// Orders this thread's earlier generic-proxy writes of shared memory
  /// (st.shared, cp.async) before later async-proxy reads (wgmma, TMA
  /// stores).
  void fenceProxyAsync();

  /// The dynamic shared buffer `smemName`, its base rounded up to 1024
  /// bytes (the caller's shared size counts the slack): sets smemAligned,
  /// alignedAddress and rootAlignedAddress.
  void alignSharedBase(StringRef smemName);
  /// Pointer to byte `offset` (i32) of the aligned shared buffer.
  Value shared(Value offset);
  Value shared(int64_t offset) { return shared(c32(offset)); }
  /// The 32-bit shared address of byte `offset` (i32) of the aligned
  /// buffer. Barriers and TMA destinations are addressed so: a 64-bit
  /// pointer costs two registers, which the persistent producer (24
  /// registers) does not have for each barrier and Q box of its loop.
  Value sharedAddress(Value offset);
  Value sharedPointer(Value address);
  /// Runs `body` with the shared base taken from an opaque copy made where
  /// `body` starts: LLVM then cannot hoist the addresses derived from it
  /// out of an enclosing loop, where each would hold a register (the
  /// persistent producer has few).
  void withFreshBase(function_ref<void()> body);
  /// A copy of `v` (i32 or i64) LLVM cannot see through, hoist or merge.
  Value opaque(Value v);

  /// mbarrier operations on the barrier at 32-bit shared address `bar`.
  void barrierInit(Value bar, int64_t count);
  /// Arrive and expect `bytes` from the copy engine on the barrier.
  void barrierExpect(Value bar, int64_t bytes);
  void barrierArrive(Value bar);
  /// Arrives `count` (i32, at least 1) times at once.
  void barrierArriveCount(Value bar, Value count);
  /// Waits until the phase of the given parity (i32 0 or 1) has completed.
  void barrierWait(Value bar, Value parity);
  /// TMA: the box of the 4-d `tensorMap` (a by-value kernel parameter) at
  /// `coords` (4 i32, innermost first) to this block's shared address
  /// `dst` (i32), completing its bytes on the mbarrier at `bar`.
  void tmaLoadBox(Value tensorMap, Value dst, Value bar, ValueRange coords);
  /// cp.async by `threads` threads of rows [row0, row0 + rows) of (batch,
  /// head) of a [.., head_dim] tensor (row strides in elements) into the
  /// 128-byte swizzled tile at shared byte offset `dst` (i32), in panels
  /// of 64 columns; rows at or past `end` are zero-filled (nothing is read
  /// for them). threads / (head_dim / 8) must be a multiple of 8.
  void copySwizzledRows(Value base, ValueRange strides, Value batch,
                        Value head, Value row0, Value end, int64_t rows,
                        Value dst, int64_t threads);
  /// bar.sync / bar.arrive on named barrier `id` (i32) for `threads`.
  void namedBarrierSync(Value id, int64_t threads);
  void namedBarrierArrive(Value id, int64_t threads);

  /// Inline PTX with side effects returning `outs` f32 registers (the
  /// first constraints, "=f") from `operands` under `inputs` constraints.
  SmallVector<Value> asmFloats(StringRef text, StringRef inputs,
                               ValueRange operands, int64_t outs);
  /// "f16" or "bf16" in PTX type suffixes.
  StringRef ptxType() const;

  /// The 1024-aligned shared base, as a pointer and as a 32-bit address.
  Value smemAligned, alignedAddress;
  /// alignedAddress as computed at entry (withFreshBase copies it).
  Value rootAlignedAddress;
  Type sharedPtr;
};

} // namespace flashjit::wgmma

#endif
