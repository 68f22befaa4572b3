#include "model/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace ss {

void ValidateConfig(const ModelConfig& c, const std::string& source, const ConfigKeys& keys) {
  auto key = [&](const char* field) {
    auto it = keys.find(field);
    return it == keys.end() ? std::string(field) : it->second;
  };
  auto fail = [&](const char* field, auto value, const char* expected) {
    Fail("{}: '{}' is {}, expected {}", source, key(field), value, expected);
  };
  // Sizes: positive; the readers bound them further where the format has a natural limit.
  auto positive = [&](const char* field, int v) {
    if (v <= 0) fail(field, v, "a positive size");
  };
  positive("dim", c.dim);
  positive("hidden_dim", c.hidden_dim);
  positive("n_layers", c.n_layers);
  positive("n_heads", c.n_heads);
  positive("n_kv_heads", c.n_kv_heads);
  positive("head_dim", c.head_dim);
  positive("vocab_size", c.vocab_size);
  positive("max_seq_len", c.max_seq_len);
  if (c.n_heads % c.n_kv_heads != 0)
    Fail("{}: '{}' {} is not a multiple of '{}' {}", source, key("n_heads"), c.n_heads,
         key("n_kv_heads"), c.n_kv_heads);
  // The norms divide by sqrt(mean + eps): eps <= 0 or NaN gives NaN or Inf on a zero row.
  if (!(std::isfinite(c.norm_eps) && c.norm_eps > 0))
    fail("norm_eps", c.norm_eps, "a finite number > 0");
  if (c.rope != RopeKind::kNone) {
    // theta^(-2i/d): theta <= 0 gives NaN angles (or none at all), Inf zero angles.
    if (!(std::isfinite(c.rope_theta) && c.rope_theta > 0))
      fail("rope_theta", c.rope_theta, "a finite number > 0");
    if (c.rotary_dim < 0 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0)
      Fail("{}: '{}' gives {} rotated dims, expected an even number up to the head size {}", source,
           key("rotary_dim"), c.rotary_dim, c.head_dim);
    if (c.rope_scaling != RopeScalingKind::kNone &&
        !(std::isfinite(c.rope_scaling_factor) && c.rope_scaling_factor > 0))
      fail("rope_scaling_factor", c.rope_scaling_factor, "a finite number > 0");
    if (c.rope_scaling == RopeScalingKind::kLlama3) {
      if (!(std::isfinite(c.rope_low_freq_factor) && c.rope_low_freq_factor > 0))
        fail("rope_low_freq_factor", c.rope_low_freq_factor, "a finite number > 0");
      // The blend between the bands divides by high - low.
      if (!(std::isfinite(c.rope_high_freq_factor) &&
            c.rope_high_freq_factor > c.rope_low_freq_factor))
        Fail("{}: '{}' is {}, expected a finite number above '{}' ({})", source,
             key("rope_high_freq_factor"), c.rope_high_freq_factor, key("rope_low_freq_factor"),
             c.rope_low_freq_factor);
      positive("rope_original_max_seq_len", c.rope_original_max_seq_len);
    }
    if (c.rope_scaling == RopeScalingKind::kYarn) {
      positive("rope_original_max_seq_len", c.rope_original_max_seq_len);
      // The correction range takes log(original / (2 pi beta)): betas must be finite and > 0.
      if (!(std::isfinite(c.rope_yarn_beta_fast) && c.rope_yarn_beta_fast > 0))
        fail("rope_yarn_beta_fast", c.rope_yarn_beta_fast, "a finite number > 0");
      if (!(std::isfinite(c.rope_yarn_beta_slow) && c.rope_yarn_beta_slow > 0))
        fail("rope_yarn_beta_slow", c.rope_yarn_beta_slow, "a finite number > 0");
    }
  }
  if (!c.layer_attention.empty() && static_cast<int>(c.layer_attention.size()) != c.n_layers)
    Fail("{}: '{}' lists {} layers, but the model has {} ('{}')", source, key("layer_attention"),
         c.layer_attention.size(), c.n_layers, key("n_layers"));
  if (!c.layer_attention.empty() && c.sliding_window == 0 &&
      std::find(c.layer_attention.begin(), c.layer_attention.end(), LayerAttention::kSliding) !=
          c.layer_attention.end())
    Fail("{}: '{}' has sliding layers but '{}' gives no window", source, key("layer_attention"),
         key("sliding_window"));
  if (!(std::isfinite(c.query_pre_attn_scalar) && c.query_pre_attn_scalar >= 0))
    fail("query_pre_attn_scalar", c.query_pre_attn_scalar, "a finite number > 0 (0: head_dim)");
  if (!(std::isfinite(c.rope_local_theta) && c.rope_local_theta >= 0))
    fail("rope_local_theta", c.rope_local_theta, "a finite number > 0 (0: rope_theta)");
  if (!(std::isfinite(c.embed_scale) && c.embed_scale >= 0))
    fail("embed_scale", c.embed_scale, "a finite number >= 0 (0: none)");
  if (!(std::isfinite(c.swiglu_limit) && c.swiglu_limit >= 0))
    fail("swiglu_limit", c.swiglu_limit, "a finite number >= 0 (0: plain gated activation)");
  if ((c.swiglu_limit > 0 || c.moe_bias) && c.n_experts == 0)
    Fail("{}: '{}' applies to mixture-of-experts layers, and the model has none", source,
         key(c.swiglu_limit > 0 ? "swiglu_limit" : "moe_bias"));
  if (!(std::isfinite(c.attn_logit_softcap) && c.attn_logit_softcap >= 0))
    fail("attn_logit_softcap", c.attn_logit_softcap, "a finite number >= 0 (0: off)");
  if (!(std::isfinite(c.final_logit_softcap) && c.final_logit_softcap >= 0))
    fail("final_logit_softcap", c.final_logit_softcap, "a finite number >= 0 (0: off)");
  if (c.sliding_window < 0) fail("sliding_window", c.sliding_window, ">= 0 (0: full attention)");
  if (c.n_experts < 0) fail("n_experts", c.n_experts, ">= 0 (0: dense)");
  if (c.n_experts > 0 && (c.n_experts_per_tok < 1 || c.n_experts_per_tok > c.n_experts))
    Fail("{}: '{}' is {}, expected 1 to '{}' ({})", source, key("n_experts_per_tok"),
         c.n_experts_per_tok, key("n_experts"), c.n_experts);
  if (c.n_shared_experts < 0) fail("n_shared_experts", c.n_shared_experts, ">= 0");
  if (c.shared_expert_hidden_dim < 0)
    fail("shared_expert_hidden_dim", c.shared_expert_hidden_dim, ">= 0");
  if (c.dense_hidden_dim < 0) fail("dense_hidden_dim", c.dense_hidden_dim, ">= 0");
  if (!c.dense_layers.empty()) {
    if (c.n_experts == 0 || static_cast<int>(c.dense_layers.size()) != c.n_layers)
      Fail("{}: {} lists {} layers; expected one per layer ({}) of a mixture-of-experts model",
           source, key("dense_layers"), c.dense_layers.size(), c.n_layers);
    if (c.dense_hidden_dim <= 0 &&
        std::find(c.dense_layers.begin(), c.dense_layers.end(), true) != c.dense_layers.end())
      Fail("{}: dense MLP layers need their width ({}), which is missing", source,
           key("dense_hidden_dim"));
  }
  if (!c.linear_layers.empty()) {
    if (static_cast<int>(c.linear_layers.size()) != c.n_layers)
      Fail("{}: {} lists {} layers; expected one per layer ({})", source, key("linear_layers"),
           c.linear_layers.size(), c.n_layers);
    positive("linear_k_heads", c.linear_k_heads);
    positive("linear_v_heads", c.linear_v_heads);
    positive("linear_k_dim", c.linear_k_dim);
    positive("linear_v_dim", c.linear_v_dim);
    // The convolution keeps K - 1 inputs per channel; 64 taps bound its state (kernels/
    // delta_rule.h). Released models use 4.
    if (c.linear_conv < 1 || c.linear_conv > 64) fail("linear_conv", c.linear_conv, "1 to 64 taps");
    // Value head h reads key head h / (nv / nk): nv must be a multiple of nk.
    if (c.linear_v_heads % c.linear_k_heads != 0)
      Fail("{}: '{}' {} is not a multiple of '{}' {}", source, key("linear_v_heads"),
           c.linear_v_heads, key("linear_k_heads"), c.linear_k_heads);
  }
  if (c.shared_expert_gate && (c.n_experts == 0 || c.shared_expert_hidden_dim <= 0))
    Fail("{}: a shared expert gate needs experts and a shared expert ({})", source,
         key("shared_expert_hidden_dim"));
  if (c.bos_id < -1) fail("bos_id", c.bos_id, "a token id or none");
  if (c.eos_id < -1) fail("eos_id", c.eos_id, "a token id or none");
}

}  // namespace ss
