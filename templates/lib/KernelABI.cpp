//===- KernelABI.cpp - parameter pointers and launch geometry -------------===//
// Why: the flattening of ForwardKernelArgs into cuLaunchKernel's parameter
// array must match the gpu.func signature the templates emit, in one place.
#include "flashjit/Templates/KernelABI.h"
#include "flashjit/Templates/KernelTemplate.h"
#include "flashjit/Templates/TileConfig.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

namespace flashjit {

std::array<void *, ForwardKernelArgs::kNumParams>
ForwardKernelArgs::paramPointers() {
  std::array<void *, kNumParams> p{};
  unsigned i = 0;
  p[i++] = &q;
  p[i++] = &k;
  p[i++] = &v;
  p[i++] = &o;
  p[i++] = &lse;
  for (auto *strides : {&qStrides, &kStrides, &vStrides, &oStrides,
                        &lseStrides})
    for (int64_t &s : *strides)
      p[i++] = &s;
  p[i++] = &seqlenQ;
  p[i++] = &seqlenK;
  p[i++] = &scaleLog2;
  p[i++] = &batch;
  p[i++] = &tileCounter;
  return p;
}

LaunchGeometry forwardGeometry(const KernelInfo &info, int64_t batch,
                               int64_t seqlenQ, unsigned residentBlocks) {
  LaunchGeometry g;
  int64_t blockM = info.config.blockM > 0 ? info.config.blockM : 1;
  int64_t queryBlocks = (seqlenQ + blockM - 1) / blockM;
  if (residentBlocks > 0) {
    // A cluster takes `cluster` adjacent query blocks of one head at once.
    const int64_t cluster = clusterSizeOf(info.config);
    int64_t tiles =
        (queryBlocks + cluster - 1) / cluster * info.numHeads * batch;
    int64_t clusters = std::max<int64_t>(
        1, std::min<int64_t>(tiles, residentBlocks / cluster));
    g.gridX = static_cast<unsigned>(clusters * cluster);
  } else {
    g.gridX = static_cast<unsigned>(queryBlocks);
    g.gridY = static_cast<unsigned>(info.numHeads);
    g.gridZ = static_cast<unsigned>(batch);
  }
  g.blockX = info.threadsPerBlock;
  g.sharedMemoryBytes = info.sharedMemoryBytes;
  return g;
}

llvm::Expected<TileConfig> TileConfig::parse(llvm::StringRef text) {
  auto malformed = [&] {
    return llvm::createStringError(
        "malformed tile config '" + text.str() +
        "': expected family:m<block_m>:n<block_n>:s<stages>:w<warps>, e.g. "
        "mma_sync:m128:n64:s2:w4");
  };
  llvm::SmallVector<llvm::StringRef, 5> parts;
  text.split(parts, ':');
  if (parts.size() != 5 || parts[0].empty())
    return malformed();
  TileConfig config;
  config.family = parts[0].str();
  int64_t *fields[] = {&config.blockM, &config.blockN, &config.stages,
                       &config.warps};
  const char prefixes[] = {'m', 'n', 's', 'w'};
  for (int i = 0; i < 4; ++i) {
    llvm::StringRef part = parts[i + 1];
    if (!part.consume_front(llvm::StringRef(&prefixes[i], 1)) ||
        part.getAsInteger(10, *fields[i]) || *fields[i] < 1)
      return malformed();
  }
  return config;
}

llvm::Expected<ConfigRequest> ConfigRequest::parse(llvm::StringRef text) {
  ConfigRequest request;
  if (text.contains(':')) {
    auto config = TileConfig::parse(text);
    if (!config)
      return config.takeError();
    request.config = *config;
  } else if (!text.empty()) {
    request.family = text.str();
  }
  return request;
}

std::string TileConfig::canonical() const {
  return llvm::formatv("{0}:m{1}:n{2}:s{3}:w{4}", family, blockM, blockN,
                       stages, warps)
      .str();
}

} // namespace flashjit
