#include "io/load.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "common/error.h"
#include "common/file_util.h"
#include "io/llama2c.h"
#include "io/model_files.h"
#include "model/precision.h"

namespace ss {

Model LoadModel(const std::string& path, Precision precision) {
  if (!FileExists(path)) Fail("{}: no such file or directory", path);
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
  Fail("{}: unrecognised model format (expected a llama2.c .bin, a GGUF file or a Hugging Face "
       "directory with config.json)",
       path);
}

}  // namespace ss
