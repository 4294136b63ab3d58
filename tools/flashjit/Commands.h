//===- Commands.h - the subcommands of `flashjit` ----------------*- C++ -*-===//
// Why: each subcommand lives in its own file with its own options; main()
// only dispatches. Options shared by several subcommands are declared here.
#ifndef FLASHJIT_TOOLS_COMMANDS_H
#define FLASHJIT_TOOLS_COMMANDS_H

#include "flashjit/Compiler/Compiler.h"
#include "flashjit/Compiler/ModInterpreter.h"
#include "flashjit/Dialect/AttentionSpec.h"
#include "flashjit/Templates/Target.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"
#include <memory>
#include <nlohmann/json_fwd.hpp>

namespace flashjit {
class Context;
} // namespace flashjit

namespace flashjit::tools {

extern llvm::cl::OptionCategory category;
extern llvm::cl::SubCommand compileCommand, infoCommand, runCommand,
    cacheCommand, autotuneCommand;

int runCompile();
int runInfo();
int runRun();
int runCache();
int runAutotune();

/// The attention described by --head-dim, --dtype, --causal, --heads,
/// --kv-heads and the variant options (--window, --causal-align, --alibi,
/// --softcap, --documents, --prefix-lm, --score-mod, --mask-mod,
/// --sparse-block, --block-sparse), shared by compile and run.
llvm::Expected<AttentionSpec> specFromOptions();
/// The fraction of key blocks a random block mask lists (--block-sparse);
/// none when only --sparse-block is given: the mask is built on the GPU.
std::optional<double> randomBlockDensity();
/// Host data for the spec's captured tensors of the preset variants
/// (presets::sampleCaptures with --documents), for a run of `batch`
/// sequences of `seqlen` queries and keys.
llvm::Expected<std::vector<HostCapture>>
capturesFromOptions(const AttentionSpec &spec, int64_t batch, int64_t seqlenQ,
                    int64_t seqlenK, uint64_t seed);
/// --arch, or the local GPU's chip, or sm_90a when there is no GPU.
llvm::Expected<Target> targetFromOptions(llvm::StringRef arch);
/// --decode was given (DecodeCommand.cpp): compile and run build the
/// decode kernels of decodeSpecFromOptions() instead.
bool decodeRequested();
llvm::Expected<CompiledKernel>
compileDecodeFromOptions(const CompileOptions &options);
/// The settings `run --decode` shares with `run`.
struct DecodeRunSettings {
  int64_t batch = 1;
  uint64_t seed = 1;
  std::optional<double> scale;
  int warmup = 0, iterations = 0;
  bool json = false;
  /// Rows compared with the reference (0: all).
  int64_t checkRows = 0;
};
/// `run --decode`: 0 when the check passed, 2 when it failed, 1 on errors.
int runDecode(const DecodeRunSettings &settings);

/// --backward (RunCommand.cpp): run checks the backward pass, compile
/// prints its kernels; --backward-config names their tile config.
bool backwardRequested();
const std::string &backwardConfigOption();
/// --varlen was given (VarlenCommand.cpp): the spec is varlen
/// (AttentionSpec::varlen), and run checks a packed batch.
bool varlenRequested();
/// --page-size (DecodeCommand.cpp): decode's cache, and a varlen spec's
/// paged K/V (AttentionSpec::pageSize).
int64_t pageSizeOption();
/// The settings `run --varlen` shares with `run`.
struct VarlenRunSettings {
  uint64_t seed = 1;
  std::optional<double> scale;
  int warmup = 0, iterations = 0;
  bool json = false;
  /// Rows per (sequence, head) compared with the reference.
  int64_t checkRows = 16;
  /// --config: a tile config or a family.
  std::string config;
  /// --backward: check and time the backward on the packed batch instead
  /// of the forward; --backward-config: its tile config.
  bool backward = false;
  std::string backwardConfig;
  /// --deterministic with --backward.
  bool deterministic = false;
  /// --check-kv-groups: (sequence, KV head) groups the backward's check
  /// compares (0: all).
  int64_t checkedGroups = 0;
};
/// `run --varlen LENGTHS [--varlen-k LENGTHS]`: 0 when the check passed,
/// 1 on errors or a failed check.
int runVarlen(const AttentionSpec &spec, const VarlenRunSettings &settings);

/// The spec's shape fields of the commands' --json reports: heads,
/// kv_heads, head_dim, dtype, causal, causal_align.
nlohmann::json specFields(const AttentionSpec &spec);

/// The build that produced a --json report: "flashjit" (the version) and
/// "generator" (generatorId(): it differs between builds whose kernels
/// may differ), so an A/B of two builds can tell whether both ran.
nlohmann::json buildFields();

/// A Context on the local GPU for `run`; an error ("no GPU: ...") where
/// there is none.
llvm::Expected<std::unique_ptr<Context>> gpuContext();

/// Prints "flashjit <command>: error: <message>" and returns 1.
int reportError(llvm::StringRef command, llvm::Error err);

} // namespace flashjit::tools

#endif
