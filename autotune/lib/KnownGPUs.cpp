//===- KnownGPUs.cpp - the cited table of GPU models ----------------------===//
// Why: every figure the heuristic uses for a known GPU is written once, here,
// with its source, so a reviewer can check it against the vendor's documents.
//
// Per compute capability (NVIDIA CUDA C++ Programming Guide, "Features and
// Technical Specifications", table "Technical Specifications per Compute
// Capability"): 64K 32-bit registers per SM and at most 255 per thread, 1024
// threads per block, and
//   cc   threads/SM  blocks/SM  shared/SM  shared/block (opt-in)
//   7.5     1024        16        64 KB       64 KB
//   8.0     2048        32       164 KB      163 KB
//   8.6     1536        16       100 KB       99 KB
//   8.9     1536        24       100 KB       99 KB
//   9.0     2048        32       228 KB      227 KB
// From 8.0 on the driver reserves 1 KB of shared memory per resident block
// (cudaDevAttrReservedSharedMemoryPerBlock = 1024; the difference between the
// two shared-memory columns). Measured on an H100 80GB HBM3 and an H200 with
// cuDeviceGetAttribute (driver 580.159.04): 233472 B per SM, 232448 B per
// block, 1024 B reserved; L2 52428800 B (H100) and 62914560 B (H200).
#include "flashjit/Autotune/KnownGPUs.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <cctype>

namespace flashjit::autotune {
namespace {

constexpr unsigned kKB = 1024;
constexpr uint64_t kMB = 1024 * 1024;

/// The per-compute-capability columns of the Programming Guide's table.
struct ArchRow {
  int cc;
  unsigned threadsPerSM, blocksPerSM, sharedPerSMKB, sharedPerBlockKB;
};
constexpr ArchRow kArchRows[] = {
    {75, 1024, 16, 64, 64},  {80, 2048, 32, 164, 163}, {86, 1536, 16, 100, 99},
    {89, 1536, 24, 100, 99}, {90, 2048, 32, 228, 227},
};

DeviceModel archLimits(int major, int minor) {
  DeviceModel m;
  m.ccMajor = major;
  m.ccMinor = minor;
  m.registersPerSM = 65536;
  m.maxRegistersPerThread = 255;
  m.maxThreadsPerBlock = 1024;
  m.reservedSharedMemoryPerBlock = major >= 8 ? kKB : 0;
  for (const ArchRow &arch : kArchRows)
    if (arch.cc == major * 10 + minor) {
      m.maxThreadsPerSM = arch.threadsPerSM;
      m.maxBlocksPerSM = arch.blocksPerSM;
      m.sharedMemoryPerSM = arch.sharedPerSMKB * kKB;
      m.sharedMemoryPerBlockOptin = arch.sharedPerBlockKB * kKB;
    }
  return m;
}

KnownGPU row(const char *key, std::vector<std::string> driverNames,
             const char *name, int major, int minor, unsigned sms, uint64_t l2,
             double bandwidthGBs, double tflops) {
  DeviceModel m = archLimits(major, minor);
  m.name = name;
  m.smCount = sms;
  m.l2Bytes = l2;
  m.memoryBandwidthGBs = bandwidthGBs;
  m.denseTensorTflops = tflops;
  return KnownGPU{key, std::move(driverNames), std::move(m)};
}

std::vector<KnownGPU> buildTable() {
  return {
      // NVIDIA T4 datasheet: 320 GB/s, 65 TFLOP/s f16 (no bf16); Turing
      // architecture whitepaper: 40 SMs, 4 MB L2 (TU104).
      row("t4", {"t4"}, "Tesla T4", 7, 5, 40, 4 * kMB, 320, 65),
      // NVIDIA A10 datasheet: 600 GB/s, 125 TFLOP/s bf16 dense; Ampere GA102
      // whitepaper: 72 SMs on the A10, 6 MB L2.
      row("a10", {"a10"}, "NVIDIA A10", 8, 6, 72, 6 * kMB, 600, 125),
      // NVIDIA A100 datasheet (40GB SXM4: 1555 GB/s, 312 TFLOP/s bf16 dense)
      // and "NVIDIA A100 Tensor Core GPU Architecture": 108 SMs, 40 MB L2.
      row("a100-40gb", {"a100 40gb", "a100 sxm4 40gb", "a100 pcie 40gb"},
          "NVIDIA A100-SXM4-40GB", 8, 0, 108, 40 * kMB, 1555, 312),
      // Same sources, 80GB SXM4: 2039 GB/s; "a100" alone means this one.
      row("a100", {"a100", "a100 80gb", "a100 sxm4 80gb"},
          "NVIDIA A100-SXM4-80GB", 8, 0, 108, 40 * kMB, 2039, 312),
      // NVIDIA L4 datasheet: 300 GB/s, 121 TFLOP/s bf16 dense (242 sparse);
      // Ada Lovelace whitepaper: 58 SMs (7424 CUDA cores), 48 MB L2 (AD104).
      row("l4", {"l4"}, "NVIDIA L4", 8, 9, 58, 48 * kMB, 300, 121),
      // Ada Lovelace whitepaper, appendix: RTX 4090, 128 SMs, 72 MB L2,
      // 1008 GB/s, 165.2 TFLOP/s f16/bf16 with f32 accumulation (dense).
      row("rtx4090", {"rtx4090", "rtx 4090", "geforce rtx 4090"},
          "NVIDIA GeForce RTX 4090", 8, 9, 128, 72 * kMB, 1008, 165.2),
      // NVIDIA H100 datasheet (SXM5: 3.35 TB/s, 989 TFLOP/s bf16 dense) and
      // Hopper whitepaper: 132 SMs, 50 MB L2 (measured, see above).
      row("h100", {"h100", "h100 sxm", "h100 sxm5", "h100 80gb hbm3"},
          "NVIDIA H100 80GB HBM3", 9, 0, 132, 50 * kMB, 3350, 989),
      // Same sources, H100 PCIe: 114 SMs, 50 MB L2, 2.0 TB/s, 756 TFLOP/s.
      row("h100-pcie", {"h100 pcie"}, "NVIDIA H100 PCIe", 9, 0, 114, 50 * kMB,
          2000, 756),
      // NVIDIA H200 datasheet: 4.8 TB/s, 989 TFLOP/s bf16 dense; 132 SMs and
      // 60 MB L2 measured (see above).
      row("h200", {"h200"}, "NVIDIA H200", 9, 0, 132, 60 * kMB, 4800, 989),
  };
}

/// Lower case, '-' and '_' as spaces, runs of spaces collapsed, trimmed.
std::string normalize(llvm::StringRef text) {
  std::string out;
  for (char c : text) {
    char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == '-' || lower == '_' ||
        std::isspace(static_cast<unsigned char>(lower)))
      lower = ' ';
    if (lower == ' ' && (out.empty() || out.back() == ' '))
      continue;
    out.push_back(lower);
  }
  while (!out.empty() && out.back() == ' ')
    out.pop_back();
  return out;
}

bool isWordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0;
}

