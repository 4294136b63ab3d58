//===- FlashJIT.h - flashjit's public C++ API ---------------------*- C++
//-*-===//
// Why: what an embedding runtime includes. A Context owns the device, the
// kernel cache, the tuning database and the compiler; compile() returns a
// Kernel for an AttentionSpec (from memory, disk, or a fresh JIT compile)
// with the tile config the tuning database gives, else the heuristic's, or
// one the caller names; forward() checks its arguments and launches on the
// caller's stream.
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
#include "flashjit/Runtime/TunedConfigs.h"
#include "flashjit/Runtime/TuningOptions.h"
#include "flashjit/Templates/KernelABI.h"
#include "flashjit/Templates/Target.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"
#include <array>
#include <cstdint>
#include <cuda.h>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace flashjit {

class KernelCache;
class LoadedModule;
struct LengthClass;
struct ForwardLaunchParams;
class BackwardKernel;     // flashjit/Backward.h
struct BackwardOptions;   // flashjit/Backward.h
class DecodeKernel;       // flashjit/Decode.h
struct DecodeSpec;        // flashjit/Decode.h
struct CompileOptions;    // flashjit/Compiler/Compiler.h
struct CompiledKernel;    // flashjit/Compiler/Compiler.h
struct LoadedEntry;       // runtime/lib/LoadOrBuild.h

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
  /// A packed varlen tensor [tokens, heads, head_dim] (contiguous) as the
  /// batch-1 view [1, heads, tokens, head_dim] (VarlenForwardArgs).
  static TensorRef packed(void *data, DType dtype, int64_t tokens,
                          int64_t heads, int64_t d);
};

/// The f32 log-sum-exp output [batch, heads, seqlen].
struct LseRef {
  float *data = nullptr;
  std::array<int64_t, 3> shape{};
  std::array<int64_t, 3> strides{};
  static LseRef contiguous(float *data, int64_t b, int64_t h, int64_t s);
  /// A varlen LSE [heads, tokens] (contiguous) as the view [1, heads,
  /// tokens].
  static LseRef packed(float *data, int64_t heads, int64_t tokens);
};

/// A captured tensor of the spec's mods (AttentionSpec::captures): device
/// memory of `dtype`, `rank` dimensions with strides in elements. One
/// declared with a static shape of fewer than 2^31 elements must span
/// fewer than 2^31 elements (the kernels index it with 32-bit offsets).
struct CapturedRef {
  const void *data = nullptr;
  CaptureDType dtype = CaptureDType::F32;
  int rank = 1;
  std::array<int64_t, 4> shape{};
  std::array<int64_t, 4> strides{};
  /// Row-major and contiguous.
  static CapturedRef contiguous(const void *data, CaptureDType dtype,
                                llvm::ArrayRef<int64_t> shape);
};

/// Captured tensors one launch takes at most.
constexpr unsigned kMaxCaptures = kMaxCapturedTensors;

/// The block mask of a block-sparse spec (AttentionSpec::sparseBlockM,
/// sparseBlockN) in FlexAttention's BlockMask layout: i32 device tensors
/// over Mq = ceil(seqlen_q / sparseBlockM) query blocks and Nk =
/// ceil(seqlen_k / sparseBlockN) key blocks; their batch and head
/// dimensions may be 1 (one mask for every sequence or head). Query block
/// qb of (b, h) visits the key blocks kvIndices[b, h, qb, 0 ..
/// kvNumBlocks[b, h, qb]) with the mask_mod, then fullKvIndices[b, h, qb,
/// 0 .. fullKvNumBlocks[b, h, qb]) without it. Shapes are checked here;
/// the contents stay on the GPU and are not: a count is clamped to
/// [0, Nk], an index outside [0, Nk) names no keys (it is skipped), and a
/// block listed twice is attended twice.
struct BlockMaskRef {
  CapturedRef kvNumBlocks;     ///< [B or 1, H or 1, Mq]
  CapturedRef kvIndices;       ///< [B or 1, H or 1, Mq, Nk or more]
  CapturedRef fullKvNumBlocks; ///< as kvNumBlocks; data null: no full lists
  CapturedRef fullKvIndices;   ///< as kvIndices; null with fullKvNumBlocks

