#include "naive_hf.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "common/error.h"
#include "io/hf_config.h"
#include "io/load.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace ss::test {
namespace {

using Vec = std::vector<double>;

const Tensor& Get(const HfTensors& w, const std::string& name) {
  auto it = w.find(name);
  if (it == w.end()) Fail("naive reference: no tensor {}", name);
  return it->second;
}
bool Has(const HfTensors& w, const std::string& name) { return w.count(name) > 0; }

// y = W x (+ b), W (out, in) as nn.Linear.
Vec Linear(const Vec& x, const Tensor& W, const Tensor* b) {
  const int64_t out = W.dim(0), in = W.dim(1);
  Vec y(out);
  for (int64_t o = 0; o < out; ++o) {
    double s = b ? (*b)[o] : 0.0;
    for (int64_t i = 0; i < in; ++i) s += W[o * in + i] * x[i];
    y[o] = s;
  }
  return y;
}
// y = x W + b, W (in, out) as GPT-2's Conv1D.
Vec Conv1D(const Vec& x, const Tensor& W, const Tensor& b) {
  const int64_t in = W.dim(0), out = W.dim(1);
  Vec y(out);
  for (int64_t o = 0; o < out; ++o) {
    double s = b[o];
    for (int64_t i = 0; i < in; ++i) s += x[i] * W[i * out + o];
    y[o] = s;
  }
  return y;
}
Vec Rms(const Vec& x, const Tensor& w, double eps, size_t offset = 0, size_t n = 0) {
  if (n == 0) n = x.size();
  Vec y = x;
  double ms = 0;
  for (size_t i = 0; i < n; ++i) ms += x[offset + i] * x[offset + i];
  double inv = 1.0 / std::sqrt(ms / n + eps);
  for (size_t i = 0; i < n; ++i) y[offset + i] = x[offset + i] * inv * w[i];
  return y;
}
Vec Ln(const Vec& x, const Tensor& w, const Tensor& b, double eps) {
  double mean = 0, var = 0;
  for (double v : x) mean += v;
  mean /= x.size();
  for (double v : x) var += (v - mean) * (v - mean);
  var /= x.size();
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mean) / std::sqrt(var + eps) * w[i] + b[i];
  return y;
}
double Act(double x, ActKind kind) {
  switch (kind) {
    case ActKind::kSilu:
      return x / (1 + std::exp(-x));
    case ActKind::kGelu:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case ActKind::kGeluTanh:
      return 0.5 * x *
             (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
    case ActKind::kRelu:
      return x > 0 ? x : 0;
  }
  return x;
}

// inv_freq as transformers' rope init functions compute it (default, linear, llama3).
Vec InvFreq(const ModelConfig& c) {
  const int rot = c.rotary_dim > 0 ? c.rotary_dim : c.head_dim;
  Vec inv;
  for (int i = 0; i < rot; i += 2) inv.push_back(1.0 / std::pow(c.rope_theta, double(i) / rot));
  if (c.rope_scaling == RopeScalingKind::kLinear) {
    for (double& f : inv) f /= c.rope_scaling_factor;
  } else if (c.rope_scaling == RopeScalingKind::kLlama3) {
    const double old_len = c.rope_original_max_seq_len, factor = c.rope_scaling_factor;
    const double lo = c.rope_low_freq_factor, hi = c.rope_high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2 * std::numbers::pi / f;
      const double scaled = wavelen > old_len / lo ? f / factor : f;
      const double smooth = (old_len / wavelen - lo) / (hi - lo);
      const double smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
      const bool medium = !(wavelen < old_len / hi) && !(wavelen > old_len / lo);
      f = medium ? smoothed : scaled;
    }
  } else if (c.rope_scaling == RopeScalingKind::kYarn) {
    // _compute_yarn_parameters, written out from its formulas.
    const double base = c.rope_theta, factor = c.rope_scaling_factor;
    const double orig = c.rope_original_max_seq_len;
    auto corr_dim = [&](double rotations) {
      return rot * std::log(orig / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
    };
    double lo = corr_dim(c.rope_yarn_beta_fast), hi = corr_dim(c.rope_yarn_beta_slow);
    if (c.rope_yarn_truncate) lo = std::floor(lo), hi = std::ceil(hi);
    lo = std::max(lo, 0.0);
    hi = std::min(hi, rot - 1.0);
    if (lo == hi) hi += 0.001;
    for (size_t i = 0; i < inv.size(); ++i) {
      const double ramp = std::min(1.0, std::max(0.0, (static_cast<double>(i) - lo) / (hi - lo)));
      const double extrapolation = 1 - ramp;
      inv[i] = inv[i] / factor * (1 - extrapolation) + inv[i] * extrapolation;
    }
  }
  return inv;
}
// cos and sin are multiplied by YaRN's attention factor (so q and k both are).
double RopeAttentionFactor(const ModelConfig& c) {
  if (c.rope_scaling != RopeScalingKind::kYarn || c.rope_scaling_factor <= 1) return 1.0;
  return 0.1 * std::log(c.rope_scaling_factor) + 1.0;
}

// rotate_half RoPE on one head (first rot dims) at `pos`.
void RopeHalf(double* head, const Vec& inv, int pos) {
  const int half = static_cast<int>(inv.size());
  for (int i = 0; i < half; ++i) {
    const double a = pos * inv[i], c = std::cos(a), s = std::sin(a);
    const double x0 = head[i], x1 = head[i + half];
    head[i] = x0 * c - x1 * s;
    head[i + half] = x1 * c + x0 * s;
  }
}

struct Qkv {
  std::vector<Vec> q, k, v;  // per position: (H*Dh), (Hkv*Dh), (Hkv*Dh)
  // sinkscope's kv-bias extension: per position the slot's logit per head (q before RoPE . k* /
  // sqrt(Dh)), and the slot's value per kv head (Hkv*Dh). Empty: no slot.
  std::vector<Vec> slot_logit;
  Vec slot_value;
};

// Causal softmax attention in block l; returns z (T, H*Dh). Scores are divided by sqrt(Dh), and
// for GPT-2 as GPT2Attention._attn does: not by sqrt(Dh) when scale_attn_weights is false, and
// also by l + 1 with scale_attn_by_inverse_layer_idx.
// gpt-oss: `sinks` (H) joins each row's softmax as one more logit whose column is then dropped,
// and layer_types picks which layers slide.
std::vector<Vec> Attend(const ModelConfig& c, const Qkv& p, int l, const Tensor* sinks = nullptr) {
  const int T = static_cast<int>(p.q.size()), H = c.n_heads, Dh = c.head_dim;
  const int group = H / c.n_kv_heads;
  const bool slides = c.sliding_window > 0 && (c.layer_attention.empty() ||
                                               c.layer_attention[l] == LayerAttention::kSliding);
  std::vector<Vec> z(T, Vec(static_cast<size_t>(H) * Dh, 0.0));
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      const int kvh = h / group;
      const int first = slides ? std::max(0, t - c.sliding_window + 1) : 0;
      Vec score;
      double mx = -1e300;
      for (int j = first; j <= t; ++j) {
        double s = 0;
        for (int d = 0; d < Dh; ++d) s += p.q[t][h * Dh + d] * p.k[j][kvh * Dh + d];
        // Gemma: scaling = query_pre_attn_scalar ** -0.5, then c * tanh(s / c).
        if (c.attn_scale_sqrt_dim)
          s /= std::sqrt(c.query_pre_attn_scalar > 0 ? static_cast<double>(c.query_pre_attn_scalar)
                                                     : static_cast<double>(Dh));
        if (c.attn_scale_inverse_layer) s /= static_cast<double>(l + 1);
        if (c.attn_logit_softcap > 0)
          s = c.attn_logit_softcap * std::tanh(s / c.attn_logit_softcap);
        score.push_back(s);
        mx = std::max(mx, s);
      }
      if (c.attn_sigmoid) {  // sinkscope's sigmoid extension: independent weights, no softmax
        for (int j = first; j <= t; ++j)
          for (int d = 0; d < Dh; ++d)
            z[t][h * Dh + d] += 1.0 / (1.0 + std::exp(-score[j - first])) * p.v[j][kvh * Dh + d];
        continue;
      }
      const bool has_slot = sinks || !p.slot_logit.empty();
      const double slot = sinks ? (*sinks)[h] : has_slot ? p.slot_logit[t][h] : 0.0;
      if (has_slot) mx = std::max(mx, slot);
      double sum = has_slot ? std::exp(slot - mx) : 0.0;
      for (double& s : score) sum += (s = std::exp(s - mx));
      for (int j = first; j <= t; ++j)
        for (int d = 0; d < Dh; ++d)
          z[t][h * Dh + d] += score[j - first] / sum * p.v[j][kvh * Dh + d];
      if (!p.slot_value.empty())
        for (int d = 0; d < Dh; ++d)
          z[t][h * Dh + d] += std::exp(slot - mx) / sum * p.slot_value[kvh * Dh + d];
    }
  }
  return z;
}

