//===- GpuProblem.h - one attention problem on the GPU, checked -----*- C++ -*-===//
// Why: the stream, graph, context and NaN tests launch the same problem
// many times, in many ways; they share its inputs (random, rounded to the
// dtype, BHSD), its float64 reference (computed once, on every core), and
// the check of an output against it, row by row.
#ifndef FLASHJIT_TESTS_GPU_GPUPROBLEM_H
#define FLASHJIT_TESTS_GPU_GPUPROBLEM_H

#include "GpuTestUtil.h"

#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/DevTools/HostFloat.h"
#include "flashjit/DevTools/Reference.h"
#include "flashjit/Runtime/ScopedContext.h"

#include <cmath>
#include <dlfcn.h>
#include <thread>

namespace flashjit::test {

inline const CudaDriver &gpuDriver() {
  return llvm::cantFail(CudaDriver::get());
}

/// Driver entry points the tests use and the library does not (graphs,
/// contexts of their own, asynchronous memsets), resolved by their
/// versioned names in the libcuda the library loaded.
struct DriverExtras {
  decltype(&::cuCtxCreate) ctxCreate = nullptr;
  decltype(&::cuCtxDestroy) ctxDestroy = nullptr;
  decltype(&::cuStreamBeginCapture) beginCapture = nullptr;
  decltype(&::cuStreamEndCapture) endCapture = nullptr;
  decltype(&::cuGraphInstantiate) instantiate = nullptr;
  decltype(&::cuGraphLaunch) graphLaunch = nullptr;
  decltype(&::cuGraphExecDestroy) graphExecDestroy = nullptr;
  decltype(&::cuGraphDestroy) graphDestroy = nullptr;
  decltype(&::cuMemsetD8Async) memsetAsync = nullptr;
  decltype(&::cuStreamCreate) streamCreate = nullptr;
};

inline const DriverExtras &driverExtras() {
  static DriverExtras x = [] {
    DriverExtras x;
    (void)gpuDriver();
    void *h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    REQUIRE(h);
#define EXTRA(field, fn)                                                       \
  x.field = reinterpret_cast<decltype(x.field)>(                               \
      ::dlsym(h, FLASHJIT_CUDA_SYMBOL(fn)));                                   \
  REQUIRE_MESSAGE(bool(x.field), FLASHJIT_CUDA_SYMBOL(fn))
    EXTRA(ctxCreate, cuCtxCreate);
    EXTRA(ctxDestroy, cuCtxDestroy);
    EXTRA(beginCapture, cuStreamBeginCapture);
    EXTRA(endCapture, cuStreamEndCapture);
    EXTRA(instantiate, cuGraphInstantiate);
    EXTRA(graphLaunch, cuGraphLaunch);
    EXTRA(graphExecDestroy, cuGraphExecDestroy);
    EXTRA(graphDestroy, cuGraphDestroy);
    EXTRA(memsetAsync, cuMemsetD8Async);
    EXTRA(streamCreate, cuStreamCreate);
#undef EXTRA
    return x;
  }();
  return x;
}

#define CU_OK(call)                                                            \
  do {                                                                         \
    CUresult result_ = (call);                                                 \
    REQUIRE_MESSAGE(result_ == CUDA_SUCCESS,                                   \
                    #call << " failed: " << int(result_));                     \
  } while (0)

/// Device memory in the primary context of device 0 (the tests' context),
/// freed at the end.
class DeviceMemory {
public:
  explicit DeviceMemory(size_t bytes) {
    auto scope = llvm::cantFail(ScopedContext::enterDevice(gpuDriver(), 0));
    REQUIRE_FALSE(bool(FLASHJIT_CU(gpuDriver(), cuMemAlloc, &Ptr, bytes)));
    Bytes = bytes;
  }
  ~DeviceMemory() { (void)gpuDriver().cuMemFree(Ptr); }
  DeviceMemory(const DeviceMemory &) = delete;
  DeviceMemory &operator=(const DeviceMemory &) = delete;
  CUdeviceptr ptr() const { return Ptr; }
  void *data() const { return reinterpret_cast<void *>(Ptr); }
  size_t bytes() const { return Bytes; }

private:
  CUdeviceptr Ptr = 0;
  size_t Bytes = 0;
};

/// The outputs of one launch: O and LSE, poisoned (all-ones bits: NaN)
/// before each use.
struct GpuOutputs {
  DeviceMemory o, lse;
  GpuOutputs(size_t elems, size_t rows) : o(elems * 2), lse(rows * 4) {}
  /// Poisons both on `stream` (ordered before the next launch there).
  void poison(CUstream stream) {
    CU_OK(driverExtras().memsetAsync(o.ptr(), 0xFF, o.bytes(), stream));
    CU_OK(driverExtras().memsetAsync(lse.ptr(), 0xFF, lse.bytes(), stream));
  }
};

/// What check() found: the largest relative error of O over the rows it
/// compared (norm-wise, per row), of the LSE, and non-finite values where
/// the reference is finite.
struct ProblemCheck {
  double relError = 0, lseRelError = 0;
  int64_t nonFinite = 0, rows = 0;
  std::string summary() const {
    return "rel " + std::to_string(relError) + ", lse rel " +
           std::to_string(lseRelError) + ", non-finite " +
           std::to_string(nonFinite) + ", rows " + std::to_string(rows);
  }
  bool passed(DType dtype) const {
    return nonFinite == 0 && relError <= checkTolerance(dtype) &&
           lseRelError <= 1e-5;
  }
};

/// A problem of `spec` ([batch, heads, seqlen, head_dim], BHSD) with fresh
/// random inputs on the GPU and its reference for every row.
class GpuProblem {
public:
  GpuProblem(const AttentionSpec &spec, int64_t batch, int64_t seqlen,
             uint64_t seed)
      : Spec(spec), B(batch), S(seqlen),
        Q(elems(spec.numHeads) * 2), K(elems(spec.numKVHeads) * 2),
        V(elems(spec.numKVHeads) * 2) {
    Host.spec = spec;
    Host.batch = batch;
    Host.seqlenQ = Host.seqlenK = seqlen;
    Host.scale = spec.defaultScale();
    std::mt19937_64 rng(seed);
    upload(Q, Host.q, spec.numHeads, rng);
    upload(K, Host.k, spec.numKVHeads, rng);
    upload(V, Host.v, spec.numKVHeads, rng);
  }

  /// Sets q, k or v (`which`) [b, head, row, col] to NaN on the GPU and in
  /// the reference's copy (call before reference()).
  void poisonInput(char which, int64_t b, int64_t head, int64_t row,
                   int64_t col) {
    const int64_t heads = which == 'q' ? Spec.numHeads : Spec.numKVHeads;
    const size_t at = ((b * heads + head) * S + row) * Spec.headDim + col;
    std::vector<float> &host = which == 'q' ? Host.q : which == 'k' ? Host.k : Host.v;
    const DeviceMemory &dev = which == 'q' ? Q : which == 'k' ? K : V;
    host[at] = NAN;
    uint16_t nanBits = 0x7FC0; // a quiet NaN in bf16
    if (Spec.dtype == DType::F16)
      nanBits = 0x7E00;
    REQUIRE_FALSE(bool(FLASHJIT_CU(gpuDriver(), cuMemcpyHtoD,
                                   dev.ptr() + at * 2, &nanBits, 2)));
  }

  /// The reference of every row, on every core (once).
  const std::vector<ReferenceRow> &reference() {
    if (!Ref.empty())
      return Ref;
    const int64_t rows = B * Spec.numHeads * S;
    Ref.resize(rows);
    unsigned workers = std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::thread> threads;
    for (unsigned w = 0; w < workers; ++w)
      threads.emplace_back([&, w] {
        for (int64_t r = w; r < rows; r += workers)
          Ref[r] = referenceRow(Host, r / (Spec.numHeads * S),
                                (r / S) % Spec.numHeads, r % S);
      });
    for (std::thread &t : threads)
      t.join();
    return Ref;
  }

  ForwardArgs args(const GpuOutputs &out, CUstream stream = nullptr) const {
    ForwardArgs a;
    const int64_t h = Spec.numHeads, hk = Spec.numKVHeads, d = Spec.headDim;
    a.q = TensorRef::bhsd(Q.data(), Spec.dtype, B, h, S, d);
    a.k = TensorRef::bhsd(K.data(), Spec.dtype, B, hk, S, d);
    a.v = TensorRef::bhsd(V.data(), Spec.dtype, B, hk, S, d);
    a.o = TensorRef::bhsd(out.o.data(), Spec.dtype, B, h, S, d);
    a.lse = LseRef::contiguous(static_cast<float *>(out.lse.data()), B, h, S);
    a.stream = stream;
    return a;
  }

  std::unique_ptr<GpuOutputs> outputs() const {
    return std::make_unique<GpuOutputs>(elems(Spec.numHeads),
                                        B * Spec.numHeads * S);
  }

  /// O and LSE copied back (synchronously: call after the launches).
  void download(const GpuOutputs &out, std::vector<uint16_t> &o,
                std::vector<float> &lse) const {
    o.resize(elems(Spec.numHeads));
    lse.resize(B * Spec.numHeads * S);
    REQUIRE_FALSE(bool(FLASHJIT_CU(gpuDriver(), cuMemcpyDtoH, o.data(),
                                   out.o.ptr(), o.size() * 2)));
    REQUIRE_FALSE(bool(FLASHJIT_CU(gpuDriver(), cuMemcpyDtoH, lse.data(),
                                   out.lse.ptr(), lse.size() * 4)));
  }

  /// Every row of `out` against the reference.
  ProblemCheck check(const GpuOutputs &out) {
    const auto &ref = reference();
    std::vector<uint16_t> o;
    std::vector<float> lse;
    download(out, o, lse);
    ProblemCheck c;
    const int64_t d = Spec.headDim;
    for (size_t r = 0; r < ref.size(); ++r) {
      double errSq = 0, refSq = 0;
      for (int64_t col = 0; col < d; ++col) {
        double got = bitsToFloat(Spec.dtype, o[r * d + col]);
        double want = ref[r].out[col];
        if (!std::isfinite(got)) {
          ++c.nonFinite;
          continue;
        }
        errSq += (got - want) * (got - want);
        refSq += want * want;
      }
      c.relError = std::max(c.relError, std::sqrt(errSq / std::max(refSq, 1e-300)));
      if (!std::isfinite(lse[r]))
        ++c.nonFinite;
      else
        c.lseRelError = std::max(
            c.lseRelError,
            std::fabs(lse[r] - ref[r].lse) / std::max(std::fabs(ref[r].lse), 1.0));
      ++c.rows;
    }
    return c;
  }

  const AttentionSpec &spec() const { return Spec; }
  int64_t batch() const { return B; }
  int64_t seqlen() const { return S; }

private:
  size_t elems(int64_t heads) const {
    return static_cast<size_t>(B * heads * S * Spec.headDim);
  }
  void upload(const DeviceMemory &dst, std::vector<float> &host, int64_t heads,
              std::mt19937_64 &rng) {
    std::vector<uint16_t> bits = makeRandomInput(host, Spec.dtype, Layout::BHSD,
                                                 B, heads, S, Spec.headDim, rng);
    REQUIRE_FALSE(bool(FLASHJIT_CU(gpuDriver(), cuMemcpyHtoD, dst.ptr(),
                                   bits.data(), bits.size() * 2)));
  }

  AttentionSpec Spec;
  int64_t B, S;
  HostProblem Host;
  DeviceMemory Q, K, V;
  std::vector<ReferenceRow> Ref;
};

/// The kernel of `spec` in `family`, or null (with a message) when the
/// family does not offer the spec on this GPU.
/// Whether this GPU runs wgmma_persistent kernels (sm_90a); says it skips
/// when not.
inline bool hasPersistentFamily() {
  if (gpuContext().target().chip != "sm_90a") {
    MESSAGE("wgmma_persistent needs sm_90a: skipped");
    return false;
  }
  return true;
}

inline std::shared_ptr<const Kernel> compileFamily(const AttentionSpec &spec,
                                                   const std::string &family) {
  KernelOptions options;
  options.family = family;
  auto kernel = gpuContext().compile(spec, options);
  if (kernel)
    return *kernel;
  std::string message = llvm::toString(kernel.takeError());
  if (message.find("no tile config") != std::string::npos ||
      message.find("no template offers") != std::string::npos ||
      message.find("does not support") != std::string::npos) {
    MESSAGE(family << " does not offer " << spec.canonical() << ": "
                   << message);
    return nullptr;
  }
  FAIL(family << ": " << message);
  return nullptr;
}

} // namespace flashjit::test

#endif
