// Sublayer helpers shared by the architecture families: a family's forward loop is a sequence of
// these named calls (norm, attention, residual, norm, MLP, residual), so that it reads like the
// paper's block and the arithmetic lives once, here.
#pragma once

#include <initializer_list>
#include <vector>

#include "model/model.h"

namespace ss {

// Everything one forward call needs, passed to each helper.
struct ForwardContext {
  const Model& model;
  const ModelConfig& config;
  KVCache& cache;
  RunState& state;
  const ForwardRequest& request;
  const Hooks* hooks;                 // null when nothing is attached
  int T;                              // tokens in this call
  int start;                          // cache index of the first new token
  std::vector<int> positions;         // (T) position of each token
  std::vector<double> rope_inv_freq;  // (rot_dim / 2) RoPE angular frequencies, scaling applied
  std::vector<double> rope_inv_freq_local;  // sliding layers' own (config.rope_local_theta > 0)

  // Fills rope_inv_freq (and rope_inv_freq_local where the config gives a local base).
  void InitRope();
  // The RoPE frequencies layer `layer` uses.
  const double* RopeFreq(int layer) const {
    return config.rope_local_theta > 0 && config.Window(layer) > 0 ? rope_inv_freq_local.data()
                                                                   : rope_inv_freq.data();
  }

  bool HookActive(HookPoint point, int layer) const { return hooks && hooks->Active(point, layer); }
  // Runs the hook on a (T, ...) view of `data` with the given trailing shape.
  void RunHook(HookPoint point, int layer, float* data, std::vector<int64_t> shape) const;
};

// x (T, D): token embeddings into state.x (hook_embed).
void EmbedTokens(ForwardContext& ctx);
// x (T, D) += learned position embeddings of ctx.positions (GPT-2's wpe).
void AddPositionEmbeddings(ForwardContext& ctx);
// RoPE inverse frequencies (rot_dim / 2): theta^(-2i/rot_dim) (Su et al. 2021, eq. 15), rescaled as
// config.rope_scaling says, then divided by `factors` (rot_dim / 2) if that is not empty.
std::vector<double> RopeInvFrequencies(const ModelConfig& config, const Tensor& factors);
// out (T, D) = norm(in) with the config's norm kind.
void ApplyNorm(const ForwardContext& ctx, const Tensor& weight, const Tensor& bias, const float* in,
               float* out);
// Self-attention of layer `layer` on the normalised input in (T, D); writes out (T, D).
// Projects q, k, v (with biases if present), normalises q and k if the config says so
// (per head or over the whole projection), applies RoPE, appends k, v to the cache, attends
// (within the sliding window if any), projects the output.
void SelfAttention(ForwardContext& ctx, int layer, const float* in, float* out);
// MLP of layer `layer` on in (T, D); writes out (T, D).
void Mlp(ForwardContext& ctx, int layer, const float* in, float* out);
// Mixture-of-experts FFN of layer `layer` (Qwen3-MoE style: softmax router, top-k experts, each a
// SwiGLU MLP) on in (T, D); writes out (T, D) (hook_mlp_out).
void MoeFfn(ForwardContext& ctx, int layer, const float* in, float* out);
// Final norm (ln_final.hook_normalized) and the LM head into state.logits.
Tensor FinalLogits(ForwardContext& ctx);
// x += y over (T, D).
void AddInPlace(float* x, const float* y, int64_t n);
// x += a y.
void AddScaled(float* x, const float* y, float a, int64_t n);

// Gated DeltaNet's token mixer of linear-attention layer `layer` (Qwen3-Next, Qwen3.5;
// model/linear_attn.cpp, docs/specs/qwen3_next.md section 4) on the normed input in (T, D); writes
// out (T, D) (hook_attn_out). Its convolution and delta-rule states live in the cache
// (KVCache::conv_state / delta_state) and carry over between calls of one sequence.
void LinearAttention(ForwardContext& ctx, int layer, const float* in, float* out);

// ---- The projections, shared by the mixers.
const float* OrNull(const Tensor& t);
// y (T, out) = x (T, in) W^T (+ bias): on the packed form when the model runs at bf16 or Q8_0
// (packed non-null), OpenBLAS sgemm on the f32 weight otherwise.
void Project(const float* x, const Tensor& w, const PackedWeight* packed, const Tensor& bias,
             float* y, int T, int in, int out);
// The member's pack, or null where it runs in f32 (no packs, or at native a projection the file
// stores as F32).
const PackedWeight* Packed(const LayerWeights& w, PackedWeight LayerPacked::*member);
// Several projections of the same x (T, in): q, k and v, or the MLP's gate and up (at most 4).
// One token on f32 weights (decode) goes through MatVecBatch, one hand-off between threads for
// all of them; anything else projects each in turn.
struct Projection {
  const Tensor& w;
  const PackedWeight* packed;
  const Tensor& bias;
  float* y;
  int out;
};
void ProjectEach(const float* x, std::initializer_list<Projection> projections, int T, int in);

// The sequential residual loop of every family but GPT-2 and GPT-NeoX: per block, attention and
// then the FFN (MoeFfn when the model has experts, else Mlp), each reading the residual stream
// through its input norm where the layer has one (attn_norm / ffn_norm: all but OLMo 2) and
// passing its output through a post norm where the layer has one (attn_post_norm / ffn_post_norm:
// OLMo 2, Gemma) before the add:
//   x = x + post_attn(Attention(in_attn(x)));  x = x + post_ffn(FFN(in_ffn(x)))
// Which norms exist is the family's tensor map's business; the loop follows the weights.
void ForwardSequential(ForwardContext& ctx);

}  // namespace ss
