// Qwen3-Next, Qwen3.5 and Qwen3.5-MoE (Qwen3.6): three of every four layers are Gated DeltaNet
// linear attention (model/linear_attn.cpp), every full_attention_interval-th is softmax attention
// with a sigmoid output gate computed from q_proj (Qiu et al. 2025, "G1"; the gated variant,
// model/attn_gated.cpp), per-head q/k norms and partial rotate-half RoPE (a quarter of each head).
// Every RMSNorm multiplies by 1 + w (Qwen3NextRMSNorm), except the DeltaNet output's gated norm
// (plain w). The facts, with their sources in transformers and llama.cpp, are in
// docs/specs/qwen3_next.md; the section numbers below point there.
//
//   qwen3_next        Qwen3NextForCausalLM: in_proj_qkvz / in_proj_ba grouped per key head (§3),
//                     MoE with a sigmoid-gated shared expert, experts one tensor each.
//   qwen3_5           Qwen3_5ForConditionalGeneration: settings under text_config, the language
//                     model under model.language_model.* (model.visual.* and mtp.* never read),
//                     in_proj_qkv / in_proj_z / in_proj_b / in_proj_a flat, a dense MLP.
//   qwen3_5_text      Qwen3_5ForCausalLM: the same, flat config, model.*.
//   qwen3_5_moe       Qwen3_5MoeForConditionalGeneration: qwen3_5 with MoE in every layer, experts
//                     fused (experts.gate_up_proj (E, 2F, D), experts.down_proj (E, D, F)), top-k
//                     always renormalised.
//   qwen3_5_moe_text  Qwen3_5MoeForCausalLM.
// For text, Qwen3.5's interleaved M-RoPE is the plain partial RoPE (§5.4): its three position
// streams are all the token's position.
#include <fmt/format.h>

#include <cstring>

#include "model/arch.h"
#include "model/attention.h"
#include "model/qwen3_next_gguf.h"

namespace ss {

namespace {

enum class Flavour { kNext, kDense, kMoe };

Flavour FlavourOf(const std::string& arch) {
  if (arch == "qwen3_next") return Flavour::kNext;
  if (arch == "qwen3_5_moe" || arch == "qwen3_5_moe_text") return Flavour::kMoe;
  return Flavour::kDense;
}

// Where the language model's tensors live.
const char* Prefix(const std::string& arch) {
  return arch == "qwen3_5" || arch == "qwen3_5_moe" ? "model.language_model." : "model.";
}

const Key kInterval{"full_attention_interval", "full_attention_interval"};
const Key kLayerTypes{"layer_types", nullptr};
// GGUF (§8.2): per layer, recurrent (linear attention) or not; overrides the interval.
const Key kRecurrent{nullptr, "attention.recurrent_layers"};
const Key kSections{nullptr, "rope.dimension_sections"};
const Key kNextn{nullptr, "nextn_predict_layers"};

// Which layers are linear attention (§1.1): layer_types, else every full_attention_interval-th
// layer (default 4) is full attention. Both given must agree. GGUF: attention.recurrent_layers,
// else the interval; the array may also cover the file's multi-token-prediction layers
// (`file_layers`, block_count).
void ReadLinearLayers(const ConfigReader& r, ModelConfig* c, int64_t file_layers) {
  const int64_t interval = r.Int(kInterval, 4);
  if (interval < 1) r.Fail(kInterval, "must be 1 or more, found {}", interval);
  std::vector<bool> linear(c->n_layers);
  for (int l = 0; l < c->n_layers; ++l) linear[l] = (l + 1) % interval != 0;
  if (r.Has(kRecurrent)) {
    r.Spelled("linear_layers", kRecurrent);
    const std::vector<int64_t> flags = r.Ints(kRecurrent);
    const auto n = static_cast<int64_t>(flags.size());
    if (n != c->n_layers && n != file_layers)
      r.Fail(kRecurrent, "must hold one flag for each of the {} layers, found {}", file_layers, n);
    for (int l = 0; l < c->n_layers; ++l) {
      if (flags[l] != 0 && flags[l] != 1)
        r.Fail(kRecurrent, "[{}] is {}; a flag is 0 or 1 (true: linear attention)", l, flags[l]);
      linear[l] = flags[l] == 1;
    }
    c->linear_layers = std::move(linear);
    return;
  }
  r.Spelled("linear_layers", r.Has(kLayerTypes) ? kLayerTypes : kInterval);
  if (r.Has(kLayerTypes)) {
    const std::vector<std::string> types = r.Strings(kLayerTypes);
    if (static_cast<int>(types.size()) != c->n_layers)
      r.Fail(kLayerTypes, "must list one kind for each of the {} layers, found {}", c->n_layers,
             types.size());
    for (int l = 0; l < c->n_layers; ++l) {
      if (types[l] != "linear_attention" && types[l] != "full_attention")
        ss::Fail(
            "{}: layer_types[{}] is \"{}\"; supported: \"linear_attention\", \"full_attention\"",
            r.source(), l, types[l]);
      const bool is_linear = types[l] == "linear_attention";
      if (r.Has(kInterval) && is_linear != linear[l])
        ss::Fail("{}: layer_types[{}] is \"{}\", but {} {} makes layer {} {}", r.source(), l,
                 types[l], r.Name(kInterval), interval, l,
                 linear[l] ? "linear_attention" : "full_attention");
      linear[l] = is_linear;
    }
  }
  c->linear_layers = std::move(linear);
}

// GGUF's qwen35 / qwen35moe: the M-RoPE sections (§5.4, §8.2) must cover the rotated part of
// each head with the three position streams text gives one position, or the numbers would not be
// the plain partial RoPE.
void ReadRopeSections(const ConfigReader& r, const ModelConfig& c) {
  if (!r.Has(kSections)) return;
  const int rot = r.PositiveInt({nullptr, "rope.dimension_count"}, c.head_dim);
  const std::vector<int64_t> s = r.Ints(kSections);
  int64_t slots = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] < 0) r.Fail(kSections, "[{}] is {}; sections are 0 or more", i, s[i]);
    if (i < 3)
      slots += s[i];
    else if (s[i] != 0)
      r.Fail(kSections, "[{}] is {}; text has no stream for sections past the third", i, s[i]);
  }
  if (slots != rot / 2)
    r.Fail(kSections, "covers {} frequency slots; the rotated part of each head ({} dims) has {}",
           slots, rot, rot / 2);
}

