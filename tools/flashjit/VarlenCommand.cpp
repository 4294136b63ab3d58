//===- VarlenCommand.cpp - `flashjit compile|run --varlen` ----------------===//
// Why: varlen kernels (AttentionSpec::varlen) from the command line:
// `compile --varlen` prints their PTX, `run --varlen 17,0,1000` checks a
// packed batch of those lengths against the float64 reference and times it;
// with --page-size the keys come from a paged cache (chunked prefill); with
// --backward it checks and times the backward of the batch instead.
#include "Commands.h"
#include "RunBackward.h"

#include "flashjit/Backward.h"
#include "flashjit/DevTools/VarlenBackwardCheck.h"
#include "flashjit/DevTools/VarlenHarness.h"
#include "flashjit/FlashJIT.h"
#include "flashjit/Runtime/KernelCache.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>

namespace cl = llvm::cl;

namespace flashjit::tools {

static cl::opt<bool> varlenKernel(
    "varlen",
    cl::desc("The varlen kernel (packed sequences, AttentionSpec::varlen)"),
    cl::sub(compileCommand), cl::cat(category));
static cl::opt<std::string>
    varlen("varlen",
           cl::desc("Variable-length batch: the query length of each packed "
                    "sequence (comma list, 0 allowed, e.g. 17,0,1000)"),
           cl::sub(runCommand), cl::cat(category));
static cl::opt<std::string>
    varlenK("varlen-k",
            cl::desc("With --varlen: the key length of each sequence "
                     "(chunked prefill: at least its query length, causal "
                     "from the bottom right); default: the query lengths"),
            cl::sub(runCommand), cl::cat(category));

/// `run --varlen ... --backward`: the backward of the packed batch,
/// checked and timed.
static int runVarlenBackward(Context &ctx, const AttentionSpec &spec,
                             const Kernel &forward,
                             const std::vector<int64_t> &lengthsQ,
                             const std::vector<int64_t> &lengthsK,
                             const VarlenRunSettings &settings) {
  // The longest sequence picks the tuned backward bucket.
  auto options = backwardRunOptions(
      settings.backwardConfig, settings.deterministic,
      std::max<int64_t>(1, *std::max_element(lengthsQ.begin(),
                                             lengthsQ.end())));
  if (!options)
    return reportError("run", options.takeError());
  auto start = std::chrono::steady_clock::now();
  auto backward = ctx.compileBackward(spec, *options);
  if (!backward)
    return reportError("run", backward.takeError());
  double compileMs = std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - start)
                         .count();
  VarlenBackwardCheckOptions check;
  check.lengthsQ = lengthsQ;
  check.lengthsK = lengthsK;
  check.seed = settings.seed;
  check.scale = settings.scale;
  check.checkedGroups = settings.checkedGroups;
  check.warmup = settings.warmup;
  check.iterations = settings.iterations;
  auto report = runAndCheckVarlenBackward(forward, **backward, check);
  if (!report)
    return reportError("run", report.takeError());
  const BackwardCheckReport &r = report->check;
  const KernelInfo &info = (*backward)->info();
  if (settings.json) {
    nlohmann::json j = {{"kernel", info.name},
                        {"pass", "backward"},
                        {"device", ctx.device()->name},
                        {"config", info.config.canonical()},
                        {"forward_config", forward.info().config.canonical()},
                        {"sequences", report->sequences},
                        {"total_q", report->totalQ},
                        {"total_k", report->totalK},
                        {"max_seqlen_k", report->maxSeqlenK},
                        {"seed", settings.seed},
                        {"compile_ms", compileMs},
                        {"dq_rel_error", r.dqError},
                        {"dk_rel_error", r.dkError},
                        {"dv_rel_error", r.dvError},
                        {"max_abs_error", r.maxAbsError},
                        {"non_finite", r.nonFinite},
                        {"written_outside", report->writtenOutside},
                        {"checked_kv_groups", r.checkedGroups},
                        {"tolerance", r.tolerance},
                        {"passed", r.passed},
                        {"median_ms", r.medianMs},
                        {"tflops", r.tflops}};
    j.update(specFields(spec));
    j.update(buildFields());
    llvm::outs() << j.dump(2) << "\n";
  } else {
    llvm::outs() << info.name << " on " << ctx.device()->name << " ("
                 << info.config.canonical() << "; forward "
                 << forward.info().config.canonical() << ")\n"
                 << "  varlen: " << report->sequences << " sequences, "
                 << report->totalQ << " query and " << report->totalK
                 << " key tokens, longest key sequence " << report->maxSeqlenK
                 << "\n"
                 << "  backward kernels ready in "
                 << llvm::format("%.2f", compileMs) << " ms\n"
                 << "  check: " << r.summary() << ", "
                 << report->writtenOutside
                 << " words written past the gradients\n";
    if (check.iterations > 0)
      printBackwardTime(r.medianMs, check.iterations, r.tflops);
  }
  // passed counts words written past the gradients too.
  return r.passed ? 0 : 1;
}

