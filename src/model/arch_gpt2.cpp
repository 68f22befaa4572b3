// GPT-2 (GPT2LMHeadModel, modeling_gpt2.py; Radford et al. 2019): learned absolute position
// embeddings added to the token embeddings, pre-norm LayerNorm blocks
//   x = x + Attention(LN_1(x));  x = x + MLP(LN_2(x))
// with an ungated GELU MLP (tanh approximation, "gelu_new"), biases on every projection, a final
// LayerNorm, and the LM head tied to the token embedding.
//
// Hugging Face stores the projections as Conv1D, weight (in, out), the transpose of nn.Linear:
// they are transposed at load (and back when written). c_attn fuses q, k, v along its output:
// (D, 3D) = [q | k | v]. llama.cpp's converter transposes the Conv1D weights, so GGUF's attn_qkv is
// (3D, D) in nn.Linear order. The original "gpt2" checkpoints were saved from GPT2Model and lack
// the "transformer." prefix: both spellings are read.
#include <fmt/format.h>

#include "model/arch.h"
#include "model/blocks.h"

namespace ss {

void ForwardGpt2(ForwardContext& ctx) {
  const ModelConfig& c = ctx.config;
  RunState& s = ctx.state;
  const int64_t n = static_cast<int64_t>(ctx.T) * c.dim;
  EmbedTokens(ctx);
  AddPositionEmbeddings(ctx);
  for (int l = ctx.request.first_layer; l < c.n_layers; ++l) {
    const LayerWeights& w = ctx.model.weights.layers[l];
    if (ctx.HookActive(HookPoint::kResidPre, l)) ctx.RunHook(HookPoint::kResidPre, l, s.x.data(), {ctx.T, c.dim});
    ApplyNorm(ctx, w.attn_norm, w.attn_norm_bias, s.x.data(), s.xb.data());
    SelfAttention(ctx, l, s.xb.data(), s.xb2.data());
    AddInPlace(s.x.data(), s.xb2.data(), n);
    if (ctx.HookActive(HookPoint::kResidMid, l)) ctx.RunHook(HookPoint::kResidMid, l, s.x.data(), {ctx.T, c.dim});
    ApplyNorm(ctx, w.ffn_norm, w.ffn_norm_bias, s.x.data(), s.xb.data());
    Mlp(ctx, l, s.xb.data(), s.xb2.data());
    AddInPlace(s.x.data(), s.xb2.data(), n);
    if (ctx.HookActive(HookPoint::kResidPost, l)) ctx.RunHook(HookPoint::kResidPost, l, s.x.data(), {ctx.T, c.dim});
  }
}

TensorMap Gpt2Tensors(const ModelConfig& c, TensorNaming naming, ModelWeights& w) {
  const bool hf = naming == TensorNaming::kHf;
  const int64_t D = c.dim, F = c.hidden_dim, V = c.vocab_size, P = c.max_seq_len;
  TensorMap map;  // no RoPE
  auto add = [&](const std::string& hf_name, const std::string& gguf_name,
                 std::vector<Tensor*> targets, std::vector<int64_t> shape, bool conv1d = false) {
    TensorSpec spec;
    if (hf) {
      spec.name = "transformer." + hf_name;
      spec.aliases = {hf_name};
    } else {
      spec.name = gguf_name;
    }
    spec.targets = std::move(targets);
    spec.shape = std::move(shape);
    spec.transposed = hf && conv1d;
    if (spec.targets.size() == 3) spec.fused_rows = {D, D, D};
    map.specs.push_back(std::move(spec));
  };
  add("wte.weight", "token_embd.weight", {&w.token_embedding}, {V, D});
  add("wpe.weight", "position_embd.weight", {&w.position_embedding}, {P, D});
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& lw = w.layers[l];
    auto h = [&](const char* s) { return fmt::format("h.{}.{}", l, s); };
    auto b = [&](const char* s) { return fmt::format("blk.{}.{}", l, s); };
    add(h("ln_1.weight"), b("attn_norm.weight"), {&lw.attn_norm}, {D});
    add(h("ln_1.bias"), b("attn_norm.bias"), {&lw.attn_norm_bias}, {D});
    add(h("attn.c_attn.weight"), b("attn_qkv.weight"), {&lw.wq, &lw.wk, &lw.wv}, {3 * D, D}, true);
    add(h("attn.c_attn.bias"), b("attn_qkv.bias"), {&lw.bq, &lw.bk, &lw.bv}, {3 * D});
    add(h("attn.c_proj.weight"), b("attn_output.weight"), {&lw.wo}, {D, D}, true);
    add(h("attn.c_proj.bias"), b("attn_output.bias"), {&lw.bo}, {D});
    add(h("ln_2.weight"), b("ffn_norm.weight"), {&lw.ffn_norm}, {D});
    add(h("ln_2.bias"), b("ffn_norm.bias"), {&lw.ffn_norm_bias}, {D});
    add(h("mlp.c_fc.weight"), b("ffn_up.weight"), {&lw.w1}, {F, D}, true);
    add(h("mlp.c_fc.bias"), b("ffn_up.bias"), {&lw.b1}, {F});
    add(h("mlp.c_proj.weight"), b("ffn_down.weight"), {&lw.w2}, {D, F}, true);
    add(h("mlp.c_proj.bias"), b("ffn_down.bias"), {&lw.b2}, {D});
  }
  add("ln_f.weight", "output_norm.weight", {&w.final_norm}, {D});
  add("ln_f.bias", "output_norm.bias", {&w.final_norm_bias}, {D});
  if (!c.tied_embeddings) {
    TensorSpec head = Spec(hf ? "lm_head.weight" : "output.weight", {&w.lm_head}, {V, D});
    map.specs.push_back(head);
  }
  return map;
}

}  // namespace ss
