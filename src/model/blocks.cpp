#include "model/blocks.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <numbers>
#include <numeric>

#include "common/interrupt.h"
#include "kernels/ops.h"
#include "kernels/vecmath.h"
#include "model/attention.h"

namespace ss {

void ForwardContext::RunHook(HookPoint point, int layer, float* data,
                             std::vector<int64_t> shape) const {
  Tensor view = Tensor::View(data, std::move(shape), nullptr);
  hooks->Run(point, layer, start, view);
}

void ForwardContext::InitRope() {
  if (config.rope == RopeKind::kNone) return;
  rope_inv_freq = RopeInvFrequencies(config, model.weights.rope_freq_factors);
  if (config.rope_local_theta > 0) {
    // Gemma 3's sliding layers: their own base, and the global layers' scaling does not apply.
    ModelConfig local = config;
    local.rope_theta = config.rope_local_theta;
    local.rope_scaling = RopeScalingKind::kNone;
    rope_inv_freq_local = RopeInvFrequencies(local, Tensor());
  }
}

void EmbedTokens(ForwardContext& ctx) {
  const int D = ctx.config.dim;
  if (ctx.request.first_layer > 0) {  // resuming at a later block: its input replaces the embedding
    std::memcpy(ctx.state.x.data(), ctx.request.resid_pre, sizeof(float) * ctx.T * D);
    return;
  }
  const auto& tokens = ctx.request.tokens;
  const ModelWeights& w = ctx.model.weights;
  for (int t = 0; t < ctx.T; ++t) {
    if (w.token_embedding.empty())  // native: the row dequantised from the stored bytes
      DequantizeGgmlRows(w.embedding_packed->ggml, tokens[t], 1, ctx.state.x.row(t));
    else
      std::memcpy(ctx.state.x.row(t), w.token_embedding.row(tokens[t]), sizeof(float) * D);
  }
  // Gemma: embeddings times sqrt(hidden_size) (Gemma2Model's normalizer).
  if (ctx.config.embed_scale > 0)
    Scale(ctx.state.x.data(), static_cast<int64_t>(ctx.T) * D, ctx.config.embed_scale);
  if (ctx.HookActive(HookPoint::kEmbed, -1))
    ctx.RunHook(HookPoint::kEmbed, -1, ctx.state.x.data(), {ctx.T, D});
}

void AddPositionEmbeddings(ForwardContext& ctx) {
  if (ctx.request.first_layer > 0) return;  // already inside the resumed residual stream
  const int D = ctx.config.dim;
  const Tensor& wpe = ctx.model.weights.position_embedding;
  for (int t = 0; t < ctx.T; ++t) {
    const int pos = ctx.positions[t];
    if (pos < 0 || pos >= wpe.dim(0))
      Fail("position {} is outside the {} learned positions of {}", pos, wpe.dim(0),
           ctx.model.source);
    AddInPlace(ctx.state.x.row(t), wpe.row(pos), D);
  }
}

std::vector<double> RopeInvFrequencies(const ModelConfig& c, const Tensor& factors) {
  const int rot = c.rot_dim(), half = rot / 2;
  std::vector<double> inv(half);
  for (int i = 0; i < half; ++i)
    inv[i] = std::pow(static_cast<double>(c.rope_theta), -2.0 * i / rot);
  if (c.rope_scaling == RopeScalingKind::kLinear) {
    // Position interpolation (Chen et al. 2023): positions divided by the factor, i.e. every
    // frequency divided by it (HF _compute_linear_scaling_rope_parameters).
    for (double& f : inv) f /= c.rope_scaling_factor;
  } else if (c.rope_scaling == RopeScalingKind::kLlama3) {
    // Llama 3.1 (HF _compute_llama3_parameters): wavelengths longer than
    // original / low_freq_factor are divided by the factor, shorter than original /
    // high_freq_factor kept, and the band between blended linearly in original / wavelength.
    const double factor = c.rope_scaling_factor, low = c.rope_low_freq_factor,
                 high = c.rope_high_freq_factor, original = c.rope_original_max_seq_len;
    const double low_wavelen = original / low, high_wavelen = original / high;
    for (double& f : inv) {
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f /= factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (original / wavelen - low) / (high - low);
        f = (1 - smooth) * f / factor + smooth * f;
      }
    }
  } else if (c.rope_scaling == RopeScalingKind::kYarn) {
    // YaRN (Peng et al. 2023, section 3.2; HF _compute_yarn_parameters): dim i's wavelength is
    // compared with the original context through the dim at which a frequency turns `rotations`
    // times over it, d(r) = rot ln(original / (2 pi r)) / (2 ln theta). Dims below d(beta_fast)
    // keep their frequency, dims above d(beta_slow) are divided by the factor, and a linear ramp
    // blends the ones between (ends rounded out to whole dims unless truncate is false).
    const double factor = c.rope_scaling_factor, original = c.rope_original_max_seq_len;
    const double log_theta = std::log(static_cast<double>(c.rope_theta));
    auto correction_dim = [&](double rotations) {
      return rot * std::log(original / (rotations * 2 * std::numbers::pi)) / (2 * log_theta);
    };
    double low = correction_dim(c.rope_yarn_beta_fast),
           high = correction_dim(c.rope_yarn_beta_slow);
    if (c.rope_yarn_truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(rot - 1));
    if (low == high) high += 0.001;  // as HF: no division by zero
    for (int i = 0; i < half; ++i) {
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double keep = 1 - ramp;  // HF's inv_freq_extrapolation_factor
      inv[i] = inv[i] / factor * (1 - keep) + inv[i] * keep;
    }
  }
  if (!factors.empty()) {
    SS_ASSERT(factors.numel() == half);
    for (int i = 0; i < half; ++i) inv[i] /= factors[i];
  }
  return inv;
}

