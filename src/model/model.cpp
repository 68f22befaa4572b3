#include "model/model.h"

#include <fmt/format.h>
#include <omp.h>

#include <numeric>

#include "model/arch.h"

namespace ss {

namespace {

// Called when a forward's output holds NaN or Inf: runs the same call again with observers on
// every block's residual stream and sublayer outputs (after any hooks of the request, so an
// intervention's effect is seen) and throws ss::Error naming the first hook point whose activation
// is non-finite. The failure path costs one more forward; the normal path only the final check.
[[noreturn]] void FailNonFinite(const Model& model, KVCache& cache, RunState& state,
                                const ForwardRequest& request, int start_length, const char* what) {
  const ModelConfig& c = model.config;
  std::string first;  // hook name of the first non-finite activation
  int position = -1;
  Hooks hooks = request.hooks ? *request.hooks : Hooks();
  auto watch = [&](HookPoint point) {
    hooks.Add(point, -1, [&](const HookContext& context, Tensor& activation) {
      if (!first.empty()) return;
      const int64_t bad = FirstNonFinite(activation.data(), activation.numel());
      if (bad < 0) return;
      first = context.Name();
      position =
          context.start +
          static_cast<int>(bad / std::max<int64_t>(1, activation.numel() / activation.dim(0)));
    });
  };
  for (HookPoint point :
       {HookPoint::kEmbed, HookPoint::kResidPre, HookPoint::kAttnOut, HookPoint::kResidMid,
        HookPoint::kMlpOut, HookPoint::kResidPost, HookPoint::kLnFinal})
    watch(point);
  ForwardRequest rerun = request;
  rerun.hooks = &hooks;
  if (rerun.logits == LogitsMode::kNone) rerun.logits = LogitsMode::kLast;
  cache.length = start_length;
  ForwardContext ctx{
      model,        c,  cache, state, rerun, &hooks, static_cast<int>(rerun.tokens.size()),
      start_length, {}, {},    {}};
  ctx.positions.resize(ctx.T);
  for (int t = 0; t < ctx.T; ++t)
    ctx.positions[t] = request.stream
                           ? request.stream->CachePosition(request.stream->first_index + t)
                       : request.positions.empty() ? start_length + t
                                                   : request.positions[t];
  ctx.InitRope();
  FindArchitecture(c.arch).forward(ctx);
  FinalLogits(ctx);
  if (first.empty())
    Fail("{}: the forward pass produced non-finite {} (the output head: lm_head or final norm)",
         model.source, what);
  Fail(
      "{}: the forward pass produced non-finite {}; they first appear in {} at position {} "
      "(check the model's weights and its norm_eps, rope_theta)",
      model.source, what, first, position);
}

}  // namespace

int64_t Model::ParameterCount() const {
  auto count = [](const Tensor& t) { return t.empty() ? 0 : t.numel(); };
  int64_t n = count(weights.token_embedding) + count(weights.final_norm) +
              count(weights.final_norm_bias) + count(weights.position_embedding);
  // A projection held packed only (packed_only: its f32 tensor empty) counts from its pack.
  auto packed = [](const PackedWeight& p) {
    return p.empty() ? 0 : static_cast<int64_t>(p.out()) * p.in();
  };
  if (weights.token_embedding.empty() && weights.embedding_packed)
    n += packed(*weights.embedding_packed);
  if (!config.tied_embeddings)
    n += weights.lm_head.empty() && weights.lm_head_packed ? packed(*weights.lm_head_packed)
                                                           : count(weights.lm_head);
  for (const auto& l : weights.layers) {
    if (l.packed)
      for (auto [t, p] : {std::pair{&l.wq, &l.packed->wq},
                          {&l.wk, &l.packed->wk},
                          {&l.wv, &l.packed->wv},
                          {&l.wo, &l.packed->wo},
                          {&l.w1, &l.packed->w1},
                          {&l.w2, &l.packed->w2},
                          {&l.w3, &l.packed->w3},
                          {&l.moe_w1, &l.packed->moe_w1},
                          {&l.moe_w2, &l.packed->moe_w2},
                          {&l.moe_w3, &l.packed->moe_w3},
                          {&l.lin_wq, &l.packed->lin_wq},
                          {&l.lin_wk, &l.packed->lin_wk},
                          {&l.lin_wv, &l.packed->lin_wv},
                          {&l.lin_wz, &l.packed->lin_wz},
                          {&l.lin_out, &l.packed->lin_out}})
        if (t->empty()) n += packed(*p);
    for (const Tensor* t : {&l.attn_norm,
                            &l.attn_norm_bias,
                            &l.wq,
                            &l.wk,
                            &l.wv,
                            &l.wo,
                            &l.bq,
                            &l.bk,
                            &l.bv,
                            &l.bo,
                            &l.ffn_norm,
                            &l.ffn_norm_bias,
                            &l.w1,
                            &l.w2,
                            &l.w3,
                            &l.b1,
                            &l.b2,
                            &l.q_norm,
                            &l.k_norm,
                            &l.moe_router,
                            &l.moe_w1,
                            &l.moe_w2,
                            &l.moe_w3,
                            &l.moe_router_bias,
                            &l.moe_b1,
                            &l.moe_b2,
                            &l.moe_b3,
                            &l.b3,
                            &l.attn_post_norm,
                            &l.ffn_post_norm,
                            &l.attn_sinks,
                            &l.attn_gate,
                            &l.attn_bias_key,
                            &l.attn_bias_value,
                            &l.lin_wq,
                            &l.lin_wk,
                            &l.lin_wv,
                            &l.lin_wz,
                            &l.lin_wb,
                            &l.lin_wa,
                            &l.lin_conv,
                            &l.lin_dt_bias,
                            &l.lin_a_log,
                            &l.lin_norm,
                            &l.lin_out,
                            &l.shared_expert_gate})
      n += count(*t);
  }
  return n;
}

namespace {

// The linear layers' states (KVCache::conv_state / delta_state), zero; `shared`: one pair for
// every linear layer (a single-use cache, whose layers run one after another from zero).
void CreateLinearState(const ModelConfig& c, KVCache& cache, bool shared) {
  cache.conv_state.assign(c.n_layers, Tensor());
  cache.delta_state.assign(c.n_layers, Tensor());
  if (!c.HasLinearLayers()) return;
  const int64_t conv = static_cast<int64_t>(c.linear_conv_dim()) * (c.linear_conv - 1);
  const int64_t delta = static_cast<int64_t>(c.linear_v_heads) * c.linear_k_dim * c.linear_v_dim;
  Tensor one_conv, one_delta;
  for (int l = 0; l < c.n_layers; ++l) {
    if (!c.LinearLayer(l)) continue;
    if (!shared || one_delta.empty()) {
      one_conv = Tensor::Zeros({std::max<int64_t>(conv, 1)});
      one_delta = Tensor::Zeros({delta});
    }
    cache.conv_state[l] = one_conv;
    cache.delta_state[l] = one_delta;
  }
}

}  // namespace

KVCache KVCache::Create(const ModelConfig& config, int capacity) {
  KVCache cache;
  cache.capacity = capacity;
  cache.kv_dim = config.kv_dim();
  for (int l = 0; l < config.n_layers; ++l) {
    const bool keys = !config.LinearLayer(l);
    cache.k.push_back(keys ? Tensor::Zeros({capacity, cache.kv_dim}) : Tensor());
    cache.v.push_back(keys ? Tensor::Zeros({capacity, cache.kv_dim}) : Tensor());
  }
  CreateLinearState(config, cache, false);
  return cache;
}

KVCache KVCache::CreateSingleUse(const ModelConfig& config, int capacity) {
  KVCache cache;
  cache.capacity = capacity;
  cache.kv_dim = config.kv_dim();
  cache.single_use = true;
  const Tensor k = Tensor::Zeros({capacity, cache.kv_dim});
  const Tensor v = Tensor::Zeros({capacity, cache.kv_dim});
  cache.k.assign(config.n_layers, k);  // handles to the same storage (Tensor copies are views)
  cache.v.assign(config.n_layers, v);
  CreateLinearState(config, cache, true);
  return cache;
}

void KVCache::CopyLinearState(const KVCache& from) {
  SS_ASSERT(from.conv_state.size() == conv_state.size());
  for (size_t l = 0; l < conv_state.size(); ++l) {
    if (conv_state[l].empty()) continue;
    std::copy_n(from.conv_state[l].data(), conv_state[l].numel(), conv_state[l].data());
    std::copy_n(from.delta_state[l].data(), delta_state[l].numel(), delta_state[l].data());
  }
}

int64_t KVCache::Bytes() const {
  int64_t n = 0;
  for (size_t l = 0; l < conv_state.size(); ++l)
    if (!conv_state[l].empty() &&
        (l == 0 || !single_use || conv_state[l].data() != conv_state[0].data()))
      n += (conv_state[l].numel() + delta_state[l].numel()) * static_cast<int64_t>(sizeof(float));
  if (head_major) {
    for (size_t l = 0; l < k_rows.size(); ++l) {
      n += static_cast<int64_t>(k_rows[l].size() + v_rows[l].size());
      if (!keep.empty() && !k_kept[l].empty())
        n += (k_kept[l].numel() + v_kept[l].numel()) * static_cast<int64_t>(sizeof(float));
    }
    return n + static_cast<int64_t>(kept_slot.size() * sizeof(int));
  }
  if (single_use) return n + 2 * static_cast<int64_t>(capacity) * kv_dim * sizeof(float);
  for (size_t l = 0; l < k.size(); ++l) n += (k[l].numel() + v[l].numel()) * sizeof(float);
  return n;
}

KVCache KVCache::CreateTyped(const ModelConfig& config, int capacity, KvType k_type, KvType v_type,
                             std::vector<int64_t> keep) {
  KVCache cache;
  cache.head_major = true;
  cache.capacity = capacity;
  cache.kv_dim = config.kv_dim();
  cache.k_type = k_type;
  cache.v_type = v_type;
  cache.k_row_bytes = KvRowBytes(k_type, cache.kv_dim);
  cache.v_row_bytes = KvRowBytes(v_type, cache.kv_dim);
  cache.k_panel = KvPanelValues(k_type, config.head_dim);
  cache.v_panel = KvPanelValues(v_type, config.head_dim);
  SS_ASSERT(cache.kv_dim % cache.k_panel == 0 && cache.kv_dim % cache.v_panel == 0);
  std::sort(keep.begin(), keep.end());
  keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
  cache.keep = std::move(keep);
  if (!cache.keep.empty()) cache.kept_slot.assign(capacity, -1);
  const int64_t kept = std::max<int64_t>(static_cast<int64_t>(cache.keep.size()), 1);
  for (int l = 0; l < config.n_layers; ++l) {
    const bool keys = !config.LinearLayer(l);  // a linear layer keeps a state instead
    cache.k_rows.emplace_back(keys ? static_cast<size_t>(capacity) * cache.k_row_bytes : 0);
    cache.v_rows.emplace_back(keys ? static_cast<size_t>(capacity) * cache.v_row_bytes : 0);
    const bool kept_rows = keys && !cache.keep.empty();
    cache.k_kept.push_back(kept_rows ? Tensor::Zeros({kept, cache.kv_dim}) : Tensor());
    cache.v_kept.push_back(kept_rows ? Tensor::Zeros({kept, cache.kv_dim}) : Tensor());
  }
  CreateLinearState(config, cache, false);
  return cache;
}

// Row `row` of a head-major layer (capacity rows, panels of `panel` values): each panel's values
// encoded as a row of their own, which gives the bytes of the whole row's blocks.
static void EncodePanels(KvType type, int panel, const float* x, int kv_dim, int capacity, int row,
                         uint8_t* layer) {
  const size_t panel_bytes = KvRowBytes(type, panel);
  for (int g = 0; g < kv_dim / panel; ++g)
    KvEncodeRow(type, x + static_cast<int64_t>(g) * panel, panel,
                layer + (static_cast<size_t>(g) * capacity + row) * panel_bytes);
}
static void CopyPanels(KvType type, int panel, int kv_dim, const uint8_t* from, int from_capacity,
                       int from_row, uint8_t* to, int to_capacity, int to_row) {
  const size_t panel_bytes = KvRowBytes(type, panel);
  for (int g = 0; g < kv_dim / panel; ++g)
    std::copy_n(from + (static_cast<size_t>(g) * from_capacity + from_row) * panel_bytes,
                panel_bytes, to + (static_cast<size_t>(g) * to_capacity + to_row) * panel_bytes);
}

void KVCache::WriteRow(int layer, int row, int64_t index, const float* kr, const float* vr) {
  if (!head_major) {
    std::copy_n(kr, kv_dim, k[layer].row(row));
    std::copy_n(vr, kv_dim, v[layer].row(row));
    return;
  }
  const auto it = std::lower_bound(keep.begin(), keep.end(), index);
  if (it != keep.end() && *it == index) {
    const int slot = static_cast<int>(it - keep.begin());
    std::copy_n(kr, kv_dim, k_kept[layer].row(slot));
    std::copy_n(vr, kv_dim, v_kept[layer].row(slot));
    kept_slot[row] = slot;
    return;
  }
  EncodePanels(k_type, k_panel, kr, kv_dim, capacity, row, k_rows[layer].data());
  EncodePanels(v_type, v_panel, vr, kv_dim, capacity, row, v_rows[layer].data());
  if (!keep.empty()) kept_slot[row] = -1;
}

void KVCache::CopyRow(const KVCache& from, int from_row, int to_row) {
  SS_ASSERT(from.k_type == k_type && from.v_type == v_type && from.keep == keep);
  for (size_t l = 0; l < (head_major ? k_rows.size() : k.size()); ++l) {
    if (!HasLayerEntries(static_cast<int>(l))) continue;  // a linear layer: no entries
    if (!head_major) {
      std::copy_n(from.k[l].row(from_row), kv_dim, k[l].row(to_row));
      std::copy_n(from.v[l].row(from_row), kv_dim, v[l].row(to_row));
      continue;
    }
    // A kept entry's slot is its index in `keep`, the same in both caches: copy the f32 rows.
    if (const int slot = from.KeptSlot(from_row); slot >= 0) {
      std::copy_n(from.k_kept[l].row(slot), kv_dim, k_kept[l].row(slot));
      std::copy_n(from.v_kept[l].row(slot), kv_dim, v_kept[l].row(slot));
      continue;
    }
    CopyPanels(k_type, k_panel, kv_dim, from.k_rows[l].data(), from.capacity, from_row,
               k_rows[l].data(), capacity, to_row);
    CopyPanels(v_type, v_panel, kv_dim, from.v_rows[l].data(), from.capacity, from_row,
               v_rows[l].data(), capacity, to_row);
  }
  if (!keep.empty()) kept_slot[to_row] = from.kept_slot[from_row];
}

// One layer's keys or values as the attention kernel reads them.
static KvRows LayerRows(const KVCache& c, const Tensor& f32, KvType type,
                        const std::vector<uint8_t>& bytes, int panel, const Tensor& kept) {
  KvRows r;
  if (!c.head_major) {
    r.f32 = f32.data();
    return r;
  }
  r.type = type;
  r.bytes = bytes.data();
  r.row_bytes = KvRowBytes(type, panel);
  r.panel_values = panel;
  r.panel_bytes = static_cast<size_t>(c.capacity) * r.row_bytes;
  r.kept_slot = c.keep.empty() ? nullptr : c.kept_slot.data();
  r.kept = c.keep.empty() ? nullptr : kept.data();
  return r;
}

KvRows KVCache::Keys(int layer) const {
  return head_major ? LayerRows(*this, Tensor(), k_type, k_rows[layer], k_panel, k_kept[layer])
                    : LayerRows(*this, k[layer], k_type, {}, 0, Tensor());
}

KvRows KVCache::Values(int layer) const {
  return head_major ? LayerRows(*this, Tensor(), v_type, v_rows[layer], v_panel, v_kept[layer])
                    : LayerRows(*this, v[layer], v_type, {}, 0, Tensor());
}

int64_t KVCache::BytesPerToken() const {
  int64_t layers = 0;  // the layers that keep entries (not the linear ones)
  for (int l = 0; l < static_cast<int>(head_major ? k_rows.size() : k.size()); ++l)
    layers += HasLayerEntries(l) ? 1 : 0;
  if (!head_major) return layers * 2 * kv_dim * static_cast<int64_t>(sizeof(float));
  return layers * static_cast<int64_t>(k_row_bytes + v_row_bytes);
}

void AttnStatsBuffers::Resize(int n_layers, int n_heads, int T, int K) {
  first_k = K;
  tokens = T;
  const int64_t n = static_cast<int64_t>(n_layers) * n_heads * T;
  if (first_k_probs.numel() != n * K) first_k_probs = Tensor::Zeros({n_layers, n_heads, T, K});
  first_k_probs = first_k_probs.Reshaped({n_layers, n_heads, T, K});
  top_key.assign(n, 0);
  if (top_prob.numel() != n) top_prob = Tensor::Zeros({n_layers, n_heads, T});
  if (sum_sq.numel() != n) sum_sq = Tensor::Zeros({n_layers, n_heads, T});
  if (sink_prob.numel() != n) sink_prob = Tensor::Zeros({n_layers, n_heads, T});
  if (row_sum.numel() != n) row_sum = Tensor::Zeros({n_layers, n_heads, T});
}

void RunState::Reserve(const ModelConfig& c, int T) {
  if (T <= capacity) return;
  capacity = T;
  x = Tensor::Zeros({T, c.dim});
  xb = Tensor::Zeros({T, c.dim});
  xb2 = Tensor::Zeros({T, c.dim});
  q = Tensor::Zeros({T, c.q_dim()});
  z = Tensor::Zeros({T, c.q_dim()});
  // The MLP runs over rows in chunks of kMlpRows (blocks.cpp), so its (rows, F) buffers stay small
  // at long T: 2 x 8192 x 3072 floats would be 201 MB for the GPT-2-small shape at T = 8192.
  hb = Tensor::Zeros({std::min(T, kMlpRows), c.MaxFfnWidth()});
  hb2 = Tensor::Zeros({std::min(T, kMlpRows), c.MaxFfnWidth()});
  // logits (T, V) are allocated by FinalLogits when a call asks for them: at long T with a large
  // vocabulary they would be the biggest buffer of all (32768 x 50257 floats = 6.6 GB), and the
  // analysis path (LogitsMode::kNone) never needs them.
  // q_sink, k_new, v_new are allocated by the streaming path when it first runs.
  q_sink = k_new = v_new = Tensor();
}

Tensor Forward(const Model& model, KVCache& cache, RunState& state, const ForwardRequest& request) {
  const ModelConfig& c = model.config;
  const int T = static_cast<int>(request.tokens.size());
  SS_ASSERT(T > 0);
  const StreamLayout* stream = request.stream;
  if (stream) {
    SS_ASSERT(!cache.single_use);
    SS_ASSERT(stream->window >= 1 && stream->ring >= stream->RingNeeded(T) &&
              stream->sinks + stream->ring <= cache.capacity);
    if (request.stats) Fail("attention statistics are not available on a streaming cache");
    if (request.first_layer != 0) Fail("a streaming forward cannot resume at a later block");
    if (request.self_attention_only) Fail("a streaming forward cannot attend to each token alone");
  } else if (cache.single_use && cache.length != 0) {
    Fail(
        "a single-use KV cache holds only the last layer's entries: Clear() it before the next "
        "call");
  } else if (cache.length + T > cache.capacity) {
    Fail("KV cache full: {} cached + {} new tokens > capacity {}", cache.length, T, cache.capacity);
  }
  if (request.first_layer < 0 || request.first_layer >= c.n_layers ||
      (request.first_layer > 0 && request.resid_pre == nullptr))
    Fail("forward from block {}: needs 0 <= block < {} and the residual stream entering it",
         request.first_layer, c.n_layers);
  if (request.last_layer >= c.n_layers ||
      (request.last_layer >= 0 && request.last_layer < request.first_layer))
    Fail("forward to block {}: needs {} <= block < {} (or -1: every block)", request.last_layer,
         request.first_layer, c.n_layers);
  if (LastLayer(request, c) < c.n_layers - 1 && request.logits != LogitsMode::kNone)
    Fail("a forward that stops after block {} of {} has no logits: ask for LogitsMode::kNone",
         request.last_layer, c.n_layers);
  for (int t = 0; t < T; ++t) {
    int id = request.tokens[t];
    if (id < 0 || id >= c.vocab_size)
      Fail("token id {} at position {} is outside the vocabulary [0, {})", id, t, c.vocab_size);
  }
  // A small prefill runs on one thread: below about 2^27 multiply-adds in its projections (e.g.
  // stories260K at T <= 256, 5 ms) waking a second thread for each of its many short parallel
  // regions costs more than it saves (measured: analyze 0.94 s on two threads against 0.72 s on
  // one). OpenBLAS's OpenMP build follows omp_get_max_threads() on each call, so both go serial.
  // Decode (T = 1) keeps the threads unless a token is tiny work (below 2^22 multiply-adds):
  // larger decode products are bound by memory bandwidth, which two cores share better. (2^24
  // before threads spun briefly between regions; with the short spin a stories15M-shaped token,
  // 15 M multiply-adds, decodes faster on two threads: 522 against 435 tokens/s in bf16.)
  const int64_t per_token =
      static_cast<int64_t>(c.n_layers) *
          (static_cast<int64_t>(c.dim) * (c.q_dim() + 2 * c.kv_dim()) +
           static_cast<int64_t>(c.q_dim()) * c.dim +
           static_cast<int64_t>(c.dim) * c.hidden_dim * (c.gated_mlp ? 3 : 2)) +
      static_cast<int64_t>(c.dim) * c.vocab_size;
  const int threads = omp_get_max_threads();
  const bool serial = threads > 1 && !omp_in_parallel() &&
                      static_cast<int64_t>(T) * per_token < (int64_t{1} << 27) &&
                      (T > 1 || per_token < (int64_t{1} << 22));
  if (serial) omp_set_num_threads(1);
  struct RestoreThreads {
    int n;
    ~RestoreThreads() {
      if (n > 0) omp_set_num_threads(n);
    }
  } restore{serial ? threads : 0};
  state.Reserve(c, T);
  if (request.stats && request.stats->first_k > 0)
    request.stats->Resize(c.n_layers, c.n_heads, T, request.stats->first_k);
  const Hooks* hooks = (request.hooks && !request.hooks->empty()) ? request.hooks : nullptr;
  ForwardContext ctx{model, c, cache, state, request, hooks, T, cache.length, {}, {}, {}};
  ctx.positions.resize(T);
  for (int t = 0; t < T; ++t) {
    if (stream)
      ctx.positions[t] = stream->CachePosition(stream->first_index + t);
    else
      ctx.positions[t] = request.positions.empty() ? cache.length + t : request.positions[t];
  }
  ctx.InitRope();
  const int start_length = cache.length;
  FindArchitecture(c.arch).forward(ctx);
  if (stream) {
    cache.length =
        static_cast<int>(std::min<int64_t>(stream->first_index + T, stream->sinks + stream->ring));
  } else {
    cache.length += T;
  }
  Tensor logits = FinalLogits(ctx);
  // NaN or Inf must stop the run, not become a perplexity of nan or a verdict on a NaN model. The
  // check reads the (T, D) residual and the logits once: O(T (D + V)) against the forward's
  // O(T D^2 L), so it costs nothing measurable; locating the cause runs only on failure.
  if (FirstNonFinite(state.x.data(), static_cast<int64_t>(T) * c.dim) >= 0)
    FailNonFinite(model, cache, state, request, start_length, "activations");
  if (!logits.empty() && FirstNonFinite(logits.data(), logits.numel()) >= 0)
    FailNonFinite(model, cache, state, request, start_length, "logits");
  return logits;
}

}  // namespace ss
