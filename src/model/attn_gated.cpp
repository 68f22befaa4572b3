// attention=gated: gated attention (Qiu et al. 2025, arXiv 2505.06708, their best position "G1";
// Qwen3-Next's gate): each head's output is multiplied elementwise by a sigmoid gate of the block's
// normed input before o_proj,
//   z' = z * g,  g = sigmoid(x_n W_g^T),  W_g (H*Dh, D), decayed like the projections;
// backward: dz = dz' * g, d(x_n W_g^T) = dz' * z * g (1 - g). The rows are plain softmax.
//
// Stored as model.layers.N.self_attn.output_gate.weight with "sinkscope_attn_output_gate": true
// (sinkscope's extension; Qwen3-Next keeps the same rows inside q_proj, per head [q | gate], which
// a converter interleaves; GGUF: the blk.N.attn_output_gate.weight tensors mark it). The hook
// blocks.L.attn.hook_gate shows the gate; analyze and the telemetry report its mean at position 0
// and elsewhere.
#include <cmath>
#include <type_traits>

#include "kernels/vecmath.h"
#include "model/attention.h"

namespace ss {

namespace {

template <typename Real>
void Gate(Real* g, int64_t n) {
  if constexpr (std::is_same_v<Real, float>) {
    Sigmoid(g, g, n);  // the vectorised kernel
  } else {
    for (int64_t i = 0; i < n; ++i) g[i] = Real(1) / (Real(1) + std::exp(-g[i]));
  }
}

template <typename Real>
void GateBackward(const Real* g, const Real* z, Real* dz, Real* d_pre, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    d_pre[i] = dz[i] * z[i] * g[i] * (Real(1) - g[i]);
    dz[i] *= g[i];
  }
}

}  // namespace

std::span<const AttnVariant* const> AttnVariants_gated() {
  static const std::vector<AttnParam> params = {
      {"self_attn.output_gate.weight", "attn_output_gate.weight", AttnParam::Shape::kGate,
       &LayerWeights::attn_gate, /*rope_rows=*/false, /*decay=*/true, /*zero_init=*/false}};
  static const AttnVariant gated{
      .name = "gated",
      .feature = "output gate per head (gated attention)",
      .flag = &ModelConfig::attn_output_gate,
      .flag_name = "attn_output_gate",
      .key = {"sinkscope_attn_output_gate", nullptr},
      .gguf_tensor = "blk.0.attn_output_gate.weight",
      .rule = SoftmaxRule,
      .gate_param = 0,
      .params = params,
      .f32 = {.gate = Gate<float>, .gate_backward = GateBackward<float>},
      .f64 = {.gate = Gate<double>, .gate_backward = GateBackward<double>}};
  static const AttnVariant* const all[] = {&gated};
  return all;
}

}  // namespace ss
