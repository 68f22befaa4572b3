// Fuzzes the trainer's config file (train_config.json, --config): parsing onto the defaults or a
// preset, then validation, the derived ModelConfig, its config.json and the resume-compatibility
// check against the defaults.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/error.h"
#include "train/checkpoint.h"
#include "train/train_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const ss::train::TrainConfig c = ss::train::ParseTrainConfig(text, "fuzz/train_config.json");
    (void)ss::train::IncompatibleFields(c, ss::train::TrainConfig{});
    (void)ss::train::ToJson(c).dump();
    c.Validate("fuzz/train_config.json");
    (void)ss::train::CheckpointConfigJson(c);
  } catch (const ss::Error&) {
  }
  return 0;
}
