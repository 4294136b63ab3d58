//===- FlashJIT.h - flashjit's public C++ API ---------------------*- C++ -*-===//
// Why: what an embedding runtime includes. A Context owns the device, the
// kernel cache and the compiler; compile() returns a Kernel for an
// AttentionSpec (from memory, disk, or a fresh JIT compile); forward()
// checks its arguments and launches on the caller's stream.
//
//   auto ctx = flashjit::Context::create();
//   flashjit::AttentionSpec spec;  spec.headDim = 128; spec.causal = true;
//   auto kernel = (*ctx)->compile(spec);
//   llvm::Error err = (*kernel)->forward(args);   // args: q, k, v, o, lse
// Each error they return carries an ErrorCode (invalid argument,
// unsupported, no device, ...): flashjit::takeErrorParts(std::move(err)).
#ifndef FLASHJIT_FLASHJIT_H
#define FLASHJIT_FLASHJIT_H

#include "flashjit/Dialect/AttentionSpec.h"
#include "flashjit/Runtime/CacheOptions.h"
#include "flashjit/Runtime/DeviceInfo.h"
#include "flashjit/Runtime/ErrorCode.h"
#include "flashjit/Templates/KernelABI.h"
#include "flashjit/Templates/Target.h"

#include "llvm/Support/Error.h"
#include <array>
#include <cuda.h>
#include <memory>
#include <optional>

namespace flashjit {

class KernelCache;
class LoadedModule;

/// A device tensor [batch, heads, seqlen, head_dim] (O, Q, K, V) with
/// strides in elements; head_dim must be contiguous (stride 1). Row-major
/// BSHD and BHSD are both just strides.
struct TensorRef {
  void *data = nullptr;
  DType dtype = DType::BF16;
  std::array<int64_t, 4> shape{};
  std::array<int64_t, 4> strides{};

  /// Contiguous [B, H, S, D] (BHSD).
  static TensorRef bhsd(void *data, DType dtype, int64_t b, int64_t h,
                        int64_t s, int64_t d);
  /// [B, H, S, D] viewed over memory laid out [B, S, H, D] (BSHD).
  static TensorRef bshd(void *data, DType dtype, int64_t b, int64_t h,
                        int64_t s, int64_t d);
};

/// The f32 log-sum-exp output [batch, heads, seqlen].
struct LseRef {
  float *data = nullptr;
  std::array<int64_t, 3> shape{};
  std::array<int64_t, 3> strides{};
  static LseRef contiguous(float *data, int64_t b, int64_t h, int64_t s);
};

struct ForwardArgs {
  TensorRef q, k, v, o;
  LseRef lse;
  /// Softmax scale; none: 1/sqrt(head_dim).
  std::optional<double> scale;
  /// The caller's stream (null: the legacy default stream).
  CUstream stream = nullptr;
};

class Kernel {
public:
  const AttentionSpec &spec() const { return Spec; }
  const KernelInfo &info() const { return Info; }
  const std::string &ptx() const { return Ptx; }

  /// Checks every argument (pointers, alignment, shapes against the spec,
  /// strides, overlap of the outputs), then launches on args.stream. A
  /// failed check returns an error and launches nothing.
  llvm::Error forward(const ForwardArgs &args) const;
  /// The checks of forward() alone (no device needed).
  llvm::Error check(const ForwardArgs &args) const;

  Kernel(AttentionSpec spec, KernelInfo info, std::string ptx,
         std::unique_ptr<LoadedModule> module, std::string deviceError);
  ~Kernel();

private:
  AttentionSpec Spec;
  KernelInfo Info;
  std::string Ptx;
  /// Null when there is no GPU; DeviceError then says why.
  std::unique_ptr<LoadedModule> Module;
  std::string DeviceError;
};

struct ContextOptions {
  /// Device ordinal used to pick the target and to launch.
  int device = 0;
  /// Target chip; empty: the device's, or sm_90a when there is no device.
  std::string chip;
  /// Kernel cache location; default from $FLASHJIT_CACHE_DIR etc.
  CacheOptions cache = CacheOptions::fromEnvironment();
};

class Context {
public:
  /// Opens the device when a driver and GPU exist (else the context still
  /// compiles PTX, and forward() reports that no GPU is present).
  static llvm::Expected<std::unique_ptr<Context>>
  create(ContextOptions options = {});
  ~Context();

  /// The kernel for `spec`: from memory (a few hundred ns), from the disk
  /// cache, or compiled now. On a GPU the module is also loaded.
  llvm::Expected<std::shared_ptr<const Kernel>>
  compile(const AttentionSpec &spec);

  const Target &target() const { return TargetChip; }
  /// The device, when one was opened.
  const std::optional<DeviceInfo> &device() const { return Device; }
  /// Why there is no device (empty when there is one).
  const std::string &deviceError() const { return DeviceError; }
  KernelCache &cache() { return *Cache; }

private:
  Context() = default;
  ContextOptions Options;
  Target TargetChip;
  std::optional<DeviceInfo> Device;
  std::string DeviceError;
  /// The device's name when the known-GPU table has it (the heuristic
  /// reasons with that model), else empty: the chip's reference GPU.
  std::string HeuristicDevice;
  std::unique_ptr<KernelCache> Cache;
  struct KernelTable;
  std::unique_ptr<KernelTable> Kernels;
};

} // namespace flashjit

#endif
