//===- Compiler.cpp - spec -> description -> pipeline -> PTX --------------===//
// Why: the single entry of the runtime and the CLI into MLIR. It validates
// everything LLVM would abort on, runs the pipeline in a private context,
// and turns diagnostics into errors.
#include "flashjit/Compiler/Compiler.h"
#include "flashjit/Compiler/ConfigAttr.h"
#include "flashjit/Compiler/ConfigChoice.h"
#include "flashjit/Compiler/Description.h"
#include "flashjit/Compiler/ParserGuard.h"
#include "flashjit/Compiler/Pipeline.h"
#include "flashjit/Templates/BlockMaskKernel.h"
#include "flashjit/Templates/KernelTemplate.h"
#include "flashjit/Templates/MmaSyncBackward.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Parser/Parser.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <memory>
#include <mutex>

using namespace mlir;

namespace flashjit {

namespace {
struct StageName {
  Stage stage;
  const char *name;
};
constexpr StageName kStages[] = {{Stage::Description, "attn"},
                                 {Stage::Kernel, "kernel"},
                                 {Stage::LLVM, "llvm"},
                                 {Stage::PTX, "ptx"}};

/// The MLIR context compiles run in, one at a time. Registering and loading
/// the dialects costs tens of milliseconds, so a context serves many
/// compiles; but a context never frees what it interns (each kernel's PTX
/// is a string attribute, each parsed constant an attribute), so once the
/// pipeline ran `kernelsPerContext` times in it, or 4096 compiles stopped
/// before it (bad input interns little), the next compile gets a fresh
/// context: the process's memory stays bounded however much it compiles.
/// Multithreading is off: the pipeline works on one small module.
class SharedContext {
public:
  static SharedContext &get() {
    static SharedContext *shared = new SharedContext();
    return *shared;
  }

  std::mutex mutex;
  std::atomic<unsigned> kernelsPerContext{32};

  /// The context for the next compile; the caller holds `mutex`, and
  /// nothing of the previous compiles' is alive.
  MLIRContext &forNextCompile() {
    if (!context || kernels >= kernelsPerContext.load() ||
        compiles >= kCompilesPerContext) {
      context.reset();
      context = std::make_unique<MLIRContext>(makeRegistry(),
                                              MLIRContext::Threading::DISABLED);
      context->loadAllAvailableDialects();
      kernels = compiles = 0;
    }
    ++compiles;
    return *context;
  }

  /// The pipeline ran in the current context, through or not: either way
  /// it interned about a kernel's worth (the caller holds `mutex`).
  void pipelineRan() { ++kernels; }

private:
  static constexpr unsigned kCompilesPerContext = 4096;
  std::unique_ptr<MLIRContext> context;
  unsigned kernels = 0, compiles = 0;