// The GGUF tensors the map cannot choose between by the config alone: refused by name when the
// file holds a layout sinkscope does not read, or neither of two accepted ones.
void CheckGgufTensors(const ConfigReader& r, const ModelConfig& c) {
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string in = fmt::format("blk.{}.ssm_in.weight", l);
    if (c.LinearLayer(l) && r.HasTensor(in))
      ss::Fail(
          "{}: tensor '{}' is the fused in_proj_qkvz of early qwen3next GGUFs, which sinkscope "
          "does not read; a current llama.cpp converter writes attn_qkv and attn_gate",
          r.source(), in);
    if (c.arch == "qwen3_next" || !c.MoeLayer(l)) continue;
    const std::string gate = fmt::format("blk.{}.ffn_gate_exps.weight", l),
                      up = fmt::format("blk.{}.ffn_up_exps.weight", l),
                      fused = fmt::format("blk.{}.ffn_gate_up_exps.weight", l);
    if (r.HasTensor(fused)) continue;
    for (const std::string& name : {gate, up})
      if (!r.HasTensor(name))
        ss::Fail("{}: missing tensor '{}' (or the fused '{}'), required by the {} architecture",
                 r.source(), name, fused, c.arch);
  }
}

void ReadQwen3Next(const ConfigReader& r, const FamilyDefaults& d, ModelConfig* c) {
  // A GGUF reads as the text-only family: qwen35 / qwen35moe hold only the language model.
  if (r.gguf() && c->arch == "qwen3_5") c->arch = "qwen3_5_text";
  if (r.gguf() && c->arch == "qwen3_5_moe") c->arch = "qwen3_5_moe_text";
  const Flavour flavour = FlavourOf(c->arch);
  ReadLlamaCore(r, d, /*head_dim_default=*/256, c, /*read_ffn_width=*/flavour == Flavour::kDense);
  // GGUF's block_count counts the multi-token-prediction layers after the model's (§8.2): never
  // read, their tensors left in the file.
  const int64_t file_layers = c->n_layers;
  if (r.Has(kNextn)) {
    const int64_t mtp = r.Int(kNextn);
    if (mtp < 0 || mtp >= c->n_layers)
      r.Fail(kNextn, "{} must be 0 or more and below {} {}", mtp,
             r.Name({"num_hidden_layers", "block_count"}), c->n_layers);
    c->n_layers -= static_cast<int>(mtp);
  }
  if (ModelAttention(*c).flag)
    ss::Fail(
        "{}: {} has its own attention (gated softmax and Gated DeltaNet); the {} variant "
        "does not apply",
        r.source(), c->arch, ModelAttention(*c).name);
  const Key bias{"attention_bias", nullptr};
  if (r.Bool(bias, false)) r.Fail(bias, "true is not supported for {}", c->arch);
  c->qk_norm = QkNormKind::kPerHead;
  c->norm_weight_offset = 1.0f;  // Qwen3NextRMSNorm: x * (1 + w)
  c->attn_output_gate = true;
  // Qwen3.5's configs also say so (a key transformers passes through): q_proj always holds the
  // gate, so a config that turns it off describes a model these tensors are not.
  const Key gate{"attn_output_gate", nullptr};
  if (!r.Bool(gate, true)) r.Fail(gate, "false is not supported: q_proj holds the gate");
  ReadPartialRotary(r, {"partial_rotary_factor", nullptr}, 0.25f, c);
  const Key nk{"linear_num_key_heads", "ssm.group_count"};
  const Key nv{"linear_num_value_heads", "ssm.time_step_rank"};
  const Key dk{"linear_key_head_dim", "ssm.state_size"};
  const Key dv{"linear_value_head_dim", nullptr};
  const Key conv{"linear_conv_kernel_dim", "ssm.conv_kernel"};
  for (auto [field, key] : {std::pair{"linear_k_heads", nk},
                            {"linear_v_heads", nv},
                            {"linear_k_dim", dk},
                            {"linear_conv", conv}})
    r.Spelled(field, key);
  c->linear_k_heads = r.PositiveInt(nk, r.HfDefault<int64_t>(16));
  c->linear_v_heads = r.PositiveInt(nv, r.HfDefault<int64_t>(32));
  c->linear_k_dim = r.PositiveInt(dk, r.HfDefault<int64_t>(128));
  c->linear_conv = r.PositiveInt(conv, r.HfDefault<int64_t>(4));
  if (r.gguf()) {  // llama.cpp: ssm.inner_size = nv * dv
    const Key inner{nullptr, "ssm.inner_size"};
    const int64_t v_width = r.PositiveInt(inner);
    if (v_width % c->linear_v_heads != 0)
      r.Fail(inner, "{} is not a multiple of {} {}", v_width, r.Name(nv), c->linear_v_heads);
    c->linear_v_dim = static_cast<int>(v_width / c->linear_v_heads);
    r.Spelled("linear_v_dim", inner);
  } else {
    r.Spelled("linear_v_dim", dv);
    c->linear_v_dim = r.PositiveInt(dv, 128);
  }
  if (c->linear_v_heads % c->linear_k_heads != 0)
    ss::Fail("{}: {} {} is not a multiple of {} {}", r.source(), r.Name(nv), c->linear_v_heads,
             r.Name(nk), c->linear_k_heads);
  if (c->linear_conv > 64) r.Fail(conv, "{} taps: at most 64 are supported", c->linear_conv);
  ReadLinearLayers(r, c, file_layers);
  if (r.gguf() && flavour != Flavour::kNext) ReadRopeSections(r, *c);
  if (flavour == Flavour::kDense) {
    if (r.gguf()) CheckGgufTensors(r, *c);
    return;
  }
  // Experts (§6.3): Qwen3-Next's norm_topk_prob (default true), Qwen3.5-MoE always renormalises.
  ReadMoe(r, "num_experts", flavour == Flavour::kNext ? 512 : 256,
          flavour == Flavour::kNext ? 10 : 8, "moe_intermediate_size",
          flavour == Flavour::kNext ? "norm_topk_prob" : nullptr, true, c, /*width_default=*/512);
  if (flavour == Flavour::kNext) {
    const Key dense{"intermediate_size", "feed_forward_length"};
    if (r.Has(dense) && !r.gguf()) {
      r.Spelled("dense_hidden_dim", dense);
      c->dense_hidden_dim = r.PositiveInt(dense);
    }
    ReadMoeLayers(r, c);
  }
  const Key shared{"shared_expert_intermediate_size", "expert_shared_feed_forward_length"};
  r.Spelled("shared_expert_hidden_dim", shared);
  c->shared_expert_hidden_dim = r.PositiveInt(shared, r.HfDefault<int64_t>(512));
  c->n_shared_experts = 1;
  c->shared_expert_gate = true;
  if (r.gguf()) CheckGgufTensors(r, *c);
}

