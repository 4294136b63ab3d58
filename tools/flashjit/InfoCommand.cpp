//===- InfoCommand.cpp - `flashjit info` ----------------------------------===//
// Why: a bug report starts with the versions and the device; this prints
// them (and --json for scripts).
#include "Commands.h"

#include "flashjit/Compiler/Compiler.h"
#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/Runtime/DeviceInfo.h"

#include "llvm/Support/raw_ostream.h"
#include <nlohmann/json.hpp>

namespace cl = llvm::cl;

namespace flashjit::tools {

static cl::opt<bool> json("json", cl::desc("Print JSON"), cl::sub(infoCommand),
                          cl::cat(category));

int runInfo() {
  ToolchainVersions versions = toolchainVersions();
  nlohmann::json j = buildFields();
  j["llvm"] = versions.llvm;
  nlohmann::json chips = nlohmann::json::array();
  for (const std::string &chip : Target::supportedChips()) {
    Target t = llvm::cantFail(Target::parse(chip));
    chips.push_back({{"chip", chip},
                     {"ptx_isa", std::to_string(t.ptxVersion() / 10) + "." +
                                     std::to_string(t.ptxVersion() % 10)}});
  }
  j["targets"] = chips;

  std::string deviceError;
  if (auto driver = CudaDriver::get(); !driver) {
    deviceError = llvm::toString(driver.takeError());
  } else if (auto device = queryDevice(0); !device) {
    deviceError = llvm::toString(device.takeError());
  } else {
    j["device"] = toJson(*device);
    if (auto target = Target::fromComputeCapability(device->computeMajor,
                                                    device->computeMinor))
      j["device"]["target"] = target->chip;
    else
      j["device"]["target_error"] = llvm::toString(target.takeError());
  }
  if (!deviceError.empty())
    j["device_error"] = deviceError;

  if (json) {
    llvm::outs() << j.dump(2) << "\n";
    return 0;
  }
  llvm::outs() << "flashjit " << versions.flashjit << " (generator "
               << versions.generator << ")\n"
               << "LLVM/MLIR " << versions.llvm << " (NVPTX back end)\n"
               << "targets:";
  for (auto &c : chips)
    llvm::outs() << " " << c["chip"].get<std::string>() << " (PTX "
                 << c["ptx_isa"].get<std::string>() << ")";
  llvm::outs() << "\n";
  if (!deviceError.empty()) {
    llvm::outs() << "device: none (" << deviceError << ")\n";
    return 0;
  }
  const nlohmann::json &d = j["device"];
  llvm::outs() << "device: " << d.dump() << "\n";
  return 0;
}

} // namespace flashjit::tools
