// Fuzzes the Hugging Face config.json -> ModelConfig mapping for every family (llama, mistral,
// qwen2, qwen3, gpt2, gpt_neox, olmo2, qwen3_moe, olmoe, mixtral). A config that parses is written
// back with HfConfigJson, which promises ParseHfConfig(HfConfigJson(c)) == c whenever it returns:
// that is checked too.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/error.h"
#include "io/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ss::ModelConfig config;
  try {
    config = ss::ParseHfConfig(text, "fuzz/config.json");
  } catch (const ss::Error&) {
    return 0;
  }
  std::string json;
  try {
    json = ss::HfConfigJson(config);
  } catch (const ss::Error&) {  // not expressible in its family's config.json
    return 0;
  }
  if (!(ss::ParseHfConfig(json, "fuzz/written.json") == config)) std::abort();
  return 0;
}
