//===- ConfigJson.h - tile configs and specs as JSON -------------*- C++
//-*-===//
// Why: the tuning database, `--json` output and the explanation of a choice
// all write tile configs; one form, {"family", "block_m", "block_n",
// "stages", "warps"}, keeps them readable by the same code.
#ifndef FLASHJIT_AUTOTUNE_CONFIGJSON_H
#define FLASHJIT_AUTOTUNE_CONFIGJSON_H

#include "flashjit/Dialect/AttentionSpec.h"
#include "flashjit/Templates/TileConfig.h"

#include "llvm/Support/Error.h"
#include <nlohmann/json_fwd.hpp>

namespace flashjit::autotune {

nlohmann::json tileConfigToJson(const TileConfig &config);
/// Reads tileConfigToJson()'s form; `at` names the field in errors
/// ("entries[3].config"). Whether the config suits a spec is the template's
/// checkConfig() to say, not this function's.
llvm::Expected<TileConfig> tileConfigFromJson(const nlohmann::json &json,
                                              llvm::StringRef at);

/// {"head_dim", "dtype", "causal", "heads", "kv_heads"}, for explanations.
nlohmann::json specToJson(const AttentionSpec &spec);

} // namespace flashjit::autotune

#endif