void ApplyNorm(const ForwardContext& ctx, const Tensor& weight, const Tensor& bias, const float* in,
               float* out) {
  const ModelConfig& c = ctx.config;
  if (c.norm == NormKind::kRms) {
    RmsNorm(in, weight.data(), out, ctx.T, c.dim, c.norm_eps, c.norm_weight_offset);
  } else {
    LayerNorm(in, weight.data(), bias.empty() ? nullptr : bias.data(), out, ctx.T, c.dim,
              c.norm_eps);
  }
}

const float* OrNull(const Tensor& t) { return t.empty() ? nullptr : t.data(); }

void Project(const float* x, const Tensor& w, const PackedWeight* packed, const Tensor& bias,
             float* y, int T, int in, int out) {
  if (packed) {
    MatMulPacked(x, *packed, OrNull(bias), y, T);
  } else {
    MatMul(x, w.data(), OrNull(bias), y, T, in, out);
  }
}
const PackedWeight* Packed(const LayerWeights& w, PackedWeight LayerPacked::*member) {
  return w.packed && !((*w.packed).*member).empty() ? &((*w.packed).*member) : nullptr;
}

void ProjectEach(const float* x, std::initializer_list<Projection> projections, int T, int in) {
  bool f32 = T == 1;
  for (const Projection& p : projections) f32 = f32 && !p.packed;
  if (f32) {
    MatVecJob jobs[4];
    int n = 0;
    for (const Projection& p : projections) jobs[n++] = {p.w.data(), OrNull(p.bias), p.y, p.out};
    MatVecBatch(x, in, std::span<const MatVecJob>(jobs, n));
    return;
  }
  for (const Projection& p : projections) Project(x, p.w, p.packed, p.bias, p.y, T, in, p.out);
}

// An output gate (the attention variant's, model/attention.h; gated attention): z (T, H*Dh) *= the
// gate of in W_gate^T, in the block's normed input; hook_gate sees the gate, hook_z the gated
// output W_O reads.
static void GateAttentionOutput(ForwardContext& ctx, int layer, const float* in) {
  const AttnVariant& variant = ModelAttention(ctx.config);
  if (variant.gate_param < 0) return;
  const Tensor& gate = ctx.model.weights.layers[layer].*variant.params[variant.gate_param].field;
  const ModelConfig& c = ctx.config;
  RunState& s = ctx.state;
  const int T = ctx.T;
  const int64_t n = static_cast<int64_t>(T) * c.q_dim();
  if (s.gate.numel() < n) s.gate = Tensor::Zeros({n});
  Project(in, gate, nullptr, Tensor(), s.gate.data(), T, c.dim, c.q_dim());
  variant.f32.gate(s.gate.data(), n);
  if (ctx.HookActive(HookPoint::kAttnGate, layer))
    ctx.RunHook(HookPoint::kAttnGate, layer, s.gate.data(), {T, c.n_heads, c.head_dim});
  float* z = s.z.data();
  const float* g = s.gate.data();
  for (int64_t i = 0; i < n; ++i) z[i] *= g[i];
}

