// Qwen3-MoE family (transformers' Qwen3MoeForCausalLM): the Llama block with per-head q/k RMSNorm
// before RoPE (applied by SelfAttention when the layer has q_norm/k_norm weights) and a sparse
// mixture-of-experts FFN in every layer: a softmax router picks the top-k of E SwiGLU experts per
// token (Shazeer et al. 2017, "Outrageously Large Neural Networks"; Fedus et al. 2021, "Switch
// Transformers"). Also the format of the MoE models sinkscope trains (src/train).
#include "model/arch.h"
#include "model/blocks.h"

namespace ss {

void ForwardQwen3Moe(ForwardContext& ctx) {
  const ModelConfig& c = ctx.config;
  RunState& s = ctx.state;
  const int64_t n = static_cast<int64_t>(ctx.T) * c.dim;
  EmbedTokens(ctx);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = ctx.model.weights.layers[l];
    if (ctx.HookActive(HookPoint::kResidPre, l)) ctx.RunHook(HookPoint::kResidPre, l, s.x.data(), {ctx.T, c.dim});
    ApplyNorm(ctx, w.attn_norm, w.attn_norm_bias, s.x.data(), s.xb.data());
    SelfAttention(ctx, l, s.xb.data(), s.xb2.data());
    AddInPlace(s.x.data(), s.xb2.data(), n);
    if (ctx.HookActive(HookPoint::kResidMid, l)) ctx.RunHook(HookPoint::kResidMid, l, s.x.data(), {ctx.T, c.dim});
    ApplyNorm(ctx, w.ffn_norm, w.ffn_norm_bias, s.x.data(), s.xb.data());
    MoeFfn(ctx, l, s.xb.data(), s.xb2.data());
    AddInPlace(s.x.data(), s.xb2.data(), n);
    if (ctx.HookActive(HookPoint::kResidPost, l)) ctx.RunHook(HookPoint::kResidPost, l, s.x.data(), {ctx.T, c.dim});
  }
}

}  // namespace ss