void WriteQwen3Next(const ModelConfig& c, ConfigWriter& w) {
  const Flavour flavour = FlavourOf(c.arch);
  WriteLlamaCore(
      c, w, {.ffn_width = flavour == Flavour::kDense, .native = &ModelConfig::attn_output_gate});
  w.Bool({"attention_bias", nullptr}, false);
  w.Float({"partial_rotary_factor", nullptr},
          static_cast<float>(c.rot_dim()) / static_cast<float>(c.head_dim));
  w.Int({"linear_num_key_heads", "ssm.group_count"}, c.linear_k_heads);
  w.Int({"linear_num_value_heads", "ssm.time_step_rank"}, c.linear_v_heads);
  w.Int({"linear_key_head_dim", "ssm.state_size"}, c.linear_k_dim);
  w.Int({"linear_value_head_dim", nullptr}, c.linear_v_dim);
  w.Int({nullptr, "ssm.inner_size"}, c.linear_value_dim());
  w.Int({"linear_conv_kernel_dim", "ssm.conv_kernel"}, c.linear_conv);
  std::vector<std::string> types;
  std::vector<bool> linear;
  for (int l = 0; l < c.n_layers; ++l) {
    types.push_back(c.LinearLayer(l) ? "linear_attention" : "full_attention");
    linear.push_back(c.LinearLayer(l));
  }
  w.Strings(kLayerTypes, types);
  if (w.gguf()) {
    // full_attention_interval when one gives the layers (n_layers + 1: none is full attention),
    // else the per-layer flags.
    int interval = 0;
    for (int p = 1; p <= c.n_layers + 1 && interval == 0; ++p) {
      bool fits = true;
      for (int l = 0; l < c.n_layers; ++l) fits = fits && linear[l] == ((l + 1) % p != 0);
      if (fits) interval = p;
    }
    if (interval > 0)
      w.Int({nullptr, kInterval.gguf}, interval);
    else
      w.Bools(kRecurrent, linear);
    if (flavour != Flavour::kNext) {
      // llama.cpp requires M-RoPE sections for qwen35*: its converter's [11, 11, 10, 0] for 32
      // slots, scaled to this head's; any split of the slots over the three streams is the same
      // RoPE for text.
      const int64_t slots = c.rot_dim() / 2, first = (slots * 11 + 16) / 32;
      w.Ints(kSections, {first, first, slots - 2 * first, 0});
    }
  }
  if (flavour == Flavour::kDense) return;
  WriteMoe(c, w, "num_experts", "moe_intermediate_size",
           flavour == Flavour::kNext ? "norm_topk_prob" : nullptr);
  if (flavour == Flavour::kNext) {
    if (c.dense_hidden_dim > 0) w.Int({"intermediate_size", nullptr}, c.dense_hidden_dim);
    WriteMoeLayers(c, w);
  }
  w.Int({"shared_expert_intermediate_size", "expert_shared_feed_forward_length"},
        c.shared_expert_hidden_dim);
}

