//===- FakeCudaDriver.cpp - a libcuda.so.1 with several fake GPUs ---------===//
// Why: multi-GPU behaviour (which context a module, an allocation or a
// launch lands in) must be tested where there is one GPU or none. This
// library exports the driver entry points flashjit resolves, under their
// versioned names, and models what matters for that: devices, primary and
// created contexts, each thread's context stack, modules that belong to the
// context they were loaded in, launches that the driver refuses unless the
// function's context is current, and streams with ids and capture status.
// Memory is host memory. The fakecuda_* functions let a test read what
// happened. The test binary finds it first through LD_LIBRARY_PATH.
#include <cuda.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

struct CUctx_st {
  int device;
  bool primary;
};
struct CUfunc_st {
  struct CUmod_st *module;
};
/// One kernel per module: the function handle lives (and dies) with it.
struct CUmod_st {
  CUcontext ctx;
  CUfunc_st function{this};
};
struct CUstream_st {
  CUcontext ctx;
  unsigned long long id;
  bool capturing;
};
struct CUevent_st {
  int unused;
};

namespace {

int deviceCount() {
  const char *n = std::getenv("FAKECUDA_DEVICES");
  return n ? std::atoi(n) : 2;
}

std::mutex mutex;
std::vector<CUctx_st *> primaries;
std::map<CUdeviceptr, std::pair<size_t, int>> allocations; // size, device
std::map<std::string, long> calls;
std::atomic<unsigned long long> nextStreamId{100};
std::atomic<unsigned long long> nextThreadStreamId{1000000};
thread_local std::vector<CUcontext> stack;
thread_local unsigned long long perThreadStreamId = 0;

struct Launch {
  int device = -1;
  CUcontext ctx = nullptr;
  CUfunction function = nullptr;
  CUstream stream = nullptr;
  void *tileCounter = nullptr;
};
std::vector<Launch> launches;

void count(const char *name) {
  std::lock_guard<std::mutex> guard(mutex);
  ++calls[name];
}

CUcontext current() { return stack.empty() ? nullptr : stack.back(); }

CUctx_st *primaryOf(int device) {
  std::lock_guard<std::mutex> guard(mutex);
  if (primaries.empty())
    for (int d = 0; d < deviceCount(); ++d)
      primaries.push_back(new CUctx_st{d, true});
  return primaries[device];
}

std::atomic<int> blocksPerSM{1};

bool validStream(CUstream s) {
  return s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

} // namespace

extern "C" {

// ---- what tests read ------------------------------------------------------
int fakecuda_launch_count() {
  std::lock_guard<std::mutex> guard(mutex);
  return static_cast<int>(launches.size());
}
int fakecuda_launch_device(int i) {
  std::lock_guard<std::mutex> guard(mutex);
  return launches.at(i).device;
}
CUcontext fakecuda_launch_context(int i) {
  std::lock_guard<std::mutex> guard(mutex);
  return launches.at(i).ctx;
}
CUfunction fakecuda_launch_function(int i) {
  std::lock_guard<std::mutex> guard(mutex);
  return launches.at(i).function;
}
long fakecuda_calls(const char *name) {
  std::lock_guard<std::mutex> guard(mutex);
  auto it = calls.find(name);
  return it == calls.end() ? 0 : it->second;
}
/// The device of the allocation holding `p`, or -1.
int fakecuda_pointer_device(CUdeviceptr p) {
  std::lock_guard<std::mutex> guard(mutex);
  auto it = allocations.upper_bound(p);
  if (it == allocations.begin())
    return -1;
  --it;
  return p < it->first + it->second.first ? it->second.second : -1;
}
int fakecuda_context_device(CUcontext ctx) { return ctx ? ctx->device : -1; }
int fakecuda_context_is_primary(CUcontext ctx) { return ctx && ctx->primary; }
void fakecuda_set_capturing(CUstream s, int capturing) {
  s->capturing = capturing != 0;
}
/// What cuOccupancyMaxActiveBlocksPerMultiprocessor answers (default 1).
void fakecuda_set_blocks_per_sm(int blocks) { blocksPerSM = blocks; }

// ---- the driver -----------------------------------------------------------
CUresult cuInit(unsigned int) { return CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int *v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
CUresult cuGetErrorName(CUresult e, const char **s) {
  switch (e) {
  case CUDA_ERROR_INVALID_CONTEXT:
    *s = "CUDA_ERROR_INVALID_CONTEXT";
    break;
  case CUDA_ERROR_INVALID_HANDLE:
    *s = "CUDA_ERROR_INVALID_HANDLE";
    break;
  case CUDA_ERROR_INVALID_DEVICE:
    *s = "CUDA_ERROR_INVALID_DEVICE";
    break;
  default:
    *s = "CUDA_ERROR_INVALID_VALUE";
  }
  return CUDA_SUCCESS;
}
CUresult cuGetErrorString(CUresult, const char **s) {
  *s = "fake driver error";
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetCount(int *n) {
  *n = deviceCount();
  return CUDA_SUCCESS;
}
CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  if (ordinal < 0 || ordinal >= deviceCount())
    return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetName(char *name, int len, CUdevice) {
  std::strncpy(name, "NVIDIA H100 80GB HBM3", len);
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice) {
  switch (a) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
    *v = 9;
    break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
    *v = 0;
    break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
    *v = 132;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
    *v = 233472;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
    *v = 232448;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
    *v = 49152;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
    *v = 65536;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
    *v = 2048;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    *v = 1024;
    break;
  case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
    *v = 50 << 20;
    break;
  default:
    *v = 0;
  }
  return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem(size_t *bytes, CUdevice) {
  *bytes = size_t(80) << 30;
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice d) {
  if (d < 0 || d >= deviceCount())
    return CUDA_ERROR_INVALID_DEVICE;
  *ctx = primaryOf(d);
  return CUDA_SUCCESS;
}
CUresult cuCtxCreate(CUcontext *ctx, CUctxCreateParams *, unsigned int,
                     CUdevice d) {
  if (d < 0 || d >= deviceCount())
    return CUDA_ERROR_INVALID_DEVICE;
  *ctx = new CUctx_st{d, false};
  stack.push_back(*ctx);
  return CUDA_SUCCESS;
}
CUresult cuCtxDestroy(CUcontext ctx) {
  for (auto it = stack.begin(); it != stack.end();)
    it = *it == ctx ? stack.erase(it) : it + 1;
  delete ctx;
  return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext ctx) {
  count("cuCtxSetCurrent");
  if (!ctx) {
    if (!stack.empty())
      stack.pop_back();
  } else if (stack.empty()) {
    stack.push_back(ctx);
  } else {
    stack.back() = ctx;
  }
  return CUDA_SUCCESS;
}
CUresult cuCtxGetCurrent(CUcontext *ctx) {
  count("cuCtxGetCurrent");
  *ctx = current();
  return CUDA_SUCCESS;
}
CUresult cuCtxPushCurrent(CUcontext ctx) {
  count("cuCtxPushCurrent");
  stack.push_back(ctx);
  return CUDA_SUCCESS;
}
CUresult cuCtxPopCurrent(CUcontext *ctx) {
  count("cuCtxPopCurrent");
  if (stack.empty())
    return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx)
    *ctx = stack.back();
  stack.pop_back();
  return CUDA_SUCCESS;
}
CUresult cuCtxGetDevice(CUdevice *d) {
  if (!current())
    return CUDA_ERROR_INVALID_CONTEXT;
  *d = current()->device;
  return CUDA_SUCCESS;
}
CUresult cuCtxSynchronize() {
  return current() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}
CUresult cuModuleLoadData(CUmodule *m, const void *) {
  if (!current())
    return CUDA_ERROR_INVALID_CONTEXT;
  *m = new CUmod_st{current()};
  return CUDA_SUCCESS;
}
CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int,
                            CUjit_option *, void **) {
  return cuModuleLoadData(m, image);
}
CUresult cuModuleUnload(CUmodule m) {
  if (current() != m->ctx)
    return CUDA_ERROR_INVALID_CONTEXT;
  delete m;
  return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *) {
  if (current() != m->ctx)
    return CUDA_ERROR_INVALID_HANDLE;
  *f = &m->function;
  return CUDA_SUCCESS;
}
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute, int) {
  return current() == f->module->ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction) {
  *v = a == CU_FUNC_ATTRIBUTE_NUM_REGS ? 128 : 1024;
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned int, unsigned int, unsigned int,
                        unsigned int, unsigned int, unsigned int, unsigned int,
                        CUstream stream, void **params, void **) {
  count("cuLaunchKernel");
  // The real driver refuses a function of another context, and a stream
  // of another context.
  if (!current() || current() != f->module->ctx)
    return CUDA_ERROR_INVALID_HANDLE;
  if (!validStream(stream) && stream->ctx != current())
    return CUDA_ERROR_INVALID_HANDLE;
  Launch l;
  l.device = current()->device;
  l.ctx = current();
  l.function = f;
  l.stream = stream;
  (void)params;
  std::lock_guard<std::mutex> guard(mutex);
  launches.push_back(l);
  return CUDA_SUCCESS;
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction, int,
                                                     size_t) {
  *n = blocksPerSM;
  return CUDA_SUCCESS;
}
CUresult cuOccupancyMaxActiveClusters(int *n, CUfunction,
                                      const CUlaunchConfig *) {
  *n = 66;
  return CUDA_SUCCESS;
}
CUresult cuMemAlloc(CUdeviceptr *p, size_t bytes) {
  count("cuMemAlloc");
  if (!current())
    return CUDA_ERROR_INVALID_CONTEXT;
  void *host = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  *p = reinterpret_cast<CUdeviceptr>(host);
  std::lock_guard<std::mutex> guard(mutex);
  allocations[*p] = {bytes, current()->device};
  return CUDA_SUCCESS;
}
CUresult cuMemFree(CUdeviceptr p) {
  std::lock_guard<std::mutex> guard(mutex);
  allocations.erase(p);
  std::free(reinterpret_cast<void *>(p));
  return CUDA_SUCCESS;
}
CUresult cuMemcpyHtoD(CUdeviceptr d, const void *h, size_t n) {
  std::memcpy(reinterpret_cast<void *>(d), h, n);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoH(void *h, CUdeviceptr d, size_t n) {
  std::memcpy(h, reinterpret_cast<void *>(d), n);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) {
  std::memset(reinterpret_cast<void *>(d), v, n);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD32(CUdeviceptr d, unsigned int v, size_t n) {
  auto *p = reinterpret_cast<unsigned int *>(d);
  for (size_t i = 0; i < n; ++i)
    p[i] = v;
  return CUDA_SUCCESS;
}
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream) {
  count("cuMemsetD32Async");
  return cuMemsetD32(d, v, n);
}
CUresult cuStreamCreate(CUstream *s, unsigned int) {
  if (!current())
    return CUDA_ERROR_INVALID_CONTEXT;
  *s = new CUstream_st{current(), nextStreamId++, false};
  return CUDA_SUCCESS;
}
CUresult cuStreamDestroy(CUstream s) {
  delete s;
  return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }
CUresult cuStreamGetId(CUstream s, unsigned long long *id) {
  count("cuStreamGetId");
  if (s == nullptr || s == CU_STREAM_LEGACY)
    *id = 1;
  else if (s == CU_STREAM_PER_THREAD)
    *id = perThreadStreamId ? perThreadStreamId
                            : (perThreadStreamId = nextThreadStreamId++);
  else
    *id = s->id;
  return CUDA_SUCCESS;
}
CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status) {
  count("cuStreamIsCapturing");
  *status = !validStream(s) && s->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                                            : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
  count("cuThreadExchangeStreamCaptureMode");
  static thread_local CUstreamCaptureMode threadMode =
      CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::swap(threadMode, *mode);
  return CUDA_SUCCESS;
}
CUresult cuEventCreate(CUevent *e, unsigned int) {
  *e = new CUevent_st{0};
  return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent, CUstream) { return CUDA_SUCCESS; }
CUresult cuEventSynchronize(CUevent) { return CUDA_SUCCESS; }
CUresult cuEventElapsedTime(float *ms, CUevent, CUevent) {
  *ms = 1.0f;
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy(CUevent e) {
  delete e;
  return CUDA_SUCCESS;
}
CUresult cuPointerGetAttribute(void *, CUpointer_attribute, CUdeviceptr) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType,
                                cuuint32_t, void *, const cuuint64_t *,
                                const cuuint64_t *, const cuuint32_t *,
                                const cuuint32_t *, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion,
                                CUtensorMapFloatOOBfill) {
  std::memset(map, 0, sizeof(*map));
  return CUDA_SUCCESS;
}

} // extern "C"
