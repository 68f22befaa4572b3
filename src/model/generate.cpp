#include "model/generate.h"

#include <algorithm>

namespace ss {

std::vector<int> Generate(const Model& model, const std::vector<int>& prompt,
                          const GenerateOptions& options,
                          const std::function<void(int prev, int token)>& on_token) {
  const ModelConfig& c = model.config;
  if (prompt.empty()) Fail("generate: the prompt has no tokens (use BOS or give --prompt)");
  const int steps = std::min(options.steps, c.max_seq_len);
  if (static_cast<int>(prompt.size()) > c.max_seq_len)
    Fail("generate: the prompt has {} tokens, more than the model's context of {}", prompt.size(),
         c.max_seq_len);
  KVCache cache =
      KVCache::Create(c, steps > 0 ? std::max<int>(steps, prompt.size()) : prompt.size());
  RunState state;
  Sampler sampler(options.sampler);
  std::vector<int> out;
  ForwardRequest request;
  request.tokens = prompt;
  request.logits = LogitsMode::kLast;
  Tensor logits = Forward(model, cache, state, request);
  int prev = prompt.back();
  for (int pos = static_cast<int>(prompt.size()); pos < steps; ++pos) {
    int next = sampler.Sample(logits.data(), c.vocab_size);
    if (options.stop_at_bos_eos && (next == c.bos_id || next == c.eos_id)) break;
    out.push_back(next);
    if (on_token) on_token(prev, next);
    prev = next;
    if (pos + 1 >= steps) break;
    request.tokens = std::span<const int>(&out.back(), 1);
    logits = Forward(model, cache, state, request);
  }
  return out;
}

}  // namespace ss
