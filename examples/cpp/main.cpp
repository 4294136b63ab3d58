//===- main.cpp - embedding flashjit's C++ API ----------------------------===//
// Why: the smallest C++ program that embeds flashjit through FlashJIT.h. It
// opens a context (which works without a GPU: kernels still compile to
// PTX), compiles a causal bf16 GQA kernel, prints where its tile config came
// from, and shows how a refused spec reports its ErrorCode. Exits 0 with or
// without a GPU.
#include <flashjit/FlashJIT.h>

#include <cstdio>
#include <string>

int main() {
  auto ctx = flashjit::Context::create();
  if (!ctx) {
    std::fprintf(stderr, "Context::create: %s\n",
                 llvm::toString(ctx.takeError()).c_str());
    return 1;
  }
  flashjit::Context &context = **ctx;
  if (context.device())
    std::printf("device %s: kernels for %s\n", context.device()->name.c_str(),
                context.target().chip.c_str());
  else
    std::printf("no GPU (%s): compiling for %s only\n",
                context.deviceError().c_str(), context.target().chip.c_str());

  flashjit::AttentionSpec spec;
  spec.headDim = 128;
  spec.causal = true;
  spec.numHeads = 16;
  spec.numKVHeads = 4;
  auto kernel = context.compile(spec);
  if (!kernel) {
    flashjit::ErrorParts parts = flashjit::takeErrorParts(kernel.takeError());
    std::fprintf(stderr, "compile: %s: %s\n",
                 flashjit::errorCodeName(parts.code), parts.message.c_str());
    return 1;
  }
  const flashjit::Kernel &k = **kernel;
  std::printf("compiled %s: %zu bytes of PTX, tile config %s (%s%s%s)\n",
              spec.kernelName().c_str(), k.ptx().size(),
              k.info().config.canonical().c_str(),
              flashjit::configSourceName(k.configOrigin().source),
              k.configOrigin().detail.empty() ? "" : ": ",
              k.configOrigin().detail.c_str());
  if (context.device())
    std::printf("loaded on the GPU: Kernel::forward runs it on device "
                "tensors\n");
  else
    std::printf("without a GPU, Kernel::forward returns a %s error\n",
                flashjit::errorCodeName(flashjit::ErrorCode::NoDevice));

  // A spec no template handles comes back as an error with its kind; the
  // message says why (one line per template here: the first is shown).
  spec.headDim = 48;
  auto refused = context.compile(spec);
  if (refused) {
    std::fprintf(stderr, "head dim 48 compiled, which it should not\n");
    return 1;
  }
  flashjit::ErrorParts parts = flashjit::takeErrorParts(refused.takeError());
  std::string firstLine = parts.message.substr(0, parts.message.find('\n'));
  std::printf("head dim 48: %s (%s)\n", flashjit::errorCodeName(parts.code),
              firstLine.c_str());
  return parts.code == flashjit::ErrorCode::Unsupported ? 0 : 1;
}
