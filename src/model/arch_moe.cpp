// Mixture-of-experts families. Qwen3-MoE (transformers' Qwen3MoeForCausalLM): the Llama block with
// per-head q/k RMSNorm before RoPE (applied by SelfAttention when the layer has q_norm/k_norm
// weights) and a sparse mixture-of-experts FFN in every layer: a softmax router picks the top-k of
// E SwiGLU experts per token (Shazeer et al. 2017, "Outrageously Large Neural Networks"; Fedus et
// al. 2021, "Switch Transformers"). Also the format of the MoE models sinkscope trains (src/train).
// OLMoE (OlmoeForCausalLM) is the same block with q/k RMSNorm over the whole projection; Mixtral
// (MixtralForCausalLM) has no q/k norm and always renormalises the top-k weights (softmax over all
// E, keep k, divide by their sum: the same as a softmax over the k kept logits). All three use
// MoeFfn; norm_topk_prob in the config says whether the top-k weights are renormalised.
//
// Tensor names: HF model.layers.N.mlp.gate.weight (E, D) and mlp.experts.e.{gate,up,down}_proj
// (Mixtral: block_sparse_moe.gate and block_sparse_moe.experts.e.w1 (gate) / w3 (up) / w2 (down));
// llama.cpp stacks the experts: blk.N.ffn_gate_inp (E, D), ffn_gate_exps / ffn_up_exps (E, F, D),
// ffn_down_exps (E, D, F).
#include <fmt/format.h>

#include <cstring>

#include "model/arch.h"
#include "model/blocks.h"

