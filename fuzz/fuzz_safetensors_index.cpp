// Fuzzes the sharded-checkpoint index, model.safetensors.index.json: the input is the index text,
// read from a directory that also holds two small valid shards ("a.safetensors" with tensors "x"
// and "y", "b.safetensors" with "z"). An index that opens has every tensor it names loaded.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.h"
#include "fuzz_util.h"
#include "io/safetensors.h"

namespace {
void WriteShards() {
  const std::string dir = ss::fuzz::ScratchDir();
  ss::Tensor x = ss::Tensor::Zeros({2, 3}), y = ss::Tensor::Zeros({4}), z = ss::Tensor::Zeros({1});
  ss::WriteSafetensors(dir + "/a.safetensors", {{"x", x}, {"y", y}});
  ss::WriteSafetensors(dir + "/b.safetensors", {{"z", z}}, ss::SafetensorsDtype::kF16);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool shards_written = (WriteShards(), true);
  (void)shards_written;
  ss::fuzz::WriteScratchFile("model.safetensors.index.json", data, size);
  try {
    const ss::SafetensorsDir dir = ss::SafetensorsDir::Open(ss::fuzz::ScratchDir());
    for (const std::string& name : dir.names()) ss::fuzz::Touch(dir.Load(name));
  } catch (const ss::Error&) {
  }
  return 0;
}
