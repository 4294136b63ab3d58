//===- TuningDatabase.cpp - the tuning database file ----------------------===//
// Why: the file is shared between processes and edited by people; it is
// written atomically so a reader never sees half a file, and read with
// checks that name the path and the field, so a bad file is reported and
// skipped, never trusted.
#include "flashjit/Autotune/TuningDatabase.h"

#include "JsonFields.h"
#include "flashjit/Autotune/ConfigJson.h"
#include "flashjit/Autotune/DeviceModel.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

#ifndef FLASHJIT_VERSION_STRING
#define FLASHJIT_VERSION_STRING "unknown"
#endif

namespace flashjit::autotune {

using nlohmann::json;

namespace {

/// Keeps the parser's message (with line and column) instead of throwing it.
class ErrorCapture : public nlohmann::json_sax<json> {
public:
  std::string message;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t &) override { return true; }
  bool string(string_t &) override { return true; }
  bool binary(binary_t &) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t &) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string &,
                   const nlohmann::detail::exception &error) override {
    message = error.what();
    return false;
  }
};

/// The parser's "[json.exception.parse_error.101] parse error at line 3,
/// column 5: ..." without the bracketed id.
std::string parseErrorMessage(llvm::StringRef text) {
  ErrorCapture capture;
  json::sax_parse(text.begin(), text.end(), &capture);
  llvm::StringRef message = capture.message;
  if (message.starts_with("["))
    message = message.split("] ").second;
  return message.empty() ? std::string("not valid JSON") : message.str();
}

llvm::Expected<GpuIdentity> gpuFromJson(const json &in) {
  using namespace detail;
  GpuIdentity gpu;
  auto name = readString(in, "gpu", "name");
  if (!name)
    return name.takeError();
  gpu.name = *name;
  auto ccText = readString(in, "gpu", "cc");
  if (!ccText)
    return ccText.takeError();
  auto cc = parseComputeCapability(*ccText);
  if (!cc)
    return fieldError("gpu.cc", toString(cc.takeError()));
  std::tie(gpu.ccMajor, gpu.ccMinor) = *cc;
  auto driver = readString(in, "gpu", "driver");
  if (!driver)
    return driver.takeError();
  gpu.driver = *driver;
  return gpu;
}

llvm::Expected<TuningEntry> entryFromJson(const json &in,
                                          const std::string &at) {
  using namespace detail;
  TuningEntry entry;
  auto bucketField = requireField(in, at, "bucket");
  if (!bucketField)
    return bucketField.takeError();
  auto bucket = bucketFromJson(**bucketField, fieldPath(at, "bucket"));
  if (!bucket)
    return bucket.takeError();
  entry.bucket = *bucket;
  auto configField = requireField(in, at, "config");
  if (!configField)
    return configField.takeError();
  auto config = tileConfigFromJson(**configField, fieldPath(at, "config"));
  if (!config)
    return config.takeError();
  entry.config = *config;
  auto tflops = readNumber(in, at, "tflops");
  if (!tflops)
    return tflops.takeError();
  if (*tflops < 0)
    return fieldError(fieldPath(at, "tflops"), "must not be negative");
  entry.tflops = *tflops;
  auto heuristic = readOptionalNumber(in, at, "heuristic_tflops");
  if (!heuristic)
    return heuristic.takeError();
  entry.heuristicTflops = *heuristic;
  auto failedIt = in.find("failed");
  if (failedIt == in.end())
    return entry;
  std::string failedAt = fieldPath(at, "failed");
  if (!failedIt->is_array())
    return fieldError(failedAt,
                      "expected an array, got " + describeJson(*failedIt));
  for (size_t i = 0; i < failedIt->size(); ++i) {
    std::string itemAt = llvm::formatv("{0}[{1}]", failedAt, i).str();
    const json &item = (*failedIt)[i];
    auto itemConfig = requireField(item, itemAt, "config");
    if (!itemConfig)
      return itemConfig.takeError();
    auto failedConfig =
        tileConfigFromJson(**itemConfig, fieldPath(itemAt, "config"));
    if (!failedConfig)
      return failedConfig.takeError();
    auto error = readString(item, itemAt, "error");
    if (!error)
      return error.takeError();
    entry.failed.push_back({*failedConfig, *error});
  }
  return entry;
}

} // namespace

llvm::StringRef builtFlashjitVersion() { return FLASHJIT_VERSION_STRING; }

llvm::Error TuningDatabase::upsert(TuningEntry entry) {
  for (TuningEntry &existing : entries) {
    if (existing.bucket == entry.bucket) {
      existing = std::move(entry);
      return llvm::Error::success();
    }
    if (existing.bucket.overlaps(entry.bucket))
      return llvm::createStringError(
          llvm::formatv("bucket {0} overlaps the database's bucket {1}",
                        entry.bucket.describe(), existing.bucket.describe())
              .str());
  }
  entries.push_back(std::move(entry));
  return llvm::Error::success();
}

