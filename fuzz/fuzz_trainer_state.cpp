// Fuzzes trainer_state.json as the trainer reads it on resume (step, AdamW count, RNG words,
// parameter count) and as `trace` reads it for a checkpoint's step.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/error.h"
#include "fuzz_util.h"
#include "trace/trace.h"
#include "train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    (void)ss::train::ParseTrainerState(text, "fuzz/trainer_state.json", 1234);
  } catch (const ss::Error&) {
  }
  ss::fuzz::WriteScratchFile("trainer_state.json", data, size);
  try {
    (void)ss::trace::ReadStep(ss::fuzz::ScratchDir());
  } catch (const ss::Error&) {
  }
  return 0;
}
