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

#include "common/interrupt.h"
#include "model/arch.h"
#include "model/blocks.h"

namespace ss {

namespace {

void ForwardGpt2(ForwardContext& ctx) {
  const ModelConfig& c = ctx.config;
  RunState& s = ctx.state;
  const int64_t n = static_cast<int64_t>(ctx.T) * c.dim;
  EmbedTokens(ctx);
  AddPositionEmbeddings(ctx);
  for (int l = ctx.request.first_layer, last = LastLayer(ctx.request, c); l <= last; ++l) {
    PollInterrupt();  // a stopping point for work asked to end (common/interrupt.h)
    const LayerWeights& w = ctx.model.weights.layers[l];
    if (ctx.HookActive(HookPoint::kResidPre, l))
      ctx.RunHook(HookPoint::kResidPre, l, s.x.data(), {ctx.T, c.dim});
    ApplyNorm(ctx, w.attn_norm, w.attn_norm_bias, s.x.data(), s.xb.data());
    SelfAttention(ctx, l, s.xb.data(), s.xb2.data());
    AddInPlace(s.x.data(), s.xb2.data(), n);
    if (ctx.HookActive(HookPoint::kResidMid, l))
      ctx.RunHook(HookPoint::kResidMid, l, s.x.data(), {ctx.T, c.dim});
    ApplyNorm(ctx, w.ffn_norm, w.ffn_norm_bias, s.x.data(), s.xb.data());
    Mlp(ctx, l, s.xb.data(), s.xb2.data());
    AddInPlace(s.x.data(), s.xb2.data(), n);
    if (ctx.HookActive(HookPoint::kResidPost, l))
      ctx.RunHook(HookPoint::kResidPost, l, s.x.data(), {ctx.T, c.dim});
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

const Key kHeads{"n_head", "attention.head_count"};
const Key kScaleWeights{"scale_attn_weights", nullptr};
const Key kScaleInverseLayer{"scale_attn_by_inverse_layer_idx", nullptr};

void ReadGpt2(const ConfigReader& r, const FamilyDefaults& d, ModelConfig* c) {
  r.Spelled("dim", {"n_embd", "embedding_length"});
  r.Spelled("hidden_dim", {"n_inner", "feed_forward_length"});
  r.Spelled("n_layers", {"n_layer", "block_count"});
  r.Spelled("n_heads", kHeads);
  r.Spelled("n_kv_heads", kHeads);
  r.Spelled("max_seq_len", {"n_positions", "context_length"});
  r.Spelled("norm_eps", {"layer_norm_epsilon", "attention.layer_norm_epsilon"});
  c->dim = r.PositiveInt({"n_embd", "embedding_length"});
  c->n_layers = r.PositiveInt({"n_layer", "block_count"});
  c->n_heads = c->n_kv_heads = r.PositiveInt(kHeads);
  if (c->dim % c->n_heads != 0)
    ss::Fail("{}: {} {} is not a multiple of {} {}", r.source(),
             r.Name({"n_embd", "embedding_length"}), c->dim, r.Name(kHeads), c->n_heads);
  c->head_dim = c->dim / c->n_heads;
  c->hidden_dim = r.PositiveInt({"n_inner", "feed_forward_length"},
                                r.HfDefault<int64_t>(4 * c->dim));  // None: 4 D
  if (!r.gguf()) c->vocab_size = r.PositiveInt({"vocab_size", nullptr});
  c->max_seq_len =
      r.PositiveInt({"n_positions", "context_length"}, r.HfDefault<int64_t>(d.max_positions));
  c->norm_eps =
      r.Real({"layer_norm_epsilon", "attention.layer_norm_epsilon"}, r.gguf() ? 1e-5 : d.norm_eps);
  c->norm = NormKind::kLayer;
  c->act = ReadAct(r, {"activation_function", nullptr}, "gelu_new");
  c->gated_mlp = false;
  c->rope = RopeKind::kNone;
  c->rope_theta = 0.0f;
  c->learned_pos = true;
  // Conv1D layers all carry biases (a GGUF file says so by holding them).
  c->qkv_bias = !r.gguf() || r.HasTensor("blk.0.attn_qkv.bias");
  c->attn_out_bias = !r.gguf() || r.HasTensor("blk.0.attn_output.bias");
  c->mlp_bias = true;
  // GPT2Attention: scores / sqrt(head_dim) unless scale_attn_weights is false, and / (l + 1) in
  // block l with scale_attn_by_inverse_layer_idx (reorder_and_upcast_attn changes only the order
  // and precision of the same product).
  c->attn_scale_sqrt_dim = r.Bool(kScaleWeights, true);
  c->attn_scale_inverse_layer = r.Bool(kScaleInverseLayer, false);
}

void WriteGpt2(const ModelConfig& c, ConfigWriter& w) {
  // llama.cpp's gpt2 has no key for these: a GGUF file would load there with the wrong scores.
  if (w.gguf() && (!c.attn_scale_sqrt_dim || c.attn_scale_inverse_layer))
    Fail(
        "GPT-2 with scale_attn_weights = false or scale_attn_by_inverse_layer_idx cannot be "
        "written to GGUF (llama.cpp has no key for either)");
  w.Int({"n_embd", "embedding_length"}, c.dim);
  w.Int({"n_inner", "feed_forward_length"}, c.hidden_dim);
  w.Int({"n_layer", "block_count"}, c.n_layers);
  w.Int(kHeads, c.n_heads);
  w.Int({nullptr, "attention.head_count_kv"}, c.n_kv_heads);
  w.Int({nullptr, "attention.key_length"}, c.head_dim);
  w.Int({nullptr, "attention.value_length"}, c.head_dim);
  w.Int({"vocab_size", nullptr}, c.vocab_size);
  w.Int({"n_positions", "context_length"}, c.max_seq_len);
  w.Float({"layer_norm_epsilon", "attention.layer_norm_epsilon"}, c.norm_eps);
  w.String({"activation_function", nullptr}, ActName(c.act, "gelu_new"));
  if (!c.attn_scale_sqrt_dim) w.Bool(kScaleWeights, false);
  if (c.attn_scale_inverse_layer) w.Bool(kScaleInverseLayer, true);
}

}  // namespace

std::span<const ArchEntry> Families_gpt2() {
  static const ArchEntry families[] = {
      {"gpt2",
       "GPT2LMHeadModel",
       "gpt2",
       "GPT-2: learned positions, LayerNorm, GELU MLP, Conv1D layout, tied head",
       {true, 1e-5f, 0.0f, 1024, 50256, 50256},
       &ReadGpt2,
       &WriteGpt2,
       &Gpt2Tensors,
       &ForwardGpt2},
  };
  return families;
}

}  // namespace ss
