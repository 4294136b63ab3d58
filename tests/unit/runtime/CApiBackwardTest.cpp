//===- CApiBackwardTest.cpp - the backward part of the C API, no GPU ------===//
// Why: the backward entry points are compiled, sized and checked through
// the C ABI like the forward's: every bad argument comes back as a status
// with a message naming it, before anything could launch.
#include "CApiTestUtil.h"

#include <cmath>
#include <cstddef>

namespace {
using namespace flashjit::test;

/// dout, dq [2, 4, 40, 64] and dk, dv [2, 2, 40, 64] at fake addresses
/// apart from Args' and from the workspace (0xA0000000).
struct Gradients {
  Tensor dout{0x60000000, {2, 4, 40, 64}, kBF16},
      dq{0x70000000, {2, 4, 40, 64}, kBF16},
      dk{0x80000000, {2, 2, 40, 64}, kBF16},
      dv{0x90000000, {2, 2, 40, 64}, kBF16};
};
void *const kWorkspace = reinterpret_cast<void *>(uintptr_t(0xA0000000));

/// The backward of `spec` in `c` and the workspace bytes of Args' problem
/// (2 sequences of 40 query rows).
flashjit_backward_t compiledBackward(Ctx &c,
                                     const flashjit_attention_spec_t &spec,
                                     uint64_t &bytes) {
  flashjit_backward_t backward = nullptr;
  REQUIRE_MESSAGE(flashjit_backward_compile(c.ctx, &spec, nullptr,
                                            &backward) == FLASHJIT_STATUS_OK,
                  lastError());
  REQUIRE(flashjit_backward_workspace_size(backward, 2, 40, &bytes) ==
          FLASHJIT_STATUS_OK);
  return backward;
}
} // namespace

TEST_CASE("the backward pass through the C API: compiled, sized, checked") {
  Ctx c;
  flashjit_attention_spec_t spec = smallSpec();
  spec.causal = 1;
  flashjit_backward_t backward = nullptr;
  CHECK(flashjit_backward_compile(c.ctx, &spec, "mma_sync:m64:n64:s2:w4",
                                  &backward) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "mma_sync_bwd"));
  CHECK(flashjit_backward_compile(c.ctx, &spec, "no-config:x", &backward) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  flashjit_attention_spec_t narrow = smallSpec();
  narrow.head_dim = 32; // the backward builds head dims 64, 96, 128, 256
  CHECK(flashjit_backward_compile(c.ctx, &narrow, nullptr, &backward) ==
        FLASHJIT_STATUS_UNSUPPORTED);
  REQUIRE(flashjit_backward_compile(c.ctx, &spec, nullptr, &backward) ==
          FLASHJIT_STATUS_OK);
  uint64_t bytes = 0;
  REQUIRE(flashjit_backward_workspace_size(backward, 2, 40, &bytes) ==
          FLASHJIT_STATUS_OK);
  CHECK(bytes >= uint64_t(4) * 2 * 4 * 40 * 65);
  CHECK(flashjit_backward_workspace_size(backward, 0, 40, &bytes) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);

  // The forward's tensors of smallSpec(), dout and the gradients.
  Args a;
  Gradients g;
  Tensor &dout = g.dout, &dq = g.dq, &dk = g.dk, &dv = g.dv;
  void *workspace = kWorkspace;
  auto run = [&](void *ws, uint64_t size, DLTensor *dkTensor) {
    return flashjit_backward_run(backward, &a.q.dl, &a.k.dl, &a.v.dl, &a.o.dl,
                                 &a.lse.dl, &dout.dl, &dq.dl, dkTensor,
                                 &dv.dl, ws, size, NAN, nullptr);
  };
  CHECK(run(nullptr, bytes, &dk.dl) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "workspace is a null pointer"));
  CHECK(run(workspace, bytes - 256, &dk.dl) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(run(workspace, bytes, &dq.dl) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "dk shape"));
  if (!driverLoadable()) {
    CHECK(run(workspace, bytes, &dk.dl) == FLASHJIT_STATUS_NO_DEVICE);
    CHECK(has(lastError(), "no GPU is available"));
  }
  CHECK(flashjit_backward_release(backward) == FLASHJIT_STATUS_OK);
  CHECK(flashjit_backward_release(nullptr) == FLASHJIT_STATUS_OK);
}

