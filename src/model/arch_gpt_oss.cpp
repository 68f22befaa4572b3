// gpt-oss (OpenAI 2025; transformers' GptOssForCausalLM, modeling_gpt_oss.py): the pre-norm
// Llama block with
//  - a learned sink logit per head (self_attn.sinks): each row's softmax runs over the scores and
//    s_h, and the sink column is dropped, so a head can put mass on "nothing" (applied by
//    SelfAttention from config.attn_sinks; analysis reports it as alpha_sink);
//  - sliding-window (128) and full attention alternating per layer (config.layer_attention);
//  - biases on q, k, v and o; YaRN RoPE in rotate-half order;
//  - a top-k mixture of experts with router bias, softmax over the k chosen logits, experts with
//    biases and the clamped activation (up + 1) * gate * sigmoid(1.702 gate) (config.swiglu_limit),
//    run by MoeFfn.
// The forward loop is ForwardSequential (model/blocks.h): pre-norm attention, pre-norm MoE.
//
// Tensor names. Hugging Face: model.layers.N.self_attn.sinks (H); mlp.router.weight (E, D) and
// .bias (E); mlp.experts.gate_up_proj (E, D, 2F), stored (in, out) with gate and up interleaved
// along the last axis (gate = [..., ::2], up = [..., 1::2]), gate_up_proj_bias (E, 2F) likewise;
// mlp.experts.down_proj (E, F, D), (in, out), and down_proj_bias (E, D). llama.cpp (GGUF
// "gpt-oss"): blk.N.attn_sinks.weight, post_attention_norm.weight (the pre-MoE norm),
// ffn_gate_inp.{weight,bias}, ffn_{gate,up,down}_exps.{weight,bias} stacked per expert.
// The published checkpoints store the expert weights as MXFP4 (config.json's quantization_config,
// quant_method "mxfp4"): mlp.experts.gate_up_proj_blocks (E, 2F, D / 32, 16) and _scales
// (E, 2F, D / 32), down_proj_blocks (E, D, F / 32, 16) and _scales, U8 tensors in (out, in) order
// beside BF16 attention, router and biases (layout in kernels/dequant.h). At --precision native
// they stay in the file's bytes (MoeFfn multiplies the chosen experts' rows); otherwise they are
// decoded to f32 at load. BF16 / F16 / F32 experts (a dequantised or random checkpoint) are read
// too. GGUF's MXFP4 experts (ggml type 39) are ffn_*_exps tensors like any other type.
#include <fmt/format.h>

#include <cstring>
#include <functional>
#include <string_view>
#include <vector>

#include "model/arch.h"
#include "model/blocks.h"