  static DialectRegistry makeRegistry() {
    DialectRegistry registry;
    registerCompilerDialects(registry);
    return registry;
  }
};

/// A compile's hold on the shared context: the lock, and the context.
/// Declared before anything of the compile's that lives in the context
/// (modules, diagnostic handlers), so that all of it is gone before the
/// lock is released.
class ContextLease {
public:
  ContextLease()
      : lock(SharedContext::get().mutex),
        ctx(SharedContext::get().forNextCompile()) {}
  MLIRContext &context() { return ctx; }

private:
  std::lock_guard<std::mutex> lock;
  MLIRContext &ctx;
};

std::string printOp(Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  op->print(os);
  return text;
}

/// The PTX held by the module's gpu.binary.
llvm::Expected<std::string> extractPTX(ModuleOp module) {
  std::string ptx;
  module.walk([&](gpu::BinaryOp binary) {
    for (Attribute object : binary.getObjects())
      if (auto obj = dyn_cast<gpu::ObjectAttr>(object))
        ptx = obj.getObject().getValue().str();
  });
  if (ptx.empty())
    return llvm::createStringError("the pipeline produced no PTX");
  return ptx;
}
} // namespace

llvm::Expected<Stage> parseStage(llvm::StringRef name) {
  for (const StageName &s : kStages)
    if (name == s.name)
      return s.stage;
  return llvm::createStringError(
      llvm::formatv("unknown stage '{0}': expected attn, kernel, llvm or ptx",
                    name)
          .str());
}

const char *stageName(Stage stage) {
  for (const StageName &s : kStages)
    if (s.stage == stage)
      return s.name;
  return "?";
}

void setKernelsPerContext(unsigned kernels) {
  SharedContext::get().kernelsPerContext = kernels > 0 ? kernels : 1;
}

ToolchainVersions toolchainVersions() {
  return {FLASHJIT_VERSION_STRING, LLVM_VERSION_STRING, generatorId()};
}

namespace {
/// Runs the pipeline over `module` (built or parsed in a ContextLease's
/// context, whose lock the caller holds) and packages the result.
llvm::Expected<CompiledKernel>
runPipeline(MLIRContext &ctx, ModuleOp module, const AttentionSpec &spec,
            KernelInfo info, KernelKind kind, const Target &target,
            const CompileOptions &options, std::string &diagnostics) {
  PassManager pm(&ctx);
  pm.enableVerifier(options.verifyEachPass);
  buildAttentionPipeline(pm, target, "", options.stopAfter, kind);
  bool ran = succeeded(pm.run(module));
  SharedContext::get().pipelineRan();
  if (!ran)
    return llvm::createStringError("compiling " + spec.canonical() + " for " +
                                   target.chip + " failed:\n" + diagnostics);

  CompiledKernel result;
  result.info = std::move(info);
  if (options.stopAfter == Stage::PTX) {
    auto ptx = extractPTX(module);
    if (!ptx)
      return ptx.takeError();
    result.text = std::move(*ptx);
  } else {
    result.text = printOp(module);
  }
  return result;
}

/// What the runtime needs to launch the forward kernel `name` of `config`.
KernelInfo forwardKernelInfo(const AttentionSpec &spec,
                             const KernelTemplate &tmpl,
                             const TileConfig &config, llvm::StringRef name) {
  TemplateResources resources = tmpl.resources(spec, config);
  KernelInfo info;
  info.name = name.str();
  info.config = config;
  info.threadsPerBlock = resources.threadsPerBlock;
  info.sharedMemoryBytes = resources.sharedMemoryBytes;
  info.numHeads = spec.numHeads;
  return info;
}

/// Checks that a template supports the spec on the target with the config
/// (the chosen one when `config` is empty); everything LLVM or the verifier
/// would choke on is caught here.
llvm::Expected<const KernelTemplate *>
checkBuildable(const AttentionSpec &spec, const Target &target,
               TileConfig &config, bool chooseConfig) {
  if (auto err = spec.validate())
    return std::move(err);
  if (chooseConfig) {
    auto chosen = chooseTileConfig(spec, target, "");
    if (!chosen)
      return chosen.takeError();
    config = *chosen;
  }
  auto tmpl = findTemplate(config.family);
  if (!tmpl)
    return tmpl.takeError();
  if (auto err = (*tmpl)->supports(spec, target))
    return std::move(err);
  if (auto err = (*tmpl)->checkConfig(spec, config))
    return std::move(err);
  return *tmpl;
}

/// Collects the context's diagnostics into a string while alive.
struct DiagnosticCollector {
  std::string text;
  ScopedDiagnosticHandler handler;
  explicit DiagnosticCollector(MLIRContext &ctx)
      : handler(&ctx, [this](Diagnostic &diag) {
          llvm::raw_string_ostream os(text);
          os << diag.getLocation() << ": " << diag << "\n";
          return success();
        }) {}
};

/// The description of `spec` in `ctx`, or an error that carries the
/// diagnostics `diagnostics` collected while building it.
llvm::Expected<OwningOpRef<ModuleOp>>
describe(MLIRContext &ctx, const AttentionSpec &spec,
         const std::optional<TileConfig> &config,
         const DiagnosticCollector &diagnostics) {
  auto module = buildDescription(ctx, spec, config);
  if (!module)
    return llvm::createStringError(llvm::toString(module.takeError()) +
                                   (diagnostics.text.empty() ? "" : ":\n") +
                                   diagnostics.text);
  return module;
}
} // namespace

llvm::Expected<CompiledKernel> compileAttention(const AttentionSpec &spec,
                                                const CompileOptions &options) {
  auto target = Target::parse(options.target.chip);
  if (!target)
    return target.takeError();
  TileConfig config = options.config.value_or(TileConfig{});
  auto tmpl = checkBuildable(spec, *target, config, !options.config);
  if (!tmpl)
    return tmpl.takeError();

  ContextLease lease;
  DiagnosticCollector diagnostics(lease.context());
  auto module = describe(lease.context(), spec, config, diagnostics);
  if (!module)
    return module.takeError();
  return runPipeline(lease.context(), **module, spec,
                     forwardKernelInfo(spec, **tmpl, config, spec.kernelName()),
                     KernelKind::Forward, *target, options, diagnostics.text);
}

llvm::Expected<CompiledKernel>
compileBlockMaskKernel(const AttentionSpec &spec,
                       const CompileOptions &options) {
  auto target = Target::parse(options.target.chip);
  if (!target)
    return target.takeError();
  if (auto err = spec.validate())
    return std::move(err);
  if (!spec.isBlockSparse())
    return llvm::createStringError(
        "only a block-sparse spec has a block mask to build (set "
        "AttentionSpec::sparseBlockM and sparseBlockN): " +
        spec.canonical());
  ContextLease lease;
  DiagnosticCollector diagnostics(lease.context());
  auto module = describe(lease.context(), spec, std::nullopt, diagnostics);
  if (!module)
    return module.takeError();
  return runPipeline(
      lease.context(), **module, spec,
      blockMaskKernelInfo(spec, spec.kernelName() + "_block_mask"),
      KernelKind::BlockMask, *target, options, diagnostics.text);
}

llvm::Expected<CompiledKernel>
compileBackward(const AttentionSpec &spec, const CompileOptions &options) {
  auto target = Target::parse(options.target.chip);
  if (!target)
    return target.takeError();
  if (auto err = MmaSyncBackward::supports(spec, *target))
    return std::move(err);
  TileConfig config =
      options.config.value_or(MmaSyncBackward::defaultConfig(spec, *target));
  if (auto err = MmaSyncBackward::checkConfig(spec, config, *target))
    return std::move(err);
  ContextLease lease;
  DiagnosticCollector diagnostics(lease.context());
  auto module = describe(lease.context(), spec, config, diagnostics);
  if (!module)
    return module.takeError();
  return runPipeline(
      lease.context(), **module, spec,
      MmaSyncBackward::mainKernelInfo(spec, config, spec.kernelName()),
      KernelKind::Backward, *target, options, diagnostics.text);
}

llvm::Expected<CompiledKernel>
compileDecodeKernel(const DecodeSpec &spec, const CompileOptions &options) {
  auto target = Target::parse(options.target.chip);
  if (!target)
    return target.takeError();
  if (auto err = spec.validate())
    return std::move(err);
  ContextLease lease;
  DiagnosticCollector diagnostics(lease.context());
  // The kernels go straight into a gpu.module: decode has no description
  // op to lower (the pipeline starts after attn-lower-to-kernel).
  OpBuilder b(&lease.context());
  Location loc = b.getUnknownLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  module->getOperation()->setAttr(
      gpu::GPUDialect::getContainerModuleAttrName(), b.getUnitAttr());
  b.setInsertionPointToEnd(module->getBody());
  auto kernels = gpu::GPUModuleOp::create(b, loc, "flashjit_kernels");
  b.setInsertionPointToEnd(kernels.getBody());
  if (auto err = buildDecodeKernels(b, loc, spec, target->ptxVersion(),
                                        target->computeCapability))
    return std::move(err);
  if (failed(verify(*module)))
    return llvm::createStringError(
        "the decode builder built an invalid kernel for " + spec.canonical() +
        " (a flashjit bug: please report it):\n" + diagnostics.text);
  AttentionSpec attention = spec.attentionSpec();
  return runPipeline(lease.context(), *module, attention,
                     decodeKernelInfo(spec), KernelKind::Decode, *target,
                     options, diagnostics.text);
}


llvm::Expected<CompiledKernel> compileDescription(llvm::StringRef mlirText,
                                                  const CompileOptions &options) {
  auto target = Target::parse(options.target.chip);
  if (!target)
    return target.takeError();
  if (auto err = checkParserSafe(mlirText, "malformed MLIR input"))
    return std::move(err);
  ContextLease lease;
  DiagnosticCollector diagnostics(lease.context());
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(mlirText, &lease.context(), "input");
  if (!module)
    return llvm::createStringError("malformed MLIR input:\n" +
                                   diagnostics.text);
  SmallVector<attn::AttentionOp> ops;
  module->walk([&](attn::AttentionOp op) { ops.push_back(op); });
  if (ops.size() != 1)
    return llvm::createStringError(
        llvm::formatv("the input must hold exactly one attn.attention, it "
                      "holds {0}",
                      ops.size())
            .str());
  AttentionSpec spec = ops[0].getSpec();
  TileConfig config;
  if (auto attr = ops[0].getConfigAttr())
    config = fromAttr(attr);
  else if (options.config)
    config = *options.config;
  bool choose = !ops[0].getConfigAttr() && !options.config;
  auto tmpl = checkBuildable(spec, *target, config, choose);
  if (!tmpl)
    return tmpl.takeError();
  if (!ops[0].getConfigAttr())
    ops[0].setConfigAttr(toAttr(&lease.context(), config));
  auto func = ops[0]->getParentOfType<func::FuncOp>();
  std::string name = func ? func.getSymName().str() : spec.kernelName();
  return runPipeline(lease.context(), *module, spec,
                     forwardKernelInfo(spec, **tmpl, config, name),
                     KernelKind::Forward, *target, options, diagnostics.text);
}

} // namespace flashjit
