// Streaming inference with a bounded KV cache (StreamingLLM: Xiao et al. 2023, "Efficient
// Streaming Language Models with Attention Sinks", arXiv 2309.17453). Four policies behind one
// interface:
//   dense      no eviction, up to the model's context (or further with force)
//   window     the S + W most recent tokens (StreamingLLM's "window attention")
//   sinks      the first S tokens of the stream plus the W most recent (StreamingLLM)
//   recompute  every token re-encodes the S + W most recent tokens from scratch ("sliding window
//              with re-computation", the baseline StreamingLLM compares against)
// Every policy but dense holds the same budget of S + W entries, so a comparison is at equal memory
// (StreamingLLM's Table 2 convention: "0+256" window versus "4+252" sinks). The token being
// processed is one of the W recent entries. Positions are assigned inside the cache (0 .. S+W-1);
// see model/model.h StreamLayout and docs/STREAMING.md for how RoPE is handled.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"

namespace ss::stream {

enum class Policy { kDense, kWindow, kSinks, kRecompute };

// "dense" | "window" | "sinks" | "recompute"; throws ss::Error naming `flag` otherwise.
Policy ParsePolicy(const std::string& name, const std::string& flag);
const char* PolicyName(Policy policy);

struct StreamOptions {
  Policy policy = Policy::kSinks;
  int sinks = 4;       // S (sinks policy; for window and recompute S adds to the window budget)
  int window = 252;    // W
  int max_chunk = 0;   // tokens per forward call in Prefill; 0: W. The sinks and window caches hold
                       // S + W entries while stepping and grow to S + W - 1 + chunk in Prefill.
  bool force = false;  // allow S + W (or dense) beyond the model's context
  // The cache's storage (kernels/kv_types.h, --kv-type-k / --kv-type-v): a typed cache holds each
  // entry encoded and attention reads it decoded. Entries whose stream index is in `keep` stay f32
  // (--kv-keep first:N or detected; IntactKV). The sinks and window policies store any type; dense
  // stores one as a window cache as long as the context (the same attention until it fills);
  // recompute keeps its f32 cache.
  KvType k_type = KvType::kF32, v_type = KvType::kF32;
  std::vector<int64_t> keep;
  // Caches hold what the stream has filled, not S + W up front: the ring of the sinks and window
  // caches starts at first_ring entries (0: 1024) and doubles as the stream fills it, each growth
  // checked against the memory (a window of millions costs its memory only once that long).
  int first_ring = 0;
  bool typed() const { return k_type != KvType::kF32 || v_type != KvType::kF32; }
};

// Refuses a cache of `entries` entries that the machine cannot hold, before allocating it: a 7B
// shape's f32 cache takes 1 MiB a token (32 GiB at 32K). `what` names the flags that sized it.
// The caches call it as they grow; a verb that knows its stream's length calls it up front.
void CheckCacheMemory(const ModelConfig& c, int64_t entries, const StreamOptions& o,
                      const std::string& what);

// --kv-keep: "none", "first:N" (stream indices 0..N-1) or "detected" (DetectSinkPositions on the
// stream's first tokens). Parses the spec; for "detected" sets *detected and returns no indices.
// The most entries first:N keeps in f32 (8 MiB of indices); ValidateOptions holds N to the cache.
inline constexpr int64_t kMaxKvKeep = int64_t{1} << 20;
std::vector<int64_t> ParseKvKeep(const std::string& spec, const std::string& flag, bool* detected);

// The positions of `prompt` (its first min(|prompt|, 16) keys) that the model's heads use as sinks
// (analyze's alpha_k, docs/ANALYZE.md): key k is one when at least a quarter of the (layer, head)
// pairs of layers >= 1 (layer 0 in a one-layer model) put more than eps of their queries' mass on
// it on average (queries after k). One forward over the prompt with the fused statistics. May
// return none (no sink).
// Queries a key's average is taken over (those that see more than 1 / eps keys): fewer, and no
// key is called a sink.
inline constexpr int kMinDetectQueries = 8;
std::vector<int64_t> DetectSinkPositions(const Model& model, std::span<const int> prompt,
                                         double eps = 0.3);

// The flags that set a cache's key type, value type and kept entries, as the messages name them:
// --kv-type, --kv-type-k / --kv-type-v where given, or one list such as --compare-kv.
struct KvFlagNames {
  std::string k = "--kv-type", v = "--kv-type", keep = "--kv-keep";
};

// Checks the options against the model; throws ss::Error naming the flag for nonsense values:
// W < 1, S < 0, S > W, S + W beyond the model's context without force.
void ValidateOptions(const StreamOptions& options, const ModelConfig& config,
                     const KvFlagNames& flags = {});

// A KV cache run under one policy. Feed it tokens one at a time (Step) or a long prompt (Prefill);
// it evicts by its policy. Not thread-safe; one stream per object.
class StreamCache {
 public:
  virtual ~StreamCache() = default;
  // Processes one token and returns its logits (V), a view valid until the next call.
  virtual Tensor Step(int token) = 0;
  // Processes tokens in chunks of at most max_chunk, evicting between chunks (never one dense pass
  // over a long prompt); returns the logits of the last token (V). Gives the same result as calling
  // Step on each token (tests/test_stream.cpp).
  virtual Tensor Prefill(std::span<const int> tokens) = 0;
  // Forgets the stream.
  virtual void Reset() = 0;

  int64_t tokens_seen() const { return tokens_seen_; }
  // Logits (V) of the last token processed (empty before the first); valid until the next call.
  const Tensor& last_logits() const { return last_logits_; }
  // Entries the next token will attend to besides itself.
  virtual int entries() const = 0;
  // The most entries any token attends to (S + W; the context or more for dense).
  virtual int budget() const = 0;
  // Bytes held by the KV cache(s) now, and the most held so far.
  virtual int64_t kv_bytes() const = 0;
  int64_t peak_kv_bytes() const { return peak_kv_bytes_; }
  const StreamOptions& options() const { return options_; }

 protected:
  StreamCache(const Model& model, StreamOptions options) : model_(model), options_(options) {}
  const Model& model_;
  StreamOptions options_;
  int64_t tokens_seen_ = 0;
  int64_t peak_kv_bytes_ = 0;
  Tensor last_logits_;
};

// Validates the options and builds the policy's cache.
std::unique_ptr<StreamCache> MakeStreamCache(const Model& model, const StreamOptions& options);

// -log softmax(logits)[target] in double (one row of V logits).
double TokenNll(const float* logits, int vocab_size, int target);

// Generation through a stream cache: prefill `prompt` (chunked), then repeatedly pick a token from
// the last logits, hand it to on_token, and feed it back. Stops after max_new_tokens (< 0: never),
// or when on_token returns false (the token is then not fed). `pick` chooses a token from (V)
// logits (greedy, or a sampler with temperature / top-p / seed). An empty prompt continues from
// the cache's last logits. Returns how many tokens were generated (and fed). With the sinks or
// window policy generation can run indefinitely in constant memory.
using TokenPicker = std::function<int(const float* logits)>;
int64_t StreamGenerate(StreamCache& cache, std::span<const int> prompt, int64_t max_new_tokens,
                       const TokenPicker& pick, const std::function<bool(int token)>& on_token);

// Greedy choice (argmax, first on ties).
int PickGreedy(const float* logits, int vocab_size);

}  // namespace ss::stream
