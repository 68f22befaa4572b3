// Phi-3 / Phi-3.5-mini / Phi-4-mini (transformers' Phi3ForCausalLM, modeling_phi3.py; Abdin et al.
// 2024, "Phi-3 Technical Report"): the pre-norm Llama block with
//  - q, k and v from one projection, self_attn.qkv_proj, rows [q (H*Dh) | k (Hkv*Dh) | v (Hkv*Dh)];
//  - gate and up from one projection, mlp.gate_up_proj, rows [gate (F) | up (F)], giving
//    up * silu(gate) (Phi3MLP: gate, up = chunk(2));
//  - rotate-half RoPE on the first partial_rotary_factor of each head (Phi-4-mini: 0.75);
//  - a sliding window over every layer when sliding_window is set (Phi-3-mini-4k: 2047), with
//    Mistral's convention (a query sees the last W keys, itself included).
// No biases. LongRoPE (rope_scaling type "longrope", the 128k variants) is refused by the shared
// rope_scaling reader.
//
// llama.cpp (GGUF "phi3"): attn_qkv and ffn_up hold the same fused rows (ffn_up's first half is
// the gate), NEOX RoPE, so nothing is permuted; the window is attention.sliding_window.
#include "model/arch.h"
#include "model/blocks.h"

namespace ss {
namespace {

const Key kPartialRotary{"partial_rotary_factor", nullptr};

TensorMap Phi3Tensors(const ModelConfig& c, TensorNaming naming, ModelWeights& w) {
  TensorMap map = LlamaLayoutTensors(c, naming, w, /*input_norms=*/true);
  map.file_rope = RopeKind::kHalf;
  // The Llama layout's separate q, k, v, gate and up become two fused tensors.
  std::erase_if(map.specs, [&w](const TensorSpec& s) {
    for (const LayerWeights& lw : w.layers)
      for (const Tensor* t : {&lw.wq, &lw.wk, &lw.wv, &lw.w1, &lw.w3})
        if (s.targets.size() == 1 && s.targets[0] == t) return true;
    return false;
  });
  const int64_t D = c.dim, F = c.hidden_dim, qd = c.q_dim(), kvd = c.kv_dim();
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& lw = w.layers[l];
    TensorSpec qkv =
        Spec(LayerTensorName(naming, l, "self_attn.qkv_proj.weight", "attn_qkv.weight"),
             {&lw.wq, &lw.wk, &lw.wv}, {qd + 2 * kvd, D});
    qkv.fused_rows = {qd, kvd, kvd};
    TensorSpec gate_up =
        Spec(LayerTensorName(naming, l, "mlp.gate_up_proj.weight", "ffn_up.weight"),
             {&lw.w1, &lw.w3}, {2 * F, D});
    gate_up.fused_rows = {F, F};
    map.specs.push_back(qkv);
    map.specs.push_back(gate_up);
  }
  return map;
}

void ReadPhi3(const ConfigReader& r, const FamilyDefaults& d, ModelConfig* c) {
  ReadLlamaCore(r, d, 0, c);
  if (c->qkv_bias || c->attn_out_bias || c->mlp_bias)
    ss::Fail("{}: phi3 has no biases, but the file holds bias tensors", r.source());
  // A window as long as the context never drops a key (Phi-4-mini: 262144 of 131072): none.
  c->sliding_window = ReadOptionalWindow(r);
  if (c->sliding_window >= c->max_seq_len) c->sliding_window = 0;
  ReadPartialRotary(r, kPartialRotary, 1.0f, c);
}

void WritePhi3(const ModelConfig& c, ConfigWriter& w) {
  WriteLlamaCore(c, w);
  WriteOptionalWindow(c, w);
  w.Float(kPartialRotary, static_cast<float>(static_cast<double>(c.rot_dim()) / c.head_dim));
}

}  // namespace

std::span<const ArchEntry> Families_phi3() {
  static const ArchEntry families[] = {
      {"phi3",
       "Phi3ForCausalLM",
       "phi3",
       "Phi-3 / Phi-4-mini: the Llama block with fused qkv and gate_up projections, partial "
       "rotary, optional sliding window",
       {false, 1e-5f, 10000.0f, 4096, 1, 32000},
       &ReadPhi3,
       &WritePhi3,
       &Phi3Tensors,
       &ForwardSequential,
       /*reads_partial_rotary=*/true},
  };
  return families;
}

}  // namespace ss