  /// The four tensors in the order above (the kernel's parameter order).
  std::array<CapturedRef *, 4> lists() {
    return {&kvNumBlocks, &kvIndices, &fullKvNumBlocks, &fullKvIndices};
  }
  std::array<const CapturedRef *, 4> lists() const {
    return {&kvNumBlocks, &kvIndices, &fullKvNumBlocks, &fullKvIndices};
  }
};

struct ForwardArgs {
  TensorRef q, k, v, o;
  LseRef lse;
  /// One per AttentionSpec::captures, in order (shapes checked against
  /// the spec's; the mods' indices into them are the caller's contract).
  std::vector<CapturedRef> captures;
  /// A block-sparse spec's block mask; unused (null) otherwise.
  BlockMaskRef blockMask;
  /// Softmax scale; none: 1/sqrt(head_dim). Finite, positive, and in
  /// [kMinScale, kMaxScale] = [8.15e-39, 2.35e38] (ForwardChecks.h:
  /// scale * log2(e) must be a normal f32).
  std::optional<double> scale;
  /// The caller's stream (null: the legacy default stream), of the
  /// primary context of the Context's device. May be capturing a CUDA
  /// graph; a graph executable holding a launch of a persistent kernel
  /// (Kernel::persistent) must not run concurrently with another executable
  /// instantiated from the same captured graph (they would share its tile
  /// counters): capture once per executable that runs concurrently.
  CUstream stream = nullptr;
};

/// A variable-length batch for a varlen kernel (AttentionSpec::varlen,
/// docs/inference.md): the sequences' tokens packed one after another.
/// `packed` holds batch-1 views of the packed tensors (TensorRef::packed,
/// LseRef::packed): q and o [1, heads, total_q, head_dim], k and v [1,
/// kv_heads, total_k, head_dim], lse [1, heads, total_q]; every rule of
/// forward() applies to them. Sequence b's query rows are
/// [cuSeqlensQ[b], cuSeqlensQ[b + 1]) and its keys [cuSeqlensK[b],
/// cuSeqlensK[b + 1]); causal attention is aligned per sequence as the
/// spec says (bottom-right for chunked prefill). The offsets stay on the
/// GPU and are not checked there: the kernel clamps each sequence's rows
/// to [0, total), so offsets that decrease or run past the buffers give
/// shorter or empty sequences and nothing is written outside o and lse.
struct VarlenForwardArgs {
  ForwardArgs packed;
  /// Device i32 [batch + 1] each, 4-byte aligned. A paged kernel takes
  /// no cuSeqlensK (null): its keys are given below.
  const int32_t *cuSeqlensQ = nullptr, *cuSeqlensK = nullptr;
  /// Paged K/V (AttentionSpec::pageSize; null/0 otherwise): packed.k and
  /// packed.v are the pools, TensorRef::packed(pool, dtype, pages *
  /// pageSize, kvHeads, headDim) of [pages, pageSize, kv_heads, head_dim]
  /// caches. kvLens: device i32 [batch], each sequence's keys (the new
  /// query tokens' included); blockTable: device i32 [batch, maxPages],
  /// its page ids in key order.
  const int32_t *kvLens = nullptr, *blockTable = nullptr;
  int64_t maxPages = 0;
  /// Sequences (0: nothing is launched); at most 65535 (CUDA's grid z).
  int64_t batch = 0;
  /// The longest query length of the batch (as FlashAttention's
  /// max_seqlen_q): it sizes the grid; query rows of a sequence past it
  /// are not computed. At least 1.
  int64_t maxSeqlenQ = 0;
};

/// Where a kernel's tile config came from.
enum class ConfigSource {
  Explicit,  ///< named by the caller (KernelOptions::config)
  Tuned,     ///< the tuning database's entry for the spec's bucket
  Heuristic, ///< the autotuner's heuristic
};
/// "explicit", "tuned", "heuristic".
const char *configSourceName(ConfigSource source);

struct ConfigOrigin {
  ConfigSource source = ConfigSource::Heuristic;
  /// Tuned: the database and the bucket. Heuristic: why no tuned config
  /// applied ("no tuning database", "no bucket for ..."). Explicit: empty.
  std::string detail;
};

