#include "stream/stream.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>

#include "common/file_util.h"

namespace ss::stream {

Policy ParsePolicy(const std::string& name, const std::string& flag) {
  if (name == "dense") return Policy::kDense;
  if (name == "window") return Policy::kWindow;
  if (name == "sinks") return Policy::kSinks;
  if (name == "recompute") return Policy::kRecompute;
  Fail("{}: expected one of dense, window, sinks, recompute; got '{}'", flag, name);
}

const char* PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kDense:
      return "dense";
    case Policy::kWindow:
      return "window";
    case Policy::kSinks:
      return "sinks";
    case Policy::kRecompute:
      return "recompute";
  }
  return "?";
}

void ValidateOptions(const StreamOptions& o, const ModelConfig& config, const KvFlagNames& flags) {
  if (o.window < 1) Fail("--window: expected a window of at least 1 token, got {}", o.window);
  if (o.sinks < 0) Fail("--sinks: expected 0 or more sink tokens, got {}", o.sinks);
  if (o.sinks > o.window)
    Fail(
        "--sinks {} is larger than --window {}: expected S <= W (the sinks are a few initial "
        "tokens beside a larger window of recent ones)",
        o.sinks, o.window);
  if (o.max_chunk < 0) Fail("max_chunk: expected 0 (= W) or more, got {}", o.max_chunk);
  if (o.first_ring < 0) Fail("first_ring: expected 0 (the default) or more, got {}", o.first_ring);
  const int64_t budget_or_context = o.policy == Policy::kDense
                                        ? (config.max_seq_len > 0 ? config.max_seq_len : 4096)
                                        : static_cast<int64_t>(o.sinks) + o.window;
  const std::string& typed_flag = o.k_type != KvType::kF32 ? flags.k : flags.v;
  if (o.typed()) {
    if (o.policy == Policy::kRecompute)
      Fail(
          "{} {} / {}: the recompute policy re-encodes its window every token into an f32 "
          "cache; use sinks, window or dense",
          typed_flag, KvTypeName(o.k_type), KvTypeName(o.v_type));
    if (o.policy == Policy::kDense && o.force)
      Fail(
          "--policy dense --force with a typed cache ({}): a typed dense cache ends at the "
          "model's context; use --policy window with --force to go beyond it",
          typed_flag);
    for (const auto& [type, flag] :
         {std::pair<KvType, const std::string&>{o.k_type, flags.k}, {o.v_type, flags.v}}) {
      try {
        (void)KvRowBytes(type, config.kv_dim());
      } catch (const Error& e) {
        Fail("{}: {}", flag, e.what());
      }
    }
  }
  if (!o.keep.empty()) {
    if (!o.typed())
      Fail("{}: an f32 cache keeps every entry exact already; it applies with --kv-type",
           flags.keep);
    if (o.keep.front() < 0) Fail("{}: stream indices must be 0 or more", flags.keep);
    if (static_cast<int64_t>(o.keep.size()) > budget_or_context)
      Fail("{}: {} entries kept in f32 is more than the cache holds ({})", flags.keep,
           o.keep.size(), budget_or_context);
  }
  if (o.policy == Policy::kDense) return;
  const int64_t budget = static_cast<int64_t>(o.sinks) + o.window;
  if (config.max_seq_len > 0 && budget > config.max_seq_len && !o.force)
    Fail(
        "--sinks + --window = {} + {} = {} exceeds the model's context of {} tokens: positions "
        "beyond it were never trained (pass --force to run anyway)",
        o.sinks, o.window, budget, config.max_seq_len);
  if (budget > INT32_MAX / 4) Fail("--sinks + --window = {} is too large", budget);
}