// One return of the named map: the after_bind steps hold &map.slices, which stays valid only as
// the returned object is the local itself (NRVO).
TensorMap Qwen3NextHfTensors(const ModelConfig& c, ModelWeights& w) {
  const Flavour flavour = FlavourOf(c.arch);
  const std::string prefix = Prefix(c.arch);
  const int64_t D = c.dim, V = c.vocab_size, H = c.n_heads, Dh = c.head_dim;
  const int64_t nk = c.linear_k_heads, nv = c.linear_v_heads, dk = c.linear_k_dim;
  const int64_t dv = c.linear_v_dim, r = nv / nk, Kd = c.linear_qk_dim();
  const int64_t Vd = c.linear_value_dim(), C = c.linear_conv_dim();
  TensorMap map;
  map.file_rope = RopeKind::kHalf;
  auto& specs = map.specs;
  auto add = [&](std::string name, std::vector<Tensor*> targets, std::vector<int64_t> shape) {
    specs.push_back(Spec(std::move(name), std::move(targets), std::move(shape)));
    return &specs.back();
  };
  add(prefix + "embed_tokens.weight", {&w.token_embedding}, {V, D});
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& lw = w.layers[l];
    const std::string at = fmt::format("{}layers.{}.", prefix, l);
    add(at + "input_layernorm.weight", {&lw.attn_norm}, {D});
    add(at + "post_attention_layernorm.weight", {&lw.ffn_norm}, {D});
    if (c.LinearLayer(l)) {
      const std::string la = at + "linear_attn.";
      if (flavour == Flavour::kNext) {
        // §3: per key head g, [q_g | k_g | v of its r value heads | z of them].
        TensorSpec* qkvz =
            add(la + "in_proj_qkvz.weight", {&lw.lin_wq, &lw.lin_wk, &lw.lin_wv, &lw.lin_wz},
                {2 * Kd + 2 * Vd, D});
        qkvz->fused_groups = static_cast<int>(nk);
        qkvz->fused_rows = {dk, dk, r * dv, r * dv};
        TensorSpec* ba = add(la + "in_proj_ba.weight", {&lw.lin_wb, &lw.lin_wa}, {2 * nv, D});
        ba->fused_groups = static_cast<int>(nk);
        ba->fused_rows = {r, r};
      } else {
        TensorSpec* qkv =
            add(la + "in_proj_qkv.weight", {&lw.lin_wq, &lw.lin_wk, &lw.lin_wv}, {C, D});
        qkv->fused_rows = {Kd, Kd, Vd};
        add(la + "in_proj_z.weight", {&lw.lin_wz}, {Vd, D});
        add(la + "in_proj_b.weight", {&lw.lin_wb}, {nv, D});
        add(la + "in_proj_a.weight", {&lw.lin_wa}, {nv, D});
      }
      add(la + "conv1d.weight", {&lw.lin_conv}, {C, 1, c.linear_conv});
      add(la + "dt_bias", {&lw.lin_dt_bias}, {nv});
      add(la + "A_log", {&lw.lin_a_log}, {nv});
      add(la + "norm.weight", {&lw.lin_norm}, {dv});
      add(la + "out_proj.weight", {&lw.lin_out}, {D, Vd});
    } else {
      const std::string sa = at + "self_attn.";
      // §5.1: per head [query | gate].
      TensorSpec* q = add(sa + "q_proj.weight", {&lw.wq, &lw.attn_gate}, {2 * H * Dh, D});
      q->fused_groups = static_cast<int>(H);
      q->fused_rows = {Dh, Dh};
      add(sa + "k_proj.weight", {&lw.wk}, {c.kv_dim(), D});
      add(sa + "v_proj.weight", {&lw.wv}, {c.kv_dim(), D});
      add(sa + "o_proj.weight", {&lw.wo}, {D, H * Dh});
      add(sa + "q_norm.weight", {&lw.q_norm}, {Dh});
      add(sa + "k_norm.weight", {&lw.k_norm}, {Dh});
    }
    const std::string mlp = at + "mlp.";
    if (!c.MoeLayer(l)) {
      const int64_t F = c.FfnWidth(l);
      add(mlp + "gate_proj.weight", {&lw.w1}, {F, D});
      add(mlp + "up_proj.weight", {&lw.w3}, {F, D});
      add(mlp + "down_proj.weight", {&lw.w2}, {D, F});
      continue;
    }
    const int64_t E = c.n_experts, F = c.hidden_dim, Fs = c.shared_expert_hidden_dim;
    add(mlp + "gate.weight", {&lw.moe_router}, {E, D});
    add(mlp + "shared_expert.gate_proj.weight", {&lw.w1}, {Fs, D});
    add(mlp + "shared_expert.up_proj.weight", {&lw.w3}, {Fs, D});
    add(mlp + "shared_expert.down_proj.weight", {&lw.w2}, {D, Fs});
    add(mlp + "shared_expert_gate.weight", {&lw.shared_expert_gate}, {1, D});
    const bool writing = !lw.moe_w1.empty();
    if (flavour == Flavour::kMoe) {
      // Fused (E, 2F, D): rows [0, F) of each expert are its gate, [F, 2F) its up. Reading: one
      // tensor split after the load; writing: the two joined.
      map.slices.push_back(Tensor());
      Tensor* gate_up = &map.slices.back();
      if (writing) {
        *gate_up = Tensor::Zeros({E, 2 * F, D});
        for (int64_t e = 0; e < E; ++e) {
          std::memcpy(gate_up->data() + e * 2 * F * D, lw.moe_w1.data() + e * F * D,
                      sizeof(float) * F * D);
          std::memcpy(gate_up->data() + (e * 2 + 1) * F * D, lw.moe_w3.data() + e * F * D,
                      sizeof(float) * F * D);
        }
      }
      add(mlp + "experts.gate_up_proj", {gate_up}, {E, 2 * F, D});
      add(mlp + "experts.down_proj", {&lw.moe_w2}, {E, D, F});
      if (!writing)
        map.after_bind.push_back(
            [gate_up, &lw, E, F, D] { SplitExpertGateUp(gate_up, lw, E, F, D); });
      continue;
    }
    // Qwen3-Next: one tensor per expert, stacked after the load (views of the stack to write).
    struct Part {
      const char* name;
      Tensor* stacked;
      int64_t rows, cols;
    };
    for (const Part& p : {Part{"gate_proj", &lw.moe_w1, F, D}, Part{"up_proj", &lw.moe_w3, F, D},
                          Part{"down_proj", &lw.moe_w2, D, F}}) {
      const size_t first = map.slices.size();
      for (int64_t e = 0; e < E; ++e) {
        map.slices.push_back(writing ? Tensor::View(p.stacked->data() + e * p.rows * p.cols,
                                                    {p.rows, p.cols}, nullptr)
                                     : Tensor());
        add(fmt::format("{}experts.{}.{}.weight", mlp, e, p.name), {&map.slices.back()},
            {p.rows, p.cols});
      }
      if (writing) continue;
      std::deque<Tensor>* slices = &map.slices;
      map.after_bind.push_back([slices, first, p, E] {
        *p.stacked = Tensor::Zeros({E, p.rows, p.cols});
        for (int64_t e = 0; e < E; ++e) {
          Tensor& slice = (*slices)[first + e];
          std::memcpy(p.stacked->data() + e * p.rows * p.cols, slice.data(),
                      sizeof(float) * p.rows * p.cols);
          slice = Tensor();
        }
      });
    }
  }
  add(prefix + "norm.weight", {&w.final_norm}, {D});
  if (!c.tied_embeddings) add("lm_head.weight", {&w.lm_head}, {V, D});
  return map;
}

