//===- DeviceModelTest.cpp - known GPUs and device-model JSON -------------===//
// Why: every heuristic choice rests on these figures; the table is checked
// row by row against the values in the brief and the vendors' documents, and
// name lookup is checked on the strings real drivers report.
#include "AutotuneTestUtil.h"

#include "flashjit/Autotune/DeviceModel.h"
#include "flashjit/Autotune/KnownGPUs.h"

#include <nlohmann/json.hpp>

using namespace flashjit::autotune;
using flashjit::autotune::testing::errorMessage;
using nlohmann::json;

namespace {

std::string errorText(llvm::Error err) {
  return llvm::toString(std::move(err));
}

template <typename T> std::string errorOf(llvm::Expected<T> value) {
  REQUIRE_FALSE(static_cast<bool>(value));
  return llvm::toString(value.takeError());
}

DeviceModel known(llvm::StringRef name) {
  auto model = lookupKnownGPU(name);
  REQUIRE_MESSAGE(static_cast<bool>(model),
                  (model ? std::string() : llvm::toString(model.takeError())));
  return *model;
}

} // namespace

TEST_CASE("the known-GPU table holds the documented figures") {
  struct Row {
    const char *key;
    int major, minor;
    unsigned sms, smemPerSMKB, smemPerBlockKB, reservedKB;
    unsigned threadsPerSM, blocksPerSM, l2MB;
  };
  const Row rows[] = {
      {"t4", 7, 5, 40, 64, 64, 0, 1024, 16, 4},
      {"a10", 8, 6, 72, 100, 99, 1, 1536, 16, 6},
      {"a100-40gb", 8, 0, 108, 164, 163, 1, 2048, 32, 40},
      {"a100", 8, 0, 108, 164, 163, 1, 2048, 32, 40},
      {"l4", 8, 9, 58, 100, 99, 1, 1536, 24, 48},
      {"rtx4090", 8, 9, 128, 100, 99, 1, 1536, 24, 72},
      {"h100", 9, 0, 132, 228, 227, 1, 2048, 32, 50},
      {"h100-pcie", 9, 0, 114, 228, 227, 1, 2048, 32, 50},
      {"h200", 9, 0, 132, 228, 227, 1, 2048, 32, 60},
  };
  CHECK(knownGPUs().size() == std::size(rows));
  for (const Row &row : rows) {
    CAPTURE(row.key);
    DeviceModel m = known(row.key);
    CHECK(errorMessage(m.validate()) == "");
    CHECK(m.ccMajor == row.major);
    CHECK(m.ccMinor == row.minor);
    CHECK(m.smCount == row.sms);
    CHECK(m.sharedMemoryPerSM == row.smemPerSMKB * 1024);
    CHECK(m.sharedMemoryPerBlockOptin == row.smemPerBlockKB * 1024);
    CHECK(m.reservedSharedMemoryPerBlock == row.reservedKB * 1024);
    CHECK(m.registersPerSM == 65536);
    CHECK(m.maxRegistersPerThread == 255);
    CHECK(m.maxThreadsPerBlock == 1024);
    CHECK(m.maxThreadsPerSM == row.threadsPerSM);
    CHECK(m.maxBlocksPerSM == row.blocksPerSM);
    CHECK(m.l2Bytes == uint64_t(row.l2MB) * 1024 * 1024);
    CHECK(m.memoryBandwidthGBs.has_value());
    CHECK(m.denseTensorTflops.has_value());
  }
}

TEST_CASE("known GPUs are found by key and by driver name") {
  const std::pair<const char *, const char *> cases[] = {
      {"h100", "NVIDIA H100 80GB HBM3"},
      {"H100", "NVIDIA H100 80GB HBM3"},
      {"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"},
      {"NVIDIA H100 PCIe", "NVIDIA H100 PCIe"},
      {"NVIDIA H200", "NVIDIA H200"},
      {"a100", "NVIDIA A100-SXM4-80GB"},
      {"NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"},
      {"NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM4-80GB"},
      {"NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"},
      {"NVIDIA A100-PCIE-40GB", "NVIDIA A100-SXM4-40GB"},
      {"a100_40gb", "NVIDIA A100-SXM4-40GB"},
      {"Tesla T4", "Tesla T4"},
      {"NVIDIA A10", "NVIDIA A10"},
      {"NVIDIA L4", "NVIDIA L4"},
      {"NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"},
      {"rtx4090", "NVIDIA GeForce RTX 4090"},
  };
  for (const auto &entry : cases) {
    // Named, not bound: clang before 16 cannot capture a structured
    // binding (CAPTURE is a lambda), and the sanitized build uses clang 14.
    const auto &query = entry.first;
    const auto &expected = entry.second;
    CAPTURE(query);
    CHECK(known(query).name == expected);
  }
}