namespace {
/// Adds `entry` to `list` after removing the entries its bucket overlaps;
/// returns how many were removed.
size_t replaceIn(std::vector<TuningEntry> &list, TuningEntry entry) {
  size_t before = list.size();
  llvm::erase_if(list, [&](const TuningEntry &existing) {
    return existing.bucket.overlaps(entry.bucket);
  });
  size_t removed = before - list.size();
  list.push_back(std::move(entry));
  return removed;
}

std::optional<TileConfig> lookupIn(const std::vector<TuningEntry> &list,
                                   const AttentionSpec &spec, int64_t seqlen) {
  for (const TuningEntry &entry : list)
    if (entry.bucket.contains(spec, seqlen))
      return entry.config;
  return std::nullopt;
}
} // namespace

size_t TuningDatabase::replace(TuningEntry entry) {
  return replaceIn(entries, std::move(entry));
}

size_t TuningDatabase::replaceBackward(TuningEntry entry) {
  return replaceIn(backwardEntries, std::move(entry));
}

std::optional<TileConfig> TuningDatabase::lookup(const AttentionSpec &spec,
                                                 int64_t seqlen) const {
  return lookupIn(entries, spec, seqlen);
}

std::optional<TileConfig>
TuningDatabase::lookupBackward(const AttentionSpec &spec,
                               int64_t seqlen) const {
  return lookupIn(backwardEntries, spec, seqlen);
}

std::optional<std::string>
TuningDatabase::isStaleFor(const GpuIdentity &current,
                           llvm::StringRef currentVersion) const {
  std::vector<std::string> reasons;
  if (gpu.name != current.name)
    reasons.push_back(llvm::formatv("it was tuned on the '{0}', this GPU is "
                                    "the '{1}'",
                                    gpu.name, current.name)
                          .str());
  if (gpu.ccMajor != current.ccMajor || gpu.ccMinor != current.ccMinor)
    reasons.push_back(llvm::formatv("compute capability {0}.{1} differs from "
                                    "{2}.{3}",
                                    gpu.ccMajor, gpu.ccMinor, current.ccMajor,
                                    current.ccMinor)
                          .str());
  if (gpu.driver != current.driver)
    reasons.push_back(
        llvm::formatv("driver {0} differs from {1}", gpu.driver, current.driver)
            .str());
  if (flashjitVersion != currentVersion)
    reasons.push_back(llvm::formatv("flashjit {0} differs from {1}",
                                    flashjitVersion, currentVersion)
                          .str());
  if (reasons.empty())
    return std::nullopt;
  return llvm::join(reasons, "; ") + "; run `flashjit autotune` again";
}

namespace {
json entriesToJson(const std::vector<TuningEntry> &entries) {
  json list = json::array();
  for (const TuningEntry &entry : entries) {
    json failed = json::array();
    for (const FailedConfig &f : entry.failed)
      failed.push_back(
          {{"config", tileConfigToJson(f.config)}, {"error", f.error}});
    json item = {{"bucket", bucketToJson(entry.bucket)},
                 {"config", tileConfigToJson(entry.config)},
                 {"tflops", entry.tflops},
                 {"heuristic_tflops", nullptr},
                 {"failed", failed}};
    if (entry.heuristicTflops)
      item["heuristic_tflops"] = *entry.heuristicTflops;
    list.push_back(std::move(item));
  }
  return list;
}

/// The entries of array field `field` (entryFromJson's form), buckets not
/// overlapping; `required`: its absence is an error.
llvm::Error entriesFromJson(const json &in, const char *field, bool required,
                            std::vector<TuningEntry> &out) {
  auto it = in.find(field);
  if (it == in.end()) {
    if (!required)
      return llvm::Error::success();
    auto missing = detail::requireField(in, "", field);
    return missing.takeError();
  }
  if (!it->is_array())
    return detail::fieldError(field, "expected an array, got " +
                                         detail::describeJson(*it));
  std::vector<ShapeBucket> buckets;
  for (size_t i = 0; i < it->size(); ++i) {
    auto entry =
        entryFromJson((*it)[i], llvm::formatv("{0}[{1}]", field, i).str());
    if (!entry)
      return entry.takeError();
    buckets.push_back(entry->bucket);
    out.push_back(std::move(*entry));
  }
  if (!buckets.empty())
    if (auto err = checkBuckets(buckets))
      return detail::fieldError(field, toString(std::move(err)));
  return llvm::Error::success();
}
} // namespace

json TuningDatabase::toJson() const {
  json list = entriesToJson(entries);
  json out = {{"format", kFormat},
              {"flashjit_version", flashjitVersion},
              {"gpu",
               {{"name", gpu.name},
                {"cc",
                 llvm::formatv("{0}.{1}", gpu.ccMajor, gpu.ccMinor).str()},
                {"driver", gpu.driver}}},
              {"entries", list}};
  if (!backwardEntries.empty())
    out["backward_entries"] = entriesToJson(backwardEntries);
  if (!decodeEntries.empty()) {
    json decode = json::array();
    for (const DecodeTuningEntry &entry : decodeEntries)
      decode.push_back(decodeEntryToJson(entry));
    out["decode_entries"] = std::move(decode);
  }
  return out;
}