// q/k RMSNorm before RoPE (Qwen3: over each head's Dh values; OLMo 2: over the whole projection,
// recognised by the weight's width). q (T, H*Dh), k (T, Hkv*Dh), in place.
static void NormalizeQk(const ModelConfig& c, const LayerWeights& w, float* q, float* k, int T) {
  if (!w.q_norm.empty()) {
    const int n = static_cast<int>(w.q_norm.numel());
    RmsNorm(q, w.q_norm.data(), q, T * c.q_dim() / n, n, c.norm_eps, c.norm_weight_offset);
  }
  if (!w.k_norm.empty()) {
    const int n = static_cast<int>(w.k_norm.numel());
    RmsNorm(k, w.k_norm.data(), k, T * c.kv_dim() / n, n, c.norm_eps, c.norm_weight_offset);
  }
}

// A slot whose logit comes from the query (the attention variant's, model/attention.h; kv-bias):
// each head's slot logit for the T queries q (T, H*Dh) before RoPE, into s.slot_logits (H, T).
// Nothing without one.
static void SlotLogits(ForwardContext& ctx, int layer, const float* q) {
  const AttnVariant& variant = ModelAttention(ctx.config);
  if (variant.slot != AttnSlot::kPerQuery) return;
  const ModelConfig& c = ctx.config;
  RunState& s = ctx.state;
  const int64_t n = static_cast<int64_t>(c.n_heads) * ctx.T;
  if (s.slot_logits.numel() < n) s.slot_logits = Tensor::Zeros({n});
  const std::vector<const float*> params = AttnParamData(variant, ctx.model.weights.layers[layer]);
  variant.f32.slot_logits(params.data(), q, s.slot_logits.data(),
                          AttnShape{1, ctx.T, c.n_heads, c.n_kv_heads, c.head_dim, c.dim});
}

// Layer `layer`'s window, soft-cap and the variant's rule and slot (learned logits, or the slot
// logits SlotLogits computed).
static AttnOptions LayerAttnOptions(const ForwardContext& ctx, int layer) {
  const ModelConfig& c = ctx.config;
  return ss::LayerAttnOptions(
      c, ctx.model.weights.layers[layer], ctx.request.self_attention_only ? 1 : c.Window(layer),
      ctx.state.slot_logits.empty() ? nullptr : ctx.state.slot_logits.data());
}