std::vector<float> Logits(const std::vector<Vec>& x, const Tensor& head, double softcap) {
  std::vector<float> out;
  for (const Vec& row : x) {
    Vec l = Linear(row, head, nullptr);
    for (double v : l)
      out.push_back(static_cast<float>(softcap > 0 ? softcap * std::tanh(v / softcap) : v));
  }
  return out;
}

// Sparse MoE block (modeling_qwen3_moe.py Qwen3MoeSparseMoeBlock, modeling_olmoe.py,
// modeling_mixtral.py): router softmax over all experts, top-k (stable: lower index first on
// ties), optionally renormalised, weighted sum of the chosen SwiGLU experts.
Vec MoeFfn(const ModelConfig& c, const HfTensors& w, int l, const Vec& h) {
  const bool mixtral = c.arch == "mixtral";
  const std::string base =
      fmt::format("model.layers.{}.{}", l, mixtral ? "block_sparse_moe." : "mlp.");
  Vec logits = Linear(h, Get(w, base + "gate.weight"), nullptr);
  const int E = c.n_experts;
  double mx = -1e300, sum = 0;
  for (double v : logits) mx = std::max(mx, v);
  Vec p(E);
  for (int e = 0; e < E; ++e) sum += (p[e] = std::exp(logits[e] - mx));
  for (double& v : p) v /= sum;
  std::vector<int> chosen;
  std::vector<bool> used(E, false);
  for (int j = 0; j < c.n_experts_per_tok; ++j) {
    int best = -1;
    for (int e = 0; e < E; ++e)
      if (!used[e] && (best < 0 || p[e] > p[best])) best = e;
    used[best] = true;
    chosen.push_back(best);
  }
  double top_sum = 0;
  for (int e : chosen) top_sum += p[e];
  Vec out(h.size(), 0.0);
  for (int e : chosen) {
    auto W = [&](const char* qwen, const char* mix) -> const Tensor& {
      return Get(w, fmt::format("{}experts.{}.{}.weight", base, e, mixtral ? mix : qwen));
    };
    Vec g = Linear(h, W("gate_proj", "w1"), nullptr);
    Vec u = Linear(h, W("up_proj", "w3"), nullptr);
    for (size_t i = 0; i < g.size(); ++i) g[i] = Act(g[i], c.act) * u[i];
    Vec y = Linear(g, W("down_proj", "w2"), nullptr);
    const double weight = c.norm_topk_prob ? p[e] / top_sum : p[e];
    for (size_t i = 0; i < out.size(); ++i) out[i] += weight * y[i];
  }
  return out;
}

