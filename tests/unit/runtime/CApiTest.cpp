//===- CApiTest.cpp - the C API of libflashjit.so without a GPU -----------===//
// Why: the C API is the boundary other languages cross; every bad input
// must come back as the right status with a message that names the
// problem, and nothing may crash. This binary links libflashjit.so itself,
// so it also proves the flashjit_* functions are exported. Pointers given
// as tensor data are never dereferenced without a GPU: fake addresses do.
#include "CApiTestUtil.h"

#include "flashjit/flashjit.h"


#include <doctest/doctest.h>

#include <cstddef>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

extern "C" int flashjit_c_api_round_trip(char *message, size_t size);

namespace {

using namespace flashjit::test;

/// A kernel for smallSpec() (or `spec`) in its own memory-only context.
struct CompiledKernel : Ctx {
  flashjit_kernel_t kernel = nullptr;
  explicit CompiledKernel(flashjit_attention_spec_t spec = smallSpec()) {
    REQUIRE(flashjit_kernel_compile(ctx, &spec, &kernel) == FLASHJIT_STATUS_OK);
  }
  ~CompiledKernel() { flashjit_kernel_release(kernel); }

  flashjit_status_t forward(Args &a, double scale = NAN) {
    return flashjit_kernel_forward(kernel, &a.q.dl, &a.k.dl, &a.v.dl, &a.o.dl,
                                   &a.lse.dl, scale, nullptr);
  }
};

/// forward(a) is INVALID_ARGUMENT with a message containing `part`.
void expectRefused(CompiledKernel &k, Args &a, const std::string &part) {
  flashjit_status_t status = k.forward(a);
  std::string why = lastError();
  INFO(why);
  CHECK(status == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(why, part));
}

} // namespace