size_t TuningDatabase::replaceDecode(DecodeTuningEntry entry) {
  size_t before = decodeEntries.size();
  llvm::erase_if(decodeEntries, [&](const DecodeTuningEntry &e) {
    return e.bucket.overlaps(entry.bucket);
  });
  size_t removed = before - decodeEntries.size();
  decodeEntries.push_back(std::move(entry));
  return removed;
}

llvm::Expected<TuningDatabase> TuningDatabase::fromJson(const json &in) {
  using namespace detail;
  if (auto err = requireObject(in, "the top level"))
    return err;
  auto format = readInt(in, "", "format", INT64_MIN, INT64_MAX);
  if (!format)
    return format.takeError();
  if (*format != kFormat)
    return fieldError("format",
                      llvm::formatv("format {0} is not the format {1} this "
                                    "flashjit reads",
                                    *format, kFormat)
                          .str());
  TuningDatabase db;
  auto version = readString(in, "", "flashjit_version");
  if (!version)
    return version.takeError();
  db.flashjitVersion = *version;
  auto gpuField = requireField(in, "", "gpu");
  if (!gpuField)
    return gpuField.takeError();
  auto gpu = gpuFromJson(**gpuField);
  if (!gpu)
    return gpu.takeError();
  db.gpu = *gpu;
  if (auto err = entriesFromJson(in, "entries", /*required=*/true, db.entries))
    return err;
  if (auto err = entriesFromJson(in, "backward_entries", /*required=*/false,
                                 db.backwardEntries))
    return err;
  if (auto it = in.find("decode_entries"); it != in.end()) {
    if (!it->is_array())
      return fieldError("decode_entries",
                        "expected an array, got " + describeJson(*it));
    for (size_t i = 0; i < it->size(); ++i) {
      std::string at = llvm::formatv("decode_entries[{0}]", i).str();
      auto entry = decodeEntryFromJson((*it)[i], at);
      if (!entry)
        return entry.takeError();
      for (const DecodeTuningEntry &other : db.decodeEntries)
        if (other.bucket.overlaps(entry->bucket))
          return fieldError(at, "its bucket " + entry->bucket.describe() +
                                    " overlaps " + other.bucket.describe());
      db.decodeEntries.push_back(std::move(*entry));
    }
  }
  return db;
}

llvm::Expected<TuningDatabase> TuningDatabase::load(llvm::StringRef path) {
  auto fail = [&](const llvm::Twine &what) {
    return llvm::createStringError(
        ("tuning database '" + path + "': " + what).str());
  };
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return fail("cannot be read: " + buffer.getError().message());
  llvm::StringRef text = (*buffer)->getBuffer();
  json parsed = json::parse(text.begin(), text.end(), /*cb=*/nullptr,
                            /*allow_exceptions=*/false);
  if (parsed.is_discarded())
    return fail("is not valid JSON: " + parseErrorMessage(text) +
                "; delete it or run `flashjit autotune --replace`");
  auto db = fromJson(parsed);
  if (!db)
    return fail("wrong schema: " + toString(db.takeError()) +
                "; delete it or run `flashjit autotune --replace`");
  return db;
}

llvm::Error TuningDatabase::save(llvm::StringRef path) const {
  auto fail = [&](const llvm::Twine &what) {
    return llvm::createStringError(
        ("cannot save tuning database '" + path + "': " + what).str());
  };
  llvm::StringRef folder = llvm::sys::path::parent_path(path);
  if (!folder.empty())
    if (std::error_code ec = llvm::sys::fs::create_directories(folder))
      return fail("cannot create its folder: " + ec.message());
  int fd = -1;
  llvm::SmallString<256> tempPath;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueFile(path + ".tmp-%%%%%%%%", fd, tempPath))
    return fail("cannot create a temporary file: " + ec.message());
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << detail::dumpJson(toJson(), 2) << "\n";
    os.close();
    if (os.has_error()) {
      std::string message = os.error().message();
      os.clear_error();
      llvm::sys::fs::remove(tempPath);
      return fail(llvm::Twine("writing ") + tempPath + " failed: " + message);
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(tempPath, path)) {
    llvm::sys::fs::remove(tempPath);
    return fail(llvm::Twine("renaming ") + tempPath +
                " failed: " + ec.message());
  }
  return llvm::Error::success();
}

std::string sanitizeGpuName(llvm::StringRef gpuName) {
  std::string out;
  for (char c : gpuName) {
    if (llvm::isAlnum(c))
      out.push_back(llvm::toLower(c));
    else if (!out.empty() && out.back() != '-')
      out.push_back('-');
  }
  while (!out.empty() && out.back() == '-')
    out.pop_back();
  return out.empty() ? std::string("gpu") : out;
}

std::string defaultDatabasePath(llvm::StringRef cacheRoot,
                                llvm::StringRef gpuName) {
  llvm::SmallString<256> path(cacheRoot);
  llvm::sys::path::append(path, "tuning", sanitizeGpuName(gpuName) + ".json");
  return std::string(path);
}

} // namespace flashjit::autotune