// gpt-oss's MoE block (modeling_gpt_oss.py GptOssMLP): router = linear with bias, top-k logits,
// softmax over those k; each chosen expert reads the fused (in, out) gate_up_proj with gate at
// even and up at odd columns, clamps (gate above at the limit, up to +-limit), computes
// (up + 1) * gate * sigmoid(1.702 gate), then down_proj (in, out) plus its bias.
Vec GptOssMoe(const ModelConfig& c, const HfTensors& w, int l, const Vec& h) {
  const std::string base = fmt::format("model.layers.{}.mlp.", l);
  const Vec logits = Linear(h, Get(w, base + "router.weight"), &Get(w, base + "router.bias"));
  const int E = c.n_experts, F = c.hidden_dim, D = c.dim;
  std::vector<int> chosen;
  std::vector<bool> used(E, false);
  for (int j = 0; j < c.n_experts_per_tok; ++j) {
    int best = -1;
    for (int e = 0; e < E; ++e)
      if (!used[e] && (best < 0 || logits[e] > logits[best])) best = e;
    used[best] = true;
    chosen.push_back(best);
  }
  double mx = -1e300, sum = 0;
  for (int e : chosen) mx = std::max(mx, logits[e]);
  for (int e : chosen) sum += std::exp(logits[e] - mx);
  const Tensor& gu = Get(w, base + "experts.gate_up_proj");
  const Tensor& gub = Get(w, base + "experts.gate_up_proj_bias");
  const Tensor& dn = Get(w, base + "experts.down_proj");
  const Tensor& dnb = Get(w, base + "experts.down_proj_bias");
  const double limit = c.swiglu_limit, alpha = 1.702;
  Vec out(D, 0.0);
  for (int e : chosen) {
    const double weight = std::exp(logits[e] - mx) / sum;
    Vec act(F);
    for (int f = 0; f < F; ++f) {
      double gate = gub[static_cast<int64_t>(e) * 2 * F + 2 * f];
      double up = gub[static_cast<int64_t>(e) * 2 * F + 2 * f + 1];
      for (int d = 0; d < D; ++d) {
        gate += h[d] * gu[(static_cast<int64_t>(e) * D + d) * 2 * F + 2 * f];
        up += h[d] * gu[(static_cast<int64_t>(e) * D + d) * 2 * F + 2 * f + 1];
      }
      gate = std::min(gate, limit);
      up = std::max(-limit, std::min(up, limit));
      act[f] = (up + 1) * gate / (1 + std::exp(-alpha * gate));
    }
    for (int d = 0; d < D; ++d) {
      double y = dnb[static_cast<int64_t>(e) * D + d];
      for (int f = 0; f < F; ++f) y += act[f] * dn[(static_cast<int64_t>(e) * F + f) * D + d];
      out[d] += weight * y;
    }
  }
  return out;
}

