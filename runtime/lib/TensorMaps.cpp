//===- TensorMaps.cpp - the TMA tensor maps of a forward launch -----------===//
// Why: see TensorMaps.h. The limits are those cuda.h documents for
// cuTensorMapEncodeTiled; each failed check says which tensor, which number,
// and that the pointer-loading family takes any 16-byte aligned layout.
#include "flashjit/Runtime/TensorMaps.h"
#include "flashjit/Runtime/CudaDriver.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstdint>
#include <string>
#include <tuple>

namespace flashjit {
namespace {

/// The tensor-core family that loads through plain pointers: the way out
/// when a layout cannot be described by a tensor map.
constexpr llvm::StringLiteral kPointerLoadFamily = "mma_sync";

constexpr unsigned kTensorMapRank = 4;
/// cuTensorMapEncodeTiled's limits (cuda.h).
constexpr uint64_t kBaseAlignmentBytes = 16;
constexpr uint64_t kStrideAlignmentBytes = 16;
constexpr uint64_t kMaxExtent = uint64_t(1) << 32;
constexpr uint64_t kStrideLimitBytes = uint64_t(1) << 40; // exclusive
constexpr unsigned kMaxBoxExtent = 256;
/// A box row may not be wider than the swizzle span (128-byte swizzle).
constexpr unsigned kSwizzleSpanBytes = 128;

/// "the wgmma kernel loads K with TMA, which needs <needs>: <found>;
/// <remedy> or a config of family mma_sync" (no remedy: just the family;
/// O is stored, not loaded).
llvm::Error tmaRequirement(llvm::StringRef family, llvm::StringRef name,
                           const llvm::Twine &needs, const llvm::Twine &found,
                           llvm::StringRef remedy = "") {
  std::string way =
      remedy.empty()
          ? llvm::formatv("pick a config of family {0}", kPointerLoadFamily)
                .str()
          : llvm::formatv("{0} or a config of family {1}", remedy,
                          kPointerLoadFamily)
                .str();
  return llvm::createStringError(
      llvm::formatv("the {0} kernel {1} {2} with TMA, which needs {3}: {4}; "
                    "{5}",
                    family, name == "O" ? "stores" : "loads", name,
                    needs.str(), found.str(), way)
          .str());
}

template <typename T> std::string listText(llvm::ArrayRef<T> values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i)
    s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

CUtensorMapDataType tensorMapDataType(DType dtype) {
  switch (dtype) {
  case DType::F16:
    return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  case DType::BF16:
    return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  }
  return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}

} // namespace

llvm::Expected<TensorMapLayout>
tensorMapLayout(const TensorRef &tensor, llvm::StringRef name, unsigned boxRows,
                unsigned boxCols, llvm::StringRef family) {
  const uint64_t elemBytes = dtypeBytes(tensor.dtype);
  if (reinterpret_cast<uintptr_t>(tensor.data) % kBaseAlignmentBytes != 0)
    return tmaRequirement(family, name, "a 16-byte aligned base address",
                          llvm::formatv("{0} starts at {1}", name, tensor.data),
                          "pass a 16-byte aligned tensor");
  if (tensor.strides[3] != 1)
    return tmaRequirement(
        family, name, "unit stride along head_dim",
        llvm::formatv("{0}'s head-dim stride is {1}", name, tensor.strides[3]),
        "pass a tensor with contiguous rows");
  for (int64_t extent : tensor.shape)
    if (extent < 1 || static_cast<uint64_t>(extent) > kMaxExtent)
      return tmaRequirement(
          family, name, "extents from 1 to 2^32",
          llvm::formatv("{0}'s shape is {1}", name,
                        listText(llvm::ArrayRef(tensor.shape))),
          "pass a tensor with every extent in that range");
  uint64_t rowBytes = static_cast<uint64_t>(tensor.shape[3]) * elemBytes;
  if (rowBytes % kStrideAlignmentBytes != 0)
    return tmaRequirement(
        family, name, "rows of a multiple of 16 bytes",
        llvm::formatv("{0}'s head dim {1} makes rows of {2} bytes", name,
                      tensor.shape[3], rowBytes),
        "use a head dim that is a multiple of 8");

  TensorMapLayout layout;
  layout.base = tensor.data;
  layout.dataType = tensorMapDataType(tensor.dtype);
  // [batch, heads, seqlen, head_dim] -> (head_dim, seqlen, heads, batch).
  for (unsigned i = 0; i < kTensorMapRank; ++i)
    layout.dims[i] =
        static_cast<cuuint64_t>(tensor.shape[kTensorMapRank - 1 - i]);

  const char *strideNames[] = {"row", "head", "batch"};
  for (unsigned i = 0; i < 3; ++i) {
    int64_t stride = tensor.strides[2 - i];
    if (stride < 0)
      return tmaRequirement(
          family, name,
          llvm::formatv("non-negative {0} strides", strideNames[i]),
          llvm::formatv("{0}'s {1} stride is {2} elements", name,
                        strideNames[i], stride),
          "pass a contiguous tensor");
    uint64_t bytes = static_cast<uint64_t>(stride) * elemBytes;
    std::string found = llvm::formatv("{0}'s {1} stride is {2} bytes", name,
                                      strideNames[i], bytes);
    if (bytes % kStrideAlignmentBytes != 0)
      return tmaRequirement(
          family, name,
          llvm::formatv("16-byte aligned {0} strides", strideNames[i]), found,
          "pass a contiguous tensor");
    if (bytes >= kStrideLimitBytes)
      return tmaRequirement(
          family, name,
          llvm::formatv("{0} strides below 2^40 bytes", strideNames[i]), found,
          "pass a contiguous tensor");
    layout.byteStrides[i] = bytes;
  }

  if (boxRows < 1 || boxRows > kMaxBoxExtent)
    return tmaRequirement(
        family, name, "boxes of 1 to 256 rows",
        llvm::formatv("the config's boxes of {0} have {1} rows", name, boxRows),
        "pick a config whose blocks have 1 to 256 rows");
  uint64_t boxRowBytes = uint64_t(boxCols) * elemBytes;
  if (boxCols < 1 || boxRowBytes % kStrideAlignmentBytes != 0 ||
      boxRowBytes > kSwizzleSpanBytes)
    return tmaRequirement(
        family, name,
        "box rows of 16 to 128 bytes (the swizzle span), a multiple of 16",
        llvm::formatv("the {0} template asks for boxes of {1} columns ({2} "
                      "bytes), a flashjit bug",
                      family, boxCols, boxRowBytes));
  layout.box = {boxCols, boxRows, 1, 1};
  return layout;
}

llvm::Expected<ForwardTensorMapLayouts>
forwardTensorMapLayouts(const ForwardArgs &args, const TensorMapBoxes &boxes,
                        llvm::StringRef family) {
  ForwardTensorMapLayouts layouts;
  const std::tuple<const char *, const TensorRef *, unsigned, TensorMapLayout *>
      maps[] = {{"Q", &args.q, boxes.qRows, &layouts.q},
                {"K", &args.k, boxes.kvRows, &layouts.k},
                {"V", &args.v, boxes.kvRows, &layouts.v},
                {"O", &args.o, boxes.oRows, &layouts.o}};
  for (auto [name, tensor, rows, layout] : maps) {
    auto one = tensorMapLayout(*tensor, name, rows, boxes.cols, family);
    if (!one)
      return one.takeError();
    *layout = *one;
  }
  return layouts;
}

llvm::Error encodeTensorMap(const CudaDriver &driver,
                            const TensorMapLayout &layout, CUtensorMap &map) {
  static_assert(std::tuple_size_v<decltype(layout.dims)> == kTensorMapRank &&
                std::tuple_size_v<decltype(layout.box)> == kTensorMapRank);
  const cuuint32_t elementStrides[kTensorMapRank] = {1, 1, 1, 1};
  return FLASHJIT_CU(
      driver, cuTensorMapEncodeTiled, &map, layout.dataType, kTensorMapRank,
      const_cast<void *>(layout.base), layout.dims.data(),
      layout.byteStrides.data(), layout.box.data(), elementStrides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

llvm::Error encodeTensorMaps(const CudaDriver &driver,
                             const ForwardTensorMapLayouts &layouts,
                             ForwardTensorMaps &maps) {
  const std::tuple<const char *, const TensorMapLayout *, CUtensorMap *> all[] =
      {{"Q", &layouts.q, &maps.q},
       {"K", &layouts.k, &maps.k},
       {"V", &layouts.v, &maps.v},
       {"O", &layouts.o, &maps.o}};
  for (auto [name, layout, map] : all)
    if (llvm::Error err = encodeTensorMap(driver, *layout, *map))
      return llvm::createStringError(
          llvm::formatv("cannot encode the tensor map of {0} (dims {1}, "
                        "byte strides {2}, box {3}): {4}",
                        name, listText(llvm::ArrayRef(layout->dims)),
                        listText(llvm::ArrayRef(layout->byteStrides)),
                        listText(llvm::ArrayRef(layout->box)),
                        llvm::toString(std::move(err)))
              .str());
  return llvm::Error::success();
}

} // namespace flashjit