/// How to build one kernel; the defaults suit most callers.
struct KernelOptions {
  /// Build this tile config (cached under its own key) instead of the
  /// tuning database's or the heuristic's.
  std::optional<TileConfig> config;
  /// Without `config`: the heuristic's config among this family's
  /// candidates (e.g. "mma_sync", to run that template where another is the
  /// default), instead of the tuning database's or the overall heuristic's.
  std::optional<std::string> family;
  /// The sequence length the kernel will mostly run at: it picks the tuning
  /// database's bucket or the heuristic's length class of the config built
  /// now. None: the heuristic's hint, 2048.
  std::optional<int64_t> seqlen;
  /// Whether forward() serves each call with the config of the call's
  /// length class (Kernel::servedLengths): the tuning database's entry for
  /// the call's length, else the heuristic's choice for that length. The
  /// other classes' kernels are compiled or loaded on their first call and
  /// cached like any kernel. False pins the config built now for every
  /// length; naming a `config` or a `family` pins it too.
  bool perLengthConfig = true;
};

class Kernel : public std::enable_shared_from_this<Kernel> {
public:
  const AttentionSpec &spec() const { return Spec; }
  const KernelInfo &info() const { return Info; }
  const std::string &ptx() const { return Ptx; }
  /// Where info().config came from.
  const ConfigOrigin &configOrigin() const { return Origin; }
  /// The tensor maps each launch passes (a family that loads tiles with
  /// TMA, see KernelABI.h), or none.
  const std::optional<TensorMapBoxes> &tensorMapBoxes() const {
    return MapBoxes;
  }
  /// Whether the kernel is persistent: launched with one block per SM (the
  /// device's resident blocks), each looping over tiles (forwardGeometry).
  bool persistent() const { return Persistent; }
  /// The call lengths (the longer of the query and key lengths) this
  /// kernel's config serves, [first, second). A call outside them goes to
  /// the kernel of its length class (KernelOptions::perLengthConfig). A
  /// pinned kernel serves every length: {1, INT64_MAX}.
  std::pair<int64_t, int64_t> servedLengths() const {
    return {ServedFrom, ServedTo};
  }
  /// The kernel forward() launches for a call of these lengths (and
  /// forwardVarlen() for a batch whose max_seqlen_q is both): this one, or
  /// (compiled or loaded now if needed) the one of their length class.
  /// A kernel that outlives its Context serves every length itself.
  llvm::Expected<std::shared_ptr<const Kernel>>
  kernelForLengths(int64_t seqlenQ, int64_t seqlenK) const;

  /// Checks every argument (pointers, alignment, shapes against the spec,
  /// strides, overlap of the outputs, the scale, grid limits, what a tensor
  /// map can describe: docs/rules.md lists the rules), then launches on
  /// args.stream in the primary context of the Context's device. A failed
  /// check returns an error and launches nothing.
  llvm::Error forward(const ForwardArgs &args) const;
  /// A varlen kernel's launch (AttentionSpec::varlen): checks `args` as
  /// forward() does, plus the offsets' pointers, batch and maxSeqlenQ,
  /// then launches on args.packed.stream the config of maxSeqlenQ's length
  /// class, as forward() does with its call's lengths (the handle's own
  /// unless it was compiled with an explicit config or perLengthConfig
  /// off). forward() refuses a varlen kernel and this refuses a dense one.
  llvm::Error forwardVarlen(const VarlenForwardArgs &args) const;
  /// The checks of forwardVarlen() alone (no device needed).
  llvm::Error checkVarlen(const VarlenForwardArgs &args) const;
  /// checkVarlen's part for paged K/V (AttentionSpec::pageSize), and that
  /// a kernel of packed K/V gets no paged arguments.
  llvm::Error checkPagedArgs(const VarlenForwardArgs &args) const;
  /// The call goes to kernelForLengths(Sq, Sk); the checks and the launch
  /// below are that kernel's.
  /// The checks of forward() alone (no device needed).
  llvm::Error check(const ForwardArgs &args) const;
  /// forward() up to the launch: checks `args` and fills `params`
  /// (Runtime/Launch.h), tensor maps encoded, for a launch of this kernel's
  /// own config (whatever the lengths).
  llvm::Error prepareLaunch(const ForwardArgs &args,
                            ForwardLaunchParams &params) const;