namespace ss {

namespace {

const Key kDenseWidth{"intermediate_size", "feed_forward_length"};

// Qwen3-MoE: per-head q/k norms, num_experts, moe_intermediate_size per expert, intermediate_size
// the width of dense MLP layers (llama.cpp: feed_forward_length beside expert_feed_forward_length).
void ReadQwen3Moe(const ConfigReader& r, const FamilyDefaults& d, ModelConfig* c) {
  ReadLlamaCore(r, d, /*head_dim_default=*/128, c, /*read_ffn_width=*/false);
  ReadAttentionBias(r, false, c);
  c->qk_norm = QkNormKind::kPerHead;
  ReadQwenSlidingWindow(r, c);
  ReadMoe(r, "num_experts", std::nullopt, std::nullopt, "moe_intermediate_size", "norm_topk_prob",
          false, c);
  r.Spelled("dense_hidden_dim", kDenseWidth);
  if (r.Has(kDenseWidth)) {
    const int dense = r.PositiveInt(kDenseWidth);
    if (!r.gguf() || dense != c->hidden_dim) c->dense_hidden_dim = dense;
  }
  ReadMoeLayers(r, c);
  const Key shared{"shared_expert_intermediate_size", nullptr};
  if (r.Has(shared)) {
    r.Spelled("shared_expert_hidden_dim", shared);
    c->shared_expert_hidden_dim = r.PositiveInt(shared);
    c->n_shared_experts = 1;
  }
}

void WriteQwen3Moe(const ModelConfig& c, ConfigWriter& w) {
  WriteLlamaCore(c, w, {.ffn_width = false});
  if (w.gguf()) {
    w.Int(kDenseWidth, c.dense_hidden_dim > 0 ? c.dense_hidden_dim : c.hidden_dim);
  } else if (c.dense_hidden_dim > 0) {
    w.Int(kDenseWidth, c.dense_hidden_dim);
  }
  WriteMoe(c, w, "num_experts", "moe_intermediate_size", "norm_topk_prob");
  WriteMoeLayers(c, w);
  if (c.n_shared_experts > 0)
    w.Int({"shared_expert_intermediate_size", nullptr}, c.shared_expert_hidden_dim);
  w.Bool({"attention_bias", nullptr}, c.qkv_bias);
  WriteQwenSlidingWindow(c, w);
}

// OLMoE: whole-projection q/k norms, intermediate_size per expert, clip_qkv not implemented.
void ReadOlmoe(const ConfigReader& r, const FamilyDefaults& d, ModelConfig* c) {
  ReadLlamaCore(r, d, 0, c);
  ReadAttentionBias(r, false, c);
  c->qk_norm = QkNormKind::kFull;
  ReadMoe(r, "num_experts", 64, 8, "intermediate_size", "norm_topk_prob", false, c);
  const Key clip{"clip_qkv", nullptr};
  if (r.Has(clip)) r.Fail(clip, "{} is not supported", r.Dump(clip));
}

void WriteOlmoe(const ModelConfig& c, ConfigWriter& w) {
  WriteLlamaCore(c, w);
  WriteMoe(c, w, "num_experts", "intermediate_size", "norm_topk_prob");
  w.Bool({"attention_bias", nullptr}, c.qkv_bias);
  w.Null({"clip_qkv", nullptr});
}

// Mixtral: Mistral's optional window, num_local_experts, always renormalised top-k weights (a
// softmax over the k kept logits; no config key). GGUF: written as llama with experts.
void ReadMixtral(const ConfigReader& r, const FamilyDefaults& d, ModelConfig* c) {
  ReadLlamaCore(r, d, 0, c);
  c->sliding_window = ReadOptionalWindow(r);
  ReadMoe(r, "num_local_experts", 8, 2, "intermediate_size", nullptr, true, c);
}

void WriteMixtral(const ModelConfig& c, ConfigWriter& w) {
  WriteLlamaCore(c, w);
  WriteOptionalWindow(c, w);
  WriteMoe(c, w, "num_local_experts", "intermediate_size", nullptr);
}

}  // namespace

std::span<const ArchEntry> Families_moe() {
  static const ArchEntry families[] = {
      {"qwen3_moe",
       "Qwen3MoeForCausalLM",
       "qwen3moe",
       "Qwen3-MoE: Llama layout with per-head q/k RMSNorm and a top-k mixture-of-experts FFN",
       {false, 1e-6f, 10000.0f, 32768, -1, -1},
       &ReadQwen3Moe,
       &WriteQwen3Moe,
       &MoeTensors,
       &ForwardSequential},
      {"olmoe",
       "OlmoeForCausalLM",
       "olmoe",
       "OLMoE: Llama layout with whole-projection q/k RMSNorm and a top-k MoE FFN",
       {false, 1e-5f, 10000.0f, 4096, -1, 50279},
       &ReadOlmoe,
       &WriteOlmoe,
       &MoeTensors,
       &ForwardSequential},
      {"mixtral",
       "MixtralForCausalLM",
       "llama",
       "Mixtral: Llama layout (sliding window optional) with a renormalised top-2 MoE FFN",
       {false, 1e-5f, 1e6f, 4096 * 32, 1, 2},
       &ReadMixtral,
       &WriteMixtral,
       &MoeTensors,
       &ForwardSequential},
  };
  return families;
}

TensorMap MoeTensors(const ModelConfig& c, TensorNaming naming, ModelWeights& w) {
  const bool hf = naming == TensorNaming::kHf;
  const bool mixtral = c.arch == "mixtral";
  // The attention half is the Llama layout; the dense MLP specs it adds are replaced below.
  ModelConfig dense = c;
  TensorMap map = LlamaLayoutTensors(dense, naming, w, /*input_norms=*/true);
  if (c.arch != "mixtral") map.file_rope = RopeKind::kHalf;  // llama.cpp: NEOX RoPE for these
  std::erase_if(map.specs, [](const TensorSpec& s) {
    return s.name.find("mlp.") != std::string::npos ||
           s.name.find("ffn_gate") != std::string::npos ||
           s.name.find("ffn_up") != std::string::npos ||
           s.name.find("ffn_down") != std::string::npos;
  });
  const int64_t D = c.dim, F = c.hidden_dim, E = c.n_experts, Dh = c.head_dim;
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& lw = w.layers[l];
    auto name = [&](const std::string& hf_name, const char* gguf) {
      return LayerTensorName(naming, l, hf_name.c_str(), gguf);
    };
    if (c.qk_norm != QkNormKind::kNone) {
      const int64_t q = c.qk_norm == QkNormKind::kPerHead ? Dh : c.q_dim();
      const int64_t k = c.qk_norm == QkNormKind::kPerHead ? Dh : c.kv_dim();
      TensorSpec qn =
          Spec(name("self_attn.q_norm.weight", "attn_q_norm.weight"), {&lw.q_norm}, {q});
      TensorSpec kn =
          Spec(name("self_attn.k_norm.weight", "attn_k_norm.weight"), {&lw.k_norm}, {k});
      // The gains follow their dimensions when q/k rows change RoPE order.
      qn.rope_heads = c.qk_norm == QkNormKind::kPerHead ? 1 : c.n_heads;
      kn.rope_heads = c.qk_norm == QkNormKind::kPerHead ? 1 : c.n_kv_heads;
      map.specs.push_back(qn);
      map.specs.push_back(kn);
    }
    if (!c.MoeLayer(l)) {  // a dense MLP layer among the expert layers (Qwen-MoE mlp_only_layers)
      const int64_t Fd = c.FfnWidth(l);
      map.specs.push_back(Spec(name("mlp.gate_proj.weight", "ffn_gate.weight"), {&lw.w1}, {Fd, D}));
      map.specs.push_back(Spec(name("mlp.down_proj.weight", "ffn_down.weight"), {&lw.w2}, {D, Fd}));
      map.specs.push_back(Spec(name("mlp.up_proj.weight", "ffn_up.weight"), {&lw.w3}, {Fd, D}));
      continue;
    }
    const std::string moe = mixtral ? "block_sparse_moe." : "mlp.";
    map.specs.push_back(
        Spec(name(moe + "gate.weight", "ffn_gate_inp.weight"), {&lw.moe_router}, {E, D}));
    if (!hf) {
      map.specs.push_back(Spec(name("", "ffn_gate_exps.weight"), {&lw.moe_w1}, {E, F, D}));
      map.specs.push_back(Spec(name("", "ffn_down_exps.weight"), {&lw.moe_w2}, {E, D, F}));
      map.specs.push_back(Spec(name("", "ffn_up_exps.weight"), {&lw.moe_w3}, {E, F, D}));
      continue;
    }
    // HF stores one tensor per expert. Writing: views into the stacked members. Loading: each
    // expert loads on its own and after_bind stacks them, so nothing is allocated from the
    // config's sizes before the file has shown it holds the data.
    struct Part {
      const char* hf_name;
      Tensor* stacked;
      int64_t rows, cols;
    };
    const Part parts[] = {{mixtral ? "w1" : "gate_proj", &lw.moe_w1, F, D},
                          {mixtral ? "w2" : "down_proj", &lw.moe_w2, D, F},
                          {mixtral ? "w3" : "up_proj", &lw.moe_w3, F, D}};
    for (const Part& p : parts) {
      const bool writing = !p.stacked->empty();
      const size_t first = map.slices.size();
      for (int e = 0; e < E; ++e) {
        map.slices.push_back(writing ? Tensor::View(p.stacked->data() + e * p.rows * p.cols,
                                                    {p.rows, p.cols}, nullptr)
                                     : Tensor());
        map.specs.push_back(Spec(name(fmt::format("{}experts.{}.{}.weight", moe, e, p.hf_name), ""),
                                 {&map.slices.back()}, {p.rows, p.cols}));
      }
      if (writing) continue;
      std::deque<Tensor>* slices = &map.slices;
      map.after_bind.push_back([slices, first, p, E] {
        *p.stacked = Tensor::Zeros({E, p.rows, p.cols});
        for (int e = 0; e < E; ++e)
          std::memcpy(p.stacked->data() + e * p.rows * p.cols, (*slices)[first + e].data(),
                      sizeof(float) * p.rows * p.cols);
      });
    }
  }
  return map;
}

}  // namespace ss