double TokenNll(const float* logits, int vocab_size, int target) {
  SS_ASSERT(target >= 0 && target < vocab_size);
  double mx = logits[0];
  for (int i = 1; i < vocab_size; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double z = 0;
  for (int i = 0; i < vocab_size; ++i) z += std::exp(static_cast<double>(logits[i]) - mx);
  return std::log(z) + mx - logits[target];
}

int PickGreedy(const float* logits, int vocab_size) {
  return static_cast<int>(std::max_element(logits, logits + vocab_size) - logits);
}

namespace {

Tensor LastRow(const Tensor& logits) {
  return logits.Rows(logits.dim(0) - 1, 1).Reshaped({logits.dim(1)});
}

// The ring a sinks or window cache starts with (entries after the sinks).
constexpr int kFirstRing = 1024;

// sinks and window: S fixed rows plus a ring of recent entries (model/model.h StreamLayout).
// The window policy is this cache with no sinks and a window of S + W.
class SinkWindowCache final : public StreamCache {
 public:
  SinkWindowCache(const Model& model, StreamOptions o) : StreamCache(model, o) {
    layout_.sinks = o.policy == Policy::kSinks ? o.sinks : 0;
    layout_.window = o.policy == Policy::kSinks ? o.window : o.sinks + o.window;
    if (o.policy ==
        Policy::kDense) {  // typed dense: a window as long as the context, never evicting
      context_ = model.config.max_seq_len > 0 ? model.config.max_seq_len : 4096;
      layout_.window = context_;
    }
    max_chunk_ = o.max_chunk > 0 ? o.max_chunk : layout_.window;
    // The ring grows as the stream fills it (Run), each time checked against the memory: a
    // window of millions costs its memory only once the stream is that long.
    Allocate(std::min(layout_.window, o.first_ring > 0 ? o.first_ring : kFirstRing));
  }

  Tensor Step(int token) override { return Run(std::span<const int>(&token, 1)); }

  Tensor Prefill(std::span<const int> tokens) override {
    SS_ASSERT(!tokens.empty());
    for (size_t i = 0; i < tokens.size(); i += max_chunk_) {
      const size_t n = std::min(tokens.size() - i, static_cast<size_t>(max_chunk_));
      Run(tokens.subspan(i, n));
    }
    return last_logits_;
  }

  void Reset() override {
    tokens_seen_ = 0;
    cache_.Clear();
    last_logits_ = Tensor();
  }

  int entries() const override {
    return static_cast<int>(std::min<int64_t>(tokens_seen_, layout_.sinks + layout_.window - 1));
  }
  int budget() const override { return layout_.sinks + layout_.window; }
  int64_t kv_bytes() const override { return cache_.Bytes(); }

 private:
  Tensor Run(std::span<const int> tokens) {
    const int T = static_cast<int>(tokens.size());
    if (context_ > 0 && tokens_seen_ + T > context_)
      Fail(
          "--policy dense: the stream reached the model's context of {} tokens; use a streaming "
          "policy (sinks, window), --max-tokens, or an f32 cache with --force",
          context_);
    layout_.first_index = tokens_seen_;
    if (const int64_t need = layout_.RingNeeded(T); layout_.ring < need)
      Grow(static_cast<int>(std::min<int64_t>(static_cast<int64_t>(layout_.window) - 1 + T,
                                              std::max<int64_t>(need, 2 * int64_t{layout_.ring}))));
    ForwardRequest request;
    request.tokens = tokens;
    request.logits = LogitsMode::kLast;
    request.stream = &layout_;
    last_logits_ = LastRow(Forward(model_, cache_, state_, request));
    tokens_seen_ += T;
    return last_logits_;
  }

  void Allocate(int ring) {
    CheckCacheMemory(model_.config, static_cast<int64_t>(layout_.sinks) + ring, options_,
                     context_ > 0 ? "--policy dense" : "--sinks + --window");
    layout_.ring = ring;
    cache_ = KVCache::CreateTyped(model_.config, layout_.sinks + ring, options_.k_type,
                                  options_.v_type, options_.keep);
    peak_kv_bytes_ = std::max(peak_kv_bytes_, cache_.Bytes());
  }

  // A longer stream or chunk needs a longer ring: move the entries still visible (the sinks and
  // the last W - 1 tokens) to their rows in the new ring. The ring doubles, so a stream of n
  // tokens grows it log2(n / kFirstRing) times at most.
  void Grow(int ring) {
    StreamLayout old = layout_;
    KVCache old_cache = std::move(cache_);
    Allocate(ring);
    const int64_t first = std::max<int64_t>(old.sinks, tokens_seen_ - (old.window - 1));
    auto move_entry = [&](int64_t m) { cache_.CopyRow(old_cache, old.Row(m), layout_.Row(m)); };
    for (int64_t m = 0; m < std::min<int64_t>(old.sinks, tokens_seen_); ++m) move_entry(m);
    for (int64_t m = first; m < tokens_seen_; ++m) move_entry(m);
    cache_.CopyLinearState(old_cache);
    cache_.length = old_cache.length;
  }

  StreamLayout layout_;
  int max_chunk_ = 0;
  int context_ = 0;  // a typed dense cache's limit; 0 otherwise
  KVCache cache_;
  RunState state_;
};

// dense: one growing cache, up to the model's context (or beyond with force).
class DenseCache final : public StreamCache {
 public:
  DenseCache(const Model& model, StreamOptions o) : StreamCache(model, o) {
    context_ = model.config.max_seq_len > 0 ? model.config.max_seq_len : 4096;
    max_chunk_ = o.max_chunk > 0 ? o.max_chunk : 512;
    cache_ = KVCache::Create(model.config, std::min(context_, 512));
    peak_kv_bytes_ = cache_.Bytes();
  }

  Tensor Step(int token) override { return Run(std::span<const int>(&token, 1)); }
  Tensor Prefill(std::span<const int> tokens) override {
    for (size_t i = 0; i < tokens.size(); i += max_chunk_)
      Run(tokens.subspan(i, std::min(tokens.size() - i, static_cast<size_t>(max_chunk_))));
    return last_logits_;
  }
  void Reset() override {
    tokens_seen_ = 0;
    cache_.Clear();
    last_logits_ = Tensor();
  }
  int entries() const override { return cache_.length; }
  int budget() const override { return options_.force ? INT32_MAX : context_; }
  int64_t kv_bytes() const override { return cache_.Bytes(); }

 private:
  Tensor Run(std::span<const int> tokens) {
    const int need = cache_.length + static_cast<int>(tokens.size());
    if (need > context_ && !options_.force)
      Fail(
          "--policy dense: the stream reached the model's context of {} tokens; use a streaming "
          "policy (sinks, window, recompute), --max-tokens, or --force",
          context_);
    if (need > cache_.capacity) Grow(std::max(need, 2 * cache_.capacity));
    ForwardRequest request;
    request.tokens = tokens;
    request.logits = LogitsMode::kLast;
    last_logits_ = LastRow(Forward(model_, cache_, state_, request));
    tokens_seen_ += static_cast<int64_t>(tokens.size());
    return last_logits_;
  }
  void Grow(int capacity) {
    if (!options_.force) capacity = std::min(capacity, context_);
    CheckCacheMemory(model_.config, capacity, options_, "--policy dense");
    KVCache bigger = KVCache::Create(model_.config, capacity);
    for (size_t l = 0; l < cache_.k.size(); ++l) {
      if (!cache_.HasLayerEntries(static_cast<int>(l))) continue;  // a linear layer's state
      std::copy(cache_.k[l].data(), cache_.k[l].row(cache_.length), bigger.k[l].data());
      std::copy(cache_.v[l].data(), cache_.v[l].row(cache_.length), bigger.v[l].data());
    }
    bigger.CopyLinearState(cache_);
    bigger.length = cache_.length;
    cache_ = std::move(bigger);
    peak_kv_bytes_ = std::max(peak_kv_bytes_, cache_.Bytes());
  }
  int context_ = 0;
  int max_chunk_ = 0;
  KVCache cache_;
  RunState state_;
};

// recompute: every token re-encodes the S + W most recent tokens with positions 0 .. n-1.
class RecomputeCache final : public StreamCache {
 public:
  RecomputeCache(const Model& model, StreamOptions o) : StreamCache(model, o) {
    budget_ = o.sinks + o.window;
    // The cache and the token buffer grow with the stream, up to S + W (SinkWindowCache's ring).
    Reserve(std::min(budget_, o.first_ring > 0 ? o.first_ring : kFirstRing));
  }
  Tensor Step(int token) override { return Prefill(std::span<const int>(&token, 1)); }
  // Only the last token's logits are wanted, and recompute keeps no state besides the tokens, so a
  // prompt costs one pass over its last S + W tokens.
  Tensor Prefill(std::span<const int> tokens) override {
    SS_ASSERT(!tokens.empty());
    for (int t : tokens) {
      // Amortised O(1) sliding: compact once the buffer holds two budgets.
      if (recent_.size() >= 2 * static_cast<size_t>(budget_))
        recent_.erase(recent_.begin(), recent_.end() - (budget_ - 1));
      recent_.push_back(t);
    }
    tokens_seen_ += static_cast<int64_t>(tokens.size());
    const size_t n = std::min(recent_.size(), static_cast<size_t>(budget_));
    if (static_cast<size_t>(cache_.capacity) < n)
      Reserve(static_cast<int>(
          std::min<size_t>(budget_, std::max(n, 2 * static_cast<size_t>(cache_.capacity)))));
    cache_.Clear();
    ForwardRequest request;
    request.tokens = std::span<const int>(recent_.data() + recent_.size() - n, n);
    request.logits = LogitsMode::kLast;
    last_logits_ = LastRow(Forward(model_, cache_, state_, request));
    return last_logits_;
  }
  void Reset() override {
    tokens_seen_ = 0;
    recent_.clear();
    last_logits_ = Tensor();
  }
  int entries() const override {
    return static_cast<int>(std::min<int64_t>(tokens_seen_, budget_ - 1));
  }
  int budget() const override { return budget_; }
  int64_t kv_bytes() const override { return cache_.Bytes(); }

 private:
  void Reserve(int entries) {
    CheckCacheMemory(model_.config, entries, options_, "--sinks + --window");
    cache_ = KVCache::Create(model_.config, entries);
    peak_kv_bytes_ = std::max(peak_kv_bytes_, cache_.Bytes());
  }

  int budget_ = 0;
  std::vector<int> recent_;
  KVCache cache_;
  RunState state_;
};

}  // namespace

void CheckCacheMemory(const ModelConfig& c, int64_t entries, const StreamOptions& o,
                      const std::string& what) {
  const int64_t row =
      static_cast<int64_t>(KvRowBytes(o.k_type, c.kv_dim()) + KvRowBytes(o.v_type, c.kv_dim()));
  const int64_t kept = o.typed() ? static_cast<int64_t>(o.keep.size()) * 2 * c.kv_dim() * 4 : 0;
  const int64_t layers =
      c.n_layers - std::count(c.linear_layers.begin(), c.linear_layers.end(), true);
  CheckMemory(static_cast<uint64_t>(layers * (entries * row + kept)),
              fmt::format("{}: a KV cache of {} entries ({} keys, {} values)", what, entries,
                          KvTypeName(o.k_type), KvTypeName(o.v_type)));
}

std::unique_ptr<StreamCache> MakeStreamCache(const Model& model, const StreamOptions& options) {
  ValidateOptions(options, model.config);
  switch (options.policy) {
    case Policy::kDense:
      if (options.typed()) return std::make_unique<SinkWindowCache>(model, options);
      return std::make_unique<DenseCache>(model, options);
    case Policy::kWindow:
    case Policy::kSinks:
      return std::make_unique<SinkWindowCache>(model, options);
    case Policy::kRecompute:
      return std::make_unique<RecomputeCache>(model, options);
  }
  SS_ASSERT(false);
  return nullptr;
}

std::vector<int64_t> ParseKvKeep(const std::string& spec, const std::string& flag, bool* detected) {
  *detected = false;
  if (spec == "none") return {};
  if (spec == "detected") {
    *detected = true;
    return {};
  }
  const std::string prefix = "first:";
  if (spec.compare(0, prefix.size(), prefix) == 0) {
    const std::string n = spec.substr(prefix.size());
    const bool digits =
        !n.empty() && n.size() <= 18 && n.find_first_not_of("0123456789") == std::string::npos;
    // At most kMaxKvKeep: no cache keeps more entries (ValidateOptions checks the actual one).
    if (digits && n[0] != '0' && std::stoll(n) <= kMaxKvKeep) {
      std::vector<int64_t> keep(static_cast<size_t>(std::stoll(n)));
      for (size_t i = 0; i < keep.size(); ++i) keep[i] = static_cast<int64_t>(i);
      return keep;
    }
    if (digits && n[0] != '0')
      Fail("{}: first:{} keeps more entries than any cache holds (at most {})", flag, n,
           kMaxKvKeep);
  }
  Fail("{}: expected none, first:N (N a decimal integer >= 1) or detected; got '{}'", flag,
       PrintableExcerpt(spec, 40));
}

std::vector<int64_t> DetectSinkPositions(const Model& model, std::span<const int> prompt,
                                         double eps) {
  const ModelConfig& c = model.config;
  const int T = static_cast<int>(prompt.size());
  if (T < 2) return {};
  const int K = std::min(T, 16);
  KVCache cache = KVCache::CreateSingleUse(c, T);
  RunState state;
  AttnStatsBuffers stats;
  stats.first_k = K;
  ForwardRequest request;
  request.tokens = prompt;
  request.logits = LogitsMode::kNone;
  request.stats = &stats;
  Forward(model, cache, state, request);
  // Only queries that see more than 1 / eps keys count: query t spreads 1 / (t + 1) on each key
  // when it attends evenly, so on a short prompt every early key would pass eps without being a
  // sink (query 1 of a 2-token prompt gives key 0 half of its mass).
  const int first_query = static_cast<int>(std::floor(1.0 / eps));
  std::vector<int64_t> sinks;
  for (int k = 0; k < K - 1; ++k) {
    const int from = std::max(k + 1, first_query);
    if (T - from < kMinDetectQueries) break;
    int heads = 0, over = 0;
    for (int l = std::min(1, c.n_layers - 1); l < c.n_layers; ++l)
      for (int h = 0; h < c.n_heads; ++h) {
        double sum = 0;
        for (int t = from; t < T; ++t)
          sum += stats.first_k_probs
                     .data()[((static_cast<int64_t>(l) * c.n_heads + h) * T + t) * K + k];
        ++heads;
        if (sum / (T - from) > eps) ++over;
      }
    if (4 * over >= heads) sinks.push_back(k);
  }
  return sinks;
}

int64_t StreamGenerate(StreamCache& cache, std::span<const int> prompt, int64_t max_new_tokens,
                       const TokenPicker& pick, const std::function<bool(int token)>& on_token) {
  if (!prompt.empty()) {
    cache.Prefill(prompt);
  } else if (cache.last_logits().empty()) {
    Fail("generation needs a prompt: the stream is empty");
  }
  int64_t generated = 0;
  while (max_new_tokens < 0 || generated < max_new_tokens) {
    const int token = pick(cache.last_logits().data());
    if (on_token && !on_token(token)) break;
    ++generated;
    cache.Step(token);
  }
  return generated;
}

}  // namespace ss::stream