// Self-attention on a sink + ring streaming cache (ForwardRequest::stream; see model.h).
static void StreamSelfAttention(ForwardContext& ctx, int layer, const float* in, float* out) {
  const ModelConfig& c = ctx.config;
  const LayerWeights& w = ctx.model.weights.layers[layer];
  const StreamLayout& layout = *ctx.request.stream;
  RunState& s = ctx.state;
  const int T = ctx.T, D = c.dim, H = c.n_heads, Hkv = c.n_kv_heads, Dh = c.head_dim;
  const int kv_dim = c.kv_dim();
  if (ctx.HookActive(HookPoint::kPattern, layer))
    Fail("the attention pattern hook is not available on a streaming cache");
  if (s.k_new.numel() < static_cast<int64_t>(T) * kv_dim) {  // streaming-only buffers, on first use
    s.q_sink = Tensor::Zeros({s.capacity, c.q_dim()});
    s.k_new = Tensor::Zeros({s.capacity, kv_dim});
    s.v_new = Tensor::Zeros({s.capacity, kv_dim});
  }
  ProjectEach(in,
              {{w.wq, Packed(w, &LayerPacked::wq), w.bq, s.q.data(), c.q_dim()},
               {w.wk, Packed(w, &LayerPacked::wk), w.bk, s.k_new.data(), kv_dim},
               {w.wv, Packed(w, &LayerPacked::wv), w.bv, s.v_new.data(), kv_dim}},
              T, D);
  NormalizeQk(c, w, s.q.data(), s.k_new.data(), T);
  SlotLogits(ctx, layer, s.q.data());
  const bool has_sinks = layout.sinks > 0;
  if (c.rope != RopeKind::kNone) {
    // Stream indices fit in int for 2^31 tokens; beyond that the stream must be restarted.
    std::vector<int> stream_pos(T);
    for (int t = 0; t < T; ++t) {
      const int64_t m = layout.first_index + t;
      if (m > INT32_MAX) Fail("stream longer than 2^31 tokens");
      stream_pos[t] = static_cast<int>(m);
    }
    if (has_sinks) {
      std::copy(s.q.data(), s.q.data() + static_cast<int64_t>(T) * c.q_dim(), s.q_sink.data());
      RopeWithFrequencies(s.q_sink.data(), ctx.positions, H, Dh, c.rot_dim(), ctx.RopeFreq(layer),
                          c.rope);
    }
    RopeWithFrequencies(s.q.data(), stream_pos, H, Dh, c.rot_dim(), ctx.RopeFreq(layer), c.rope);
    RopeWithFrequencies(s.k_new.data(), stream_pos, Hkv, Dh, c.rot_dim(), ctx.RopeFreq(layer),
                        c.rope);
    if (const float m = c.RopeMagnitude(); m != 1.0f) {
      Scale(s.q.data(), static_cast<int64_t>(T) * c.q_dim(), m);
      Scale(s.k_new.data(), static_cast<int64_t>(T) * kv_dim, m);
      if (has_sinks) Scale(s.q_sink.data(), static_cast<int64_t>(T) * c.q_dim(), m);
    }
  } else if (has_sinks) {
    std::copy(s.q.data(), s.q.data() + static_cast<int64_t>(T) * c.q_dim(), s.q_sink.data());
  }
  if (ctx.hooks) {
    if (ctx.HookActive(HookPoint::kQ, layer))
      ctx.RunHook(HookPoint::kQ, layer, s.q.data(), {T, H, Dh});
    if (ctx.HookActive(HookPoint::kK, layer))
      ctx.RunHook(HookPoint::kK, layer, s.k_new.data(), {T, Hkv, Dh});
    if (ctx.HookActive(HookPoint::kV, layer))
      ctx.RunHook(HookPoint::kV, layer, s.v_new.data(), {T, Hkv, Dh});
  }
  if (const float f = c.QueryScale(layer); f != 1.0f) {
    Scale(s.q.data(), static_cast<int64_t>(T) * c.q_dim(), f);
    if (has_sinks) Scale(s.q_sink.data(), static_cast<int64_t>(T) * c.q_dim(), f);
  }
  // Writing a new entry into its ring row evicts the entry ring tokens older; no query of this
  // call can see that one because ring >= RingNeeded(T).
  // A typed cache (--kv-type) encodes the entry here; attention reads it back decoded.
  for (int t = 0; t < T; ++t) {
    const int64_t m = layout.first_index + t;
    ctx.cache.WriteRow(layer, layout.Row(m), m, s.k_new.row(t), s.v_new.row(t));
  }
  SinkWindowAttention(s.q.data(), has_sinks ? s.q_sink.data() : s.q.data(), ctx.cache.Keys(layer),
                      ctx.cache.Values(layer), s.z.data(), T, H, Hkv, Dh, layout.sinks,
                      layout.window, layout.ring, layout.first_index, LayerAttnOptions(ctx, layer));
  GateAttentionOutput(ctx, layer, in);
  if (ctx.HookActive(HookPoint::kZ, layer))
    ctx.RunHook(HookPoint::kZ, layer, s.z.data(), {T, H, Dh});
  Project(s.z.data(), w.wo, Packed(w, &LayerPacked::wo), w.bo, out, T, c.q_dim(), D);
  if (ctx.HookActive(HookPoint::kAttnOut, layer))
    ctx.RunHook(HookPoint::kAttnOut, layer, out, {T, D});
}