bool varlenRequested() {
  return varlenKernel || varlen.getNumOccurrences() > 0;
}

int runVarlen(const AttentionSpec &spec, const VarlenRunSettings &settings) {
  auto lengthsQ = parseVarlenLengths(varlen);
  if (!lengthsQ)
    return reportError("run", lengthsQ.takeError());
  std::vector<int64_t> lengthsK;
  if (!varlenK.empty()) {
    auto parsed = parseVarlenLengths(varlenK);
    if (!parsed)
      return reportError("run", parsed.takeError());
    lengthsK = std::move(*parsed);
    if (lengthsK.size() != lengthsQ->size())
      return reportError(
          "run", llvm::createStringError(llvm::formatv(
                     "--varlen gives {0} sequences but --varlen-k {1}",
                     lengthsQ->size(), lengthsK.size()).str()));
  }
  auto request = ConfigRequest::parse(settings.config);
  if (!request)
    return reportError("run", request.takeError());
  auto ctx = gpuContext();
  if (!ctx)
    return reportError("run", ctx.takeError());
  auto start = std::chrono::steady_clock::now();
  KernelOptions options;
  // The longest sequence picks the tuning bucket and length class.
  options.seqlen =
      std::max<int64_t>(1, *std::max_element(lengthsQ->begin(), lengthsQ->end()));
  options.config = request->config;
  options.family = request->family;
  options.perLengthConfig = false;
  auto kernel = (*ctx)->compile(spec, options);
  if (!kernel)
    return reportError("run", kernel.takeError());
  double compileMs = std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - start)
                         .count();

  if (settings.backward)
    return runVarlenBackward(**ctx, spec, **kernel, *lengthsQ, lengthsK,
                             settings);

  VarlenCheckOptions check;
  check.lengthsQ = *lengthsQ;
  check.lengthsK = lengthsK;
  check.seed = settings.seed;
  check.rowsPerSequence = settings.checkRows;
  check.scale = settings.scale;
  check.warmup = settings.warmup;
  check.iterations = settings.iterations;
  auto report = runAndCheckVarlen(**kernel, check);
  if (!report)
    return reportError("run", report.takeError());
  const CheckReport &r = report->check;
  const KernelInfo &info = (*kernel)->info();
  if (settings.json) {
    nlohmann::json j = {
        {"kernel", info.name},
        {"device", (*ctx)->device()->name},
        {"config", info.config.canonical()},
        {"config_source", configSourceName((*kernel)->configOrigin().source)},
        {"sequences", report->sequences},
        {"total_q", report->totalQ},
        {"total_k", report->totalK},
        {"max_seqlen_q", report->maxSeqlenQ},
        {"page_size", spec.pageSize},
        {"pool_pages", report->poolPages},
        {"max_pages", report->maxPages},
        {"seed", settings.seed},
        {"compile_ms", compileMs},
        {"rel_error", r.relError},
        {"lse_rel_error", r.lseRelError},
        {"max_abs_error", r.maxAbsError},
        {"non_finite", r.nonFinite},
        {"written_outside", report->writtenOutside},
        {"checked_rows", r.checkedRows},
        {"tolerance", r.tolerance},
        {"passed", r.passed},
        {"median_ms", r.medianMs},
        {"tflops", r.tflops}};
    j.update(specFields(spec));
    j.update(buildFields());
    llvm::outs() << j.dump(2) << "\n";
  } else {
    llvm::outs() << info.name << " on " << (*ctx)->device()->name << " ("
                 << info.config.canonical() << ", "
                 << configSourceName((*kernel)->configOrigin().source)
                 << ")\n"
                 << "  varlen: " << report->sequences << " sequences, "
                 << report->totalQ << " query and " << report->totalK
                 << " key tokens, longest query " << report->maxSeqlenQ;
    if (spec.paged())
      llvm::outs() << "; keys in pages of " << spec.pageSize << " (pool of "
                   << report->poolPages << ", " << report->maxPages
                   << " per table row, shuffled)";
    llvm::outs() << "\n"
                 << "  kernel ready in " << llvm::format("%.2f", compileMs)
                 << " ms\n"
                 << "  check: " << r.summary() << ", "
                 << report->writtenOutside
                 << " words written past the outputs\n";
    if (check.iterations > 0)
      llvm::outs() << "  time: " << llvm::format("%.3f", r.medianMs)
                   << " ms median of " << check.iterations << ", "
                   << llvm::format("%.1f", r.tflops) << " TFLOP/s\n";
  }
  return r.passed ? 0 : 1;
}

} // namespace flashjit::tools
