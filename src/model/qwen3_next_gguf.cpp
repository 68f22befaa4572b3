#include "model/qwen3_next_gguf.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "common/error.h"

namespace ss {

Tensor ReorderValueHeads(const Tensor& t, int64_t first, int64_t block, int nk, int nv,
                         bool to_tiled, bool columns) {
  SS_ASSERT(nk > 0 && nv % nk == 0 && t.rank() >= 1);
  const int64_t r = nv / nk;
  // Rows: `lines` = 1 line of dim(0) rows of `width`; columns: every row is a line of units of 1.
  const int64_t units = columns ? t.dim(-1) : t.dim(0);
  const int64_t width = columns ? 1 : t.numel() / t.dim(0);
  const int64_t lines = columns ? t.numel() / t.dim(-1) : 1;
  SS_ASSERT(first + nv * block <= units);
  Tensor out = t.Copy();
  const int64_t n = block * width;
  for (int64_t line = 0; line < lines; ++line) {
    const float* src = t.data() + line * units * width;
    float* dst = out.data() + line * units * width;
    for (int64_t g = 0; g < nk; ++g) {
      for (int64_t j = 0; j < r; ++j) {
        const int64_t grouped = first + (g * r + j) * block, tiled = first + (j * nk + g) * block;
        const int64_t from = to_tiled ? grouped : tiled, to = to_tiled ? tiled : grouped;
        std::memcpy(dst + to * width, src + from * width, sizeof(float) * n);
      }
    }
  }
  return out;
}

TensorMap Qwen3NextGgufTensors(const ModelConfig& c, bool qwen35, ModelWeights& w) {
  const int64_t D = c.dim, V = c.vocab_size, H = c.n_heads, Dh = c.head_dim;
  const int nk = c.linear_k_heads, nv = c.linear_v_heads;
  const int64_t dv = c.linear_v_dim, Kd = c.linear_qk_dim(), Vd = c.linear_value_dim();
  const int64_t C = c.linear_conv_dim(), r = nv / nk;
  const bool tiled = qwen35 && nk != nv;
  TensorMap map;
  map.file_rope = RopeKind::kHalf;  // rotate-half (NeoX / IMROPE) in llama.cpp too: no permutation
  auto& specs = map.specs;
  auto add = [&](std::string name, std::vector<Tensor*> targets, std::vector<int64_t> shape) {
    specs.push_back(Spec(std::move(name), std::move(targets), std::move(shape)));
    return &specs.back();
  };
  // A norm stored as 1 + w.
  auto norm = [&](std::string name, Tensor* target, int64_t size) {
    add(std::move(name), {target}, {size})->offset = 1.0f;
  };
  // Value heads of `block` rows (or columns) from `first` in tiled order.
  auto tile = [&](TensorSpec* spec, int64_t first, int64_t block, bool columns = false) {
    if (!tiled) return;
    spec->read = [=](const Tensor& t, const std::string&) {
      return ReorderValueHeads(t, first, block, nk, nv, /*to_tiled=*/false, columns);
    };
    spec->write = [=](const Tensor& t) {
      return ReorderValueHeads(t, first, block, nk, nv, /*to_tiled=*/true, columns);
    };
  };
  add("token_embd.weight", {&w.token_embedding}, {V, D});
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& lw = w.layers[l];
    auto at = [l](const char* name) { return fmt::format("blk.{}.{}", l, name); };
    norm(at("attn_norm.weight"), &lw.attn_norm, D);
    norm(at("post_attention_norm.weight"), &lw.ffn_norm, D);
    if (c.LinearLayer(l)) {
      TensorSpec* qkv = add(at("attn_qkv.weight"), {&lw.lin_wq, &lw.lin_wk, &lw.lin_wv}, {C, D});
      qkv->fused_rows = {Kd, Kd, Vd};
      tile(qkv, 2 * Kd, dv);
      tile(add(at("attn_gate.weight"), {&lw.lin_wz}, {Vd, D}), 0, dv);
      if (qwen35) {
        tile(add(at("ssm_beta.weight"), {&lw.lin_wb}, {nv, D}), 0, 1);
        tile(add(at("ssm_alpha.weight"), {&lw.lin_wa}, {nv, D}), 0, 1);
      } else {  // in_proj_ba's layout: per key head g, [b of its r value heads | a of them]
        TensorSpec* ba = add(at("ssm_ba.weight"), {&lw.lin_wb, &lw.lin_wa}, {2 * nv, D});
        ba->fused_groups = nk;
        ba->fused_rows = {r, r};
      }
      tile(add(at("ssm_conv1d.weight"), {&lw.lin_conv}, {C, c.linear_conv}), 2 * Kd, dv);
      tile(add(at("ssm_dt.bias"), {&lw.lin_dt_bias}, {nv}), 0, 1);
      // ssm_a = -exp(A_log) (no ".weight"); the model keeps A_log.
      TensorSpec* a = add(at("ssm_a"), {&lw.lin_a_log}, {nv});
      a->read = [=](const Tensor& t, const std::string& where) {
        Tensor out = Tensor::Zeros(t.shape());
        for (int64_t i = 0; i < t.numel(); ++i) {
          if (!(t[i] < 0.0f) || !std::isfinite(t[i]))
            Fail("{} holds {} at element {}: llama.cpp stores -exp(A_log) there, below zero", where,
                 t[i], i);
          out[i] = static_cast<float>(std::log(-static_cast<double>(t[i])));
        }
        return tiled ? ReorderValueHeads(out, 0, 1, nk, nv, false) : out;
      };
      a->write = [=](const Tensor& t) {
        Tensor out = tiled ? ReorderValueHeads(t, 0, 1, nk, nv, true) : t.Copy();
        for (int64_t i = 0; i < out.numel(); ++i)
          out[i] = static_cast<float>(-std::exp(static_cast<double>(out[i])));
        return out;
      };
      add(at("ssm_norm.weight"), {&lw.lin_norm}, {dv});  // plain w, not 1 + w
      tile(add(at("ssm_out.weight"), {&lw.lin_out}, {D, Vd}), 0, dv, /*columns=*/true);
    } else {
      // Per head [query | gate], as Hugging Face's q_proj.
      TensorSpec* q = add(at("attn_q.weight"), {&lw.wq, &lw.attn_gate}, {2 * H * Dh, D});
      q->fused_groups = static_cast<int>(H);
      q->fused_rows = {Dh, Dh};
      add(at("attn_k.weight"), {&lw.wk}, {c.kv_dim(), D});
      add(at("attn_v.weight"), {&lw.wv}, {c.kv_dim(), D});
      add(at("attn_output.weight"), {&lw.wo}, {D, H * Dh});
      norm(at("attn_q_norm.weight"), &lw.q_norm, Dh);
      norm(at("attn_k_norm.weight"), &lw.k_norm, Dh);
    }
    if (!c.MoeLayer(l)) {
      const int64_t F = c.FfnWidth(l);
      add(at("ffn_gate.weight"), {&lw.w1}, {F, D});
      add(at("ffn_up.weight"), {&lw.w3}, {F, D});
      add(at("ffn_down.weight"), {&lw.w2}, {D, F});
      continue;
    }
    const int64_t E = c.n_experts, F = c.hidden_dim, Fs = c.shared_expert_hidden_dim;
    add(at("ffn_gate_inp.weight"), {&lw.moe_router}, {E, D});
    // Stacked experts: plain (E, rows, cols) tensors, kept in their stored type where they can be.
    // Indices, not pointers: a later add may move the specs.
    const size_t gate = specs.size();
    add(at("ffn_gate_exps.weight"), {&lw.moe_w1}, {E, F, D});
    add(at("ffn_up_exps.weight"), {&lw.moe_w3}, {E, F, D});
    add(at("ffn_down_exps.weight"), {&lw.moe_w2}, {E, D, F});
    if (qwen35 && lw.moe_w1.empty()) {
      // Reading: either gate and up, or both fused (the family's reader checks one is there).
      specs[gate].optional = specs[gate + 1].optional = true;
      map.slices.push_back(Tensor());
      Tensor* gate_up = &map.slices.back();
      add(at("ffn_gate_up_exps.weight"), {gate_up}, {E, 2 * F, D})->optional = true;
      map.after_bind.push_back([gate_up, &lw, E, F, D] {
        if (gate_up->empty() || !lw.moe_w1.empty()) return;
        SplitExpertGateUp(gate_up, lw, E, F, D);
      });
    }
    add(at("ffn_gate_inp_shexp.weight"), {&lw.shared_expert_gate}, {D});
    add(at("ffn_gate_shexp.weight"), {&lw.w1}, {Fs, D});
    add(at("ffn_up_shexp.weight"), {&lw.w3}, {Fs, D});
    add(at("ffn_down_shexp.weight"), {&lw.w2}, {D, Fs});
  }
  norm("output_norm.weight", &w.final_norm, D);
  if (!c.tied_embeddings) add("output.weight", {&w.lm_head}, {V, D});
  return map;
}

void SplitExpertGateUp(Tensor* gate_up, LayerWeights& lw, int64_t E, int64_t F, int64_t D) {
  lw.moe_w1 = Tensor::Zeros({E, F, D});
  lw.moe_w3 = Tensor::Zeros({E, F, D});
  for (int64_t e = 0; e < E; ++e) {
    std::memcpy(lw.moe_w1.data() + e * F * D, gate_up->data() + e * 2 * F * D,
                sizeof(float) * F * D);
    std::memcpy(lw.moe_w3.data() + e * F * D, gate_up->data() + (e * 2 + 1) * F * D,
                sizeof(float) * F * D);
  }
  *gate_up = Tensor();
}

}  // namespace ss
