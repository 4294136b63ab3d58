// Why: the varlen part of the C API (flashjit_kernel_forward_varlen and
// _paged) through libflashjit.so as another language loads it: the spec's
// varlen and page_size fields, packed tensors and paged pools translated to
// the C++ views, offsets, lengths and block tables checked as DLTensors
// before anything launches, and no device reported as such; the backward of
// a varlen spec (flashjit_backward_run_varlen) likewise.
#include "CApiTestUtil.h"

#include <doctest/doctest.h>

#include <cmath>

using namespace flashjit::test;

namespace {

struct VarlenCtx : Ctx {
  int32_t hasDevice = 0;
  VarlenCtx() : Ctx("sm_90a") {
    REQUIRE(flashjit_context_device(ctx, &hasDevice, nullptr) ==
            FLASHJIT_STATUS_OK);
  }
  flashjit_kernel_t compile(int64_t pageSize) {
    flashjit_attention_spec_t spec;
    flashjit_attention_spec_init(&spec);
    spec.num_heads = 8;
    spec.num_kv_heads = 2;
    spec.causal = 1;
    spec.causal_align = 1;
    spec.varlen = 1;
    spec.page_size = pageSize;
    flashjit_kernel_t kernel = nullptr;
    REQUIRE_MESSAGE(flashjit_kernel_compile(ctx, &spec, &kernel) ==
                        FLASHJIT_STATUS_OK,
                    flashjit_last_error());
    return kernel;
  }
};

/// Packed queries of 3 sequences (1000 tokens) and their outputs.
struct Queries {
  FakeTensor q{0x10000000, {1000, 8, 128}, kBF16};
  FakeTensor o{0x40000000, {1000, 8, 128}, kBF16};
  FakeTensor lse{0x50000000, {8, 1000}, kF32};
  FakeTensor cuQ{0x60000000, {4}, kI32};
};
} // namespace

TEST_CASE("C API varlen: the spec's page size is read and checked") {
  VarlenCtx c;
  flashjit_attention_spec_t spec;
  flashjit_attention_spec_init(&spec);
  CHECK(spec.page_size == 0);
  spec.varlen = 1;
  spec.page_size = 48;
  flashjit_kernel_t kernel = nullptr;
  CHECK(flashjit_kernel_compile(c.ctx, &spec, &kernel) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "a power of two from 16 to 256"));
  spec.varlen = 0;
  spec.page_size = 16;
  CHECK(flashjit_kernel_compile(c.ctx, &spec, &kernel) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "read by varlen kernels only"));
  CHECK(kernel == nullptr);
}

TEST_CASE("C API varlen: packed K/V, checked before the launch") {
  VarlenCtx c;
  flashjit_kernel_t kernel = c.compile(0);
  Queries in;
  FakeTensor k(0x20000000, {3000, 2, 128}, kBF16);
  FakeTensor v(0x30000000, {3000, 2, 128}, kBF16);
  FakeTensor cuK(0x70000000, {4}, kI32);
  auto run = [&](const DLTensor *keys) {
    return flashjit_kernel_forward_varlen(kernel, &in.q.dl, &k.dl, &v.dl,
                                          &in.o.dl, &in.lse.dl, &in.cuQ.dl,
                                          keys, 500, NAN, nullptr);
  };
  if (!c.hasDevice)
    CHECK(run(&cuK.dl) == FLASHJIT_STATUS_NO_DEVICE);
  FakeTensor shortK(0x70000000, {3}, kI32);
  CHECK(run(&shortK.dl) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "cu_seqlens_q has 4 entries but"));
  FakeTensor floatK(0x70000000, {4}, kF32);
  CHECK(run(&floatK.dl) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "int32"));
  // A paged launch of a packed kernel.
  FakeTensor table(0x80000000, {3, 8}, kI32);
  CHECK(flashjit_kernel_forward_paged(kernel, &in.q.dl, &k.dl, &v.dl,
                                      &in.o.dl, &in.lse.dl, &in.cuQ.dl,
                                      &cuK.dl, &table.dl, 500, NAN,
                                      nullptr) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "has no page size"));
  flashjit_kernel_release(kernel);
}

