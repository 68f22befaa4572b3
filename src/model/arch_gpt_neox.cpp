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

#include <cmath>
#include <optional>
#include <utility>

#include "common/interrupt.h"
#include "model/arch.h"
#include "model/blocks.h"

namespace ss {

namespace {

void ForwardGptNeox(ForwardContext& ctx) {
  const ModelConfig& c = ctx.config;
  RunState& s = ctx.state;
  const int64_t n = static_cast<int64_t>(ctx.T) * c.dim;
  EmbedTokens(ctx);
  for (int l = ctx.request.first_layer, last = LastLayer(ctx.request, c); l <= last; ++l) {
    PollInterrupt();  // a stopping point for work asked to end (common/interrupt.h)
    const LayerWeights& w = ctx.model.weights.layers[l];
    if (ctx.HookActive(HookPoint::kResidPre, l))
      ctx.RunHook(HookPoint::kResidPre, l, s.x.data(), {ctx.T, c.dim});
    ApplyNorm(ctx, w.attn_norm, w.attn_norm_bias, s.x.data(), s.xb.data());
    SelfAttention(ctx, l, s.xb.data(), s.xb2.data());
    if (c.parallel_residual) {
      // Both sublayers read the same x; the MLP's norm is taken before the attention output is
      // added.
      ApplyNorm(ctx, w.ffn_norm, w.ffn_norm_bias, s.x.data(), s.xb.data());
      AddInPlace(s.x.data(), s.xb2.data(), n);
      if (ctx.HookActive(HookPoint::kResidMid, l))
        ctx.RunHook(HookPoint::kResidMid, l, s.x.data(), {ctx.T, c.dim});
    } else {
      AddInPlace(s.x.data(), s.xb2.data(), n);
      if (ctx.HookActive(HookPoint::kResidMid, l))
        ctx.RunHook(HookPoint::kResidMid, l, s.x.data(), {ctx.T, c.dim});
      ApplyNorm(ctx, w.ffn_norm, w.ffn_norm_bias, s.x.data(), s.xb.data());
    }
    Mlp(ctx, l, s.xb.data(), s.xb2.data());
    AddInPlace(s.x.data(), s.xb2.data(), n);
    if (ctx.HookActive(HookPoint::kResidPost, l))
      ctx.RunHook(HookPoint::kResidPost, l, s.x.data(), {ctx.T, c.dim});
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
    add(name("attention.query_key_value.weight", "attn_qkv.weight"), {&lw.wq, &lw.wk, &lw.wv},
        {3 * D, D});
    if (c.qkv_bias)
      add(name("attention.query_key_value.bias", "attn_qkv.bias"), {&lw.bq, &lw.bk, &lw.bv},
          {3 * D});
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

const Key kHidden{"hidden_size", "embedding_length"};
const Key kHeads{"num_attention_heads", "attention.head_count"};
const Key kRotaryPct{"rotary_pct", nullptr};

void ReadGptNeox(const ConfigReader& r, const FamilyDefaults& d, ModelConfig* c) {
  r.Spelled("n_kv_heads", kHeads);
  r.Spelled("norm_eps", {"layer_norm_eps", "attention.layer_norm_epsilon"});
  c->dim = r.PositiveInt(kHidden);
  c->n_layers = r.PositiveInt({"num_hidden_layers", "block_count"});
  c->n_heads = c->n_kv_heads = r.PositiveInt(kHeads);
  if (c->dim % c->n_heads != 0)
    ss::Fail("{}: {} {} is not a multiple of {} {}", r.source(), r.Name(kHidden), c->dim,
             r.Name(kHeads), c->n_heads);
  c->head_dim = c->dim / c->n_heads;
  c->hidden_dim = r.PositiveInt({"intermediate_size", "feed_forward_length"});
  if (!r.gguf()) c->vocab_size = r.PositiveInt({"vocab_size", nullptr});
  c->max_seq_len = r.PositiveInt({"max_position_embeddings", "context_length"},
                                 r.HfDefault<int64_t>(d.max_positions));
  c->norm_eps =
      r.Real({"layer_norm_eps", "attention.layer_norm_epsilon"}, r.gguf() ? 1e-5 : d.norm_eps);
  c->norm = NormKind::kLayer;
  c->act = r.gguf() ? ActKind::kGelu : ReadAct(r, {"hidden_act", nullptr}, "gelu");
  c->gated_mlp = false;
  c->rope = RopeKind::kHalf;
  // Older configs name the base rotary_emb_base, newer ones rope_theta.
  const Key base{"rotary_emb_base", nullptr};
  if (!r.gguf() && !r.Has({"rope_theta", nullptr}) && r.Has(base)) r.Spelled("rope_theta", base);
  c->rope_theta =
      r.Real({"rope_theta", "rope.freq_base"}, r.gguf() ? 10000.0 : r.Float(base, d.rope_theta));
  ReadPartialRotary(r, kRotaryPct, 0.25f, c);  // GPTNeoXConfig's default rotary_pct
  c->parallel_residual = r.Bool({"use_parallel_residual", "use_parallel_residual"}, true);
  if (r.gguf()) {
    c->qkv_bias = r.HasTensor("blk.0.attn_qkv.bias");
    c->attn_out_bias = r.HasTensor("blk.0.attn_output.bias");
  } else {
    ReadAttentionBias(r, true, c);
  }
  c->mlp_bias = true;
}

void WriteGptNeox(const ModelConfig& c, ConfigWriter& w) {
  w.Int(kHidden, c.dim);
  w.Int({"intermediate_size", "feed_forward_length"}, c.hidden_dim);
  w.Int({"num_hidden_layers", "block_count"}, c.n_layers);
  w.Int(kHeads, c.n_heads);
  w.Int({nullptr, "attention.head_count_kv"}, c.n_kv_heads);
  w.Int({nullptr, "attention.key_length"}, c.head_dim);
  w.Int({nullptr, "attention.value_length"}, c.head_dim);
  w.Int({"vocab_size", nullptr}, c.vocab_size);
  w.Int({"max_position_embeddings", "context_length"}, c.max_seq_len);
  w.Float({"layer_norm_eps", "attention.layer_norm_epsilon"}, c.norm_eps);
  w.String({"hidden_act", nullptr}, ActName(c.act));
  w.Float(kRotaryPct, c.head_dim > 0
                          ? static_cast<float>(static_cast<double>(c.rot_dim()) / c.head_dim)
                          : 1.0f);
  w.Float({"rotary_emb_base", nullptr}, c.rope_theta);
  w.Bool({"use_parallel_residual", "use_parallel_residual"}, c.parallel_residual);
  w.Bool({"attention_bias", nullptr}, c.qkv_bias);
}

}  // namespace

std::span<const ArchEntry> Families_gpt_neox() {
  static const ArchEntry families[] = {
      {"gpt_neox",
       "GPTNeoXForCausalLM",
       "gptneox",
       "GPT-NeoX / Pythia: parallel residual, partial rotate-half RoPE, fused QKV",
       {false, 1e-5f, 10000.0f, 2048, 0, 2},
       &ReadGptNeox,
       &WriteGptNeox,
       &GptNeoxTensors,
       &ForwardGptNeox,
       /*reads_partial_rotary=*/true},
  };
  return families;
}

}  // namespace ss
