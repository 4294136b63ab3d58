// Why: every bad forward() argument gets its own message, before any
// device call: tested here on fake (never dereferenced) pointers.
#include "flashjit/Runtime/ForwardChecks.h"

#include <doctest/doctest.h>
#include <cmath>
#include <functional>

using namespace flashjit;

namespace {
AttentionSpec spec() {
  AttentionSpec s;
  s.headDim = 64;
  s.numHeads = 4;
  s.numKVHeads = 2;
  return s;
}
void *fake(uintptr_t offsetMiB) {
  return reinterpret_cast<void *>((uintptr_t(1) << 40) + (offsetMiB << 20));
}
ForwardArgs good() {
  AttentionSpec s = spec();
  ForwardArgs a;
  a.q = TensorRef::bshd(fake(0), DType::BF16, 2, 4, 100, 64);
  a.k = TensorRef::bshd(fake(1), DType::BF16, 2, 2, 120, 64);
  a.v = TensorRef::bhsd(fake(2), DType::BF16, 2, 2, 120, 64);
  a.o = TensorRef::bhsd(fake(3), DType::BF16, 2, 4, 100, 64);
  a.lse = LseRef::contiguous(static_cast<float *>(fake(4)), 2, 4, 100);
  (void)s;
  return a;
}
std::string check(const ForwardArgs &a) {
  llvm::Error err = checkForwardArgs(spec(), a);
  return err ? llvm::toString(std::move(err)) : "";
}
} // namespace

TEST_CASE("good arguments pass, in BSHD and BHSD") { CHECK(check(good()) == ""); }

TEST_CASE("each bad argument has its message") {
  struct Case {
    std::function<void(ForwardArgs &)> mutate;
    const char *message;
  };
  const Case cases[] = {
      {[](ForwardArgs &a) { a.k.data = nullptr; }, "k is a null pointer"},
      {[](ForwardArgs &a) { a.q.data = static_cast<char *>(a.q.data) + 8; },
       "is not 16-byte aligned"},
      {[](ForwardArgs &a) { a.o.dtype = DType::F16; },
       "o is f16 but the kernel was compiled for bf16"},
      {[](ForwardArgs &a) { a.q.shape[3] = a.k.shape[3] = a.v.shape[3] = a.o.shape[3] = 128; },
       "q head dim is 128 but the kernel was compiled for head dim 64"},
      {[](ForwardArgs &a) { a.q.strides[3] = 2; }, "q head-dim stride is 2"},
      {[](ForwardArgs &a) { a.v.strides[2] = 68; }, "must be non-negative multiples of 8"},
      {[](ForwardArgs &a) { a.k.shape[0] = 3; }, "batch sizes differ: q 2, k 3, v 2"},
      {[](ForwardArgs &a) { a.v.shape[2] = 7; }, "k has seqlen 120 but v has 7"},
      {[](ForwardArgs &a) { a.q.shape[1] = 8; }, "q has 8 heads but the kernel was compiled for 4"},
      {[](ForwardArgs &a) { a.k.shape[1] = 1; }, "k and v have 1 and 2 heads"},
      {[](ForwardArgs &a) { a.o.shape[2] = 99; }, "o shape [2, 4, 99, 64] must equal q shape"},
      {[](ForwardArgs &a) { a.q.shape[2] = a.o.shape[2] = 0; }, "has an empty dimension"},
      {[](ForwardArgs &a) { a.lse.data = nullptr; }, "lse is a null pointer"},
      {[](ForwardArgs &a) { a.lse.shape[1] = 3; }, "lse shape [2, 3, 100] must be"},
      {[](ForwardArgs &a) { a.o.strides[1] = 0; }, "o strides [25600, 0, 64, 1] make distinct outputs share memory"},
      {[](ForwardArgs &a) { a.lse.strides = {1, 1, 1}; }, "lse strides [1, 1, 1] make distinct outputs share memory"},
      {[](ForwardArgs &a) { a.o.data = a.v.data; }, "the outputs overlap input v"},
      {[](ForwardArgs &a) { a.lse.data = static_cast<float *>(a.o.data); }, "o and lse overlap in memory"},
      {[](ForwardArgs &a) { a.scale = NAN; },
       "scale must be a positive finite number"},
      {[](ForwardArgs &a) { a.scale = -0.125; },
       "scale must be a positive finite number"},
      {[](ForwardArgs &a) { a.scale = 0.0; },
       "scale must be a positive finite number"},
  };
  for (const Case &c : cases) {
    ForwardArgs a = good();
    c.mutate(a);
    std::string message = check(a);
    INFO(c.message);
    INFO(message);
    CHECK(message.find(c.message) != std::string::npos);
  }
}

