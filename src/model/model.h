// The forward pass: one call processes T new tokens against a KV cache (prefill when the cache is
// empty and T is the prompt, decode when T = 1). Families register their top-level loop in the
// architecture table (model/arch.cpp); they share the sublayer helpers in model/blocks.h.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "hooks/hooks.h"
#include "model/weights.h"
#include "tensor/tensor.h"

namespace ss {

// Keys (after RoPE) and values of every layer for the tokens seen so far.
struct KVCache {
  int capacity = 0;         // S_max entries
  int kv_dim = 0;           // Hkv * Dh
  int length = 0;           // entries in use
  std::vector<Tensor> k;    // per layer (S_max, Hkv * Dh)
  std::vector<Tensor> v;    // per layer (S_max, Hkv * Dh)

  static KVCache Create(const ModelConfig& config, int capacity);
  void Clear() { length = 0; }
  int64_t Bytes() const;  // memory held by the cache
};

// Attention statistics computed inside the attention kernel (the fused path): per layer, head and
// query, the probabilities on the first K keys, the top key and its probability, and sum_j p^2.
struct AttnStatsBuffers {
  int first_k = 0;            // K (0: no statistics)
  int tokens = 0;             // T of the last call
  Tensor first_k_probs;       // (L, H, T, K)
  std::vector<int> top_key;   // (L, H, T)
  Tensor top_prob;            // (L, H, T)
  Tensor sum_sq;              // (L, H, T)
  void Resize(int n_layers, int n_heads, int T, int K);
};

enum class LogitsMode { kNone, kLast, kAll };

struct ForwardRequest {
  std::span<const int> tokens;          // (T) token ids
  std::span<const int> positions;       // (T) positions for RoPE / learned embeddings;
                                        // empty: cache.length + t
  LogitsMode logits = LogitsMode::kAll;
  const Hooks* hooks = nullptr;         // null or empty: no hooks
  AttnStatsBuffers* stats = nullptr;    // fused attention statistics, if wanted
};

// Scratch buffers for one forward call, grown on demand and reused (no allocation per token).
struct RunState {
  int capacity = 0;   // T the buffers hold
  Tensor x;           // (T, D) residual stream
  Tensor xb;          // (T, D) normalised input of a sublayer
  Tensor xb2;         // (T, D) sublayer output
  Tensor q;           // (T, H * Dh)
  Tensor z;           // (T, H * Dh) attention output per head, before the output projection
  Tensor hb;          // (T, F)
  Tensor hb2;         // (T, F)
  Tensor logits;      // (T, V) or (1, V), allocated on first use
  Tensor pattern;     // (H, T, S) only when a pattern hook is attached
  void Reserve(const ModelConfig& config, int T);
};

// Runs the model on request.tokens, appending their keys and values to the cache. Returns a view of
// the logits in `state` ((T, V) for kAll, (1, V) for kLast, empty for kNone). Throws ss::Error when
// the cache is too small or a token id is out of range.
Tensor Forward(const Model& model, KVCache& cache, RunState& state, const ForwardRequest& request);

// Names of the registered architecture families, for error messages.
std::vector<std::string> SupportedArchitectures();

}  // namespace ss
