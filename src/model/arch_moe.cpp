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
#include <cstring>

#include <fmt/format.h>

#include "model/arch.h"
#include "model/blocks.h"

namespace ss {

TensorMap MoeTensors(const ModelConfig& c, TensorNaming naming, ModelWeights& w) {
  const bool hf = naming == TensorNaming::kHf;
  const bool mixtral = c.arch == "mixtral";
  // The attention half is the Llama layout; the dense MLP specs it adds are replaced below.
  ModelConfig dense = c;
  TensorMap map = LlamaLayoutTensors(dense, naming, w, /*input_norms=*/true);
  if (c.arch != "mixtral") map.file_rope = RopeKind::kHalf;  // llama.cpp: NEOX RoPE for these
  std::erase_if(map.specs, [](const TensorSpec& s) {
    return s.name.find("mlp.") != std::string::npos || s.name.find("ffn_gate") != std::string::npos ||
           s.name.find("ffn_up") != std::string::npos || s.name.find("ffn_down") != std::string::npos;
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
      TensorSpec qn = Spec(name("self_attn.q_norm.weight", "attn_q_norm.weight"), {&lw.q_norm}, {q});
      TensorSpec kn = Spec(name("self_attn.k_norm.weight", "attn_k_norm.weight"), {&lw.k_norm}, {k});
      // The gains follow their dimensions when q/k rows change RoPE order.
      qn.rope_heads = c.qk_norm == QkNormKind::kPerHead ? 1 : c.n_heads;
      kn.rope_heads = c.qk_norm == QkNormKind::kPerHead ? 1 : c.n_kv_heads;
      map.specs.push_back(qn);
      map.specs.push_back(kn);
    }
    const std::string moe = mixtral ? "block_sparse_moe." : "mlp.";
    map.specs.push_back(Spec(name(moe + "gate.weight", "ffn_gate_inp.weight"), {&lw.moe_router}, {E, D}));
    if (!hf) {
      map.specs.push_back(Spec(name("", "ffn_gate_exps.weight"), {&lw.moe_w1}, {E, F, D}));
      map.specs.push_back(Spec(name("", "ffn_down_exps.weight"), {&lw.moe_w2}, {E, D, F}));
      map.specs.push_back(Spec(name("", "ffn_up_exps.weight"), {&lw.moe_w3}, {E, F, D}));
      continue;
    }
    // HF stores one tensor per expert. Writing: views into the stacked members. Loading: each
    // expert loads on its own and after_bind stacks them, so nothing is allocated from the
    // config's sizes before the file has shown it holds the data.
    struct Part { const char* hf_name; Tensor* stacked; int64_t rows, cols; };
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
