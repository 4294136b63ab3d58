// Why: the decode part of the C API (flashjit_decode_*) through
// libflashjit.so as another language loads it: specs checked field by
// field, DLPack tensors translated and checked before anything launches,
// and no device reported as such.
#include "CApiTestUtil.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

using namespace flashjit::test;

namespace {

flashjit_decode_spec_t smallDecodeSpec() {
  flashjit_decode_spec_t spec;
  flashjit_decode_spec_init(&spec);
  spec.num_heads = 8;
  spec.num_kv_heads = 2;
  spec.q_len = 2;
  return spec;
}
} // namespace

TEST_CASE("C API decode: compile, bad specs, release") {
  Ctx c("sm_90a");
  flashjit_decode_spec_t spec = smallDecodeSpec();
  flashjit_decode_kernel_t kernel = nullptr;
  REQUIRE(flashjit_decode_kernel_compile(c.ctx, &spec, &kernel) ==
          FLASHJIT_STATUS_OK);
  REQUIRE(kernel != nullptr);
  CHECK(flashjit_decode_kernel_release(kernel) == FLASHJIT_STATUS_OK);
  CHECK(flashjit_decode_kernel_release(nullptr) == FLASHJIT_STATUS_OK);

  spec.q_len = 17;
  CHECK(flashjit_decode_kernel_compile(c.ctx, &spec, &kernel) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(kernel == nullptr);
  CHECK(has(flashjit_last_error(), "1 to 16 query tokens"));
  spec = smallDecodeSpec();
  spec.struct_size = 8;
  CHECK(flashjit_decode_kernel_compile(c.ctx, &spec, &kernel) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "flashjit_decode_spec_init"));
  spec = smallDecodeSpec();
  spec.dtype = 0;
  CHECK(flashjit_decode_kernel_compile(c.ctx, &spec, &kernel) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  spec = smallDecodeSpec();
  CHECK(flashjit_decode_kernel_compile(nullptr, &spec, &kernel) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(flashjit_decode_kernel_compile(c.ctx, nullptr, &kernel) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(flashjit_decode_kernel_compile(c.ctx, &spec, nullptr) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("C API decode: tensors are checked before the launch") {
  Ctx c("sm_90a");
  flashjit_decode_spec_t spec = smallDecodeSpec();
  flashjit_decode_kernel_t kernel = nullptr;
  REQUIRE(flashjit_decode_kernel_compile(c.ctx, &spec, &kernel) ==
          FLASHJIT_STATUS_OK);
  FakeTensor q(0x10000000, {3, 2, 8, 128}, kBF16);
  FakeTensor k(0x20000000, {3, 500, 2, 128}, kBF16);
  FakeTensor v(0x30000000, {3, 500, 2, 128}, kBF16);
  FakeTensor o(0x40000000, {3, 2, 8, 128}, kBF16);
  FakeTensor lse(0x50000000, {3, 8, 2}, kF32);
  FakeTensor lens(0x60000000, {3}, kI32);
  FakeTensor table(0x70000000, {3, 4}, kI32);
  auto step = [&](const DLTensor *blockTable, DLTensor *out) {
    return flashjit_decode(kernel, &q.dl, &k.dl, &v.dl, &lens.dl, blockTable,
                           out, &lse.dl, 0, 0, NAN, nullptr);
  };
  int32_t hasDevice = 0;
  REQUIRE(flashjit_context_device(c.ctx, &hasDevice, nullptr) ==
          FLASHJIT_STATUS_OK);
  if (!hasDevice) {
    // Every check passes; the launch has no GPU.
    CHECK(step(nullptr, &o.dl) == FLASHJIT_STATUS_NO_DEVICE);
  }
  // A block table for a contiguous kernel.
  CHECK(step(&table.dl, &o.dl) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "no page size"));
  // O of the wrong shape.
  FakeTensor badO(0x40000000, {3, 1, 8, 128}, kBF16);
  CHECK(step(nullptr, &badO.dl) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "o has shape"));
  // kv_lens of the wrong length or type.
  FakeTensor shortLens(0x60000000, {2}, kI32);
  CHECK(flashjit_decode(kernel, &q.dl, &k.dl, &v.dl, &shortLens.dl, nullptr,
                        &o.dl, &lse.dl, 0, 0, NAN,
                        nullptr) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "kv_lens has 2 entries"));
  FakeTensor floatLens(0x60000000, {3}, kF32);
  CHECK(flashjit_decode(kernel, &q.dl, &k.dl, &v.dl, &floatLens.dl, nullptr,
                        &o.dl, &lse.dl, 0, 0, NAN,
                        nullptr) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  // A CPU tensor.
  q.dl.device = {kDLCPU, 0};
  CHECK(step(nullptr, &o.dl) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  q.dl.device = {kDLCUDA, 0};
  CHECK(flashjit_decode(nullptr, &q.dl, &k.dl, &v.dl, &lens.dl, nullptr, &o.dl,
                        &lse.dl, 0, 0, NAN,
                        nullptr) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  flashjit_decode_kernel_release(kernel);

  // Paged: the table is required and checked.
  spec.page_size = 16;
  REQUIRE(flashjit_decode_kernel_compile(c.ctx, &spec, &kernel) ==
          FLASHJIT_STATUS_OK);
  FakeTensor pool(0x20000000, {40, 16, 2, 128}, kBF16);
  FakeTensor poolV(0x30000000, {40, 16, 2, 128}, kBF16);
  CHECK(flashjit_decode(kernel, &q.dl, &pool.dl, &poolV.dl, &lens.dl, nullptr,
                        &o.dl, &lse.dl, 0, 0, NAN,
                        nullptr) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "needs block_table"));
  if (!hasDevice)
    CHECK(flashjit_decode(kernel, &q.dl, &pool.dl, &poolV.dl, &lens.dl,
                          &table.dl, &o.dl, &lse.dl, 64, 0, NAN,
                          nullptr) == FLASHJIT_STATUS_NO_DEVICE);
  flashjit_decode_kernel_release(kernel);
}
