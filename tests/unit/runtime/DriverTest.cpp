//===- DriverTest.cpp - the driver layer on a machine without a GPU -------===//
// Why: CI has no GPU and no libcuda; the driver layer must still say
// clearly why it cannot load kernels, and its checks that need no device
// (geometry, shared memory, versions) must hold.
#include "RuntimeTestUtil.h"
#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/Runtime/DeviceInfo.h"
#include "flashjit/Runtime/Launch.h"
#include "flashjit/Runtime/ModuleLoader.h"

#include <dlfcn.h>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

using namespace flashjit;
using namespace flashjit::test;

namespace {

const char *kNoDriver = "no CUDA driver (libcuda.so.1) found: flashjit can "
                        "compile PTX here but cannot load or launch kernels";

bool driverLoadable() {
  void *h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h)
    ::dlclose(h);
  return h != nullptr;
}

template <typename T> std::string errorOf(llvm::Expected<T> value) {
  return value ? std::string() : llvm::toString(value.takeError());
}

} // namespace

TEST_CASE("without libcuda every entry point says so, and nothing crashes") {
  if (driverLoadable()) {
    MESSAGE("libcuda.so.1 is loadable here: driver-absent checks skipped");
    return;
  }
  for (int i = 0; i < 2; ++i) { // the same answer every time
    auto drv = CudaDriver::get();
    REQUIRE_FALSE(drv);
    std::string why = llvm::toString(drv.takeError());
    CHECK(why.rfind(kNoDriver, 0) == 0);
  }
  CHECK(errorOf(queryDevice(0)).rfind(kNoDriver, 0) == 0);
  KernelInfo info;
  info.name = "k";
  info.threadsPerBlock = 128;
  CHECK(errorOf(LoadedModule::fromPtx(info, ".version 8.0\n"))
            .rfind(kNoDriver, 0) == 0);
  CHECK(errorOf(LoadedModule::load(info, "ptx", "cubin")).rfind(kNoDriver, 0) ==
        0);
  LaunchGeometry g;
  g.blockX = 128;
  int dummy = 0;
  void *params[] = {&dummy};
  CHECK(errorText(
            launch(reinterpret_cast<CUfunction>(&dummy), g, params, nullptr))
            .rfind(kNoDriver, 0) == 0);
}

TEST_CASE("a missing driver library is named in the error") {
  auto drv = CudaDriver::load("libflashjit-no-such-driver.so.1");
  REQUIRE_FALSE(drv);
  std::string why = llvm::toString(drv.takeError());
  CHECK(why.rfind("no CUDA driver (libflashjit-no-such-driver.so.1) found",
                  0) == 0);
  CHECK(missingDriverMessage("libcuda.so.1") == kNoDriver);
}

TEST_CASE(
    "a library that is not the driver is refused with the missing entry") {
  // libm is loadable but has no cu* symbols.
  auto drv = CudaDriver::load("libm.so.6");
  REQUIRE_FALSE(drv);
  std::string why = llvm::toString(drv.takeError());
  CHECK(why.find("lacks cuInit") != std::string::npos);
  CHECK(why.find("update the NVIDIA driver") != std::string::npos);
}

TEST_CASE("versioned entry points resolve by the names cuda.h maps them to") {
  // The member named by the short spelling is the versioned one.
  CHECK(std::string(FLASHJIT_CUDA_SYMBOL(cuMemAlloc)) == "cuMemAlloc_v2");
  CHECK(std::string(FLASHJIT_CUDA_SYMBOL(cuMemcpyHtoD)) == "cuMemcpyHtoD_v2");
  CHECK(std::string(FLASHJIT_CUDA_SYMBOL(cuInit)) == "cuInit");
}

TEST_CASE("launch geometry is checked before the driver sees it") {
  LaunchGeometry g;
  g.gridX = 4;
  g.gridY = 8;
  g.gridZ = 2;
  g.blockX = 128;
  CHECK(errorText(validateGeometry(g)) == "");
  auto with = [&](auto change) {
    LaunchGeometry bad = g;
    change(bad);
    return errorText(validateGeometry(bad));
  };
  CHECK(with([](LaunchGeometry &b) { b.gridX = 0; }) ==
        "invalid launch: grid x (query blocks) is 0, must be at least 1");
  CHECK(with([](LaunchGeometry &b) {
          b.gridY = 70000;
        }).find("grid y (heads) is 70000") != std::string::npos);
  CHECK(with([](LaunchGeometry &b) { b.gridZ = 0; }).find("grid z (batch)") !=
        std::string::npos);
  CHECK(with([](LaunchGeometry &b) {
          b.blockX = 2048;
        }).find("threads per block is 2048") != std::string::npos);
  int dummy = 0;
  void *params[] = {&dummy};
  CHECK(errorText(launch(nullptr, g, params, nullptr)) ==
        "invalid launch: no kernel function");
}

TEST_CASE("shared memory and block size limits name both numbers") {
  KernelInfo info;
  info.name = "flashjit_fwd_d256";
  info.sharedMemoryBytes = 240 * 1024;
  info.threadsPerBlock = 256;
  std::string why = errorText(checkSharedMemory(info, 227 * 1024));
  CHECK(why.find("flashjit_fwd_d256") != std::string::npos);
  CHECK(why.find("245760") != std::string::npos);
  CHECK(why.find("232448") != std::string::npos);
  CHECK(errorText(checkSharedMemory(info, 240 * 1024)) == "");

  why = errorText(checkThreadsPerBlock(info, 128, 255));
  CHECK(why.find("256 threads") != std::string::npos);
  CHECK(why.find("255 registers") != std::string::npos);
  CHECK(why.find("at most 128") != std::string::npos);
  CHECK(errorText(checkThreadsPerBlock(info, 1024, 64)) == "");
}

TEST_CASE("device info formatting") {
  CHECK(formatDriverVersion(13000) == "13.0");
  CHECK(formatDriverVersion(12040) == "12.4");
  DeviceInfo d;
  d.name = "NVIDIA H100 80GB HBM3";
  d.computeMajor = 9;
  d.smCount = 132;
  d.totalMemoryBytes = 85ull << 30;
  d.driverVersion = 13000;
  d.driverVersionText = "13.0";
  CHECK(d.computeCapability() == 90);
  nlohmann::json j = toJson(d);
  CHECK(j["name"] == d.name);
  CHECK(j["compute_capability"] == "9.0");
  CHECK(j["sm_count"] == 132);
  CHECK(j["total_memory_bytes"] == (85ull << 30));
  CHECK(j["driver_version_text"] == "13.0");
}