// Llama, Mistral, Qwen2, Qwen3, OLMo 2 (modeling_llama / mistral / qwen2 / qwen3 / olmo2.py).
std::vector<float> LlamaLike(const ModelConfig& c, const HfTensors& w,
                             const std::vector<int>& tokens) {
  const int T = static_cast<int>(tokens.size()), D = c.dim, Dh = c.head_dim;
  const bool olmo2 = c.arch == "olmo2";
  const bool head_qk_norm = c.qk_norm == QkNormKind::kPerHead;  // Qwen3, Qwen3-MoE
  const bool full_qk_norm = c.qk_norm == QkNormKind::kFull;     // OLMo 2, OLMoE
  const Vec inv = InvFreq(c);
  const double magnitude = RopeAttentionFactor(c);
  const bool gpt_oss = c.arch == "gpt_oss";
  std::vector<Vec> x(T);
  const Tensor& emb = Get(w, "model.embed_tokens.weight");
  for (int t = 0; t < T; ++t) x[t].assign(emb.row(tokens[t]), emb.row(tokens[t]) + D);
  for (int l = 0; l < c.n_layers; ++l) {
    auto W = [&](const std::string& s) -> const Tensor& {
      return Get(w, fmt::format("model.layers.{}.{}", l, s));
    };
    auto B = [&](const std::string& s) -> const Tensor* {
      std::string n = fmt::format("model.layers.{}.{}", l, s);
      return Has(w, n) ? &w.at(n) : nullptr;
    };
    Qkv p;
    for (int t = 0; t < T; ++t) {
      Vec h = olmo2 ? x[t] : Rms(x[t], W("input_layernorm.weight"), c.norm_eps);
      Vec q = Linear(h, W("self_attn.q_proj.weight"), B("self_attn.q_proj.bias"));
      Vec k = Linear(h, W("self_attn.k_proj.weight"), B("self_attn.k_proj.bias"));
      Vec v = Linear(h, W("self_attn.v_proj.weight"), B("self_attn.v_proj.bias"));
      if (head_qk_norm) {
        for (int hh = 0; hh < c.n_heads; ++hh)
          q = Rms(q, W("self_attn.q_norm.weight"), c.norm_eps, hh * Dh, Dh);
        for (int hh = 0; hh < c.n_kv_heads; ++hh)
          k = Rms(k, W("self_attn.k_norm.weight"), c.norm_eps, hh * Dh, Dh);
      }
      if (full_qk_norm) {
        q = Rms(q, W("self_attn.q_norm.weight"), c.norm_eps);
        k = Rms(k, W("self_attn.k_norm.weight"), c.norm_eps);
      }
      if (c.attn_kv_bias) {  // the slot is scored with the query before RoPE
        const Tensor& key = W("self_attn.bias_key");
        Vec logits(c.n_heads, 0.0);
        for (int hh = 0; hh < c.n_heads; ++hh) {
          const int kvh = hh / (c.n_heads / c.n_kv_heads);
          for (int d = 0; d < Dh; ++d) logits[hh] += q[hh * Dh + d] * key[kvh * Dh + d];
          logits[hh] /= std::sqrt(static_cast<double>(Dh));
        }
        p.slot_logit.push_back(logits);
        if (p.slot_value.empty()) {
          const Tensor& value = W("self_attn.bias_value");
          p.slot_value.assign(value.data(), value.data() + value.numel());
        }
      }
      for (int hh = 0; hh < c.n_heads; ++hh) RopeHalf(q.data() + hh * Dh, inv, t);
      for (int hh = 0; hh < c.n_kv_heads; ++hh) RopeHalf(k.data() + hh * Dh, inv, t);
      for (double& x : q) x *= magnitude;
      for (double& x : k) x *= magnitude;
      p.q.push_back(q), p.k.push_back(k), p.v.push_back(v);
    }
    std::vector<Vec> z = Attend(c, p, l, gpt_oss ? &W("self_attn.sinks") : nullptr);
    if (c.attn_output_gate) {  // gated attention: z *= sigmoid(x_norm W_gate^T), per dimension
      for (int t = 0; t < T; ++t) {
        const Vec g = Linear(Rms(x[t], W("input_layernorm.weight"), c.norm_eps),
                             W("self_attn.output_gate.weight"), nullptr);
        for (size_t i = 0; i < g.size(); ++i) z[t][i] *= 1.0 / (1.0 + std::exp(-g[i]));
      }
    }
    for (int t = 0; t < T; ++t) {
      Vec o = Linear(z[t], W("self_attn.o_proj.weight"), B("self_attn.o_proj.bias"));
      if (olmo2) o = Rms(o, W("post_attention_layernorm.weight"), c.norm_eps);
      for (int i = 0; i < D; ++i) x[t][i] += o[i];
      Vec h = olmo2 ? x[t] : Rms(x[t], W("post_attention_layernorm.weight"), c.norm_eps);
      Vec m;
      if (gpt_oss) {
        m = GptOssMoe(c, w, l, h);
      } else if (c.n_experts > 0 && (c.dense_layers.empty() || !c.dense_layers[l])) {
        m = MoeFfn(c, w, l, h);
      } else {
        Vec g = Linear(h, W("mlp.gate_proj.weight"), B("mlp.gate_proj.bias"));
        Vec u = Linear(h, W("mlp.up_proj.weight"), B("mlp.up_proj.bias"));
        for (size_t i = 0; i < g.size(); ++i) g[i] = Act(g[i], c.act) * u[i];
        m = Linear(g, W("mlp.down_proj.weight"), B("mlp.down_proj.bias"));
      }
      if (olmo2) m = Rms(m, W("post_feedforward_layernorm.weight"), c.norm_eps);
      for (int i = 0; i < D; ++i) x[t][i] += m[i];
    }
  }
  for (auto& row : x) row = Rms(row, Get(w, "model.norm.weight"), c.norm_eps);
  const Tensor& head = c.tied_embeddings ? emb : Get(w, "lm_head.weight");
  return Logits(x, head, c.final_logit_softcap);
}

// Gemma 2 and Gemma 3 text (modeling_gemma2.py, modeling_gemma3.py): Gemma's RMSNorm multiplies
// by (1 + w); embeddings times sqrt(hidden); norms before and after attention and MLP; GeGLU;
// Gemma 3's per-head q/k norms and its sliding layers' own RoPE base without rope_scaling.
Vec GemmaRms(const Vec& x, const Tensor& w, double eps, size_t offset = 0, size_t n = 0) {
  if (n == 0) n = x.size();
  Vec y = x;
  double ms = 0;
  for (size_t i = 0; i < n; ++i) ms += x[offset + i] * x[offset + i];
  const double inv = 1.0 / std::sqrt(ms / n + eps);
  for (size_t i = 0; i < n; ++i) y[offset + i] = x[offset + i] * inv * (1.0 + w[i]);
  return y;
}