namespace ss {

namespace {

TensorMap GptOssTensors(const ModelConfig& c, TensorNaming naming, ModelWeights& w) {
  const bool hf = naming == TensorNaming::kHf;
  TensorMap map = LlamaLayoutTensors(c, naming, w, /*input_norms=*/true);
  map.file_rope = RopeKind::kHalf;  // rotate-half in both conventions (llama.cpp: NEOX RoPE)
  std::erase_if(map.specs, [](const TensorSpec& s) {
    return s.name.find("mlp.") != std::string::npos ||
           s.name.find("ffn_gate") != std::string::npos ||
           s.name.find("ffn_up") != std::string::npos ||
           s.name.find("ffn_down") != std::string::npos;
  });
  for (TensorSpec& s : map.specs) {  // llama.cpp names gpt-oss's pre-MoE norm post_attention_norm
    const size_t at = s.name.find("ffn_norm.weight");
    if (!hf && at != std::string::npos) s.name.replace(at, 8, "post_attention_norm");
  }
  const int64_t D = c.dim, F = c.hidden_dim, E = c.n_experts;
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& lw = w.layers[l];
    auto name = [&](const char* hf_name, const char* gguf) {
      return LayerTensorName(naming, l, hf_name, gguf);
    };
    map.specs.push_back(
        Spec(name("mlp.router.weight", "ffn_gate_inp.weight"), {&lw.moe_router}, {E, D}));
    map.specs.push_back(
        Spec(name("mlp.router.bias", "ffn_gate_inp.bias"), {&lw.moe_router_bias}, {E}));
    if (!hf) {
      map.specs.push_back(Spec(name("", "ffn_gate_exps.weight"), {&lw.moe_w1}, {E, F, D}));
      map.specs.push_back(Spec(name("", "ffn_down_exps.weight"), {&lw.moe_w2}, {E, D, F}));
      map.specs.push_back(Spec(name("", "ffn_up_exps.weight"), {&lw.moe_w3}, {E, F, D}));
      map.specs.push_back(Spec(name("", "ffn_gate_exps.bias"), {&lw.moe_b1}, {E, F}));
      map.specs.push_back(Spec(name("", "ffn_down_exps.bias"), {&lw.moe_b2}, {E, D}));
      map.specs.push_back(Spec(name("", "ffn_up_exps.bias"), {&lw.moe_b3}, {E, F}));
      continue;
    }
    map.specs.push_back(Spec(name("mlp.experts.down_proj_bias", ""), {&lw.moe_b2}, {E, D}));
    // The fused, (in, out)-ordered HF tensors. Writing: built from the members. Reading: loaded
    // into slices that after_bind splits and transposes into the members.
    const bool writing = !lw.moe_w1.empty();
    const bool mxfp4 = c.mxfp4_experts && !writing;
    Tensor gate_up = writing ? Tensor::Zeros({E, D, 2 * F}) : Tensor();
    Tensor gate_up_bias = writing ? Tensor::Zeros({E, 2 * F}) : Tensor();
    Tensor down = writing ? Tensor::Zeros({E, F, D}) : Tensor();
    if (writing) {
      for (int64_t e = 0; e < E; ++e)
        for (int64_t f = 0; f < F; ++f) {
          for (int64_t d = 0; d < D; ++d) {
            gate_up[(e * D + d) * 2 * F + 2 * f] = lw.moe_w1[(e * F + f) * D + d];
            gate_up[(e * D + d) * 2 * F + 2 * f + 1] = lw.moe_w3[(e * F + f) * D + d];
            down[(e * F + f) * D + d] = lw.moe_w2[(e * D + d) * F + f];
          }
          gate_up_bias[e * 2 * F + 2 * f] = lw.moe_b1[e * F + f];
          gate_up_bias[e * 2 * F + 2 * f + 1] = lw.moe_b3[e * F + f];
        }
    }
    Tensor* gu = nullptr;
    Tensor* dn = nullptr;
    if (mxfp4) {
      // The published checkpoints' MXFP4 experts, in (out, in) order (kernels/dequant.h):
      // gate_up_proj_blocks (E, 2F, D / 32, 16) holds gate at its even rows and up at its odd
      // ones (the (in, out) tensor's even and odd columns), down_proj_blocks (E, D, F / 32, 16)
      // is down_proj transposed. Loaded straight into the members, or kept as stored (native).
      TensorSpec gate_up_blocks = Spec(name("mlp.experts.gate_up_proj_blocks", ""),
                                       {&lw.moe_w1, &lw.moe_w3}, {E, 2 * F, D});
      gate_up_blocks.mxfp4_scales = name("mlp.experts.gate_up_proj_scales", "");
      gate_up_blocks.alternate_rows = true;
      map.specs.push_back(gate_up_blocks);
    } else {
      map.slices.push_back(gate_up);
      gu = &map.slices.back();
      map.specs.push_back(Spec(name("mlp.experts.gate_up_proj", ""), {gu}, {E, D, 2 * F}));
    }
    map.slices.push_back(gate_up_bias);
    Tensor* gub = &map.slices.back();
    map.specs.push_back(Spec(name("mlp.experts.gate_up_proj_bias", ""), {gub}, {E, 2 * F}));
    if (mxfp4) {
      TensorSpec down_blocks =
          Spec(name("mlp.experts.down_proj_blocks", ""), {&lw.moe_w2}, {E, D, F});
      down_blocks.mxfp4_scales = name("mlp.experts.down_proj_scales", "");
      map.specs.push_back(down_blocks);
    } else {
      map.slices.push_back(down);
      dn = &map.slices.back();
      map.specs.push_back(Spec(name("mlp.experts.down_proj", ""), {dn}, {E, F, D}));
    }
    if (writing) continue;
    map.after_bind.push_back([&lw, gu, gub, dn, E, F, D] {
      lw.moe_b1 = Tensor::Zeros({E, F});
      lw.moe_b3 = Tensor::Zeros({E, F});
      for (int64_t e = 0; e < E; ++e)
        for (int64_t f = 0; f < F; ++f) {
          lw.moe_b1[e * F + f] = (*gub)[e * 2 * F + 2 * f];
          lw.moe_b3[e * F + f] = (*gub)[e * 2 * F + 2 * f + 1];
        }
      *gub = Tensor();
      if (!gu) return;  // MXFP4: the blocks went straight into the members
      lw.moe_w1 = Tensor::Zeros({E, F, D});
      lw.moe_w3 = Tensor::Zeros({E, F, D});
      lw.moe_w2 = Tensor::Zeros({E, D, F});
      for (int64_t e = 0; e < E; ++e)
        for (int64_t f = 0; f < F; ++f)
          for (int64_t d = 0; d < D; ++d) {
            lw.moe_w1[(e * F + f) * D + d] = (*gu)[(e * D + d) * 2 * F + 2 * f];
            lw.moe_w3[(e * F + f) * D + d] = (*gu)[(e * D + d) * 2 * F + 2 * f + 1];
            lw.moe_w2[(e * D + d) * F + f] = (*dn)[(e * F + f) * D + d];
          }
      *gu = Tensor();
      *dn = Tensor();
    });
  }
  return map;
}

const Key kSwigluLimit{"swiglu_limit", "sinkscope.swiglu_limit"};
const Key kWindow{"sliding_window", "attention.sliding_window"};

LayerAttention EvenLayersSlide(int l, int) {
  return l % 2 == 0 ? LayerAttention::kSliding : LayerAttention::kFull;
}

// Whether `pattern` matches at the start of `text` (Python's re.match, which need not reach the
// end) for the patterns transformers' modules_to_not_convert holds: literal characters, '.' (any
// character) and a postfix '*' (zero or more of the one before). Memoised over (pattern position,
// text position), so a pattern of many '*' cannot take exponential time.
bool MatchesAtStart(std::string_view pattern, std::string_view text) {
  const size_t m = pattern.size(), n = text.size();
  std::vector<int8_t> memo((m + 1) * (n + 1), -1);  // -1 unknown, 0 no, 1 yes
  std::function<bool(size_t, size_t)> match = [&](size_t i, size_t j) -> bool {
    if (i == m) return true;
    int8_t& known = memo[i * (n + 1) + j];
    if (known >= 0) return known;
    const auto same = [&](size_t at) {
      return at < n && (pattern[i] == '.' || pattern[i] == text[at]);
    };
    bool yes;
    if (i + 1 < m && pattern[i + 1] == '*')
      yes = match(i + 2, j) || (same(j) && match(i, j + 1));  // none, or one more of pattern[i]
    else
      yes = same(j) && match(i + 1, j + 1);
    known = yes;
    return yes;
  };
  return match(0, 0);
}

// quantization_config: the published checkpoints' {"quant_method": "mxfp4",
// "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
// "model.embed_tokens", "lm_head"]}. transformers (integrations/mxfp4.py) replaces only the
// GptOssExperts modules, and none whose name a listed pattern matches at its start (re.match), so
// the list can only keep experts unquantised: sinkscope reads MXFP4 experts in every layer or none.
void ReadQuantization(const ConfigReader& r, const ModelConfig& c, bool* mxfp4_experts) {
  const Key quant{"quantization_config", nullptr};
  *mxfp4_experts = false;
  if (!r.Has(quant)) return;
  const Key method{"quantization_config.quant_method", nullptr};
  const std::string name = r.String(method, "");
  if (name != "mxfp4")
    r.Fail(method,
           "'{}' is not supported: sinkscope reads gpt-oss's MXFP4 experts (quant_method "
           "\"mxfp4\"), or BF16 / F16 / F32 ones without a quantization_config",
           name);
  const Key skip{"quantization_config.modules_to_not_convert", nullptr};
  std::vector<std::string> patterns;
  if (r.Given(skip) && r.Has(skip)) patterns = r.Strings(skip);
  int kept_plain = 0;
  std::string first_pattern;
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string experts = "model.layers." + std::to_string(l) + ".mlp.experts";
    for (const std::string& p : patterns) {
      if (p.find_first_of("[](){}+?|^$\\") != std::string::npos)
        r.Fail(skip,
               "entry '{}' uses regular-expression syntax beyond '.' and '*', which sinkscope "
               "does not match",
               p);
      if (MatchesAtStart(p, experts)) {
        if (first_pattern.empty()) first_pattern = p;
        ++kept_plain;
        break;
      }
    }
  }
  if (kept_plain == 0) {
    *mxfp4_experts = true;
  } else if (kept_plain < c.n_layers) {
    r.Fail(skip,
           "entry '{}' keeps the experts of {} of the {} layers unquantised; sinkscope reads "
           "MXFP4 experts in every layer or in none",
           first_pattern, kept_plain, c.n_layers);
  }
  // Every layer's experts listed: the checkpoint's experts are not MXFP4 at all.
}

