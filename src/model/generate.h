// Autoregressive generation with a dense KV cache (the model's context): prefill the prompt in one
// call, then one decode call per new token. Streaming policies (sink + window caches) live in
// src/stream and reuse the same Sampler.
#pragma once

#include <functional>
#include <vector>

#include "model/model.h"
#include "model/sampler.h"

namespace ss {

struct GenerateOptions {
  // Total sequence length, prompt included, as llama2.c's -n; capped at the model's context.
  int steps = 256;
  SamplerOptions sampler;
  // Stop when the model produces BOS or EOS (llama2.c stops at BOS, which delimits its stories).
  bool stop_at_bos_eos = true;
};

// Generates after `prompt` (not empty). Calls on_token(prev, token) for each new token as it is
// produced. Returns the new tokens (the stop token, if any, is not included).
std::vector<int> Generate(const Model& model, const std::vector<int>& prompt,
                          const GenerateOptions& options,
                          const std::function<void(int prev, int token)>& on_token);

}  // namespace ss