void SelfAttention(ForwardContext& ctx, int layer, const float* in, float* out) {
  if (ctx.request.stream) return StreamSelfAttention(ctx, layer, in, out);
  const ModelConfig& c = ctx.config;
  const LayerWeights& w = ctx.model.weights.layers[layer];
  RunState& s = ctx.state;
  const int T = ctx.T, D = c.dim, H = c.n_heads, Hkv = c.n_kv_heads, Dh = c.head_dim;
  const int S = ctx.start + T;  // keys visible after appending this call's tokens
  float* k_new = ctx.cache.k[layer].row(ctx.start);
  float* v_new = ctx.cache.v[layer].row(ctx.start);

  ProjectEach(in,
              {{w.wq, Packed(w, &LayerPacked::wq), w.bq, s.q.data(), c.q_dim()},
               {w.wk, Packed(w, &LayerPacked::wk), w.bk, k_new, c.kv_dim()},
               {w.wv, Packed(w, &LayerPacked::wv), w.bv, v_new, c.kv_dim()}},
              T, D);
  NormalizeQk(c, w, s.q.data(), k_new, T);
  SlotLogits(ctx, layer, s.q.data());
  if (c.rope != RopeKind::kNone) {
    RopeWithFrequencies(s.q.data(), ctx.positions, H, Dh, c.rot_dim(), ctx.RopeFreq(layer), c.rope);
    RopeWithFrequencies(k_new, ctx.positions, Hkv, Dh, c.rot_dim(), ctx.RopeFreq(layer), c.rope);
    if (const float m = c.RopeMagnitude(); m != 1.0f) {  // YaRN: cos and sin carry the factor
      Scale(s.q.data(), static_cast<int64_t>(T) * c.q_dim(), m);
      Scale(k_new, static_cast<int64_t>(T) * c.kv_dim(), m);
    }
  }
  if (ctx.hooks) {
    if (ctx.HookActive(HookPoint::kQ, layer))
      ctx.RunHook(HookPoint::kQ, layer, s.q.data(), {T, H, Dh});
    if (ctx.HookActive(HookPoint::kK, layer))
      ctx.RunHook(HookPoint::kK, layer, k_new, {T, Hkv, Dh});
    if (ctx.HookActive(HookPoint::kV, layer))
      ctx.RunHook(HookPoint::kV, layer, v_new, {T, Hkv, Dh});
  }
  // GPT-2's optional scalings, on the queries after hook_q (which shows them as the model
  // computes them, before the scores are scaled).
  if (const float f = c.QueryScale(layer); f != 1.0f)
    Scale(s.q.data(), static_cast<int64_t>(T) * c.q_dim(), f);

  AttnStats stats{};
  const AttnStats* stats_ptr = nullptr;
  if (AttnStatsBuffers* b = ctx.request.stats; b && b->first_k > 0) {
    const int64_t offset = static_cast<int64_t>(layer) * H * T;
    stats.first_k = b->first_k;
    stats.first_k_probs = b->first_k_probs.data() + offset * b->first_k;
    stats.top_key = b->top_key.data() + offset;
    stats.top_prob = b->top_prob.data() + offset;
    stats.sum_sq = b->sum_sq.data() + offset;
    stats.sink_prob = b->sink_prob.data() + offset;
    stats.row_sum = b->row_sum.data() + offset;
    stats_ptr = &stats;
  }
  const bool want_pattern = ctx.HookActive(HookPoint::kPattern, layer);
  float* pattern = nullptr;
  if (want_pattern) {
    const int64_t need = static_cast<int64_t>(H) * T * S;
    if (s.pattern.numel() < need) s.pattern = Tensor::Zeros({need});
    pattern = s.pattern.data();
  }
  const float* k_all = ctx.cache.k[layer].data();
  const float* v_all = ctx.cache.v[layer].data();
  const AttnOptions opt = LayerAttnOptions(ctx, layer);
  Attention(s.q.data(), k_all, v_all, s.z.data(), T, S, H, Hkv, Dh, opt, pattern, stats_ptr,
            ctx.model.precision == Precision::kBf16);
  if (want_pattern) {
    // The hook may rewrite the probabilities (an intervention): recompute z from them. A kv-bias
    // slot keeps the mass it had before the hook (1 - the row's sum over the keys) and its value.
    std::vector<float> slot_p;
    if (opt.slot_values) {
      slot_p.resize(static_cast<size_t>(H) * T);
      for (int64_t ht = 0; ht < static_cast<int64_t>(H) * T; ++ht) {
        const float* row = pattern + ht * S;
        slot_p[ht] = 1.0f - std::accumulate(row, row + S, 0.0f);
      }
    }
    ctx.RunHook(HookPoint::kPattern, layer, pattern, {H, T, S});
    AttentionFromPattern(pattern, v_all, s.z.data(), T, S, H, Hkv, Dh);
    if (opt.slot_values)
      for (int h = 0; h < H; ++h)
        for (int t = 0; t < T; ++t)
          AddSlotValue(opt, h / (H / Hkv), Dh, slot_p[static_cast<size_t>(h) * T + t],
                       s.z.data() + static_cast<int64_t>(t) * c.q_dim() + h * Dh);
  }
  GateAttentionOutput(ctx, layer, in);
  if (ctx.HookActive(HookPoint::kZ, layer))
    ctx.RunHook(HookPoint::kZ, layer, s.z.data(), {T, H, Dh});
  Project(s.z.data(), w.wo, Packed(w, &LayerPacked::wo), w.bo, out, T, c.q_dim(), D);
  if (ctx.HookActive(HookPoint::kAttnOut, layer))
    ctx.RunHook(HookPoint::kAttnOut, layer, out, {T, D});
}