TEST_CASE("the deterministic backward through the C API: options struct") {
  Ctx c;
  flashjit_attention_spec_t spec = smallSpec();
  spec.causal = 1;
  flashjit_backward_options_t options;
  flashjit_backward_options_init(&options);
  CHECK(options.struct_size == sizeof(flashjit_backward_options_t));
  CHECK(options.config == nullptr);
  CHECK(options.deterministic == 0);

  flashjit_backward_t plain = nullptr, det = nullptr, byNull = nullptr;
  REQUIRE(flashjit_backward_compile_with_options(
              c.ctx, &spec, nullptr, &byNull) == FLASHJIT_STATUS_OK);
  REQUIRE(flashjit_backward_compile_with_options(c.ctx, &spec, &options,
                                                 &plain) == FLASHJIT_STATUS_OK);
  options.deterministic = 1;
  REQUIRE(flashjit_backward_compile_with_options(c.ctx, &spec, &options,
                                                 &det) == FLASHJIT_STATUS_OK);
  // The deterministic kernels add turn counters to the workspace.
  uint64_t plainBytes = 0, detBytes = 0, nullBytes = 0;
  REQUIRE(flashjit_backward_workspace_size(plain, 2, 40, &plainBytes) ==
          FLASHJIT_STATUS_OK);
  REQUIRE(flashjit_backward_workspace_size(byNull, 2, 40, &nullBytes) ==
          FLASHJIT_STATUS_OK);
  REQUIRE(flashjit_backward_workspace_size(det, 2, 40, &detBytes) ==
          FLASHJIT_STATUS_OK);
  CHECK(nullBytes == plainBytes);
  CHECK(detBytes == plainBytes + 256);

  // Bad values, sizes and unknown trailing fields are refused.
  flashjit_backward_t none = nullptr;
  options.deterministic = 2;
  CHECK(flashjit_backward_compile_with_options(c.ctx, &spec, &options, &none) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "deterministic is 2"));
  CHECK(has(lastError(), "flashjit_backward_compile_with_options"));
  CHECK(none == nullptr);
  flashjit_backward_options_init(&options);
  options.struct_size = 4;
  CHECK(flashjit_backward_compile_with_options(c.ctx, &spec, &options, &none) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "backward options struct_size is 4"));
  struct Later {
    flashjit_backward_options_t known;
    int64_t unknown;
  } later{};
  flashjit_backward_options_init(&later.known);
  later.known.struct_size = sizeof(Later);
  later.unknown = 1;
  CHECK(flashjit_backward_compile_with_options(
            c.ctx, &spec,
            reinterpret_cast<flashjit_backward_options_t *>(&later),
            &none) == FLASHJIT_STATUS_UNSUPPORTED);
  CHECK(has(lastError(), "backward options sets a field"));
  later.unknown = 0;
  CHECK(flashjit_backward_compile_with_options(
            c.ctx, &spec,
            reinterpret_cast<flashjit_backward_options_t *>(&later),
            &none) == FLASHJIT_STATUS_OK);
  CHECK(flashjit_backward_release(none) == FLASHJIT_STATUS_OK);
  flashjit_backward_options_init(&options);
  options.config = "mma_sync:m64:n64:s2:w4";
  CHECK(flashjit_backward_compile_with_options(c.ctx, &spec, &options, &none) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "mma_sync_bwd_det"));
  CHECK(
      flashjit_backward_compile_with_options(nullptr, &spec, nullptr, &none) ==
      FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(
      flashjit_backward_compile_with_options(c.ctx, &spec, nullptr, nullptr) ==
      FLASHJIT_STATUS_INVALID_ARGUMENT);
  // API version 9's seqlen hint: a negative one is refused; a struct of
  // version 7 (it ends before the hint) still reads.
  flashjit_backward_options_init(&options);
  options.seqlen = -1;
  CHECK(flashjit_backward_compile_with_options(c.ctx, &spec, &options, &none) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "backward options seqlen is -1"));
  options.seqlen = 512;
  CHECK(flashjit_backward_compile_with_options(c.ctx, &spec, &options, &none) ==
        FLASHJIT_STATUS_OK);
  CHECK(flashjit_backward_release(none) == FLASHJIT_STATUS_OK);
  flashjit_backward_options_init(&options);
  options.struct_size = offsetof(flashjit_backward_options_t, seqlen);
  CHECK(flashjit_backward_compile_with_options(c.ctx, &spec, &options, &none) ==
        FLASHJIT_STATUS_OK);
  CHECK(flashjit_backward_release(none) == FLASHJIT_STATUS_OK);
  for (flashjit_backward_t h : {plain, det, byNull})
    CHECK(flashjit_backward_release(h) == FLASHJIT_STATUS_OK);
}