/// Whether `word` appears in `text` with no letter or digit touching it.
bool containsWords(llvm::StringRef text, llvm::StringRef word) {
  for (size_t pos = text.find(word); pos != llvm::StringRef::npos;
       pos = text.find(word, pos + 1)) {
    size_t end = pos + word.size();
    bool startOk = pos == 0 || !isWordChar(text[pos - 1]);
    bool endOk = end == text.size() || !isWordChar(text[end]);
    if (startOk && endOk)
      return true;
  }
  return false;
}

} // namespace

const std::vector<KnownGPU> &knownGPUs() {
  static const std::vector<KnownGPU> table = buildTable();
  return table;
}

std::string knownGPUKeys() {
  std::vector<std::string> keys;
  for (const KnownGPU &gpu : knownGPUs())
    keys.push_back(gpu.key);
  return llvm::join(keys, ", ");
}

llvm::Expected<DeviceModel> lookupKnownGPU(llvm::StringRef name) {
  std::string wanted = normalize(name);
  const KnownGPU *best = nullptr;
  size_t bestLength = 0;
  for (const KnownGPU &gpu : knownGPUs()) {
    if (!wanted.empty() && normalize(gpu.key) == wanted)
      return gpu.model;
    for (const std::string &driverName : gpu.driverNames)
      if (driverName.size() > bestLength && containsWords(wanted, driverName)) {
        best = &gpu;
        bestLength = driverName.size();
      }
  }
  if (best)
    return best->model;
  return llvm::createStringError(
      llvm::formatv("unknown GPU '{0}': known GPUs are {1} (or their driver "
                    "names, e.g. \"NVIDIA H100 80GB HBM3\"); describe another "
                    "GPU with a device model JSON file",
                    name, knownGPUKeys())
          .str());
}

llvm::Expected<DeviceModel> referenceGPU(int major, int minor) {
  const char *key = nullptr;
  switch (major * 10 + minor) {
  case 80:
    key = "a100";
    break;
  case 86:
    key = "a10";
    break;
  case 89:
    key = "l4";
    break;
  case 90:
    key = "h100";
    break;
  default:
    return llvm::createStringError(
        llvm::formatv("no reference GPU for compute capability {0}.{1}: name "
                      "the device (one of {2}) or give its device model",
                      major, minor, knownGPUKeys())
            .str());
  }
  return lookupKnownGPU(key);
}

} // namespace flashjit::autotune