std::vector<float> Gemma(const ModelConfig& c, const HfTensors& w, const std::vector<int>& tokens) {
  const int T = static_cast<int>(tokens.size()), D = c.dim, Dh = c.head_dim;
  const bool gemma3 = c.arch == "gemma3_text";
  const Vec global_inv = InvFreq(c);
  Vec local_inv;
  for (int i = 0; i < Dh; i += 2)
    local_inv.push_back(1.0 / std::pow(c.rope_local_theta, double(i) / Dh));
  const Tensor& emb = Get(w, "model.embed_tokens.weight");
  std::vector<Vec> x(T, Vec(D));
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < D; ++i) x[t][i] = emb.row(tokens[t])[i] * std::sqrt(static_cast<double>(D));
  for (int l = 0; l < c.n_layers; ++l) {
    auto W = [&](const std::string& s) -> const Tensor& {
      return Get(w, fmt::format("model.layers.{}.{}", l, s));
    };
    const bool sliding =
        c.layer_attention.empty() || c.layer_attention[l] == LayerAttention::kSliding;
    const Vec& inv = gemma3 && sliding ? local_inv : global_inv;
    Qkv p;
    for (int t = 0; t < T; ++t) {
      Vec h = GemmaRms(x[t], W("input_layernorm.weight"), c.norm_eps);
      Vec q = Linear(h, W("self_attn.q_proj.weight"), nullptr);
      Vec k = Linear(h, W("self_attn.k_proj.weight"), nullptr);
      Vec v = Linear(h, W("self_attn.v_proj.weight"), nullptr);
      if (gemma3) {
        for (int hh = 0; hh < c.n_heads; ++hh)
          q = GemmaRms(q, W("self_attn.q_norm.weight"), c.norm_eps, hh * Dh, Dh);
        for (int hh = 0; hh < c.n_kv_heads; ++hh)
          k = GemmaRms(k, W("self_attn.k_norm.weight"), c.norm_eps, hh * Dh, Dh);
      }
      for (int hh = 0; hh < c.n_heads; ++hh) RopeHalf(q.data() + hh * Dh, inv, t);
      for (int hh = 0; hh < c.n_kv_heads; ++hh) RopeHalf(k.data() + hh * Dh, inv, t);
      p.q.push_back(q), p.k.push_back(k), p.v.push_back(v);
    }
    const std::vector<Vec> z = Attend(c, p, l);
    for (int t = 0; t < T; ++t) {
      Vec o = GemmaRms(Linear(z[t], W("self_attn.o_proj.weight"), nullptr),
                       W("post_attention_layernorm.weight"), c.norm_eps);
      for (int i = 0; i < D; ++i) x[t][i] += o[i];
      const Vec h = GemmaRms(x[t], W("pre_feedforward_layernorm.weight"), c.norm_eps);
      Vec g = Linear(h, W("mlp.gate_proj.weight"), nullptr);
      const Vec u = Linear(h, W("mlp.up_proj.weight"), nullptr);
      for (size_t i = 0; i < g.size(); ++i) g[i] = Act(g[i], c.act) * u[i];
      const Vec m = GemmaRms(Linear(g, W("mlp.down_proj.weight"), nullptr),
                             W("post_feedforward_layernorm.weight"), c.norm_eps);
      for (int i = 0; i < D; ++i) x[t][i] += m[i];
    }
  }
  for (auto& row : x) row = GemmaRms(row, Get(w, "model.norm.weight"), c.norm_eps);
  return Logits(x, c.tied_embeddings ? emb : Get(w, "lm_head.weight"), c.final_logit_softcap);
}

// GPT-2 (modeling_gpt2.py).
std::vector<float> Gpt2(const ModelConfig& c, const HfTensors& w, const std::vector<int>& tokens) {
  const int T = static_cast<int>(tokens.size()), D = c.dim;
  const Tensor& wte = Get(w, "transformer.wte.weight");
  const Tensor& wpe = Get(w, "transformer.wpe.weight");
  std::vector<Vec> x(T, Vec(D));
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < D; ++i) x[t][i] = wte.row(tokens[t])[i] + wpe.row(t)[i];
  for (int l = 0; l < c.n_layers; ++l) {
    auto W = [&](const std::string& s) -> const Tensor& {
      return Get(w, fmt::format("transformer.h.{}.{}", l, s));
    };
    Qkv p;
    for (int t = 0; t < T; ++t) {
      Vec h = Ln(x[t], W("ln_1.weight"), W("ln_1.bias"), c.norm_eps);
      Vec qkv = Conv1D(h, W("attn.c_attn.weight"), W("attn.c_attn.bias"));  // split(n_embd, dim=2)
      p.q.emplace_back(qkv.begin(), qkv.begin() + D);
      p.k.emplace_back(qkv.begin() + D, qkv.begin() + 2 * D);
      p.v.emplace_back(qkv.begin() + 2 * D, qkv.end());
    }
    std::vector<Vec> z = Attend(c, p, l);
    for (int t = 0; t < T; ++t) {
      Vec o = Conv1D(z[t], W("attn.c_proj.weight"), W("attn.c_proj.bias"));
      for (int i = 0; i < D; ++i) x[t][i] += o[i];
      Vec h = Ln(x[t], W("ln_2.weight"), W("ln_2.bias"), c.norm_eps);
      Vec f = Conv1D(h, W("mlp.c_fc.weight"), W("mlp.c_fc.bias"));
      for (double& v : f) v = Act(v, c.act);
      Vec m = Conv1D(f, W("mlp.c_proj.weight"), W("mlp.c_proj.bias"));
      for (int i = 0; i < D; ++i) x[t][i] += m[i];
    }
  }
  for (auto& row : x)
    row = Ln(row, Get(w, "transformer.ln_f.weight"), Get(w, "transformer.ln_f.bias"), c.norm_eps);
  return Logits(x, c.tied_embeddings ? wte : Get(w, "lm_head.weight"), 0);
}

