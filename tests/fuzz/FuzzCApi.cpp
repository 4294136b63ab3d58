//===- FuzzCApi.cpp - fuzz the C API's argument checks --------------------===//
// Why: flashjit.h takes structs, strings and DLTensors from other
// languages. Any value in them (sizes, strides, dtypes, devices, pointers
// never dereferenced on the host, strings) must give a status and a
// message, never a crash, undefined behaviour or a leak. No GPU is needed:
// a context without one checks every argument, then reports NO_DEVICE.
// The input is read as a stream of fields (FieldReader); running out of
// input reads zeros.
#include "flashjit/flashjit.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

class FieldReader {
public:
  FieldReader(const uint8_t *data, size_t size) : Data(data), Size(size) {}
  template <typename T> T take() {
    T value{};
    size_t n = std::min(sizeof(T), Size - At);
    std::memcpy(&value, Data + At, n);
    At += n;
    return value;
  }
  /// A string of up to `max` bytes (its length first), or null.
  const char *string(std::string &storage, size_t max) {
    uint8_t len = take<uint8_t>();
    if (len == 0xFF)
      return nullptr;
    size_t n = std::min<size_t>({len, max, Size - At});
    storage.assign(reinterpret_cast<const char *>(Data + At), n);
    At += n;
    return storage.c_str();
  }
  bool empty() const { return At >= Size; }

private:
  const uint8_t *Data;
  size_t Size, At = 0;
};

/// A DLTensor with fuzzed fields; its shape and strides arrays hold as many
/// entries as its ndim says (the caller's side of the contract).
struct FuzzTensor {
  DLTensor t{};
  std::vector<int64_t> shape, strides;
  void read(FieldReader &in) {
    t.data = reinterpret_cast<void *>(in.take<uint64_t>());
    t.device.device_type = static_cast<DLDeviceType>(in.take<uint8_t>() % 16);
    t.device.device_id = in.take<int8_t>();
    t.ndim = in.take<int8_t>() % 8;
    t.dtype.code = in.take<uint8_t>() % 8;
    t.dtype.bits = in.take<uint8_t>();
    t.dtype.lanes = in.take<uint16_t>() % 3;
    t.byte_offset = in.take<uint32_t>() % 4 == 0 ? 0 : in.take<uint64_t>();
    const size_t n = t.ndim > 0 ? t.ndim : 0;
    shape.resize(n);
    for (int64_t &s : shape)
      s = in.take<uint8_t>() < 200 ? in.take<uint16_t>() : in.take<int64_t>();
    t.shape = in.take<uint8_t>() == 0xFF ? nullptr : shape.data();
    if (in.take<uint8_t>() % 2) {
      strides.resize(n);
      for (int64_t &s : strides)
        s = in.take<uint8_t>() < 200 ? in.take<int32_t>() : in.take<int64_t>();
      t.strides = strides.data();
    } else {
      t.strides = nullptr;
    }
  }
};

flashjit_context_t context = nullptr;
// A context keeps every kernel and block-mask builder it makes until it is
// destroyed, so one shared context lets a long run grow to libFuzzer's
// memory limit. The inputs that compile (specs, block-mask builds) go to
// this one, replaced once the process holds more than kReplaceAboveMb
// (looked at every kCheckEvery of them). Not on a count alone: a fresh
// context compiles again the kernels the corpus keeps asking for, which
// costs the run a large share of its inputs a second.
flashjit_context_t compileContext = nullptr;
constexpr unsigned kCheckEvery = 256;
constexpr long kReplaceAboveMb = 1280;

/// The resident set in MB (/proc/self/statm), 0 where unknown.
long residentMb() {
  FILE *f = std::fopen("/proc/self/statm", "r");
  if (!f)
    return 0;
  long pages = 0, resident = 0;
  const int read = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return read == 2 ? resident * (sysconf(_SC_PAGESIZE) / 1024) / 1024 : 0;
}

flashjit_context_t contextToCompileIn() {
  static unsigned inputs = 0;
  if (compileContext &&
      (++inputs % kCheckEvery != 0 || residentMb() <= kReplaceAboveMb))
    return compileContext;
  flashjit_context_destroy(compileContext);
  compileContext = nullptr;
  if (flashjit_context_create(0, "", "sm_90a", &compileContext) !=
      FLASHJIT_STATUS_OK)
    __builtin_trap();
  return compileContext;
}