// The gated (or plain) MLP of width F on in (T, D) with the layer's w1 / w2 / w3: the dense MLP, or
// a mixture-of-experts layer's shared expert.
static void DenseMlp(ForwardContext& ctx, const LayerWeights& w, int F, const float* in,
                     float* out) {
  const ModelConfig& c = ctx.config;
  RunState& s = ctx.state;
  const int T = ctx.T, D = c.dim;
  // Rows are independent: chunks of kMlpRows keep the (rows, F) activations small at long T.
  for (int t0 = 0; t0 < T; t0 += kMlpRows) {
    const int rows = std::min(kMlpRows, T - t0);
    const float* x = in + static_cast<int64_t>(t0) * D;
    if (c.gated_mlp) {
      ProjectEach(x,
                  {{w.w1, Packed(w, &LayerPacked::w1), w.b1, s.hb.data(), F},
                   {w.w3, Packed(w, &LayerPacked::w3), w.b3, s.hb2.data(), F}},
                  rows, D);
      GatedActivation(s.hb.data(), s.hb2.data(), static_cast<int64_t>(rows) * F, c.act);
    } else {
      Project(x, w.w1, Packed(w, &LayerPacked::w1), w.b1, s.hb.data(), rows, D, F);
      ActivationInPlace(s.hb.data(), static_cast<int64_t>(rows) * F, c.act);
    }
    Project(s.hb.data(), w.w2, Packed(w, &LayerPacked::w2), w.b2,
            out + static_cast<int64_t>(t0) * D, rows, F, D);
  }
}

void Mlp(ForwardContext& ctx, int layer, const float* in, float* out) {
  DenseMlp(ctx, ctx.model.weights.layers[layer], ctx.config.FfnWidth(layer), in, out);
  if (ctx.HookActive(HookPoint::kMlpOut, layer))
    ctx.RunHook(HookPoint::kMlpOut, layer, out, {ctx.T, ctx.config.dim});
}

