//===- ConfigJson.cpp - tile configs and specs as JSON --------------------===//
// Why: see ConfigJson.h; the reader checks every field so a hand-edited
// database fails with the field's path, not an exception.
#include "flashjit/Autotune/ConfigJson.h"

#include "JsonFields.h"

#include <nlohmann/json.hpp>

namespace flashjit::autotune {

using nlohmann::json;

json tileConfigToJson(const TileConfig &config) {
  return {{"family", config.family},
          {"block_m", config.blockM},
          {"block_n", config.blockN},
          {"stages", config.stages},
          {"warps", config.warps}};
}

llvm::Expected<TileConfig> tileConfigFromJson(const json &in,
                                              llvm::StringRef at) {
  using namespace detail;
  TileConfig config;
  auto family = readString(in, at, "family");
  if (!family)
    return family.takeError();
  if (family->empty())
    return fieldError(fieldPath(at, "family"), "the kernel family is empty");
  config.family = *family;
  struct IntField {
    const char *key;
    int64_t *dest;
    int64_t max;
  };
  const IntField fields[] = {{"block_m", &config.blockM, 1024},
                             {"block_n", &config.blockN, 1024},
                             {"stages", &config.stages, 16},
                             {"warps", &config.warps, 32}};
  for (const IntField &field : fields) {
    auto value = readInt(in, at, field.key, 1, field.max);
    if (!value)
      return value.takeError();
    *field.dest = *value;
  }
  return config;
}

json specToJson(const AttentionSpec &spec) {
  return {{"head_dim", spec.headDim},
          {"dtype", dtypeName(spec.dtype)},
          {"causal", spec.causal},
          {"heads", spec.numHeads},
          {"kv_heads", spec.numKVHeads}};
}

} // namespace flashjit::autotune
