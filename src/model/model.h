// The forward pass: one call processes T new tokens against a KV cache (prefill when the cache is
// empty and T is the prompt, decode when T = 1). Families register their top-level loop in the
// architecture table (model/arch.cpp); they share the sublayer helpers in model/blocks.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hooks/hooks.h"
#include "kernels/ops.h"
#include "model/weights.h"
#include "tensor/tensor.h"

namespace ss {

// Keys (after RoPE) and values of every layer for the tokens seen so far.
struct KVCache {
  int capacity = 0;       // S_max entries
  int kv_dim = 0;         // Hkv * Dh
  int length = 0;         // entries in use
  std::vector<Tensor> k;  // per layer (S_max, Hkv * Dh)
  std::vector<Tensor> v;  // per layer (S_max, Hkv * Dh)

  static KVCache Create(const ModelConfig& config, int capacity);
  // Layers share one (S_max, Hkv * Dh) pair of buffers: for a single forward call from an empty
  // cache whose entries are never read afterwards (the analyses). Each layer writes its keys and
  // values and reads them in its own attention before the next layer overwrites them, so the call
  // computes exactly what Create() would, in 1/L of the memory (GPT-2-small shape at T = 8192:
  // 50 MB instead of 604 MB). Forward refuses a second call on it without Clear().
  static KVCache CreateSingleUse(const ModelConfig& config, int capacity);
  bool single_use = false;
  void Clear() { length = 0; }
  int64_t Bytes() const;  // memory held by the cache

  // A streaming cache (CreateTyped) stores each layer's capacity rows of KvRowBytes in k_rows /
  // v_rows, in any type (kernels/kv_types.h, --kv-type; f32 included) and head-major: panel g
  // (k_panel values of each row: a head, or the fewest whole heads that are whole blocks) of row r
  // at (g * capacity + r) * KvRowBytes(k_type, k_panel), so that a head's rows are one contiguous
  // run for the attention to read (a 7B shape's head reads 512 bytes every 16 KiB in the
  // row-major f32 layout; contiguous, the f32 attention over 32K entries took a third of the
  // time: docs/STREAMING.md). k and v are then empty. Entries whose stream index is in `keep`
  // (sorted) are held in f32 instead, one row of k_kept / v_kept each, so that a sink's entry
  // stays exact (--kv-keep; IntactKV, arXiv 2403.01241).
  static KVCache CreateTyped(const ModelConfig& config, int capacity, KvType k_type, KvType v_type,
                             std::vector<int64_t> keep);
  bool head_major = false;  // made by CreateTyped: k_rows / v_rows hold the entries
  bool typed() const { return k_type != KvType::kF32 || v_type != KvType::kF32; }
  // Stores entry `index` of the stream in `row` of `layer` (k, v: kv_dim floats each).
  void WriteRow(int layer, int row, int64_t index, const float* k, const float* v);
  // Copies every layer's `from_row` of `from` (a cache of the same types and keep) into `to_row`,
  // a kept entry's f32 rows included.
  void CopyRow(const KVCache& from, int from_row, int to_row);
  // The attention kernel's view of one layer's keys or values.
  KvRows Keys(int layer) const;
  KvRows Values(int layer) const;
  // Bytes a token's entries take over all layers (the kept ones aside).
  int64_t BytesPerToken() const;

  KvType k_type = KvType::kF32, v_type = KvType::kF32;
  size_t k_row_bytes = 0, v_row_bytes = 0;
  int k_panel = 0, v_panel = 0;                      // values per panel (KvPanelValues)
  std::vector<std::vector<uint8_t>> k_rows, v_rows;  // per layer (capacity * row bytes)
  std::vector<int64_t> keep;
  std::vector<int> kept_slot;  // per row: its slot in k_kept / v_kept, or -1
                               // (empty when nothing is kept)
  int KeptSlot(int row) const { return kept_slot.empty() ? -1 : kept_slot[row]; }
  std::vector<Tensor> k_kept, v_kept;  // per layer (keep.size(), kv_dim)