TEST_CASE("version, status names, and the last error after success") {
  int32_t major = -1, minor = -1, patch = -1, api = -1;
  CHECK(flashjit_get_version(&major, &minor, &patch, &api) ==
        FLASHJIT_STATUS_OK);
  CHECK(std::to_string(major) + "." + std::to_string(minor) + "." +
            std::to_string(patch) ==
        FLASHJIT_TEST_VERSION);
  CHECK(api == FLASHJIT_C_API_VERSION);
  CHECK(flashjit_get_version(nullptr, nullptr, nullptr, nullptr) ==
        FLASHJIT_STATUS_OK);

  CHECK(std::string(flashjit_status_name(FLASHJIT_STATUS_OK)) == "ok");
  CHECK(std::string(flashjit_status_name(FLASHJIT_STATUS_NO_DEVICE)) ==
        "no device");
  CHECK(std::string(flashjit_status_name(FLASHJIT_STATUS_UNSUPPORTED)) ==
        "unsupported");
  CHECK(std::string(flashjit_status_name(static_cast<flashjit_status_t>(99))) ==
        "unknown status");

  flashjit_context_t ctx = nullptr;
  CHECK(flashjit_context_create(-1, "", nullptr, &ctx) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(lastError() != "");
  CHECK(flashjit_context_create(0, "", nullptr, &ctx) == FLASHJIT_STATUS_OK);
  CHECK(lastError() == "");
  flashjit_context_destroy(ctx);
}

TEST_CASE("null handles and pointers are refused with a message") {
  CHECK(flashjit_context_create(0, "", nullptr, nullptr) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(lastError() == "flashjit_context_create: out is a null pointer");

  flashjit_context_t ctx = reinterpret_cast<flashjit_context_t>(0x1);
  CHECK(flashjit_context_create(-3, "", nullptr, &ctx) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(ctx == nullptr);
  CHECK(has(lastError(), "device ordinal -3 is negative"));

  flashjit_attention_spec_t spec = smallSpec();
  flashjit_kernel_t kernel = reinterpret_cast<flashjit_kernel_t>(0x1);
  CHECK(flashjit_kernel_compile(nullptr, &spec, &kernel) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(kernel == nullptr);
  CHECK(lastError() == "flashjit_kernel_compile: ctx is a null handle");

  Ctx c;
  CHECK(flashjit_kernel_compile(c.ctx, nullptr, &kernel) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "spec is a null pointer"));
  CHECK(flashjit_kernel_compile(c.ctx, &spec, nullptr) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "out is a null pointer"));

  Args a;
  CHECK(flashjit_kernel_forward(nullptr, &a.q.dl, &a.k.dl, &a.v.dl, &a.o.dl,
                                &a.lse.dl, NAN,
                                nullptr) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(lastError() == "flashjit_kernel_forward: kernel is a null handle");

  const char *text = nullptr;
  int32_t hasDevice = 0;
  CHECK(flashjit_context_chip(nullptr, &text) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(flashjit_context_chip(c.ctx, nullptr) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(flashjit_context_device(nullptr, &hasDevice, nullptr) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(flashjit_kernel_describe(nullptr, &text, nullptr) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);

  // Releasing nothing is allowed, as free(NULL) is.
  CHECK(flashjit_context_destroy(nullptr) == FLASHJIT_STATUS_OK);
  CHECK(flashjit_kernel_release(nullptr) == FLASHJIT_STATUS_OK);
}

TEST_CASE("a context names its chip, and an unknown chip is refused") {
  flashjit_context_t ctx = nullptr;
  REQUIRE(flashjit_context_create(0, "", "sm_80", &ctx) == FLASHJIT_STATUS_OK);
  const char *chip = nullptr;
  CHECK(flashjit_context_chip(ctx, &chip) == FLASHJIT_STATUS_OK);
  CHECK(std::string(chip) == "sm_80");
  flashjit_context_destroy(ctx);

  CHECK(flashjit_context_create(0, "", "sm_12", &ctx) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(ctx == nullptr);
  CHECK(has(lastError(), "sm_12"));
}

TEST_CASE("the spec is read by its struct_size, and bad fields are named") {
  Ctx c;
  flashjit_kernel_t kernel = nullptr;
  std::string why; // the message, kept before release clears it
  auto compile = [&](const flashjit_attention_spec_t &spec) {
    flashjit_status_t status = flashjit_kernel_compile(c.ctx, &spec, &kernel);
    why = lastError();
    flashjit_kernel_release(kernel);
    kernel = nullptr;
    return status;
  };

  flashjit_attention_spec_t spec = smallSpec();
  spec.struct_size = 0; // never initialised
  CHECK(compile(spec) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(why, "struct_size is 0"));
  CHECK(has(why, "flashjit_attention_spec_init"));

  spec = smallSpec();
  spec.dtype = 0;
  CHECK(compile(spec) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(why, "dtype code 0"));
  spec.dtype = 7;
  CHECK(compile(spec) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(why, "dtype code 7"));

  spec = smallSpec();
  spec.causal = 2;
  CHECK(compile(spec) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(why, "causal is 2"));

  spec = smallSpec();
  spec.num_heads = 6;
  spec.num_kv_heads = 4;
  CHECK(compile(spec) == FLASHJIT_STATUS_INVALID_ARGUMENT);

  // A newer caller's larger struct: zero extra fields ask for nothing new;
  // a set one is a feature this library lacks.
  struct Newer {
    flashjit_attention_spec_t v1;
    int64_t future = 0;
  } newer;
  newer.v1 = smallSpec();
  newer.v1.struct_size = sizeof(Newer);
  CHECK(flashjit_kernel_compile(c.ctx, &newer.v1, &kernel) ==
        FLASHJIT_STATUS_OK);
  flashjit_kernel_release(kernel);
  newer.future = 1;
  CHECK(flashjit_kernel_compile(c.ctx, &newer.v1, &kernel) ==
        FLASHJIT_STATUS_UNSUPPORTED);
  CHECK(kernel == nullptr);
  CHECK(has(lastError(),
            "byte " + std::to_string(sizeof(flashjit_attention_spec_t))));
}

TEST_CASE("an unsupported head dim is UNSUPPORTED and named") {
  Ctx c;
  flashjit_attention_spec_t spec = smallSpec();
  spec.head_dim = 48; // a multiple of 8, but no template handles it
  flashjit_kernel_t kernel = nullptr;
  CHECK(flashjit_kernel_compile(c.ctx, &spec, &kernel) ==
        FLASHJIT_STATUS_UNSUPPORTED);
  CHECK(kernel == nullptr);
  CHECK(has(lastError(), "head dim 48"));

  spec.head_dim = 300; // outside what any attention kernel takes
  CHECK(flashjit_kernel_compile(c.ctx, &spec, &kernel) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "300"));
}

TEST_CASE("a valid spec compiles to a kernel without a GPU") {
  TempDir dir;
  REQUIRE(!dir.path.empty());
  flashjit_context_t ctx = nullptr;
  REQUIRE(flashjit_context_create(0, dir.path.c_str(), "sm_90a", &ctx) ==
          FLASHJIT_STATUS_OK);
  flashjit_attention_spec_t spec = smallSpec();
  spec.causal = 1;
  flashjit_kernel_t kernel = nullptr;
  REQUIRE(flashjit_kernel_compile(ctx, &spec, &kernel) == FLASHJIT_STATUS_OK);
  REQUIRE(kernel != nullptr);
  const char *name = nullptr, *config = nullptr;
  CHECK(flashjit_kernel_describe(kernel, &name, &config) == FLASHJIT_STATUS_OK);
  CHECK(std::string(name) == "flashjit_fwd_d64_bf16_causal_h4_kv2");
  CHECK(has(config, "wgmma_persistent:")); // sm_90a, head dim 64, causal

  // The cache directory given is the one used.
  std::error_code ec;
  bool empty = true;
  for (llvm::sys::fs::directory_iterator it(dir.path, ec), end;
       !ec && it != end; it.increment(ec))
    empty = false;
  CHECK_FALSE(empty);

  // The kernel outlives its context.
  flashjit_context_destroy(ctx);
  CHECK(flashjit_kernel_describe(kernel, &name, nullptr) == FLASHJIT_STATUS_OK);
  CHECK(std::string(name) == "flashjit_fwd_d64_bf16_causal_h4_kv2");
  flashjit_kernel_release(kernel);
}

TEST_CASE("the header works from C: a C file runs the handle life cycle") {
  char message[256];
  CHECK(flashjit_c_api_round_trip(message, sizeof message) ==
        FLASHJIT_STATUS_OK);
  CHECK(std::string(message) == "flashjit_fwd_d64_bf16_causal_h4_kv2");
}

TEST_CASE("forward without a GPU: valid arguments give NO_DEVICE") {
  if (driverLoadable()) {
    MESSAGE("libcuda.so.1 is loadable here: no-device check skipped");
    return;
  }
  CompiledKernel k;
  int32_t hasDevice = 1;
  const char *reason = nullptr;
  CHECK(flashjit_context_device(k.ctx, &hasDevice, &reason) ==
        FLASHJIT_STATUS_OK);
  CHECK(hasDevice == 0);
  CHECK(has(reason, "libcuda.so.1"));

  Args a;
  CHECK(k.forward(a) == FLASHJIT_STATUS_NO_DEVICE);
  CHECK(has(lastError(), "no GPU is available"));
  CHECK(k.forward(a, 0.125) == FLASHJIT_STATUS_NO_DEVICE);

  // Null strides mean compact row-major (DLPack's rule).
  Args compact;
  for (Tensor *t :
       {&compact.q, &compact.k, &compact.v, &compact.o, &compact.lse})
    t->dl.strides = nullptr;
  CHECK(k.forward(compact) == FLASHJIT_STATUS_NO_DEVICE);

  // BSHD memory, viewed as [B, H, S, D] by its strides: {S*H*D, D, H*D, 1}.
  Args bshd;
  for (Tensor *t : {&bshd.q, &bshd.k, &bshd.v, &bshd.o}) {
    int64_t h = t->shape[1], s = t->shape[2], d = t->shape[3];
    t->strides = {s * h * d, d, h * d, 1};
  }
  CHECK(k.forward(bshd) == FLASHJIT_STATUS_NO_DEVICE);
}

TEST_CASE("forward refuses malformed DLTensors before anything else") {
  CompiledKernel k;
  auto refused = [&](Args &a, const std::string &part) {
    expectRefused(k, a, part);
  };

  {
    Args a;
    CHECK(flashjit_kernel_forward(k.kernel, &a.q.dl, nullptr, &a.v.dl, &a.o.dl,
                                  &a.lse.dl, NAN,
                                  nullptr) == FLASHJIT_STATUS_INVALID_ARGUMENT);
    CHECK(has(lastError(), "k is a null DLTensor pointer"));
  }
  {
    Args a;
    a.v.dl.dtype = {kDLInt, 8, 1};
    refused(a, "v has dtype int8");
  }
  {
    Args a;
    a.q.dl.dtype = {kDLBfloat, 16, 2};
    refused(a, "q has dtype bf16x2");
  }
  {
    Args a;
    a.k.dl.dtype = {static_cast<uint8_t>(42), 16, 1};
    refused(a, "type code 42");
  }
  {
    Args a;
    a.q.dl.ndim = 3;
    refused(a, "q has 3 dimensions, expected 4");
  }
  {
    Args a;
    a.lse.dl.ndim = 4;
    a.lse.shape.push_back(1);
    a.lse.dl.shape = a.lse.shape.data();
    refused(a, "lse has 4 dimensions, expected 3");
  }
  {
    Args a;
    a.o.dl.device = {kDLCPU, 0};
    refused(a, "o is on kDLCPU (1)");
  }
  {
    Args a;
    a.k.dl.device = {kDLCUDA, 1};
    refused(a, "k is on CUDA device 1 but the context uses device 0");
  }
  {
    Args a;
    a.q.dl.data = nullptr;
    refused(a, "q has a null data pointer");
  }
  {
    Args a;
    a.q.dl.shape = nullptr;
    refused(a, "q has a null shape pointer");
  }
  {
    Args a;
    a.v.shape[2] = -5;
    refused(a, "v dimension 2 has extent -5");
  }
  {
    Args a;
    a.lse.dl.dtype = kBF16;
    refused(a, "lse has dtype bf16: expected f32");
  }
  {
    // Compact strides of extents just below 2^31 overflow int64 when
    // multiplied out: refused, computed without overflow.
    Args a;
    a.v.shape = {(int64_t(1) << 31) - 1, 2, (int64_t(1) << 31) - 1, 64};
    a.v.dl.shape = a.v.shape.data();
    a.v.dl.strides = nullptr;
    refused(a, "v shape");
    CHECK(has(lastError(), "spans more than 2^62 bytes"));
  }
}

TEST_CASE("forward's own checks apply to what DLPack describes") {
  CompiledKernel k; // bf16, head dim 64, 4 heads, 2 kv heads
  auto refused = [&](Args &a, const std::string &part) {
    expectRefused(k, a, part);
  };
  {
    Args a(kF16);
    refused(a, "q is f16 but the kernel was compiled for bf16");
  }
  {
    Args a(kBF16, /*kvHeads=*/4);
    refused(a, "kv heads");
  }
  {
    Args a;
    a.o.shape[2] = 41; // o must match q
    refused(a, "o shape [2, 4, 41, 64] must equal q shape [2, 4, 40, 64]");
  }
  {
    Args a;
    a.q.shape[3] = 128;
    a.q.strides = {4 * 40 * 128, 40 * 128, 128, 1};
    refused(a, "q head dim is 128 but the kernel was compiled for head dim 64");
  }
  {
    Args a;
    a.lse.shape[2] = 39;
    refused(a, "lse shape [2, 4, 39]");
  }
  {
    Args a;
    a.k.strides[3] = 2;
    refused(a, "k head-dim stride is 2");
  }
  {
    Args a;
    a.q.dl.byte_offset = 2; // byte_offset counts: the rows lose alignment
    refused(a, "not 16-byte aligned");
  }
  {
    Args a;
    a.o.dl.data = a.q.dl.data; // the output overwrites an input
    refused(a, "overlap input q");
  }
  {
    Args a;
    CHECK(k.forward(a, INFINITY) == FLASHJIT_STATUS_INVALID_ARGUMENT);
    CHECK(has(lastError(), "scale must be a positive finite number"));
  }
}

TEST_CASE("the last error is per thread") {
  CHECK(flashjit_kernel_release(nullptr) == FLASHJIT_STATUS_OK);
  CHECK(lastError() == "");
  std::string seenThere;
  std::thread other([&] {
    flashjit_context_create(0, "", nullptr, nullptr);
    seenThere = lastError();
  });
  other.join();
  CHECK(has(seenThere, "out is a null pointer"));
  CHECK(lastError() == "");
}

TEST_CASE("compile_config: a whole config, a family's choice, and refusals") {
  flashjit_context_t ctx = nullptr;
  REQUIRE(flashjit_context_create(0, "", "sm_90a", &ctx) ==
          FLASHJIT_STATUS_OK);
  flashjit_attention_spec_t spec = smallSpec();
  // The config a compile chose, or its status; seqlen 0 is the default
  // hint.
  auto configFor = [&](const char *config, int64_t seqlen) -> std::string {
    flashjit_kernel_t kernel = nullptr;
    flashjit_status_t status =
        seqlen == 0
            ? flashjit_kernel_compile_config(ctx, &spec, config, &kernel)
            : flashjit_kernel_compile_for_seqlen(ctx, &spec, config, seqlen,
                                                 &kernel);
    if (status != FLASHJIT_STATUS_OK) {
      CHECK(kernel == nullptr);
      return std::string("status ") + flashjit_status_name(status);
    }
    const char *text = nullptr;
    CHECK(flashjit_kernel_describe(kernel, nullptr, &text) ==
          FLASHJIT_STATUS_OK);
    std::string out = text;
    flashjit_kernel_release(kernel);
    return out;
  };
  auto configOf = [&](const char *config) { return configFor(config, 0); };
  // NULL and "" are the default choice: wgmma on sm_90a for head dim 64.
  CHECK(has(configOf(nullptr), "wgmma:"));
  CHECK(has(configOf(""), "wgmma:"));
  // A family runs that template where another is the default.
  CHECK(has(configOf("mma_sync"), "mma_sync:"));
  CHECK(has(configOf("cuda_core"), "cuda_core:"));
  // A whole config is built as given.
  CHECK(configOf("mma_sync:m64:n32:s2:w4") == "mma_sync:m64:n32:s2:w4");
  CHECK(configOf("wgmma:m128:n64:s2:w12") == "wgmma:m128:n64:s2:w12");
  // Refusals, each with its reason.
  CHECK(configOf("tpu") == "status invalid argument");
  CHECK(has(lastError(), "unknown kernel family 'tpu'"));
  CHECK(configOf("mma_sync:m64") == "status invalid argument");
  CHECK(has(lastError(), "malformed tile config"));
  CHECK(configOf("wgmma:m128:n256:s2:w12").rfind("status ", 0) == 0);
  CHECK(has(lastError(), "block_n"));
  // The measurement-only family (P = S, wrong by design) lives in the
  // developer tools: the shipped library does not know it.
  CHECK(configOf("mma_sync_nosoftmax:m64:n32:s2:w4").rfind("status ", 0) ==
        0);
  CHECK(has(lastError(), "unknown kernel family 'mma_sync_nosoftmax'"));

  // A seqlen hint picks the tuning bucket; without a database the choice
  // is the heuristic's. 0 is the default hint, a negative one refused.
  CHECK(configFor(nullptr, 8192) == configOf(nullptr));
  CHECK(configFor("mma_sync", 8192) == configOf("mma_sync"));
  CHECK(configFor(nullptr, -1) == "status invalid argument");
  CHECK(has(lastError(),
            "flashjit_kernel_compile_for_seqlen: seqlen must be 0 (the "
            "default hint) or positive, got -1"));
  flashjit_context_destroy(ctx);

  // wgmma needs sm_90a: on sm_80 the family is unsupported.
  REQUIRE(flashjit_context_create(0, "", "sm_80", &ctx) == FLASHJIT_STATUS_OK);
  CHECK(configOf("wgmma") == "status unsupported");
  CHECK(has(lastError(), "needs sm_90 or newer"));
  CHECK(has(configOf(nullptr), "mma_sync:"));
  flashjit_context_destroy(ctx);
}

TEST_CASE("block-sparse through the C API: spec fields and the mask's checks") {
  if (driverLoadable()) {
    MESSAGE("libcuda.so.1 is loadable here: the no-device path is skipped");
    return;
  }
  flashjit_attention_spec_t spec = smallSpec();
  spec.sparse_block_m = 64;
  spec.sparse_block_n = 16;
  CompiledKernel k(spec);
  const char *name = nullptr, *config = nullptr;
  REQUIRE(flashjit_kernel_describe(k.kernel, &name, &config) ==
          FLASHJIT_STATUS_OK);
  // The tile divides the mask's block: block_n 16 at most.
  CHECK(has(config, ":n16:"));
  constexpr DLDataType kI32{kDLInt, 32, 1};
  Args a;
  // 40 rows -> 1 query block of 64; 40 keys -> 3 key blocks of 16.
  Tensor counts(0x60000000, {2, 4, 1}, kI32), indices(0x61000000, {1, 4, 1, 3}, kI32);
  auto forward = [&](const DLTensor *c, const DLTensor *i) {
    return flashjit_kernel_forward_block_sparse(
        k.kernel, &a.q.dl, &a.k.dl, &a.v.dl, &a.o.dl, &a.lse.dl, NAN, nullptr,
        0, c, i, nullptr, nullptr, nullptr);
  };
  CHECK(forward(&counts.dl, &indices.dl) == FLASHJIT_STATUS_NO_DEVICE);
  CHECK(forward(nullptr, nullptr) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "needs kv_num_blocks and kv_indices"));
  Tensor narrow(0x62000000, {1, 4, 1, 2}, kI32);
  CHECK(forward(&counts.dl, &narrow.dl) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "kv_indices has shape [1, 4, 1, 2]"));
  // A dense kernel refuses a mask.
  CompiledKernel dense;
  CHECK(flashjit_kernel_forward_block_sparse(
            dense.kernel, &a.q.dl, &a.k.dl, &a.v.dl, &a.o.dl, &a.lse.dl, NAN,
            nullptr, 0, &counts.dl, &indices.dl, nullptr, nullptr,
            nullptr) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "not block-sparse"));
}

TEST_CASE("a block mask built through the C API: checked, then launched") {
  if (driverLoadable()) {
    MESSAGE("libcuda.so.1 is loadable here: the no-device path is skipped");
    return;
  }
  flashjit_attention_spec_t spec = smallSpec();
  spec.causal = 1;
  spec.sparse_block_m = 64;
  spec.sparse_block_n = 16;
  Ctx c;
  constexpr DLDataType kI32{kDLInt, 32, 1};
  // 40 x 40 -> 1 query block of 64 and 3 key blocks of 16; one mask for
  // every head.
  Tensor counts(0x60000000, {2, 1, 1}, kI32),
      indices(0x61000000, {2, 1, 1, 3}, kI32);
  auto build = [&](const flashjit_attention_spec_t *s, DLTensor *n,
                   DLTensor *i, int64_t seqlen) {
    return flashjit_context_build_block_mask(c.ctx, s, nullptr, 0, seqlen,
                                             seqlen, n, i, nullptr, nullptr,
                                             nullptr);
  };
  // The kernel compiles without a GPU; the launch needs one.
  CHECK(build(&spec, &counts.dl, &indices.dl, 40) == FLASHJIT_STATUS_NO_DEVICE);
  CHECK(has(lastError(), "no GPU"));
  CHECK(build(&spec, &counts.dl, &indices.dl, 200) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "kv_num_blocks has shape"));
  CHECK(build(&spec, nullptr, nullptr, 40) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "needs kv_num_blocks"));
  flashjit_attention_spec_t dense = smallSpec();
  CHECK(build(&dense, &counts.dl, &indices.dl, 40) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "block-sparse"));
  CHECK(flashjit_context_build_block_mask(nullptr, &spec, nullptr, 0, 40, 40,
                                          &counts.dl, &indices.dl, nullptr,
                                          nullptr, nullptr) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "ctx is a null handle"));
}