// GPT-NeoX (modeling_gpt_neox.py).
std::vector<float> GptNeox(const ModelConfig& c, const HfTensors& w,
                           const std::vector<int>& tokens) {
  const int T = static_cast<int>(tokens.size()), D = c.dim, Dh = c.head_dim, H = c.n_heads;
  const Vec inv = InvFreq(c);
  const Tensor& emb = Get(w, "gpt_neox.embed_in.weight");
  std::vector<Vec> x(T);
  for (int t = 0; t < T; ++t) x[t].assign(emb.row(tokens[t]), emb.row(tokens[t]) + D);
  for (int l = 0; l < c.n_layers; ++l) {
    auto W = [&](const std::string& s) -> const Tensor& {
      return Get(w, fmt::format("gpt_neox.layers.{}.{}", l, s));
    };
    auto Bp = [&](const std::string& s) -> const Tensor* {
      std::string n = fmt::format("gpt_neox.layers.{}.{}", l, s);
      return Has(w, n) ? &w.at(n) : nullptr;
    };
    auto mlp = [&](const Vec& h) {
      Vec f = Linear(h, W("mlp.dense_h_to_4h.weight"), &W("mlp.dense_h_to_4h.bias"));
      for (double& v : f) v = Act(v, c.act);
      return Linear(f, W("mlp.dense_4h_to_h.weight"), &W("mlp.dense_4h_to_h.bias"));
    };
    Qkv p;
    for (int t = 0; t < T; ++t) {
      Vec h = Ln(x[t], W("input_layernorm.weight"), W("input_layernorm.bias"), c.norm_eps);
      Vec qkv =
          Linear(h, W("attention.query_key_value.weight"), Bp("attention.query_key_value.bias"));
      // view(..., H, 3 * Dh) then chunk(3, dim=-1)
      Vec q(H * Dh), k(H * Dh), v(H * Dh);
      for (int hh = 0; hh < H; ++hh)
        for (int d = 0; d < Dh; ++d) {
          q[hh * Dh + d] = qkv[hh * 3 * Dh + d];
          k[hh * Dh + d] = qkv[hh * 3 * Dh + Dh + d];
          v[hh * Dh + d] = qkv[hh * 3 * Dh + 2 * Dh + d];
        }
      for (int hh = 0; hh < H; ++hh) {
        RopeHalf(q.data() + hh * Dh, inv, t);
        RopeHalf(k.data() + hh * Dh, inv, t);
      }
      p.q.push_back(q), p.k.push_back(k), p.v.push_back(v);
    }
    std::vector<Vec> z = Attend(c, p, l);
    for (int t = 0; t < T; ++t) {
      Vec o = Linear(z[t], W("attention.dense.weight"), Bp("attention.dense.bias"));
      if (c.parallel_residual) {
        Vec m = mlp(Ln(x[t], W("post_attention_layernorm.weight"),
                       W("post_attention_layernorm.bias"), c.norm_eps));
        for (int i = 0; i < D; ++i) x[t][i] += o[i] + m[i];
      } else {
        for (int i = 0; i < D; ++i) x[t][i] += o[i];
        Vec m = mlp(Ln(x[t], W("post_attention_layernorm.weight"),
                       W("post_attention_layernorm.bias"), c.norm_eps));
        for (int i = 0; i < D; ++i) x[t][i] += m[i];
      }
    }
  }
  for (auto& row : x)
    row = Ln(row, Get(w, "gpt_neox.final_layer_norm.weight"),
             Get(w, "gpt_neox.final_layer_norm.bias"), c.norm_eps);
  return Logits(x, c.tied_embeddings ? emb : Get(w, "embed_out.weight"), 0);
}

}  // namespace

// Phi-3's fused projections as modeling_phi3.py slices them: qkv_proj rows [q | k | v]
// (Phi3Attention: query_pos = H * Dh, then Hkv * Dh each), gate_up_proj rows [gate | up]
// (Phi3MLP: gate, up = chunk(2)). Split into the Llama names, the rest of the block is Llama's.
HfTensors SplitPhi3(const ModelConfig& c, const HfTensors& w) {
  HfTensors out = w;
  const int64_t qd = static_cast<int64_t>(c.n_heads) * c.head_dim,
                kvd = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  auto rows = [](const Tensor& t, int64_t first, int64_t count) {
    Tensor r = Tensor::Zeros({count, t.dim(1)});
    for (int64_t i = 0; i < count * t.dim(1); ++i) r[i] = t[first * t.dim(1) + i];
    return r;
  };
  for (int l = 0; l < c.n_layers; ++l) {
    auto n = [&](const char* s) { return fmt::format("model.layers.{}.{}", l, s); };
    const Tensor& qkv = Get(w, n("self_attn.qkv_proj.weight"));
    out[n("self_attn.q_proj.weight")] = rows(qkv, 0, qd);
    out[n("self_attn.k_proj.weight")] = rows(qkv, qd, kvd);
    out[n("self_attn.v_proj.weight")] = rows(qkv, qd + kvd, kvd);
    const Tensor& gu = Get(w, n("mlp.gate_up_proj.weight"));
    out[n("mlp.gate_proj.weight")] = rows(gu, 0, c.hidden_dim);
    out[n("mlp.up_proj.weight")] = rows(gu, c.hidden_dim, c.hidden_dim);
  }
  return out;
}

std::vector<float> NaiveHfForward(const ModelConfig& c, const HfTensors& w,
                                  const std::vector<int>& tokens) {
  if (IsQwen35Family(c.arch)) return NaiveQwen35Forward(c, w, tokens);
  if (c.arch == "phi3") return LlamaLike(c, SplitPhi3(c, w), tokens);
  if (c.arch == "gpt2") return Gpt2(c, w, tokens);
  if (c.arch == "gpt_neox") return GptNeox(c, w, tokens);
  if (c.arch == "gemma2" || c.arch == "gemma3_text") return Gemma(c, w, tokens);
  return LlamaLike(c, w, tokens);
}