  Kernel(AttentionSpec spec, KernelInfo info, std::string ptx,
         std::unique_ptr<LoadedModule> module, std::string deviceError,
         ConfigOrigin origin = {});
  ~Kernel();

private:
  friend class Context;
  /// The per-length kernels of one spec, shared by them
  /// (KernelLengthChoice.h).
  struct LengthChoice;
  /// forward() on this kernel's own config; with `varlen`, the packed
  /// batch of forwardVarlen() (args is its `packed`).
  llvm::Error launchOwn(const ForwardArgs &args,
                        const VarlenForwardArgs *varlen = nullptr) const;
  /// launchOwn() on the kernel of the lengths' class (kernelForLengths):
  /// this one unless the lengths lie outside the lengths it serves.
  llvm::Error launchForLengths(int64_t seqlenQ, int64_t seqlenK,
                               const ForwardArgs &args,
                               const VarlenForwardArgs *varlen = nullptr) const;
  /// The error of forward() and check() on a varlen kernel.
  llvm::Error varlenNeedsOffsets() const;

  AttentionSpec Spec;
  /// Null when the config is pinned.
  std::shared_ptr<LengthChoice> Lengths;
  int64_t ServedFrom = 1, ServedTo = INT64_MAX;
  KernelInfo Info;
  std::string Ptx;
  ConfigOrigin Origin;
  /// Looked up once from the template, so forward() does no string work.
  std::optional<TensorMapBoxes> MapBoxes;
  /// Whether the template's kernels are persistent (forwardGeometry).
  bool Persistent = false;
  /// A persistent kernel's tile counters (KernelABI.h; null for other
  /// kernels): one pair per stream (launches on one stream run in turn,
  /// each leaving its pair at zero for the next; launches on different
  /// streams may overlap), and one per launch captured into a CUDA graph.
  struct TileCounters;
  std::unique_ptr<TileCounters> Counters;
  /// A block-sparse persistent kernel's tile order (TileOrderKernel.h; null
  /// for other kernels): the order kernel and its buffers. launchOwn runs
  /// it ahead of the forward; prepareLaunch leaves the natural order.
  struct TileOrder;
  std::unique_ptr<TileOrder> Order;
  llvm::Error launchTileOrder(const ForwardArgs &args,
                              ForwardLaunchParams &params) const;
  /// Null when there is no GPU; DeviceError then says why.
  std::unique_ptr<LoadedModule> Module;
  std::string DeviceError;
};

/// What BlockMaskBuilder::build takes.
struct BlockMaskBuildArgs {
  /// One per AttentionSpec::captures, as ForwardArgs::captures: the
  /// mask_mod reads them.
  std::vector<CapturedRef> captures;
  /// The lists to write, in ForwardArgs::blockMask's layout for a problem
  /// of seqlenQ x seqlenK. Their batch and head sizes (the same in all four)
  /// say which masks are built: the problem's, or 1 for one mask that
  /// every sequence or head shares (the mask_mod then sees b = 0 or h = 0).
  /// Without full lists every kept block is listed as partial.
  BlockMaskRef blockMask;
  int64_t seqlenQ = 0, seqlenK = 0;
  /// The caller's stream (null: the legacy default stream).
  CUstream stream = nullptr;
};

/// The block-mask kernel of a block-sparse spec (Context::blockMaskBuilder):
/// it evaluates the spec's mask (its mask_mod, causal mask and window) on
/// every (query, key) pair on the GPU and lists, per query block, the key
/// blocks where every pair is kept (full) and where some are (partial), in
/// ascending order, as FlexAttention's create_block_mask does. A pair
/// outside the sequences counts as dropped, so the last blocks of a
/// sequence whose length is not a multiple of the block are partial.
/// Entries past each list's count are not written. The work is one
/// mask evaluation per pair of a visited block: run it once per mask and
/// reuse the lists for every forward() that shares it.
class BlockMaskBuilder {
public:
  const AttentionSpec &spec() const { return Spec; }
  const KernelInfo &info() const { return Info; }
  const std::string &ptx() const { return Ptx; }

  /// Checks every argument (checkBlockMaskOutput, the captures), then
  /// launches on args.stream. A failed check launches nothing.
  llvm::Error build(const BlockMaskBuildArgs &args) const;
  /// The checks of build() alone (no device needed).
  llvm::Error check(const BlockMaskBuildArgs &args) const;

