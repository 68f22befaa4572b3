// Fuzzes the list flags parsed against a model: --patterns ("0:3,1:*", analyze), --ablate
// ("mlp.1,head.0.3", explain) and --conditions ("bos,no-bos", analyze and explain). Every input
// goes to all three parsers, against a 12-layer, 12-head model and a 1-layer, 1-head one.
#include <cstddef>
#include <cstdint>
#include <string>

#include "analysis/analyze.h"
#include "analysis/conditions.h"
#include "common/error.h"
#include "explain/explain.h"

namespace {
ss::ModelConfig Config(int layers, int heads) {
  ss::ModelConfig c;
  c.dim = 16 * heads;
  c.hidden_dim = 4 * c.dim;
  c.n_layers = layers;
  c.n_heads = c.n_kv_heads = heads;
  c.head_dim = 16;
  c.vocab_size = 32;
  return c;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string spec(reinterpret_cast<const char*>(data), size);
  static const ss::ModelConfig configs[] = {Config(12, 12), Config(1, 1)};
  for (const ss::ModelConfig& c : configs) {
    try {
      (void)ss::analysis::ParsePatternSpec(spec, c, "--patterns");
    } catch (const ss::Error&) {
    }
    try {
      for (const ss::explain::Component& component :
           ss::explain::ParseComponents(spec, c, "--ablate"))
        (void)component.Name();
    } catch (const ss::Error&) {
    }
  }
  try {
    for (ss::analysis::Condition condition : ss::analysis::ParseConditions(spec, "--conditions"))
      (void)ss::analysis::ConditionName(condition);
  } catch (const ss::Error&) {
  }
  return 0;
}
