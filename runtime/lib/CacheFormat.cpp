//===- CacheFormat.cpp - the key and metadata of one cache entry ----------===//
// Why: see CacheFormat.h. Parsing never throws: nlohmann::json is used in
// its non-throwing mode and every field's type is checked before it is read.
#include "flashjit/Runtime/CacheFormat.h"
#include "flashjit/Runtime/Checksum.h"

#include "llvm/Support/FormatVariadic.h"

#include <ctime>
#include <nlohmann/json.hpp>

namespace flashjit {

using nlohmann::json;

std::string makeCacheKey(const CacheKeyInputs &in) {
  std::string text =
      "flashjit-kernel-cache-key/" + std::to_string(kCacheFormatVersion) + "\n";
  auto add = [&](const char *name, const std::string &value) {
    text += name;
    text += '=';
    text += std::to_string(value.size());
    text += ':';
    text += value;
    text += '\n';
  };
  add("spec", in.spec);
  add("config", in.config);
  add("chip", in.chip);
  add("flashjit", in.flashjitVersion);
  add("llvm", in.llvmVersion);
  add("ptx", in.ptxVersion);
  if (!in.generator.empty())
    add("generator", in.generator);
  return hash128Hex(text);
}

bool isCacheKey(llvm::StringRef name) {
  if (name.size() != 32)
    return false;
  for (char c : name)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

CacheMetadata makeMetadata(llvm::StringRef key, const CacheKeyInputs &inputs,
                           const KernelInfo &info, llvm::StringRef ptx,
                           llvm::StringRef cubin) {
  CacheMetadata meta;
  meta.key = key.str();
  meta.inputs = inputs;
  meta.info = info;
  meta.ptx = {ptx.size(), checksumHex(ptx)};
  meta.cubin = {cubin.size(), checksumHex(cubin)};
  std::time_t now = std::time(nullptr);
  meta.createdUnix = static_cast<int64_t>(now);
  std::tm utc{};
  char buffer[32] = {0};
  if (gmtime_r(&now, &utc))
    std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &utc);
  meta.created = buffer;
  return meta;
}

static json fileJson(const CacheFileInfo &file) {
  return json{{"bytes", file.bytes}, {"checksum", file.checksum}};
}

std::string serializeMetadata(const CacheMetadata &meta) {
  const KernelInfo &info = meta.info;
  json j = {
      {"format", kCacheFormatVersion},
      {"key", meta.key},
      {"inputs",
       {{"spec", meta.inputs.spec},
        {"config", meta.inputs.config},
        {"chip", meta.inputs.chip}}},
      {"versions",
       {{"flashjit", meta.inputs.flashjitVersion},
        {"llvm", meta.inputs.llvmVersion},
        {"ptx", meta.inputs.ptxVersion},
        {"generator", meta.inputs.generator}}},
      {"kernel",
       {{"name", info.name},
        {"family", info.config.family},
        {"block_m", info.config.blockM},
        {"block_n", info.config.blockN},
        {"stages", info.config.stages},
        {"warps", info.config.warps},
        {"threads", info.threadsPerBlock},
        {"shared_bytes", info.sharedMemoryBytes},
        {"num_heads", info.numHeads}}},
      {"files",
       {{kPtxFileName, fileJson(meta.ptx)},
        {kCubinFileName, fileJson(meta.cubin)}}},
      {"created", meta.created},
      {"created_unix", meta.createdUnix},
  };
  // The checksum covers the compact dump of everything else; dump() is
  // deterministic (keys sorted), so the reader can recompute it.
  j["meta_checksum"] = checksumHex(j.dump());
  return j.dump(2) + "\n";
}

namespace {

/// Typed, non-throwing field reads that record the first problem.
class Reader {
public:
  std::string problem;