/// Compiled once: a dense kernel and a block-sparse one, and the backward
/// of a varlen spec.
flashjit_kernel_t dense = nullptr, sparse = nullptr;
flashjit_backward_t varlenBackward = nullptr;

void readSpec(FieldReader &in, std::vector<unsigned char> &buffer,
              std::string &scoreMod, std::string &maskMod) {
  flashjit_attention_spec_t spec;
  flashjit_attention_spec_init(&spec);
  // Mostly small sizes around the real one; sometimes anything.
  size_t size = in.take<uint8_t>() < 220
                    ? sizeof(spec) - 64 + in.take<uint8_t>() % 128
                    : in.take<uint32_t>();
  spec.struct_size = size;
  spec.head_dim = in.take<int16_t>();
  spec.dtype = in.take<int8_t>();
  spec.causal = in.take<int8_t>();
  spec.num_heads = in.take<int16_t>();
  spec.num_kv_heads = in.take<int16_t>();
  spec.causal_align = in.take<int8_t>();
  spec.num_captures = in.take<int8_t>();
  spec.window_left = in.take<int32_t>();
  spec.window_right = in.take<int32_t>();
  spec.score_mod = in.string(scoreMod, 200);
  spec.mask_mod = in.string(maskMod, 200);
  for (int i = 0; i < 8; ++i) {
    spec.capture_dtype[i] = in.take<int8_t>();
    spec.capture_rank[i] = in.take<int8_t>();
    for (int d = 0; d < 4; ++d)
      spec.capture_shape[i][d] = in.take<int16_t>();
  }
  spec.sparse_block_m = in.take<int16_t>();
  spec.sparse_block_n = in.take<int16_t>();
  // The bytes past this header's struct, as a newer caller would send.
  buffer.assign(std::max(sizeof(spec), std::min<size_t>(size, 8192)), 0);
  std::memcpy(buffer.data(), &spec, sizeof(spec));
  if (in.take<uint8_t>() == 0x5A && buffer.size() > sizeof(spec))
    buffer[sizeof(spec) + in.take<uint16_t>() % (buffer.size() - sizeof(spec))] =
        in.take<uint8_t>();
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // Never a GPU, even where one exists: the fuzzed pointers would reach it.
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  if (flashjit_context_create(0, "", "sm_90a", &context) != FLASHJIT_STATUS_OK)
    __builtin_trap();
  flashjit_attention_spec_t spec;
  flashjit_attention_spec_init(&spec);
  spec.head_dim = 64;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  if (flashjit_kernel_compile_config(context, &spec, "mma_sync", &dense) !=
      FLASHJIT_STATUS_OK)
    __builtin_trap();
  spec.sparse_block_m = spec.sparse_block_n = 128;
  if (flashjit_kernel_compile_config(context, &spec, "mma_sync", &sparse) !=
      FLASHJIT_STATUS_OK)
    __builtin_trap();
  spec.sparse_block_m = spec.sparse_block_n = 0;
  spec.varlen = 1;
  if (flashjit_backward_compile(context, &spec, nullptr, &varlenBackward) !=
      FLASHJIT_STATUS_OK)
    __builtin_trap();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FieldReader in(data, size);
  const uint8_t what = in.take<uint8_t>() % 6;
  if (what == 0) { // a spec and a config request
    std::vector<unsigned char> buffer;
    std::string scoreMod, maskMod, config;
    readSpec(in, buffer, scoreMod, maskMod);
    const char *request = in.string(config, 64);
    int64_t seqlen = in.take<int32_t>();
    flashjit_kernel_t kernel = nullptr;
    auto *spec = in.take<uint8_t>() == 0xFF
                     ? nullptr
                     : reinterpret_cast<flashjit_attention_spec_t *>(
                           buffer.data());
    (void)flashjit_kernel_compile_for_seqlen(contextToCompileIn(), spec,
                                             request, seqlen, &kernel);
    (void)flashjit_last_error();
    flashjit_kernel_release(kernel);
    return 0;
  }
  if (what == 1) { // a context
    std::string dir, chip;
    int32_t device = in.take<int8_t>();
    (void)dir;
    const char *chipText = in.string(chip, 32);
    flashjit_context_t ctx = nullptr;
    // The cache stays in memory: the fuzzer must not write files.
    (void)flashjit_context_create(device, "", chipText, &ctx);
    flashjit_context_destroy(ctx);
    return 0;
  }
  if (what == 5) { // the backward of packed sequences
    FuzzTensor t[11];
    for (FuzzTensor &x : t)
      x.read(in);
    auto nullable = [&](FuzzTensor &x) {
      return in.take<uint8_t>() == 0xFF ? nullptr : &x.t;
    };
    const int64_t maxSeqlenK = in.take<uint8_t>() < 200 ? in.take<int16_t>()
                                                        : in.take<int64_t>();
    void *workspace = reinterpret_cast<void *>(in.take<uint64_t>());
    const uint64_t bytes = in.take<uint64_t>();
    (void)flashjit_backward_run_varlen(
        in.take<uint8_t>() == 0xFF ? nullptr : varlenBackward, nullable(t[0]),
        nullable(t[1]), nullable(t[2]), nullable(t[3]), nullable(t[4]),
        nullable(t[5]), nullable(t[6]), nullable(t[7]), nullable(t[8]),
        nullable(t[9]), nullable(t[10]), maxSeqlenK, workspace, bytes,
        __builtin_nan(""), nullptr);
    (void)flashjit_last_error();
    return 0;
  }
  // Forward (dense or block-sparse) or a block-mask build.
  FuzzTensor t[5], captures[3], mask[4];
  for (FuzzTensor &x : t)
    x.read(in);
  const int32_t numCaptures = in.take<int8_t>() % 5;
  for (FuzzTensor &x : captures)
    x.read(in);
  for (FuzzTensor &x : mask)
    x.read(in);
  DLTensor captureArray[3] = {captures[0].t, captures[1].t, captures[2].t};
  const DLTensor *capturePtr = in.take<uint8_t>() % 4 ? captureArray : nullptr;
  // At most 3 captures exist; a count above is the caller's lie, refused
  // before any is read only if above 8, so keep it within the array.
  const int32_t count = numCaptures > 3 ? 9 : numCaptures;
  uint64_t scaleBits = in.take<uint64_t>();
  double scale;
  if (in.take<uint8_t>() % 2) {
    std::memcpy(&scale, &scaleBits, sizeof(scale));
  } else {
    scale = in.take<uint8_t>() % 2 ? 0.125 : __builtin_nan("");
  }
  auto nullable = [&](FuzzTensor &x) {
    return in.take<uint8_t>() == 0xFF ? nullptr : &x.t;
  };
  if (what == 2) {
    (void)flashjit_kernel_forward(in.take<uint8_t>() == 0xFF ? nullptr : dense,
                                  nullable(t[0]), nullable(t[1]),
                                  nullable(t[2]), nullable(t[3]),
                                  nullable(t[4]), scale, nullptr);
  } else if (what == 3) {
    (void)flashjit_kernel_forward_block_sparse(
        in.take<uint8_t>() % 2 ? sparse : dense, nullable(t[0]),
        nullable(t[1]), nullable(t[2]), nullable(t[3]), nullable(t[4]), scale,
        capturePtr, count, nullable(mask[0]), nullable(mask[1]),
        nullable(mask[2]), nullable(mask[3]), nullptr);
  } else {
    flashjit_attention_spec_t spec;
    flashjit_attention_spec_init(&spec);
    spec.head_dim = 64;
    spec.sparse_block_m = in.take<uint8_t>() % 2 ? 128 : in.take<int16_t>();
    spec.sparse_block_n = 128;
    (void)flashjit_context_build_block_mask(
        contextToCompileIn(), &spec, capturePtr, count, in.take<int32_t>(),
        in.take<int32_t>(), nullable(mask[0]), nullable(mask[1]),
        nullable(mask[2]), nullable(mask[3]), nullptr);
  }
  (void)flashjit_last_error();
  return 0;
}
