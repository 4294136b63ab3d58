//===- AutotuneCommand.cpp - `flashjit autotune` --------------------------===//
// Why: operators tune once per GPU model. This measures the candidates of
// every registered template on the local GPU for a set of shape buckets and
// merges the winners into the tuning database the runtime reads first;
// `--backward` does the same for the backward kernels (their own entries).
// `--dry-run` prints the plan without a GPU. Bad input (an unknown --gpu, a
// database that cannot be read, an empty bucket list, no GPU) is an error
// that says what to change; a candidate that fails to compile or run is
// only recorded.
#include "AutotuneDecode.h"
#include "AutotuneOutput.h"
#include "Commands.h"

#include "flashjit/Autotune/KnownGPUs.h"
#include "flashjit/Autotune/TuningDatabase.h"
#include "flashjit/Autotune/TuningPlan.h"
#include "flashjit/Autotune/TuningRun.h"
#include "flashjit/Compiler/ConfigChoice.h"
#include "flashjit/FlashJIT.h"
#include "flashjit/DevTools/Benchmark.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"
#include <nlohmann/json.hpp>

#include <random>

namespace cl = llvm::cl;

namespace flashjit::tools {

using autotune::BucketPlan;
using autotune::TuningDatabase;

static cl::opt<std::string> dbPath(
    "db",
    cl::desc("Tuning database to merge into: a file, or a folder for "
             "one file per GPU (default: <cache dir>/tuning/<gpu>.json)"),
    cl::init(""), cl::sub(autotuneCommand), cl::cat(category));
static cl::opt<bool>
    replace("replace",
            cl::desc("Start a new database instead of merging into the one at "
                     "--db, even if it is corrupt or from another GPU"),
            cl::sub(autotuneCommand), cl::cat(category));
static cl::list<int64_t>
    headDims("head-dims", cl::desc("Head dims to tune (default: 64,128)"),
             cl::CommaSeparated, cl::sub(autotuneCommand), cl::cat(category));
static cl::list<std::string>
    dtypes("dtype", cl::desc("Dtypes to tune, f16 and/or bf16 (default: bf16)"),
           cl::CommaSeparated, cl::sub(autotuneCommand), cl::cat(category));
static cl::opt<std::string>
    causal("causal", cl::desc("Causal settings to tune: both, yes or no"),
           cl::init("both"), cl::sub(autotuneCommand), cl::cat(category));
static cl::list<int64_t> seqlenStarts(
    "seqlen-starts",
    cl::desc("Increasing starts of the sequence-length ranges; the last range "
             "is unbounded (default: 1,384,768,1536,3072,8192)"),
    cl::CommaSeparated, cl::sub(autotuneCommand), cl::cat(category));
static cl::list<std::string> bucketFilter(
    "buckets",
    cl::desc("Tune only the buckets whose description contains this text, "
             "e.g. 'd128 bf16 causal' (repeatable; see --dry-run)"),
    cl::sub(autotuneCommand), cl::cat(category));
static cl::opt<unsigned> maxCandidates(
    "max-candidates",
    cl::desc("Candidates timed per bucket, the heuristic's config included "
             "(0: every one that fits)"),
    cl::init(0), cl::sub(autotuneCommand), cl::cat(category));
static cl::opt<double>
    timeBudget("time-budget",
               cl::desc("Seconds after which no more candidates are started"),
               cl::init(540), cl::sub(autotuneCommand), cl::cat(category));
static cl::opt<int> warmup("warmup",
                           cl::desc("Untimed launches before the timed ones"),
                           cl::init(2), cl::sub(autotuneCommand),
                           cl::cat(category));
static cl::opt<int> iterations("iters",
                               cl::desc("Timed samples per candidate (median)"),
                               cl::init(5), cl::sub(autotuneCommand),
                               cl::cat(category));
static cl::opt<double>
    minGain("min-gain",
            cl::desc("Percent by which a config must beat the heuristic's to "
                     "replace it"),
            cl::init(2), cl::sub(autotuneCommand), cl::cat(category));
static cl::opt<bool> dryRun("dry-run",
                            cl::desc("List the buckets and candidates that "
                                     "would be measured (no GPU needed)"),
                            cl::sub(autotuneCommand), cl::cat(category));
static cl::opt<std::string> gpuName(
    "gpu",
    cl::desc("With --dry-run: plan for this known GPU (e.g. h100, a100; "
             "default: the local GPU, else h100)"),
    cl::init(""), cl::sub(autotuneCommand), cl::cat(category));
static cl::opt<uint64_t> seed("seed", cl::desc("Input seed (default: random)"),
                              cl::init(0), cl::sub(autotuneCommand),
                              cl::cat(category));
static cl::opt<bool> json("json", cl::desc("Print JSON on stdout"),
                          cl::sub(autotuneCommand), cl::cat(category));
static cl::opt<bool> backwardPass(
    "backward",
    cl::desc("Tune the backward kernels (their own entries in the database; "
             "BackwardOptions::seqlen picks the bucket) instead of the "
             "forward"),
    cl::sub(autotuneCommand), cl::cat(category));

namespace {

llvm::Error optionError(const llvm::Twine &message) {
  return llvm::createStringError(message.str());
}

/// The bucket list: the default axes, narrowed by the options, then
/// filtered by --buckets. Empty is an error.
llvm::Expected<std::vector<autotune::ShapeBucket>> selectBuckets() {
  autotune::BucketAxes axes = autotune::defaultBucketAxes();
  if (!headDims.empty())
    axes.headDims.assign(headDims.begin(), headDims.end());
  if (!seqlenStarts.empty())
    axes.seqlenStarts.assign(seqlenStarts.begin(), seqlenStarts.end());
  if (!dtypes.empty()) {
    axes.dtypes.clear();
    for (const std::string &name : dtypes) {
      auto dtype = parseDType(name);
      if (!dtype)
        return dtype.takeError();
      if (!llvm::is_contained(axes.dtypes, *dtype))
        axes.dtypes.push_back(*dtype);
    }
  }
  if (causal == "both")
    axes.causal = {false, true};
  else if (causal == "yes")
    axes.causal = {true};
  else if (causal == "no")
    axes.causal = {false};
  else
    return optionError("unknown --causal '" + causal +
                       "': expected both, yes or no");
  auto buckets = autotune::makeBuckets(axes);
  if (!buckets)
    return buckets.takeError();
  std::vector<std::string> patterns(bucketFilter.begin(), bucketFilter.end());
  return autotune::filterBuckets(*buckets, patterns);
}

llvm::Error checkNumbers() {
  if (!(timeBudget > 0))
    return optionError("--time-budget must be a positive number of seconds");
  if (iterations < 1 || warmup < 0)
    return optionError("--iters must be at least 1 and --warmup at least 0");
  if (!(minGain >= 0))
    return optionError("--min-gain must be a percentage of at least 0");
  if (!gpuName.empty() && !dryRun)
    return optionError("--gpu plans for another GPU and goes with --dry-run; "
                       "without it, flashjit autotune measures the local GPU");
  if (backwardPass && decodeAutotuneRequested())
    return optionError("--backward and --decode tune different kernels: give "
                       "one of them");
  return llvm::Error::success();
}

/// The database the results merge into: none when the file does not exist
/// (or --replace). A file that cannot be read, or that holds another GPU's
/// tuning, is an error unless --replace; one from another driver or
/// flashjit version is started afresh with a note.
llvm::Expected<std::optional<TuningDatabase>>
openExisting(const std::string &path, const autotune::GpuIdentity &gpu,
             bool checkStale) {
  llvm::sys::fs::file_status status;
  std::error_code ec = llvm::sys::fs::status(path, status);
  if (ec == std::errc::no_such_file_or_directory || replace)
    return std::nullopt;
  auto db = TuningDatabase::load(path); // its error says what to do
  if (!db)
    return db.takeError();
  if (!checkStale)
    return std::optional<TuningDatabase>(std::move(*db));
  if (db->gpu.name != gpu.name || db->gpu.ccMajor != gpu.ccMajor ||
      db->gpu.ccMinor != gpu.ccMinor)
    return optionError(llvm::formatv(
        "tuning database '{0}' holds the tuning of the '{1}' (compute "
        "capability {2}.{3}), not of this '{4}': give another --db, or "
        "--replace to overwrite it",
        path, db->gpu.name, db->gpu.ccMajor, db->gpu.ccMinor, gpu.name));
  if (auto stale = db->isStaleFor(gpu, autotune::builtFlashjitVersion())) {
    llvm::errs() << "flashjit autotune: starting a new database at " << path
                 << ": " << *stale << "\n";
    return std::nullopt;
  }
  return std::optional<TuningDatabase>(std::move(*db));
}

/// The device model the candidates are checked against (--gpu, else the
/// local GPU's, else the h100's), and in `summary` the identity the
/// database is keyed by and where the model came from.
llvm::Expected<autotune::DeviceModel> chooseDevice(const Context &ctx,
                                                   AutotuneContext &summary) {
  const std::optional<DeviceInfo> &device = ctx.device();
  if (device && gpuName.empty()) {
    auto model = heuristicDeviceModel(ctx.target(), ctx.heuristicDevice());
    if (!model)
      return model.takeError();
    summary.gpu = gpuIdentity(*device);
    summary.modelSource = ctx.heuristicDevice().empty()
                              ? "limits of the reference " + model->name
                              : std::string("the local GPU");
    return model;
  }
  auto model = autotune::lookupKnownGPU(gpuName.empty() ? std::string("h100")
                                                        : std::string(gpuName));
  if (!model)
    return model.takeError();
  summary.gpu = {model->name, model->ccMajor, model->ccMinor, "unknown"};
  summary.modelSource = gpuName.empty()
                            ? "no GPU here: the h100 of the known-GPU table"
                            : "the known-GPU table";
  return model;
}

} // namespace

int runAutotune() {
  if (auto err = checkNumbers())
    return reportError("autotune", std::move(err));
  // --decode has its own buckets (AutotuneDecode.cpp).
  auto buckets = decodeAutotuneRequested()
                     ? llvm::Expected<std::vector<autotune::ShapeBucket>>(
                           std::vector<autotune::ShapeBucket>{})
                     : selectBuckets();
  if (!buckets)
    return reportError("autotune", buckets.takeError());

  // The context builds the candidates; it reads no database (every config
  // is named, and a broken database is this command's error to report).
  ContextOptions contextOptions;
  contextOptions.tuning.enabled = false;
  auto ctx = Context::create(contextOptions);
  if (!ctx)
    return reportError("autotune", ctx.takeError());
  if (!dryRun && !(*ctx)->device())
    return reportError(
        "autotune",
        optionError("flashjit autotune needs a GPU: " + (*ctx)->deviceError() +
                    "; --dry-run lists what would be tuned without one"));

  AutotuneContext summary;
  auto model = chooseDevice(**ctx, summary);
  if (!model)
    return reportError("autotune", model.takeError());

  DatabaseLocation location =
      locateDatabase(dbPath, contextOptions.cache.directory, summary.gpu.name);
  if (location.path.empty())
    return reportError(
        "autotune", optionError("no place for the tuning database: give "
                                "--db, or set $FLASHJIT_CACHE_DIR or $HOME"));
  summary.databasePath = location.path;
  auto existing = openExisting(location.path, summary.gpu, !dryRun);
  if (!existing)
    return reportError("autotune", existing.takeError());
  if (backwardPass)
    summary.pass = "backward";
  if (*existing)
    summary.existingEntries = backwardPass
                                  ? (*existing)->backwardEntries.size()
                                  : (*existing)->entries.size();
  if (decodeAutotuneRequested()) {
    DecodeAutotuneSettings settings;
    settings.headDims.assign(headDims.begin(), headDims.end());
    settings.dtypes.assign(dtypes.begin(), dtypes.end());
    settings.bucketFilter.assign(bucketFilter.begin(), bucketFilter.end());
    settings.timeBudget = timeBudget;
    settings.minGain = minGain;
    settings.warmup = warmup;
    settings.iterations = iterations;
    settings.dryRun = dryRun;
    settings.json = json;
    settings.seed = seed ? uint64_t(seed) : uint64_t(std::random_device()());
    return runDecodeAutotune(**ctx, location.path, std::move(*existing),
                             summary.gpu, settings);
  }

  autotune::PlanOptions planOptions;
  planOptions.maxCandidates = maxCandidates;
  auto plans = autotune::planTuning(
      *buckets, *model, planOptions,
      backwardPass ? autotune::Pass::Backward : autotune::Pass::Forward);
  if (!plans)
    return reportError("autotune", plans.takeError());
  if (dryRun) {
    if (json)
      llvm::outs() << planToJson(summary, *plans).dump(2) << "\n";
    else
      printPlanText(llvm::outs(), summary, *plans);
    return 0;
  }

  const uint64_t inputSeed =
      seed ? uint64_t(seed) : uint64_t(std::random_device()());
  auto bench = Benchmark::create(inputSeed);
  if (!bench)
    return reportError("autotune", bench.takeError());
  BenchmarkOptions benchOptions;
  benchOptions.timing.warmup = warmup;
  benchOptions.timing.iterations = iterations;
  auto measure = [&](const BucketPlan &plan, const TileConfig &config) {
    if (backwardPass)
      return measureBackwardCandidate(**ctx, plan, config, benchOptions,
                                      inputSeed);
    return measureCandidate(**ctx, **bench, plan, config, benchOptions);
  };
  // Each measured bucket is merged and saved at once, so an interrupted
  // run keeps what it measured.
  TuningDatabase db =
      *existing ? std::move(**existing) : TuningDatabase(summary.gpu, "");
  db.gpu = summary.gpu;
  db.flashjitVersion = autotune::builtFlashjitVersion().str();
  size_t written = 0;
  std::string saveError;
  ProgressBar bar(llvm::errs());
  autotune::RunOptions runOptions;
  runOptions.timeBudgetSeconds = timeBudget;
  runOptions.minGain = minGain / 100.0;
  runOptions.onBucketDone = [&](const autotune::BucketResult &bucket) {
    auto entry = bucket.entry();
    if (!entry || !saveError.empty())
      return;
    if (backwardPass)
      db.replaceBackward(std::move(*entry));
    else
      db.replace(std::move(*entry));
    ++written;
    if (auto err = db.save(location.path))
      saveError = llvm::toString(std::move(err));
  };
  autotune::TuningRunResult run = autotune::runTuning(
      *plans, measure,
      [&](const autotune::TuningProgress &p) { bar.update(p); }, runOptions);
  bar.finish();

  bool savedOk = saveError.empty();
  const size_t held =
      savedOk ? (backwardPass ? db.backwardEntries.size() : db.entries.size())
              : 0;
  if (json)
    llvm::outs() << summaryToJson(summary, run, timeBudget, held).dump(2)
                 << "\n";
  else
    printSummaryText(llvm::outs(), summary, run, held);
  if (!savedOk)
    return reportError("autotune", optionError(saveError));
  if (written == 0)
    return reportError("autotune",
                       optionError("no bucket could be measured; nothing was "
                                   "written (see the summary)"));
  if (!run.stoppedBy.empty())
    return reportError("autotune",
                       optionError("stopped early: " + run.stoppedBy +
                                   "; the buckets measured before were saved"));
  return 0;
}

} // namespace flashjit::tools
