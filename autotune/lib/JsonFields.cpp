//===- JsonFields.cpp - checked reads of JSON fields ----------------------===//
// Why: one implementation of "present, right type, in range" for every file
// format of the autotuner, with the field path in each message.
#include "JsonFields.h"

#include "llvm/Support/FormatVariadic.h"

namespace flashjit::autotune::detail {

using nlohmann::json;

std::string fieldPath(llvm::StringRef at, llvm::StringRef key) {
  if (at.empty())
    return key.str();
  return (at + "." + key).str();
}

std::string dumpJson(const json &value, int indent) {
  return value.dump(indent, ' ', /*ensure_ascii=*/false,
                    json::error_handler_t::replace);
}

std::string describeJson(const json &value) {
  std::string text = dumpJson(value, -1);
  if (text.size() > 40)
    text = text.substr(0, 37) + "...";
  if (value.is_null())
    return "null";
  return llvm::formatv("{0} {1}", value.type_name(), text).str();
}

llvm::Error fieldError(llvm::StringRef at, const llvm::Twine &message) {
  return llvm::createStringError(
      (at.empty() ? message.str() : (at + ": " + message).str()));
}

llvm::Error requireObject(const json &value, llvm::StringRef at) {
  if (value.is_object())
    return llvm::Error::success();
  return fieldError(at, "expected an object, got " + describeJson(value));
}

llvm::Expected<const json *>
requireField(const json &object, llvm::StringRef at, llvm::StringRef key) {
  if (auto err = requireObject(object, at))
    return err;
  auto it = object.find(key.str());
  if (it == object.end())
    return fieldError(fieldPath(at, key), "missing field");
  return &*it;
}

llvm::Expected<int64_t> readInt(const json &object, llvm::StringRef at,
                                llvm::StringRef key, int64_t min, int64_t max) {
  auto field = requireField(object, at, key);
  if (!field)
    return field.takeError();
  const json &value = **field;
  std::string path = fieldPath(at, key);
  auto rangeError = [&] {
    return fieldError(path, llvm::formatv("expected an integer from {0} to "
                                          "{1}, got {2}",
                                          min, max, describeJson(value))
                                .str());
  };
  if (value.is_number_unsigned()) {
    uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(max) || static_cast<int64_t>(v) < min)
      return rangeError();
    return static_cast<int64_t>(v);
  }
  if (value.is_number_integer()) {
    int64_t v = value.get<int64_t>();
    if (v < min || v > max)
      return rangeError();
    return v;
  }
  return rangeError();
}

llvm::Expected<double> readNumber(const json &object, llvm::StringRef at,
                                  llvm::StringRef key) {
  auto field = requireField(object, at, key);
  if (!field)
    return field.takeError();
  if (!(*field)->is_number())
    return fieldError(fieldPath(at, key),
                      "expected a number, got " + describeJson(**field));
  return (*field)->get<double>();
}

llvm::Expected<std::optional<double>> readOptionalNumber(const json &object,
                                                         llvm::StringRef at,
                                                         llvm::StringRef key) {
  if (auto err = requireObject(object, at))
    return err;
  auto it = object.find(key.str());
  if (it == object.end() || it->is_null())
    return std::optional<double>();
  auto value = readNumber(object, at, key);
  if (!value)
    return value.takeError();
  return std::optional<double>(*value);
}

llvm::Expected<std::string> readString(const json &object, llvm::StringRef at,
                                       llvm::StringRef key) {
  auto field = requireField(object, at, key);
  if (!field)
    return field.takeError();
  if (!(*field)->is_string())
    return fieldError(fieldPath(at, key),
                      "expected a string, got " + describeJson(**field));
  return (*field)->get<std::string>();
}

llvm::Expected<bool> readBool(const json &object, llvm::StringRef at,
                              llvm::StringRef key) {
  auto field = requireField(object, at, key);
  if (!field)
    return field.takeError();
  if (!(*field)->is_boolean())
    return fieldError(fieldPath(at, key),
                      "expected true or false, got " + describeJson(**field));
  return (*field)->get<bool>();
}

} // namespace flashjit::autotune::detail
