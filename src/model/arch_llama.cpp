// Llama family (Llama 2/3, TinyLlama, llama2.c models): pre-norm RMSNorm, RoPE, grouped-query
// attention, SwiGLU MLP (Touvron et al. 2023, "Llama 2", section 2.2).
#include "model/arch.h"
#include "model/blocks.h"

namespace ss {

void ForwardLlama(ForwardContext& ctx) {
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
    Mlp(ctx, l, s.xb.data(), s.xb2.data());
    AddInPlace(s.x.data(), s.xb2.data(), n);
    if (ctx.HookActive(HookPoint::kResidPost, l)) ctx.RunHook(HookPoint::kResidPost, l, s.x.data(), {ctx.T, c.dim});
  }
}

}  // namespace ss