TensorMap Qwen3NextTensors(const ModelConfig& c, TensorNaming naming, ModelWeights& w) {
  if (naming == TensorNaming::kGguf)
    return Qwen3NextGgufTensors(c, /*qwen35=*/FlavourOf(c.arch) != Flavour::kNext, w);
  return Qwen3NextHfTensors(c, w);
}

constexpr FamilyDefaults kNextDefaults{false, 1e-6f, 10000.0f, 32768, -1, -1};

}  // namespace

std::span<const ArchEntry> Families_qwen3_next() {
  static const ArchEntry families[] = {
      {"qwen3_next", "Qwen3NextForCausalLM", "qwen3next",
       "Qwen3-Next: Gated DeltaNet layers beside gated attention, MoE with a shared expert",
       kNextDefaults, &ReadQwen3Next, &WriteQwen3Next, &Qwen3NextTensors, &ForwardSequential,
       /*reads_partial_rotary=*/true},
      {"qwen3_5", "Qwen3_5ForConditionalGeneration", "qwen35",
       "Qwen3.5 (image-text checkpoint, language model read): Gated DeltaNet and gated attention",
       kNextDefaults, &ReadQwen3Next, &WriteQwen3Next, &Qwen3NextTensors, &ForwardSequential,
       /*reads_partial_rotary=*/true, /*reads_softcaps=*/false, /*nested_text_config=*/true},
      {"qwen3_5_text", "Qwen3_5ForCausalLM", "qwen35",
       "Qwen3.5 text-only: Gated DeltaNet layers beside gated attention, dense MLP", kNextDefaults,
       &ReadQwen3Next, &WriteQwen3Next, &Qwen3NextTensors, &ForwardSequential,
       /*reads_partial_rotary=*/true},
      {"qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration", "qwen35moe",
       "Qwen3.5-MoE / Qwen3.6 (image-text checkpoint): Gated DeltaNet, gated attention, MoE",
       kNextDefaults, &ReadQwen3Next, &WriteQwen3Next, &Qwen3NextTensors, &ForwardSequential,
       /*reads_partial_rotary=*/true, /*reads_softcaps=*/false, /*nested_text_config=*/true},
      {"qwen3_5_moe_text", "Qwen3_5MoeForCausalLM", "qwen35moe",
       "Qwen3.5-MoE text-only: Gated DeltaNet, gated attention, MoE with a shared expert",
       kNextDefaults, &ReadQwen3Next, &WriteQwen3Next, &Qwen3NextTensors, &ForwardSequential,
       /*reads_partial_rotary=*/true},
  };
  return families;
}

}  // namespace ss