void MoeFfn(ForwardContext& ctx, int layer, const float* in, float* out) {
  const ModelConfig& c = ctx.config;
  const LayerWeights& w = ctx.model.weights.layers[layer];
  const int T = ctx.T, D = c.dim, F = c.hidden_dim, E = c.n_experts, k = c.n_experts_per_tok;
  SS_ASSERT(E > 0 && k > 0 && k <= E);
  std::vector<float> probs(E), gate(F), up(F), y(D);
  std::vector<int> order(E);
  for (int t = 0; t < T; ++t) {
    const float* x = in + static_cast<int64_t>(t) * D;
    float* o = out + static_cast<int64_t>(t) * D;
    // Router: softmax over all E logits, keep the top k (lower index first on ties), optionally
    // renormalised (Qwen3-MoE's norm_topk_prob).
    MatMul(x, w.moe_router.data(), OrNull(w.moe_router_bias), probs.data(), 1, D, E);
    Softmax(probs.data(), E);
    for (int e = 0; e < E; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return probs[a] > probs[b]; });
    float norm = 0.0f;
    for (int j = 0; j < k; ++j) norm += probs[order[j]];
    std::fill(o, o + D, 0.0f);
    for (int j = 0; j < k; ++j) {
      const int e = order[j];
      const float weight = c.norm_topk_prob ? probs[e] / norm : probs[e];
      // Expert biases (gpt-oss): row e of the stacked (E, F) / (E, D) tensors.
      auto bias = [&](const Tensor& b, int64_t n) {
        return b.empty() ? nullptr : b.data() + e * n;
      };
      // Expert e's rows of a stacked (E, rows, cols) weight: its f32 slice, or (native) its rows
      // of the stored matrix, so that only the chosen experts' bytes are read.
      auto expert = [&](const Tensor& f32, const PackedWeight* stored, const float* input, int rows,
                        int cols, const float* b, float* result) {
        if (stored)
          MatMulGgml(input, stored->ggml.Rows(e * rows, rows), b, result, 1);
        else
          MatMul(input, f32.data() + static_cast<int64_t>(e) * rows * cols, b, result, 1, cols,
                 rows);
      };
      const PackedWeight* stored_gate = Packed(w, &LayerPacked::moe_w1);
      const PackedWeight* stored_up = Packed(w, &LayerPacked::moe_w3);
      if (stored_gate && stored_up) {
        // gpt-oss's gate and up rows alternate in one stored matrix: read it once (MatMulGgmlPair).
        MatMulGgmlPair(x, stored_gate->ggml.Rows(e * F, F), bias(w.moe_b1, F), gate.data(),
                       stored_up->ggml.Rows(e * F, F), bias(w.moe_b3, F), up.data());
      } else {
        expert(w.moe_w1, stored_gate, x, F, D, bias(w.moe_b1, F), gate.data());
        expert(w.moe_w3, stored_up, x, F, D, bias(w.moe_b3, F), up.data());
      }
      if (c.swiglu_limit > 0) {
        ClampedGlu(gate.data(), up.data(), F, c.swiglu_limit);
      } else {
        GatedActivation(gate.data(), up.data(), F, c.act);
      }
      expert(w.moe_w2, Packed(w, &LayerPacked::moe_w2), gate.data(), D, F, bias(w.moe_b2, D),
             y.data());
      for (int d = 0; d < D; ++d) o[d] += weight * y[d];
    }
  }
  if (!w.w1.empty() || (w.packed && !w.packed->w1.empty())) {
    // The shared expert every token goes through (Qwen3-Next, Qwen3.5-MoE), scaled per token by
    // sigmoid(x w_sg) where the model has that gate.
    RunState& s = ctx.state;
    if (s.shared.numel() < static_cast<int64_t>(T) * D) s.shared = Tensor::Zeros({s.capacity, D});
    float* shared = s.shared.data();
    DenseMlp(ctx, w, c.shared_expert_hidden_dim, in, shared);
    for (int t = 0; t < T; ++t) {
      const float* x = in + static_cast<int64_t>(t) * D;
      float scale = 1.0f;
      if (!w.shared_expert_gate.empty()) {
        double logit = 0;
        for (int d = 0; d < D; ++d) logit += static_cast<double>(x[d]) * w.shared_expert_gate[d];
        scale = static_cast<float>(1.0 / (1.0 + std::exp(-logit)));
      }
      AddScaled(out + static_cast<int64_t>(t) * D, shared + static_cast<int64_t>(t) * D, scale, D);
    }
  }
  if (ctx.HookActive(HookPoint::kMlpOut, layer))
    ctx.RunHook(HookPoint::kMlpOut, layer, out, {T, D});
}