  /// Query blocks (Mq) and key blocks (Nk) of the spec's sparse block for
  /// a problem: the lists are [B, H, Mq] and [B, H, Mq, Nk].
  static std::array<int64_t, 2> blockCounts(const AttentionSpec &spec,
                                            int64_t seqlenQ, int64_t seqlenK);

  BlockMaskBuilder(AttentionSpec spec, KernelInfo info, std::string ptx,
                   std::unique_ptr<LoadedModule> module,
                   std::string deviceError);
  ~BlockMaskBuilder();

private:
  AttentionSpec Spec;
  KernelInfo Info;
  std::string Ptx;
  /// Null when there is no GPU; DeviceError then says why.
  std::unique_ptr<LoadedModule> Module;
  std::string DeviceError;
};

struct ContextOptions {
  /// Device ordinal used to pick the target and to launch. Kernels are
  /// loaded, and launched, in this device's primary context whatever
  /// context the calling thread has current (which is current again when
  /// the call returns); the streams given to forward() must belong to that
  /// primary context (as streams the CUDA runtime creates on the device do).
  int device = 0;
  /// Target chip; empty: the device's, or sm_90a when there is no device.
  std::string chip;
  /// Kernel cache location; default from $FLASHJIT_CACHE_DIR etc.
  CacheOptions cache = CacheOptions::fromEnvironment();
  /// The tuning database; default from $FLASHJIT_TUNING_DB, else the one
  /// under the kernel cache (see TuningOptions.h).
  TuningOptions tuning = TuningOptions::fromEnvironment();
  /// Receives the context's warnings (a tuning database that is ignored, a
  /// tuned config that cannot be built) as one line each. Unset: stderr, as
  /// "flashjit: warning: <text>".
  std::function<void(llvm::StringRef)> onWarning;
};

/// A tile config and where it came from, before anything is compiled.
struct ResolvedConfig {
  TileConfig config;
  ConfigOrigin origin;
};

/// A Context keeps every kernel it hands out (its PTX, cubin and loaded
/// module, and its length classes' kernels), every block-mask builder,
/// backward and decode kernel, until it is destroyed, so that asking
/// again costs a lookup. A process that compiles kernels for many
/// distinct specs bounds that memory by replacing a context it no longer
/// needs: kernels already handed out stay valid, and a new context loads
/// the old one's kernels from the disk cache in milliseconds.
class Context {
public:
  /// Opens the device when a driver and GPU exist (else the context still
  /// compiles PTX, and forward() reports that no GPU is present).
  static llvm::Expected<std::unique_ptr<Context>>
  create(ContextOptions options = {});
  ~Context();

  /// The kernel for `spec`: from memory (a few hundred ns), from the disk
  /// cache, or compiled now. On a GPU the module is also loaded. Its config
  /// is options.config, else the tuning database's for the spec's bucket,
  /// else the heuristic's. A tuned config that cannot be built falls back to
  /// the heuristic's with a warning.
  llvm::Expected<std::shared_ptr<const Kernel>>
  compile(const AttentionSpec &spec, const KernelOptions &options);
  llvm::Expected<std::shared_ptr<const Kernel>>
  compile(const AttentionSpec &spec) {
    return compile(spec, KernelOptions());
  }
  /// The kernel of `spec` with exactly `config`.
  llvm::Expected<std::shared_ptr<const Kernel>>
  compile(const AttentionSpec &spec, const TileConfig &config);

  /// The block-mask kernel of a block-sparse `spec`, from memory, the disk
  /// cache or compiled now (and loaded on the GPU), like compile().
  llvm::Expected<std::shared_ptr<const BlockMaskBuilder>>
  blockMaskBuilder(const AttentionSpec &spec);

  /// The backward kernels of `spec` (flashjit/Backward.h), from memory,
  /// the disk cache (keyed by their own config family, apart from the
  /// forward's) or compiled now, and loaded on the GPU, like compile().
  llvm::Expected<std::shared_ptr<const BackwardKernel>>
  compileBackward(const AttentionSpec &spec, const BackwardOptions &options);
  /// The config compileBackward() would build and where it comes from (the
  /// options' config; the tuning database's backward bucket of
  /// options.seqlen; else the default), before the deterministic variant
  /// is applied, without compiling. Errors: a bad spec, seqlen or config,
  /// or a spec the backward does not support.
  llvm::Expected<ResolvedConfig>
  resolveBackwardConfig(const AttentionSpec &spec,
                        const BackwardOptions &options) const;

