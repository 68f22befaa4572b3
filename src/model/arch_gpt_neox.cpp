// GPT-NeoX / Pythia (GPTNeoXForCausalLM, modeling_gpt_neox.py; Black et al. 2022, section 2.1;
// Biderman et al. 2023): LayerNorm, ungated GELU MLP (exact erf form, "gelu"), biases everywhere,
// untied head (embed_out), RoPE on the first rotary_pct of each head in rotate-half order, and by
// default the parallel residual
//   x = x + Attention(LN_1(x)) + MLP(LN_2(x))
// (use_parallel_residual = false gives the sequential Llama-style block).
//
// query_key_value fuses the projections per head: its 3D output rows are [h][q | k | v][Dh]
// (the module views them as (H, 3 * Dh) and splits the last axis). llama.cpp's converter
// reorders them to [q | k | v] for GGUF's attn_qkv; both layouts are mapped here.
#include <fmt/format.h>

#include "model/arch.h"
#include "model/blocks.h"

namespace ss {

void ForwardGptNeox(ForwardContext& ctx) {
  const ModelConfig& c = ctx.config;
  RunState& s = ctx.state;
  const int64_t n = static_cast<int64_t>(ctx.T) * c.dim;
  EmbedTokens(ctx);
  for (int l = ctx.request.first_layer; l < c.n_layers; ++l) {
    const LayerWeights& w = ctx.model.weights.layers[l];
    if (ctx.HookActive(HookPoint::kResidPre, l)) ctx.RunHook(HookPoint::kResidPre, l, s.x.data(), {ctx.T, c.dim});
    ApplyNorm(ctx, w.attn_norm, w.attn_norm_bias, s.x.data(), s.xb.data());
    SelfAttention(ctx, l, s.xb.data(), s.xb2.data());
    if (c.parallel_residual) {
      // Both sublayers read the same x; the MLP's norm is taken before the attention output is
      // added.
      ApplyNorm(ctx, w.ffn_norm, w.ffn_norm_bias, s.x.data(), s.xb.data());
      AddInPlace(s.x.data(), s.xb2.data(), n);
      if (ctx.HookActive(HookPoint::kResidMid, l)) ctx.RunHook(HookPoint::kResidMid, l, s.x.data(), {ctx.T, c.dim});
    } else {
      AddInPlace(s.x.data(), s.xb2.data(), n);
      if (ctx.HookActive(HookPoint::kResidMid, l)) ctx.RunHook(HookPoint::kResidMid, l, s.x.data(), {ctx.T, c.dim});
      ApplyNorm(ctx, w.ffn_norm, w.ffn_norm_bias, s.x.data(), s.xb.data());
    }
    Mlp(ctx, l, s.xb.data(), s.xb2.data());
    AddInPlace(s.x.data(), s.xb2.data(), n);
    if (ctx.HookActive(HookPoint::kResidPost, l)) ctx.RunHook(HookPoint::kResidPost, l, s.x.data(), {ctx.T, c.dim});
  }
}

TensorMap GptNeoxTensors(const ModelConfig& c, TensorNaming naming, ModelWeights& w) {
  const bool hf = naming == TensorNaming::kHf;
  const int64_t D = c.dim, F = c.hidden_dim, V = c.vocab_size, Dh = c.head_dim;
  TensorMap map;
  map.file_rope = RopeKind::kHalf;
  auto add = [&](std::string name, std::vector<Tensor*> targets, std::vector<int64_t> shape) {
    TensorSpec spec;
    spec.name = std::move(name);
    spec.targets = std::move(targets);
    spec.shape = std::move(shape);
    if (spec.targets.size() == 3) {
      if (hf) {
        spec.fused_groups = c.n_heads;
        spec.fused_rows = {Dh, Dh, Dh};
      } else {
        spec.fused_rows = {D, D, D};
      }
    }
    map.specs.push_back(std::move(spec));
  };
  add(hf ? "gpt_neox.embed_in.weight" : "token_embd.weight", {&w.token_embedding}, {V, D});
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& lw = w.layers[l];
    auto name = [&](const char* hf_name, const char* gguf_name) {
      return hf ? fmt::format("gpt_neox.layers.{}.{}", l, hf_name)
                : fmt::format("blk.{}.{}", l, gguf_name);
    };
    add(name("input_layernorm.weight", "attn_norm.weight"), {&lw.attn_norm}, {D});
    add(name("input_layernorm.bias", "attn_norm.bias"), {&lw.attn_norm_bias}, {D});
    add(name("attention.query_key_value.weight", "attn_qkv.weight"), {&lw.wq, &lw.wk, &lw.wv}, {3 * D, D});
    if (c.qkv_bias)
      add(name("attention.query_key_value.bias", "attn_qkv.bias"), {&lw.bq, &lw.bk, &lw.bv}, {3 * D});
    add(name("attention.dense.weight", "attn_output.weight"), {&lw.wo}, {D, D});
    if (c.attn_out_bias) add(name("attention.dense.bias", "attn_output.bias"), {&lw.bo}, {D});
    add(name("post_attention_layernorm.weight", "ffn_norm.weight"), {&lw.ffn_norm}, {D});
    add(name("post_attention_layernorm.bias", "ffn_norm.bias"), {&lw.ffn_norm_bias}, {D});
    add(name("mlp.dense_h_to_4h.weight", "ffn_up.weight"), {&lw.w1}, {F, D});
    add(name("mlp.dense_h_to_4h.bias", "ffn_up.bias"), {&lw.b1}, {F});
    add(name("mlp.dense_4h_to_h.weight", "ffn_down.weight"), {&lw.w2}, {D, F});
    add(name("mlp.dense_4h_to_h.bias", "ffn_down.bias"), {&lw.b2}, {D});
  }
  add(hf ? "gpt_neox.final_layer_norm.weight" : "output_norm.weight", {&w.final_norm}, {D});
  add(hf ? "gpt_neox.final_layer_norm.bias" : "output_norm.bias", {&w.final_norm_bias}, {D});
  if (!c.tied_embeddings) add(hf ? "embed_out.weight" : "output.weight", {&w.lm_head}, {V, D});
  return map;
}

}  // namespace ss