Tensor FinalLogits(ForwardContext& ctx) {
  const ModelConfig& c = ctx.config;
  RunState& s = ctx.state;
  const ModelWeights& w = ctx.model.weights;
  const int T = ctx.T, D = c.dim, V = c.vocab_size;
  const LogitsMode mode = ctx.request.logits;
  // A forward stopped before the last block has no final residual: no final norm, no logits.
  if (LastLayer(ctx.request, c) < c.n_layers - 1) return Tensor();
  const bool hook = ctx.HookActive(HookPoint::kLnFinal, -1);
  if (mode == LogitsMode::kNone && !hook) return Tensor();
  // Only the rows whose logits are wanted need the final norm, unless a hook reads them all.
  const int first = (mode == LogitsMode::kLast && !hook) ? T - 1 : 0;
  const int rows = T - first;
  if (c.norm == NormKind::kRms) {
    RmsNorm(s.x.row(first), w.final_norm.data(), s.xb.row(first), rows, D, c.norm_eps,
            c.norm_weight_offset);
  } else {
    LayerNorm(s.x.row(first), w.final_norm.data(), OrNull(w.final_norm_bias), s.xb.row(first), rows,
              D, c.norm_eps);
  }
  if (hook) ctx.RunHook(HookPoint::kLnFinal, -1, s.xb.data(), {T, D});
  if (mode == LogitsMode::kNone) return Tensor();
  const int out_first = mode == LogitsMode::kLast ? T - 1 : 0;
  const int out_rows = T - out_first;
  if (s.logits.empty() || s.logits.dim(0) < out_rows) s.logits = Tensor::Zeros({out_rows, V});
  Project(s.xb.row(out_first), w.lm_head, w.lm_head_packed.get(), Tensor(), s.logits.data(),
          out_rows, D, V);
  if (c.final_logit_softcap != 0)
    SoftCap(s.logits.data(), static_cast<int64_t>(out_rows) * V, c.final_logit_softcap);
  return s.logits.Rows(0, out_rows);
}

void AddInPlace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void AddScaled(float* x, const float* y, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += a * y[i];
}

void ForwardSequential(ForwardContext& ctx) {
  const ModelConfig& c = ctx.config;
  RunState& s = ctx.state;
  const int64_t n = static_cast<int64_t>(ctx.T) * c.dim;
  // in -> the sublayer's input: the stream itself, or its norm in xb.
  auto input = [&](const Tensor& norm, const Tensor& bias) -> const float* {
    if (norm.empty()) return s.x.data();
    ApplyNorm(ctx, norm, bias, s.x.data(), s.xb.data());
    return s.xb.data();
  };
  EmbedTokens(ctx);
  for (int l = ctx.request.first_layer, last = LastLayer(ctx.request, c); l <= last; ++l) {
    PollInterrupt();  // a stopping point for work asked to end (common/interrupt.h)
    const LayerWeights& w = ctx.model.weights.layers[l];
    if (ctx.HookActive(HookPoint::kResidPre, l))
      ctx.RunHook(HookPoint::kResidPre, l, s.x.data(), {ctx.T, c.dim});
    if (c.LinearLayer(l))
      LinearAttention(ctx, l, input(w.attn_norm, w.attn_norm_bias), s.xb2.data());
    else
      SelfAttention(ctx, l, input(w.attn_norm, w.attn_norm_bias), s.xb2.data());
    if (!w.attn_post_norm.empty())
      ApplyNorm(ctx, w.attn_post_norm, Tensor(), s.xb2.data(), s.xb2.data());
    AddInPlace(s.x.data(), s.xb2.data(), n);
    if (ctx.HookActive(HookPoint::kResidMid, l))
      ctx.RunHook(HookPoint::kResidMid, l, s.x.data(), {ctx.T, c.dim});
    const float* ffn_in = input(w.ffn_norm, w.ffn_norm_bias);
    if (c.MoeLayer(l)) {
      MoeFfn(ctx, l, ffn_in, s.xb2.data());
    } else {
      Mlp(ctx, l, ffn_in, s.xb2.data());
    }
    if (!w.ffn_post_norm.empty())
      ApplyNorm(ctx, w.ffn_post_norm, Tensor(), s.xb2.data(), s.xb2.data());
    AddInPlace(s.x.data(), s.xb2.data(), n);
    if (ctx.HookActive(HookPoint::kResidPost, l))
      ctx.RunHook(HookPoint::kResidPost, l, s.x.data(), {ctx.T, c.dim});
  }
}

}  // namespace ss