HfTensors RandomHfWeights(const ModelConfig& c, uint32_t seed) {
  if (IsQwen35Family(c.arch)) return RandomQwen35Weights(c, seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.2f);
  HfTensors w;
  auto rnd = [&](const std::string& name, std::vector<int64_t> shape) {
    Tensor t = Tensor::Zeros(std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t[i] = dist(rng);
    w[name] = t;
  };
  auto norm = [&](const std::string& name, int64_t n) {
    Tensor t = Tensor::Zeros({n});
    for (int64_t i = 0; i < n; ++i) t[i] = 1.0f + dist(rng);
    w[name] = t;
  };
  const int64_t D = c.dim, F = c.hidden_dim, V = c.vocab_size, Dh = c.head_dim;
  const int64_t qd = c.n_heads * Dh, kvd = c.n_kv_heads * Dh;
  if (c.arch == "gpt2") {
    rnd("transformer.wte.weight", {V, D});
    rnd("transformer.wpe.weight", {c.max_seq_len, D});
    for (int l = 0; l < c.n_layers; ++l) {
      auto n = [&](const char* s) { return fmt::format("transformer.h.{}.{}", l, s); };
      norm(n("ln_1.weight"), D), rnd(n("ln_1.bias"), {D});
      rnd(n("attn.c_attn.weight"), {D, 3 * D}), rnd(n("attn.c_attn.bias"), {3 * D});
      rnd(n("attn.c_proj.weight"), {D, D}), rnd(n("attn.c_proj.bias"), {D});
      norm(n("ln_2.weight"), D), rnd(n("ln_2.bias"), {D});
      rnd(n("mlp.c_fc.weight"), {D, F}), rnd(n("mlp.c_fc.bias"), {F});
      rnd(n("mlp.c_proj.weight"), {F, D}), rnd(n("mlp.c_proj.bias"), {D});
    }
    norm("transformer.ln_f.weight", D), rnd("transformer.ln_f.bias", {D});
    if (!c.tied_embeddings) rnd("lm_head.weight", {V, D});
    return w;
  }
  if (c.arch == "gpt_neox") {
    rnd("gpt_neox.embed_in.weight", {V, D});
    for (int l = 0; l < c.n_layers; ++l) {
      auto n = [&](const char* s) { return fmt::format("gpt_neox.layers.{}.{}", l, s); };
      norm(n("input_layernorm.weight"), D), rnd(n("input_layernorm.bias"), {D});
      norm(n("post_attention_layernorm.weight"), D), rnd(n("post_attention_layernorm.bias"), {D});
      rnd(n("attention.query_key_value.weight"), {3 * D, D});
      if (c.qkv_bias) rnd(n("attention.query_key_value.bias"), {3 * D});
      rnd(n("attention.dense.weight"), {D, D});
      if (c.attn_out_bias) rnd(n("attention.dense.bias"), {D});
      rnd(n("mlp.dense_h_to_4h.weight"), {F, D}), rnd(n("mlp.dense_h_to_4h.bias"), {F});
      rnd(n("mlp.dense_4h_to_h.weight"), {D, F}), rnd(n("mlp.dense_4h_to_h.bias"), {D});
    }
    norm("gpt_neox.final_layer_norm.weight", D), rnd("gpt_neox.final_layer_norm.bias", {D});
    if (!c.tied_embeddings) rnd("embed_out.weight", {V, D});
    return w;
  }
  if (c.arch == "gemma2" || c.arch == "gemma3_text") {
    rnd("model.embed_tokens.weight", {V, D});
    for (int l = 0; l < c.n_layers; ++l) {
      auto n = [&](const char* s) { return fmt::format("model.layers.{}.{}", l, s); };
      // Norm weights near 0: the model multiplies by 1 + w.
      for (const char* s :
           {"input_layernorm.weight", "post_attention_layernorm.weight",
            "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight"})
        rnd(n(s), {D});
      rnd(n("self_attn.q_proj.weight"), {qd, D});
      rnd(n("self_attn.k_proj.weight"), {kvd, D});
      rnd(n("self_attn.v_proj.weight"), {kvd, D});
      rnd(n("self_attn.o_proj.weight"), {D, qd});
      if (c.qk_norm == QkNormKind::kPerHead)
        rnd(n("self_attn.q_norm.weight"), {Dh}), rnd(n("self_attn.k_norm.weight"), {Dh});
      rnd(n("mlp.gate_proj.weight"), {F, D});
      rnd(n("mlp.up_proj.weight"), {F, D});
      rnd(n("mlp.down_proj.weight"), {D, F});
    }
    rnd("model.norm.weight", {D});
    if (!c.tied_embeddings) rnd("lm_head.weight", {V, D});
    return w;
  }
  const bool olmo2 = c.arch == "olmo2";
  rnd("model.embed_tokens.weight", {V, D});
  for (int l = 0; l < c.n_layers; ++l) {
    auto n = [&](const char* s) { return fmt::format("model.layers.{}.{}", l, s); };
    if (!olmo2) norm(n("input_layernorm.weight"), D);
    norm(n("post_attention_layernorm.weight"), D);
    if (olmo2) norm(n("post_feedforward_layernorm.weight"), D);
    rnd(n("self_attn.q_proj.weight"), {qd, D});
    rnd(n("self_attn.k_proj.weight"), {kvd, D});
    rnd(n("self_attn.v_proj.weight"), {kvd, D});
    rnd(n("self_attn.o_proj.weight"), {D, qd});
    if (c.attn_output_gate) rnd(n("self_attn.output_gate.weight"), {qd, D});
    if (c.attn_kv_bias) {  // large enough that the slot holds much of some rows
      rnd(n("self_attn.bias_key"), {kvd});
      rnd(n("self_attn.bias_value"), {kvd});
      for (const char* s : {"self_attn.bias_key", "self_attn.bias_value"}) {
        Tensor& t = w[n(s)];
        for (int64_t i = 0; i < t.numel(); ++i) t[i] *= 8.0f;
      }
    }
    if (c.qkv_bias) {
      rnd(n("self_attn.q_proj.bias"), {qd});
      rnd(n("self_attn.k_proj.bias"), {kvd});
      rnd(n("self_attn.v_proj.bias"), {kvd});
    }
    if (c.attn_out_bias) rnd(n("self_attn.o_proj.bias"), {D});
    if (c.qk_norm == QkNormKind::kPerHead)
      norm(n("self_attn.q_norm.weight"), Dh), norm(n("self_attn.k_norm.weight"), Dh);
    if (c.qk_norm == QkNormKind::kFull)
      norm(n("self_attn.q_norm.weight"), qd), norm(n("self_attn.k_norm.weight"), kvd);
    if (c.arch == "gpt_oss") {
      // Sink logits spread so that some heads put most of their mass on the slot.
      Tensor sinks = Tensor::Zeros({c.n_heads});
      for (int h = 0; h < c.n_heads; ++h) sinks[h] = -3.0f + 3.0f * h + dist(rng);
      w[n("self_attn.sinks")] = sinks;
      const int64_t E = c.n_experts;
      rnd(n("mlp.router.weight"), {E, D}), rnd(n("mlp.router.bias"), {E});
      rnd(n("mlp.experts.gate_up_proj"), {E, D, 2 * F}),
          rnd(n("mlp.experts.gate_up_proj_bias"), {E, 2 * F});
      rnd(n("mlp.experts.down_proj"), {E, F, D}), rnd(n("mlp.experts.down_proj_bias"), {E, D});
      continue;
    }
    if (c.n_experts > 0 && !c.dense_layers.empty() && c.dense_layers[l]) {
      rnd(n("mlp.gate_proj.weight"), {c.dense_hidden_dim, D});
      rnd(n("mlp.up_proj.weight"), {c.dense_hidden_dim, D});
      rnd(n("mlp.down_proj.weight"), {D, c.dense_hidden_dim});
      continue;
    }
    if (c.n_experts > 0) {
      const bool mixtral = c.arch == "mixtral";
      const std::string base =
          fmt::format("model.layers.{}.{}", l, mixtral ? "block_sparse_moe." : "mlp.");
      rnd(base + "gate.weight", {c.n_experts, D});
      for (int e = 0; e < c.n_experts; ++e) {
        rnd(fmt::format("{}experts.{}.{}.weight", base, e, mixtral ? "w1" : "gate_proj"), {F, D});
        rnd(fmt::format("{}experts.{}.{}.weight", base, e, mixtral ? "w3" : "up_proj"), {F, D});
        rnd(fmt::format("{}experts.{}.{}.weight", base, e, mixtral ? "w2" : "down_proj"), {D, F});
      }
      continue;
    }
    rnd(n("mlp.gate_proj.weight"), {F, D});
    rnd(n("mlp.up_proj.weight"), {F, D});
    rnd(n("mlp.down_proj.weight"), {D, F});
    if (c.mlp_bias) {
      rnd(n("mlp.gate_proj.bias"), {F});
      rnd(n("mlp.up_proj.bias"), {F});
      rnd(n("mlp.down_proj.bias"), {D});
    }
  }
  norm("model.norm.weight", D);
  if (!c.tied_embeddings) rnd("lm_head.weight", {V, D});
  if (c.arch == "phi3") {  // fuse [q | k | v] and [gate | up] as Phi-3 stores them
    auto fuse = [&](const std::string& name, std::vector<std::string> parts) {
      int64_t rows = 0;
      for (const std::string& p : parts) rows += w.at(p).dim(0);
      Tensor f = Tensor::Zeros({rows, D});
      int64_t at = 0;
      for (const std::string& p : parts) {
        const Tensor& t = w.at(p);
        std::copy(t.data(), t.data() + t.numel(), f.data() + at);
        at += t.numel();
        w.erase(p);
      }
      w[name] = f;
    };
    for (int l = 0; l < c.n_layers; ++l) {
      auto n = [&](const char* s) { return fmt::format("model.layers.{}.{}", l, s); };
      fuse(n("self_attn.qkv_proj.weight"),
           {n("self_attn.q_proj.weight"), n("self_attn.k_proj.weight"),
            n("self_attn.v_proj.weight")});
      fuse(n("mlp.gate_up_proj.weight"), {n("mlp.gate_proj.weight"), n("mlp.up_proj.weight")});
    }
  }
  return w;
}

std::string SmallGptOssConfig(int vocab_size) {
  return fmt::format(R"({{"architectures": ["GptOssForCausalLM"], "hidden_size": 32,
      "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 8, "vocab_size": {}, "max_position_embeddings": 128,
      "num_local_experts": 3, "num_experts_per_tok": 2, "sliding_window": 8}})",
                     vocab_size);
}

std::function<void(HfTensors&)> SetSinkLogits(float value) {
  return [value](HfTensors& w) {
    for (auto& [name, t] : w)
      if (name.size() > 15 && name.compare(name.size() - 15, 15, "self_attn.sinks") == 0)
        for (int64_t i = 0; i < t.numel(); ++i) t[i] = value;
  };
}

std::string WriteRandomHf(const std::string& config_json, uint32_t seed, const std::string& name,
                          const std::function<void(HfTensors&)>& edit) {
  const ModelConfig config = ParseHfConfig(config_json, name);
  HfTensors weights = RandomHfWeights(config, seed);
  if (edit) edit(weights);
  const std::string dir = TempDir(name);
  WriteHfConfig(dir + "/config.json", config);
  std::vector<std::pair<std::string, Tensor>> list(weights.begin(), weights.end());
  WriteSafetensors(dir + "/model.safetensors", list);
  return dir;
}

Model LoadRandomHf(const std::string& config_json, uint32_t seed, const std::string& name,
                   const std::function<void(HfTensors&)>& edit) {
  return LoadModel(WriteRandomHf(config_json, seed, name, edit));
}

}  // namespace ss::test
