//===- CompileCommand.cpp - `flashjit compile` ----------------------------===//
// Why: the command-line face of compileAttention: a description in, PTX (or
// the IR of any stage) out, with a summary for scripts (--json).
#include "Commands.h"

#include "flashjit/Autotune/Heuristic.h"
#include "flashjit/Compiler/Compiler.h"
#include "flashjit/Compiler/ConfigChoice.h"
#include "flashjit/Templates/MmaSyncBackward.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"
#include <nlohmann/json.hpp>

#include <chrono>

namespace cl = llvm::cl;

namespace flashjit::tools {

static cl::opt<std::string> input(cl::Positional,
                                  cl::desc("[description.mlir]"),
                                  cl::init(""), cl::sub(compileCommand));
static cl::opt<std::string> arch(
    "arch",
    cl::desc("sm_80, sm_86, sm_89, sm_90 or sm_90a (default: the local GPU, "
             "else sm_90a)"),
    cl::init(""), cl::sub(compileCommand), cl::cat(category));
static cl::opt<std::string> emit("emit",
                                 cl::desc("attn, kernel, llvm or ptx"),
                                 cl::init("ptx"), cl::sub(compileCommand),
                                 cl::cat(category));
static cl::opt<std::string> output("o", cl::desc("Output file (default: stdout)"),
                                   cl::init("-"), cl::sub(compileCommand),
                                   cl::cat(category));
static cl::opt<bool> explain("explain",
                             cl::desc("Print the tile configs considered and "
                                      "why one was chosen (to stdout)"),
                             cl::sub(compileCommand), cl::cat(category));
static cl::opt<std::string> device(
    "device",
    cl::desc("Known GPU for the tile-size heuristic (e.g. h100, a100, t4); "
             "default: the reference GPU of --arch"),
    cl::init(""), cl::sub(compileCommand), cl::cat(category));
static cl::opt<std::string> configText(
    "config",
    cl::desc("Build this tile config (e.g. mma_sync:m128:n48:s1:w4), or the "
             "heuristic's choice within this kernel family (e.g. mma_sync), "
             "instead of the heuristic's overall choice"),
    cl::init(""), cl::sub(compileCommand), cl::cat(category));
static cl::opt<int64_t> seqlenHint(
    "seqlen",
    cl::desc("Sequence length the heuristic chooses the tile config for "
             "(default: 2048; see --explain)"),
    cl::init(0), cl::sub(compileCommand), cl::cat(category));
static cl::opt<bool> json("json",
                          cl::desc("Print a JSON summary instead of the text "
                                   "(the text goes to -o when given)"),
                          cl::sub(compileCommand), cl::cat(category));

static int
writeCompiled(llvm::Expected<CompiledKernel> &kernel, const Target &target,
              Stage stage, std::chrono::steady_clock::time_point start);

int runCompile() {
  auto target = targetFromOptions(arch);
  if (!target)
    return reportError("compile", target.takeError());
  auto stage = parseStage(emit);
  if (!stage)
    return reportError("compile", stage.takeError());
  if (seqlenHint < 0)
    return reportError("compile", llvm::createStringError(
                                      "--seqlen must be at least 1 (or 0 for "
                                      "the default hint), got " +
                                      std::to_string(seqlenHint)));
  CompileOptions options;
  options.target = *target;
  options.stopAfter = *stage;

  auto start = std::chrono::steady_clock::now();
  llvm::Expected<CompiledKernel> kernel =
      llvm::createStringError("nothing compiled");
  if (backwardRequested() && (decodeRequested() || !input.empty())) {
    llvm::consumeError(kernel.takeError());
    return reportError("compile",
                       llvm::createStringError(
                           "--backward builds the backward of the spec the "
                           "options describe (--head-dim, --causal, "
                           "--varlen, ...), not of a decode step or a "
                           "description file"));
  }
  if (decodeRequested()) {
    llvm::consumeError(kernel.takeError());
    kernel = compileDecodeFromOptions(options);
  } else if (!input.empty()) {
    llvm::consumeError(kernel.takeError());
    auto buffer = llvm::MemoryBuffer::getFileOrSTDIN(input);
    if (!buffer)
      return reportError("compile",
                         llvm::createStringError("cannot read '" + input +
                                                 "': " +
                                                 buffer.getError().message()));
    kernel = compileDescription((*buffer)->getBuffer(), options);
  } else {
    auto spec = specFromOptions();
    if (!spec)
      return reportError("compile", spec.takeError());
    if (backwardRequested()) {
      // The backward's own configs (wgmma_bwd, mma_sync_bwd): the one
      // named, else the template's default for the target.
      if (!backwardConfigOption().empty()) {
        auto config = TileConfig::parse(backwardConfigOption());
        if (!config)
          return reportError("compile", config.takeError());
        options.config = *config;
      } else {
        options.config = MmaSyncBackward::defaultConfig(*spec, *target);
      }
      llvm::consumeError(kernel.takeError());
      kernel = compileBackward(*spec, options);
      return writeCompiled(kernel, *target, *stage, start);
    }
    auto request = ConfigRequest::parse(configText);
    if (!request)
      return reportError("compile", request.takeError());
    if (request->config) {
      options.config = request->config;
    } else {
      auto choice = request->family
                        ? explainFamilyChoice(*spec, *target, device,
                                              *request->family, seqlenHint)
                        : explainTileConfig(*spec, *target, device,
                                            seqlenHint);
      if (!choice)
        return reportError("compile", choice.takeError());
      if (explain)
        llvm::outs() << autotune::renderChoiceText(*choice) << "\n";
      options.config = choice->config;
    }
    llvm::consumeError(kernel.takeError());
    kernel = compileAttention(*spec, options);
  }
  return writeCompiled(kernel, *target, *stage, start);
}

/// Writes what runCompile built (-o, --json) and reports it.
static int
writeCompiled(llvm::Expected<CompiledKernel> &kernel, const Target &target,
              Stage stage, std::chrono::steady_clock::time_point start) {
  if (!kernel)
    return reportError("compile", kernel.takeError());
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();

  bool toStdout = output == "-";
  if (!(json && toStdout)) {
    std::error_code ec;
    llvm::ToolOutputFile out(output, ec, llvm::sys::fs::OF_None);
    if (ec)
      return reportError("compile", llvm::createStringError(
                                        "cannot write '" + output +
                                        "': " + ec.message()));
    out.os() << kernel->text;
    out.keep();
  }
  const KernelInfo &info = kernel->info;
  if (json) {
    nlohmann::json j = {
        {"kernel", info.name},
        {"arch", target.chip},
        {"stage", stageName(stage)},
        {"config",
         {{"family", info.config.family},
          {"block_m", info.config.blockM},
          {"block_n", info.config.blockN},
          {"stages", info.config.stages},
          {"warps", info.config.warps}}},
        {"threads_per_block", info.threadsPerBlock},
        {"shared_memory_bytes", info.sharedMemoryBytes},
        {"bytes", kernel->text.size()},
        {"compile_seconds", seconds},
        {"output", toStdout ? nlohmann::json() : nlohmann::json(output)}};
    j.update(buildFields());
    llvm::outs() << j.dump(2) << "\n";
  } else if (!toStdout) {
    llvm::errs() << "wrote " << stageName(stage) << " of " << info.name
                 << " for " << target.chip << " to " << output << " ("
                 << kernel->text.size() << " bytes, "
                 << llvm::format("%.3f", seconds) << " s, config "
                 << info.config.canonical() << ")\n";
  }
  return 0;
}

} // namespace flashjit::tools
