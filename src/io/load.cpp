#include "io/load.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "common/error.h"
#include "common/file_util.h"
#include "io/gguf.h"
#include "io/llama2c.h"
#include "io/model_files.h"
#include "io/safetensors.h"
#include "kernels/dequant.h"
#include "model/precision.h"

namespace ss {

Model LoadModel(const std::string& path, Precision precision) {
  if (const std::string why = UnreachableReason(path); !why.empty()) Fail("{}: {}", path, why);
  if (IsDirectory(path)) {
    return LoadHfModel(path, precision);
  }
  // Refuses a FIFO or a device by name before anything reads from it (a read would block).
  const int fd = OpenRegularFile(path);
  char magic[4] = {};
  const ssize_t n = read(fd, magic, 4);
  close(fd);
  if (n == 4 && std::memcmp(magic, "GGUF", 4) == 0) return LoadGgufModel(path, precision);
  if (LooksLikeLlama2c(path)) {
    // llama2.c files are f32 and small: pack after loading, then free the f32 projections.
    Model model = LoadLlama2c(path);
    // native: the file stores f32, so the model stays f32.
    if (precision == Precision::kNative)
      SetPrecision(model, precision);
    else if (precision != Precision::kF32)
      WeightPacker(model.weights, precision).PackLoaded(model);
    return model;
  }
  Fail(
      "{}: unrecognised model format (expected a llama2.c .bin, a GGUF file or a Hugging Face "
      "directory with config.json)",
      path);
}

std::vector<std::pair<std::string, int>> StoredTensorTypes(const std::string& path) {
  std::map<std::string, int> counts;
  if (IsDirectory(path)) {
    const SafetensorsDir dir = SafetensorsDir::Open(path);
    auto u8 = [&](const std::string& name) {
      return dir.Has(name) && dir.Info(name).dtype == SafetensorsDtype::kU8;
    };
    for (const std::string& name : dir.names()) {
      const std::string stem = name.ends_with("_blocks")   ? name.substr(0, name.size() - 7)
                               : name.ends_with("_scales") ? name.substr(0, name.size() - 7)
                                                           : "";
      if (!stem.empty() && u8(stem + "_blocks") && u8(stem + "_scales")) {
        if (name.ends_with("_blocks")) ++counts[GgmlTypeName(kTypeMxfp4Split)];
        continue;
      }
      ++counts[SafetensorsDtypeName(dir.Info(name).dtype)];
    }
  } else {
    const int fd = OpenRegularFile(path);
    char magic[4] = {};
    const ssize_t n = read(fd, magic, 4);
    close(fd);
    if (n != 4 || std::memcmp(magic, "GGUF", 4) != 0) return {};
    const GgufFile gguf = GgufFile::Open(path);
    for (const GgufTensorInfo& t : gguf.tensors()) ++counts[GgmlTypeName(t.type)];
  }
  std::vector<std::pair<std::string, int>> out(counts.begin(), counts.end());
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

Precision FilePrecision(const std::string& path, std::string* why) {
  auto say = [&](const std::string& text) {
    if (why) *why = text;
  };
  std::vector<std::pair<std::string, int>> types;
  try {
    if (!FileExists(path) || (IsDirectory(path) && !FileExists(path + "/config.json"))) {
      say("not a model file");
      return Precision::kF32;
    }
    types = StoredTensorTypes(path);
  } catch (const Error&) {
    // The loader reads the same headers and reports the fault in its own words.
    say("unreadable");
    return Precision::kF32;
  }
  if (types.empty()) {  // not GGUF, not a directory: llama2.c, all f32
    say("a llama2.c file, every weight F32");
    return Precision::kF32;
  }
  std::vector<std::string> names;
  bool all_f32 = true;
  for (const auto& [type, count] : types) {
    names.push_back(type);
    all_f32 = all_f32 && type == "F32";
  }
  say(all_f32 ? std::string("every weight stored as F32")
              : "weights stored as " + fmt::format("{}", fmt::join(names, ", ")));
  return all_f32 ? Precision::kF32 : Precision::kNative;
}

}  // namespace ss