TEST_CASE("C API varlen: paged pools, lengths and block table checked") {
  VarlenCtx c;
  flashjit_kernel_t kernel = c.compile(16);
  Queries in;
  FakeTensor k(0x20000000, {60, 16, 2, 128}, kBF16);
  FakeTensor v(0x30000000, {60, 16, 2, 128}, kBF16);
  FakeTensor lens(0x70000000, {3}, kI32);
  FakeTensor table(0x80000000, {3, 8}, kI32);
  auto run = [&](const DLTensor *keys, const DLTensor *values,
                 const DLTensor *kvLens, const DLTensor *blockTable) {
    return flashjit_kernel_forward_paged(
        kernel, &in.q.dl, keys, values, &in.o.dl, &in.lse.dl, &in.cuQ.dl,
        kvLens, blockTable, 500, NAN, nullptr);
  };
  if (!c.hasDevice)
    CHECK(run(&k.dl, &v.dl, &lens.dl, &table.dl) ==
          FLASHJIT_STATUS_NO_DEVICE);
  // Pools of another page size, or not 4-D.
  FakeTensor page32(0x20000000, {30, 32, 2, 128}, kBF16);
  CHECK(run(&page32.dl, &page32.dl, &lens.dl, &table.dl) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "pages of 32 and 32 tokens"));
  FakeTensor packed(0x20000000, {960, 2, 128}, kBF16);
  CHECK(run(&packed.dl, &v.dl, &lens.dl, &table.dl) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "[pages, page_size, kv_heads, head_dim]"));
  // Pages that do not follow one another.
  int64_t gapped[4] = {16 * 2 * 128 + 256, 2 * 128, 128, 1};
  k.dl.strides = gapped;
  CHECK(run(&k.dl, &v.dl, &lens.dl, &table.dl) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "pages follow one another"));
  k.dl.strides = nullptr;
  // Lengths and table of the wrong size, type or layout.
  FakeTensor shortLens(0x70000000, {2}, kI32);
  CHECK(run(&k.dl, &v.dl, &shortLens.dl, &table.dl) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "kv_lens has 2 entries and block_table"));
  FakeTensor flatTable(0x80000000, {24}, kI32);
  CHECK(run(&k.dl, &v.dl, &lens.dl, &flatTable.dl) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "block_table must be a 2-D int32"));
  int64_t wide[2] = {16, 1};
  table.dl.strides = wide;
  CHECK(run(&k.dl, &v.dl, &lens.dl, &table.dl) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "block_table must be contiguous"));
  table.dl.strides = nullptr;
  CHECK(run(&k.dl, &v.dl, nullptr, &table.dl) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  // A packed launch of a paged kernel.
  FakeTensor cuK(0x70000000, {4}, kI32);
  CHECK(flashjit_kernel_forward_varlen(kernel, &in.q.dl, &packed.dl,
                                       &packed.dl, &in.o.dl, &in.lse.dl,
                                       &in.cuQ.dl, &cuK.dl, 500, NAN,
                                       nullptr) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "not cu_seqlens_k"));
  CHECK(flashjit_kernel_forward_paged(nullptr, &in.q.dl, &k.dl, &v.dl,
                                      &in.o.dl, &in.lse.dl, &in.cuQ.dl,
                                      &lens.dl, &table.dl, 500, NAN,
                                      nullptr) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  flashjit_kernel_release(kernel);
}

TEST_CASE("C API varlen: the backward on packed sequences, checked before "
          "the launch") {
  VarlenCtx c;
  flashjit_attention_spec_t spec;
  flashjit_attention_spec_init(&spec);
  spec.num_heads = 8;
  spec.num_kv_heads = 2;
  spec.causal = 1;
  spec.causal_align = 1;
  spec.varlen = 1;
  flashjit_backward_t backward = nullptr;
  REQUIRE_MESSAGE(flashjit_backward_compile(c.ctx, &spec, nullptr, &backward) ==
                      FLASHJIT_STATUS_OK,
                  flashjit_last_error());
  uint64_t bytes = 0;
  REQUIRE(flashjit_backward_workspace_size(backward, 1, 1000, &bytes) ==
          FLASHJIT_STATUS_OK);
  Queries in;
  FakeTensor dout(0x90000000, {1000, 8, 128}, kBF16);
  FakeTensor dq(0xA0000000, {1000, 8, 128}, kBF16);
  FakeTensor k(0x20000000, {3000, 2, 128}, kBF16);
  FakeTensor v(0x30000000, {3000, 2, 128}, kBF16);
  FakeTensor dk(0xB0000000, {3000, 2, 128}, kBF16);
  FakeTensor dv(0xC0000000, {3000, 2, 128}, kBF16);
  FakeTensor cuK(0x70000000, {4}, kI32);
  void *workspace = reinterpret_cast<void *>(0xD0000000);
  auto run = [&](const DLTensor *q, const DLTensor *keys, int64_t maxK,
                 uint64_t space) {
    return flashjit_backward_run_varlen(
        backward, q, &k.dl, &v.dl, &in.o.dl, &in.lse.dl, &dout.dl, &dq.dl,
        &dk.dl, &dv.dl, &in.cuQ.dl, keys, maxK, workspace, space, NAN,
        nullptr);
  };
  if (!c.hasDevice)
    CHECK(run(&in.q.dl, &cuK.dl, 1500, bytes) == FLASHJIT_STATUS_NO_DEVICE);
  FakeTensor shortK(0x70000000, {3}, kI32);
  CHECK(run(&in.q.dl, &shortK.dl, 1500, bytes) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "cu_seqlens_q has 4 entries but"));
  CHECK(run(&in.q.dl, &cuK.dl, 0, bytes) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "max_seqlen_k 0 is out of range"));
  CHECK(run(&in.q.dl, &cuK.dl, 1500, bytes - 256) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "workspace"));
  FakeTensor batched(0x10000000, {1, 1000, 8, 128}, kBF16);
  CHECK(run(&batched.dl, &cuK.dl, 1500, bytes) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "[total_tokens, heads, head_dim]"));
  // The dense call refuses it.
  FakeTensor q4(0x10000000, {1, 8, 1000, 128}, kBF16);
  FakeTensor o4(0x40000000, {1, 8, 1000, 128}, kBF16);
  FakeTensor dout4(0x90000000, {1, 8, 1000, 128}, kBF16);
  FakeTensor dq4(0xA0000000, {1, 8, 1000, 128}, kBF16);
  FakeTensor k4(0x20000000, {1, 2, 3000, 128}, kBF16);
  FakeTensor v4(0x30000000, {1, 2, 3000, 128}, kBF16);
  FakeTensor dk4(0xB0000000, {1, 2, 3000, 128}, kBF16);
  FakeTensor dv4(0xC0000000, {1, 2, 3000, 128}, kBF16);
  FakeTensor lse3(0x50000000, {1, 8, 1000}, kF32);
  CHECK(flashjit_backward_run(backward, &q4.dl, &k4.dl, &v4.dl, &o4.dl,
                              &lse3.dl, &dout4.dl, &dq4.dl, &dk4.dl, &dv4.dl,
                              workspace, bytes, NAN, nullptr) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(flashjit_last_error(), "flashjit_backward_run_varlen"));
  flashjit_backward_release(backward);
}