  /// The decode (Flash-Decoding) kernels of `spec`, from memory, the disk
  /// cache or compiled now, like compile(); flashjit/Decode.h declares
  /// DecodeSpec and DecodeKernel.
  llvm::Expected<std::shared_ptr<const DecodeKernel>>
  decodeKernel(const DecodeSpec &spec);

  /// The config compile() would build and where it comes from, without
  /// compiling. Errors: a bad spec or seqlen, or no config fits.
  llvm::Expected<ResolvedConfig>
  resolveConfig(const AttentionSpec &spec,
                const KernelOptions &options = {}) const;
  /// The heuristic's config for `spec` on this context's GPU, for sequences
  /// of `seqlen` (0: the default hint, 2048).
  llvm::Expected<TileConfig> heuristicConfig(const AttentionSpec &spec,
                                             int64_t seqlen = 0) const;

  const Target &target() const { return TargetChip; }
  /// The device, when one was opened.
  const std::optional<DeviceInfo> &device() const { return Device; }
  /// Why there is no device (empty when there is one).
  const std::string &deviceError() const { return DeviceError; }
  KernelCache &cache() { return *Cache; }
  /// The tuning database in use (empty when there is none).
  const TunedConfigs &tuning() const { return Tuned; }
  /// The known GPU the heuristic reasons with; empty: the reference GPU of
  /// the target (see heuristicDeviceModel in ConfigChoice.h).
  const std::string &heuristicDevice() const { return HeuristicDevice; }

private:
  Context() = default;
  void warn(llvm::StringRef message) const;
  /// The kernel of each length class of `spec`, built on first use.
  llvm::Expected<std::shared_ptr<const Kernel>>
  compilePerLength(const AttentionSpec &spec, int64_t seqlen);
  /// resolveConfig, then build; a tuned config that fails to build falls
  /// back to the heuristic's with a warning.
  llvm::Expected<std::shared_ptr<const Kernel>>
  resolveAndBuild(const AttentionSpec &spec, const KernelOptions &options,
                  std::shared_ptr<Kernel::LengthChoice> choice,
                  const LengthClass &range);
  /// Looks the config up in the cache or builds it, and loads it on the
  /// GPU; `choice` (null: pinned) gets the kernel of `range`.
  llvm::Expected<std::shared_ptr<const Kernel>>
  build(const AttentionSpec &spec, const ResolvedConfig &resolved,
        std::shared_ptr<Kernel::LengthChoice> choice, const LengthClass &range);
  /// The cache entry of `key` and `config` (LoadOrBuild.h), or on a miss
  /// the one `compile` builds from options that carry this context's
  /// target; loaded on the device when there is one.
  llvm::Expected<LoadedEntry> loadOrCompile(
      const std::string &key, const TileConfig &config,
      llvm::function_ref<llvm::Expected<CompiledKernel>(CompileOptions)>
          compile);
  /// decodeKernel's kernel of `fitted` (`spec` with the stages and tile
  /// this GPU holds; `key` its canonical text), from the cache or built,
  /// with the tuning database's variants of `spec`.
  llvm::Expected<std::shared_ptr<const DecodeKernel>>
  makeDecodeKernel(const DecodeSpec &spec, const DecodeSpec &fitted,
                   const std::string &key);

  ContextOptions Options;
  Target TargetChip;
  std::optional<DeviceInfo> Device;
  std::string DeviceError;
  /// The device's name when the known-GPU table has it (the heuristic
  /// reasons with that model), else empty: the chip's reference GPU.
  std::string HeuristicDevice;
  TunedConfigs Tuned;
  /// Tuned entries already warned about (one warning each).
  struct WarnedEntries;
  std::unique_ptr<WarnedEntries> Warned;
  std::unique_ptr<KernelCache> Cache;
  struct KernelTable;
  std::unique_ptr<KernelTable> Kernels;
};

} // namespace flashjit

#endif