void ReadGptOss(const ConfigReader& r, const FamilyDefaults& d, ModelConfig* c) {
  ReadLlamaCore(r, d, /*head_dim_default=*/64, c);
  ReadAttentionBias(r, true, c);
  const int per_tok = static_cast<int>(r.Int({"experts_per_token", nullptr}, 4));  // older name
  ReadMoe(r, "num_local_experts", 128, per_tok, "intermediate_size", nullptr, true, c);
  // Both names given: they must agree, or which one transformers reads decides the model.
  if (!r.gguf() && r.Has({"experts_per_token", nullptr}) &&
      r.Has({"num_experts_per_tok", nullptr}) && per_tok != c->n_experts_per_tok)
    r.Fail({"experts_per_token", nullptr}, "is {} but num_experts_per_tok is {}; give one value",
           per_tok, c->n_experts_per_tok);
  c->norm_topk_prob = true;  // GptOssTopKRouter: softmax over the k chosen logits
  c->moe_bias = true;
  c->attn_sinks = true;
  r.Spelled("swiglu_limit", kSwigluLimit);
  c->swiglu_limit = r.Real(kSwigluLimit, 7.0);
  if (!(c->swiglu_limit > 0)) r.Fail(kSwigluLimit, "must be positive, found {}", c->swiglu_limit);
  c->sliding_window = ReadSlidingWindow(r, r.HfDefault<int64_t>(128), *c);
  ReadQuantization(r, *c, &c->mxfp4_experts);
  // GptOssConfig's default (and llama.cpp's): layer i slides when i is even.
  c->layer_attention = ReadLayerTypes(r, c->n_layers, &EvenLayersSlide, 2);
}

void WriteGptOss(const ModelConfig& c, ConfigWriter& w) {
  WriteLlamaCore(c, w, {.sink_extension = false});
  w.Bool({"attention_bias", nullptr}, c.qkv_bias);
  WriteMoe(c, w, "num_local_experts", "intermediate_size", nullptr);
  w.Float(kSwigluLimit, c.swiglu_limit);
  w.Int(kWindow, c.sliding_window);
  WriteLayerTypes(c, w);
}

}  // namespace

std::span<const ArchEntry> Families_gpt_oss() {
  static const ArchEntry families[] = {
      {"gpt_oss",
       "GptOssForCausalLM",
       "gpt-oss",
       "gpt-oss: learned per-head sink logits, alternating sliding / full attention, YaRN RoPE, "
       "biased top-k MoE with a clamped GLU",
       {false, 1e-5f, 150000.0f, 131072, -1, -1},
       &ReadGptOss,
       &WriteGptOss,
       &GptOssTensors,
       &ForwardSequential},
  };
  return families;
}

}  // namespace ss