TEST_CASE("unknown GPU names are errors that list the known ones") {
  // Neighbours of known names must not match by substring: an A10G has 80
  // SMs, an L40S 142, neither is an A10 or an L4.
  for (const char *name : {"NVIDIA A10G", "NVIDIA L40S", "NVIDIA GH200 480GB",
                           "AMD Instinct MI300X", ""}) {
    CAPTURE(name);
    std::string message = errorOf(lookupKnownGPU(name));
    CHECK(message.find("unknown GPU") != std::string::npos);
    CHECK(message.find(knownGPUKeys()) != std::string::npos);
    CHECK(message.find("h100, h100-pcie, h200") != std::string::npos);
  }
}

TEST_CASE("reference GPUs stand for a compute capability") {
  auto a100 = referenceGPU(8, 0);
  REQUIRE(static_cast<bool>(a100));
  CHECK(a100->name == "NVIDIA A100-SXM4-80GB");
  auto h100 = referenceGPU(9, 0);
  REQUIRE(static_cast<bool>(h100));
  CHECK(h100->smCount == 132);
  CHECK(errorOf(referenceGPU(7, 5)).find("no reference GPU") !=
        std::string::npos);
}

TEST_CASE("device models round-trip through JSON") {
  for (const KnownGPU &gpu : knownGPUs()) {
    CAPTURE(gpu.key);
    json text = gpu.model.toJson();
    auto back = DeviceModel::fromJson(text);
    REQUIRE(static_cast<bool>(back));
    CHECK(back->toJson() == text);
  }
  DeviceModel h100 = known("h100");
  json j = h100.toJson();
  CHECK(j["compute_capability"] == "9.0");
  CHECK(j["shared_memory_per_block_optin"] == 232448);
  j.erase("memory_bandwidth_gbs");
  auto noBandwidth = DeviceModel::fromJson(j);
  REQUIRE(static_cast<bool>(noBandwidth));
  CHECK_FALSE(noBandwidth->memoryBandwidthGBs.has_value());
}

TEST_CASE("bad device-model JSON names the field") {
  json base = known("l4").toJson();

  json missing = base;
  missing.erase("sm_count");
  CHECK(errorOf(DeviceModel::fromJson(missing)) == "sm_count: missing field");

  json wrongType = base;
  wrongType["registers_per_sm"] = "65536";
  CHECK(errorOf(DeviceModel::fromJson(wrongType))
            .find("registers_per_sm: expected an integer") !=
        std::string::npos);

  json badCC = base;
  badCC["compute_capability"] = "89";
  CHECK(errorOf(DeviceModel::fromJson(badCC)).find("<major>.<minor>") !=
        std::string::npos);

  json inconsistent = base;
  inconsistent["shared_memory_per_block_optin"] = 200 * 1024;
  CHECK(errorOf(DeviceModel::fromJson(inconsistent))
            .find("exceeds shared memory per SM") != std::string::npos);

  CHECK(errorOf(DeviceModel::fromJson(json::array()))
            .find("expected an "
                  "object") != std::string::npos);
}

TEST_CASE("formatBytes and parseComputeCapability") {
  CHECK(formatBytes(65536) == "64 KB");
  CHECK(formatBytes(81920) == "80 KB");
  CHECK(formatBytes(64000) == "62.5 KB");
  CHECK(formatBytes(512) == "512 B");
  auto cc = parseComputeCapability("8.6");
  REQUIRE(static_cast<bool>(cc));
  CHECK(cc->first == 8);
  CHECK(cc->second == 6);
  CHECK(errorText(parseComputeCapability("sm_90").takeError()).find("8.0") !=
        std::string::npos);
}