TEST_CASE("broadcast inputs (stride 0) are allowed") {
  ForwardArgs a = good();
  a.k.strides[0] = 0;
  a.v.strides[0] = 0;
  CHECK(check(a) == "");
}

TEST_CASE("a block mask is checked against the spec and the problem") {
  AttentionSpec sparse = spec();
  sparse.sparseBlockM = 64;
  sparse.sparseBlockN = 32;
  // q: 100 rows -> 2 query blocks; k: 120 keys -> 4 key blocks.
  auto withMask = [](bool full) {
    ForwardArgs a = good();
    a.blockMask.kvNumBlocks =
        CapturedRef::contiguous(fake(5), CaptureDType::I32, {2, 4, 2});
    a.blockMask.kvIndices =
        CapturedRef::contiguous(fake(6), CaptureDType::I32, {2, 4, 2, 4});
    if (full) {
      a.blockMask.fullKvNumBlocks =
          CapturedRef::contiguous(fake(7), CaptureDType::I32, {1, 1, 2});
      a.blockMask.fullKvIndices =
          CapturedRef::contiguous(fake(8), CaptureDType::I32, {1, 4, 2, 5});
    }
    return a;
  };
  auto checkSparse = [&](const ForwardArgs &a) {
    llvm::Error err = checkForwardArgs(sparse, a);
    return err ? llvm::toString(std::move(err)) : std::string();
  };
  CHECK(checkSparse(withMask(false)) == "");
  CHECK(checkSparse(withMask(true)) == "");
  // A dense kernel takes no mask; a sparse one needs its partial lists.
  CHECK(check(withMask(false)).find("not block-sparse") != std::string::npos);
  CHECK(checkSparse(good()).find("needs kv_num_blocks and kv_indices") !=
        std::string::npos);
  struct Case {
    std::function<void(ForwardArgs &)> mutate;
    const char *message;
  };
  const Case cases[] = {
      {[](ForwardArgs &a) { a.blockMask.kvNumBlocks.shape[2] = 3; },
       "kv_num_blocks has shape [2, 4, 3]: expected [2 or 1, 4 or 1, 2]"},
      {[](ForwardArgs &a) { a.blockMask.kvIndices.shape[3] = 3; },
       "kv_indices has shape [2, 4, 2, 3]: expected [2 or 1, 4 or 1, 2, 4 "
       "or more]"},
      {[](ForwardArgs &a) { a.blockMask.kvIndices.shape[1] = 2; },
       "kv_indices has shape [2, 2, 2, 4]"},
      {[](ForwardArgs &a) { a.blockMask.kvIndices.dtype = CaptureDType::F32; },
       "kv_indices is f32: expected i32"},
      {[](ForwardArgs &a) { a.blockMask.fullKvIndices.data = nullptr; },
       "full_kv_num_blocks and full_kv_indices come together"},
      {[](ForwardArgs &a) {
         a.blockMask.fullKvNumBlocks.data =
             static_cast<const char *>(a.blockMask.fullKvNumBlocks.data) + 2;
       },
       "full_kv_num_blocks is not 4-byte aligned"},
      {[](ForwardArgs &a) { a.blockMask.kvNumBlocks.strides[0] = -1; },
       "negative stride"},
  };
  for (const Case &c : cases) {
    ForwardArgs a = withMask(true);
    c.mutate(a);
    std::string message = checkSparse(a);
    INFO("expected: " << c.message << "\ngot: " << message);
    CHECK(message.find(c.message) != std::string::npos);
  }
}