TEST_CASE("the backward of a spec with mods through the C API: its "
          "captured tensors are checked") {
  Ctx c;
  flashjit_attention_spec_t spec = smallSpec();
  spec.causal = 1;
  // ALiBi-like: a slope per head, captured [4] f32.
  const char *scoreMod =
      "func.func @m(%s: f32, %b: index, %h: index, %q: index, %kv: index, "
      "%sl: tensor<4xf32>) -> f32 {\n"
      "  %x = tensor.extract %sl[%h] : tensor<4xf32>\n"
      "  %r = arith.addf %s, %x : f32\n  return %r : f32\n}";
  spec.score_mod = scoreMod;
  spec.num_captures = 1;
  spec.capture_dtype[0] = FLASHJIT_CAPTURE_F32;
  spec.capture_rank[0] = 1;
  spec.capture_shape[0][0] = 4;
  uint64_t bytes = 0;
  flashjit_backward_t backward = compiledBackward(c, spec, bytes);
  Args a;
  Gradients g;
  Tensor &dout = g.dout, &dq = g.dq, &dk = g.dk, &dv = g.dv;
  Tensor slopes(0xB0000000, {4}, kF32), wrong(0xB0000000, {5}, kF32);
  void *workspace = kWorkspace;
  auto run = [&](const DLTensor *captures, int32_t count) {
    return flashjit_backward_run_captures(
        backward, &a.q.dl, &a.k.dl, &a.v.dl, &a.o.dl, &a.lse.dl, &dout.dl,
        &dq.dl, &dk.dl, &dv.dl, workspace, bytes, NAN, captures, count,
        nullptr);
  };
  // The slopes are missing, of the wrong shape, or too many.
  CHECK(run(nullptr, 0) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "captured"));
  CHECK(run(&wrong.dl, 1) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "flashjit_backward_run_captures"));
  CHECK(run(&slopes.dl, 9) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "num_captures is 9"));
  // flashjit_backward_run passes none.
  CHECK(flashjit_backward_run(backward, &a.q.dl, &a.k.dl, &a.v.dl, &a.o.dl,
                              &a.lse.dl, &dout.dl, &dq.dl, &dk.dl, &dv.dl,
                              workspace, bytes, NAN, nullptr) ==
        FLASHJIT_STATUS_INVALID_ARGUMENT);
  if (!driverLoadable()) {
    CHECK(run(&slopes.dl, 1) == FLASHJIT_STATUS_NO_DEVICE);
    CHECK(has(lastError(), "no GPU is available"));
  }
  CHECK(flashjit_backward_release(backward) == FLASHJIT_STATUS_OK);
}

TEST_CASE("the backward of a block-sparse spec through the C API: its "
          "transposed lists are checked") {
  Ctx c;
  flashjit_attention_spec_t spec = smallSpec();
  spec.sparse_block_m = spec.sparse_block_n = 128;
  uint64_t bytes = 0;
  flashjit_backward_t backward = compiledBackward(c, spec, bytes);
  Args a;
  Gradients g;
  // One key block of 40 keys, one query block: [2, 4, 1] and [2, 4, 1, 1].
  Tensor counts(0xC0000000, {2, 4, 1}, kI32),
      indices(0xC1000000, {2, 4, 1, 1}, kI32),
      forwardShaped(0xC2000000, {2, 4, 1, 2}, kI32);
  auto run = [&](const DLTensor *num, const DLTensor *idx) {
    return flashjit_backward_run_block_sparse(
        backward, &a.q.dl, &a.k.dl, &a.v.dl, &a.o.dl, &a.lse.dl, &g.dout.dl,
        &g.dq.dl, &g.dk.dl, &g.dv.dl, kWorkspace, bytes, NAN, nullptr, 0, num,
        idx, nullptr, nullptr, nullptr);
  };
  CHECK(run(nullptr, nullptr) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "q_num_blocks and q_indices"));
  CHECK(run(&counts.dl, &counts.dl) == FLASHJIT_STATUS_INVALID_ARGUMENT);
  CHECK(has(lastError(), "q_indices has shape"));
  if (!driverLoadable()) {
    CHECK(run(&counts.dl, &indices.dl) == FLASHJIT_STATUS_NO_DEVICE);
    CHECK(run(&counts.dl, &forwardShaped.dl) == FLASHJIT_STATUS_NO_DEVICE);
  }
  CHECK(flashjit_backward_release(backward) == FLASHJIT_STATUS_OK);
}