  // Gated DeltaNet layers (ModelConfig::LinearLayer) keep no keys: their k / v (k_rows / v_rows)
  // are empty, and they hold instead, per layer, the convolution's last K - 1 inputs (C, K - 1)
  // and the delta rule's state (nv, dk, dv): a size independent of the stream's length. Empty on
  // attention layers. A call that starts a sequence (cache.length 0, or stream index 0) starts
  // them from zero.
  std::vector<Tensor> conv_state, delta_state;
  bool HasLayerEntries(int layer) const {
    return head_major ? !k_rows[layer].empty() : !k[layer].empty();
  }
  // Copies the linear layers' states of `from` (a cache of the same model).
  void CopyLinearState(const KVCache& from);
};

// Attention statistics computed inside the attention kernel (the fused path): per layer, head and
// query, the probabilities on the first K keys, the top key and its probability, and sum_j p^2.
struct AttnStatsBuffers {
  int first_k = 0;           // K (0: no statistics)
  int tokens = 0;            // T of the last call
  Tensor first_k_probs;      // (L, H, T, K)
  std::vector<int> top_key;  // (L, H, T)
  Tensor top_prob;           // (L, H, T)
  Tensor sum_sq;             // (L, H, T)
  Tensor sink_prob;          // (L, H, T) mass on the learned sink slot (0 without one)
  Tensor row_sum;            // (L, H, T) the weights' sum over the keys (AttnStats::row_sum)
  void Resize(int n_layers, int n_heads, int T, int K);
};

enum class LogitsMode { kNone, kLast, kAll };

// Attention-sink streaming layout (StreamingLLM; used by src/stream). The cache holds `sinks` rows
// for the first tokens of the stream, then a ring of `ring` rows for recent tokens (stream index
// m >= sinks in row sinks + (m - sinks) % ring). New token t has stream index first_index + t; it
// attends to the sinks and to the `window` most recent tokens, itself included, with positions
// inside the cache: its own position is min(m, sinks + window - 1), and a kept token's position is
// its index among the kept tokens (0 .. S + W - 1), as StreamingLLM assigns them.
//
// RoPE: keys are cached after RoPE at their stream index m and never re-rotated. The query is
// rotated twice: at m for the recent keys (their relative distance is the stream distance, which
// equals the distance inside the cache because the window is contiguous) and at its cache position
// for the sink keys. As R(a)^T R(b) = R(b - a), every score equals the score with cache positions.
// Learned absolute positions (GPT-2) take the cache position at insertion; cached entries keep it.
struct StreamLayout {
  int sinks = 0;            // S
  int window = 0;           // W >= 1
  int ring = 0;             // rows after the sinks; >= RingNeeded(T)
  int64_t first_index = 0;  // stream index of request.tokens[0]
  // The ring a call of T tokens needs: the W - 1 entries before it and its own T must have
  // distinct rows, or, while the stream is shorter than that, every entry after the sinks
  // (a ring grows with the stream, so a long window costs memory only once it fills).
  int64_t RingNeeded(int T) const {
    return std::min<int64_t>(static_cast<int64_t>(window) - 1 + T,
                             std::max<int64_t>(1, first_index + T - sinks));
  }
  int CachePosition(int64_t m) const {
    return static_cast<int>(std::min<int64_t>(m, static_cast<int64_t>(sinks) + window - 1));
  }
  int Row(int64_t m) const {
    return m < sinks ? static_cast<int>(m) : sinks + static_cast<int>((m - sinks) % ring);
  }
};

struct ForwardRequest {
  std::span<const int> tokens;     // (T) token ids
  std::span<const int> positions;  // (T) positions for RoPE / learned embeddings;
                                   // empty: cache.length + t
  LogitsMode logits = LogitsMode::kAll;
  const Hooks* hooks = nullptr;          // null or empty: no hooks
  AttnStatsBuffers* stats = nullptr;     // fused attention statistics, if wanted
  const StreamLayout* stream = nullptr;  // null: plain cache (append at cache.length)
  // Resume a forward at block first_layer from a residual stream computed earlier (the input of
  // that block for the same tokens): blocks before it are skipped, and so are their hooks and
  // statistics. Interventions at block l need only blocks l.. (explain's intervention table).
  int first_layer = 0;
  const float* resid_pre = nullptr;  // (T, D), required when first_layer > 0
  // Stop after block last_layer (-1: run to the last block). Work that reads nothing deeper (a
  // metric of the first blocks, explain's block-by-block sweep of position 0) skips the rest;
  // the final norm and the logits need every block, so a request that stops early asks for
  // LogitsMode::kNone.
  int last_layer = -1;
  // Every token attends to its own key alone (an attention window of one). With all positions 0
  // the call computes T independent one-token forwards of position 0, which under the causal mask
  // sees only itself: explain recomputes position 0 under many interventions in one call, reading
  // the weights once. Not with a stream.
  bool self_attention_only = false;
};

// Rows of the MLP's hidden activations computed at a time (see RunState::hb).
inline constexpr int kMlpRows = 512;

// Scratch buffers for one forward call, grown on demand and reused (no allocation per token).
struct RunState {
  int capacity = 0;  // T the buffers hold
  Tensor x;          // (T, D) residual stream
  Tensor xb;         // (T, D) normalised input of a sublayer
  Tensor xb2;        // (T, D) sublayer output
  Tensor q;          // (T, H * Dh)
  Tensor z;          // (T, H * Dh) attention output per head, before the output projection
  Tensor hb;         // (min(T, kMlpRows), F)
  Tensor hb2;        // (min(T, kMlpRows), F)
  Tensor logits;     // (T, V) or (1, V), allocated on first use
  Tensor pattern;    // (H, T, S) only when a pattern hook is attached
  Tensor q_sink;     // (T, H * Dh) streaming only: the query rotated at its cache position
  Tensor gate;       // (T * H * Dh) gated attention's gate, allocated when the model has one
  Tensor
      slot_logits;  // (H * T) the kv-bias slot's logit per head and query, when the model has one
  Tensor linear;    // Gated DeltaNet layers' buffers (model/linear_attn.cpp), on first use
  Tensor shared;    // (T, D) the shared expert's output (MoeFfn), on first use
  Tensor k_new;     // (T, Hkv * Dh) streaming only: new keys before they go to their ring rows
  Tensor v_new;     // (T, Hkv * Dh)
  void Reserve(const ModelConfig& config, int T);
};

// Runs the model on request.tokens, appending their keys and values to the cache. Returns a view of
// the logits in `state` ((T, V) for kAll, (1, V) for kLast, empty for kNone). Throws ss::Error when
// the cache is too small or a token id is out of range.
Tensor Forward(const Model& model, KVCache& cache, RunState& state, const ForwardRequest& request);

// The last block `request` runs: request.last_layer, or the model's last block when it is -1.
inline int LastLayer(const ForwardRequest& request, const ModelConfig& config) {
  return request.last_layer < 0 ? config.n_layers - 1 : request.last_layer;
}

// Names of the registered architecture families, for error messages.
std::vector<std::string> SupportedArchitectures();

}  // namespace ss