  const json *object(const json &parent, const char *key) {
    const json *v = find(parent, key);
    if (v && !v->is_object())
      return fail(key, "an object");
    return v;
  }
  void string(const json &parent, const char *key, std::string &out) {
    if (const json *v = find(parent, key)) {
      if (v->is_string())
        out = v->get_ref<const std::string &>();
      else
        fail(key, "a string");
    }
  }
  template <typename T>
  void integer(const json &parent, const char *key, T &out) {
    if (const json *v = find(parent, key)) {
      if (!v->is_number_integer())
        fail(key, "an integer");
      else if (std::is_unsigned<T>::value && !v->is_number_unsigned())
        fail(key, "a non-negative integer");
      else
        out = v->get<T>();
    }
  }

private:
  const json *find(const json &parent, const char *key) {
    if (!problem.empty() || !parent.is_object())
      return nullptr;
    auto it = parent.find(key);
    if (it == parent.end()) {
      problem = llvm::formatv("field '{0}' is missing", key).str();
      return nullptr;
    }
    return &*it;
  }
  const json *fail(const char *key, const char *what) {
    if (problem.empty())
      problem = llvm::formatv("field '{0}' is not {1}", key, what).str();
    return nullptr;
  }
};

} // namespace

static llvm::Error metaError(const llvm::Twine &why) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "meta.json: " + why);
}

llvm::Expected<CacheMetadata> parseMetadata(llvm::StringRef text) {
  json j = json::parse(text.begin(), text.end(), nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return metaError("not a JSON object");

  Reader r;
  int64_t format = 0;
  r.integer(j, "format", format);
  if (r.problem.empty() && format != kCacheFormatVersion)
    return metaError(llvm::formatv("format {0}, this flashjit reads {1}",
                                   format, kCacheFormatVersion));

  std::string stored;
  r.string(j, "meta_checksum", stored);
  if (!r.problem.empty())
    return metaError(r.problem);
  json rest = j;
  rest.erase("meta_checksum");
  if (checksumHex(rest.dump()) != stored)
    return metaError("checksum mismatch (file altered or damaged)");

  CacheMetadata meta;
  r.string(j, "key", meta.key);
  if (const json *in = r.object(j, "inputs")) {
    r.string(*in, "spec", meta.inputs.spec);
    r.string(*in, "config", meta.inputs.config);
    r.string(*in, "chip", meta.inputs.chip);
  }
  if (const json *v = r.object(j, "versions")) {
    r.string(*v, "flashjit", meta.inputs.flashjitVersion);
    r.string(*v, "llvm", meta.inputs.llvmVersion);
    r.string(*v, "ptx", meta.inputs.ptxVersion);
    if (v->contains("generator"))
      r.string(*v, "generator", meta.inputs.generator);
  }
  if (const json *k = r.object(j, "kernel")) {
    KernelInfo &info = meta.info;
    r.string(*k, "name", info.name);
    r.string(*k, "family", info.config.family);
    r.integer(*k, "block_m", info.config.blockM);
    r.integer(*k, "block_n", info.config.blockN);
    r.integer(*k, "stages", info.config.stages);
    r.integer(*k, "warps", info.config.warps);
    r.integer(*k, "threads", info.threadsPerBlock);
    r.integer(*k, "shared_bytes", info.sharedMemoryBytes);
    r.integer(*k, "num_heads", info.numHeads);
  }
  if (const json *files = r.object(j, "files")) {
    const std::pair<const char *, CacheFileInfo *> each[] = {
        {kPtxFileName, &meta.ptx}, {kCubinFileName, &meta.cubin}};
    for (auto [name, file] : each)
      if (const json *f = r.object(*files, name)) {
        r.integer(*f, "bytes", file->bytes);
        r.string(*f, "checksum", file->checksum);
      }
  }
  r.string(j, "created", meta.created);
  r.integer(j, "created_unix", meta.createdUnix);
  if (!r.problem.empty())
    return metaError(r.problem);
  if (makeCacheKey(meta.inputs) != meta.key)
    return metaError("its key is not the hash of its inputs");
  return meta;
}

} // namespace flashjit
