// The trainable model: a Llama-style decoder (RMSNorm pre-norm, RoPE, causal GQA, SwiGLU, tied or
// untied embeddings) with an optional Qwen3-MoE-style FFN (softmax router, top-k experts,
// load-balancing auxiliary loss) and optional per-head q/k RMSNorm. Forward saves every
// activation the hand-written backward needs (docs/TRAINING.md lists the formulas).
//
// Templated on the scalar: TrainModel<float> trains, TrainModel<double> is the float64 path of the
// finite-difference gradient checks. Parameters and gradients are flat arrays (train/params.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/attention.h"
#include "train/grad_ops.h"
#include "train/linear_bf16.h"
#include "train/params.h"

namespace ss::train {

template <typename Real>
class TrainModel {
 public:
  // A model for batches of `batch` sequences of `seq_len` tokens.
  TrainModel(const TrainConfig& config, int batch, int seq_len);

  const TrainConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  int batch() const { return B_; }
  int seq_len() const { return T_; }

  std::vector<Real> params;  // (P) every parameter, HF tensor order
  std::vector<Real> grads;   // (P)

  // Gaussian init N(0, init_std) for linear weights and embeddings, with the residual output
  // projections (o_proj, down_proj) scaled by 1/sqrt(2 L) (GPT-2, Radford et al. 2019, sec. 2.3);
  // norm gains 1. Deterministic in `seed`.
  void InitParams(uint64_t seed);

  // tokens, targets (B*T). Returns the training loss: mean cross-entropy over the B*T targets plus
  // aux_loss_coef * the load-balancing loss (MoE). Saves activations for Backward().
  double Forward(const int* tokens, const int* targets);
  // grads = d(loss)/d(params) of the last Forward (overwritten).
  void Backward();

  // Data-parallel training (MPI): sums a double array over every rank in place. When set, the
  // load-balancing loss uses the routing counts and router probabilities of the global batch (so
  // its value and gradient equal the single-process run's), not this rank's slice. Called once
  // per MoE layer per Forward, on every rank.
  std::function<void(double*, int64_t)> all_reduce_sum;
  int ranks = 1;  // the global batch is ranks x this model's B

  double ce_loss() const { return ce_loss_; }
  // After Forward: the cross-entropy of token n (its target's probability under the softmax).
  double TokenLoss(int n) const {
    return -std::log(static_cast<double>(probs_[int64_t(n) * V_ + targets_[n]]));
  }
  double aux_loss() const { return aux_loss_; }  // before the coefficient; 0 for dense
  // Name of the first saved activation holding a NaN or Inf ("" if none), for error messages.
  std::string FirstNonFiniteActivation() const;
  // Logits of the last Forward are turned into probabilities in place; this copies the logits'
  // log-probabilities of row n (for tests).
  const Real* probs() const { return probs_.data(); }

 private:
  // The dense projections and the LM head: LinearForward / LinearBackward, or at --precision bf16
  // (float only) the forward and the input gradient through Bf16Linear (weight gradients f32).
  void Linear(const Real* x, const Real* w, Real* y, int N, int in, int out);
  // ya = x Wa^T and yb = x Wb^T (one input, two weights).
  void LinearPair(const Real* x, const Real* wa, Real* ya, int out_a, const Real* wb, Real* yb,
                  int out_b, int N, int in);
  void LinearBack(const Real* dy, const Real* x, const Real* w, Real* dx, Real* dw, int N, int in,
                  int out, bool accumulate_dx = false);
  struct LayerActs {
    std::vector<Real> x_in;                 // (N, D) residual entering the layer
    std::vector<Real> xn1, rstd1;           // (N, D), (N)
    std::vector<Real> q_pre, k_pre;         // (N, H*Dh), (N, Hkv*Dh) before q/k norm (qk_norm)
    std::vector<Real> q_rstd, k_rstd;       // (N*H), (N*Hkv)
    std::vector<Real> q, k, v;              // (N, H*Dh), (N, Hkv*Dh) x2, after norm and RoPE
    std::vector<Real> probs;                // (B, H, T, T)
    std::vector<Real> z;                    // (N, H*Dh)
    std::vector<Real> attn_saved;           // (B, H, T, T) the rule's saved rows, if it keeps any
    std::vector<Real> gate, zg;             // an output gate (N, H*Dh): the gate and z * gate
    std::vector<Real> slot_p, slot_logits;  // a slot: (B, H, T) its probability and logit
    std::vector<Real> q_unrot;              // a slot logit from the query: it before RoPE (N, H*Dh)
    std::vector<Real> x_mid;                // (N, D)
    std::vector<Real> xn2, rstd2;           // (N, D), (N)
    std::vector<Real> h1, h3, g;            // dense: (N, F) each
    // MoE
    std::vector<Real> router_probs;      // (N, E)
    std::vector<int> topk_expert;        // (N, k)
    std::vector<Real> topk_weight;       // (N, k) the weights applied
    std::vector<std::vector<int>> rows;  // per expert: token*k + slot routed to it, ascending
    std::vector<std::vector<Real>> ex_in, ex_h1, ex_h3, ex_g, ex_y;  // per expert (n_e, D|F)
    std::vector<Real> counts;  // (E) routed assignments per expert, global batch
  };

  // Layer l's rows for AttentionForward / AttentionBackward, and its variant tensors (data, grads).
  AttnRows<Real> Rows(int l);
  std::vector<const Real*> AttnParams(int l) const;
  std::vector<Real*> AttnGrads(int l);
  AttnShape Shape() const { return {B_, T_, H_, Hkv_, Dh_, D_}; }
  void MoeForward(int l, const Real* in, Real* out);
  void MoeBackward(int l, const Real* dout, Real* din);

  TrainConfig config_;
  const AttnVariant& variant_;  // config.attention (model/attention.h)
  ParamLayout layout_;
  int B_, T_, N_, D_, H_, Hkv_, Dh_, F_, V_, E_, K_;
  RopeKind rope_kind_;
  RopeTable rope_;
  std::vector<int> tokens_, targets_;
  std::vector<LayerActs> acts_;
  std::vector<Real> x_final_, xnf_, rstdf_;  // (N, D), (N, D), (N)
  std::vector<Real> probs_;                  // (N, V) logits -> probabilities -> dlogits
  // backward scratch
  std::vector<Real> dx_, dxn_, dq_, dk_, dv_, dz_, dh1_, dh3_, dg_, dtmp_, dgate_;
  std::vector<Real> dslot_;  // a slot: (B, H, T) its logits' gradient
  double ce_loss_ = 0, aux_loss_ = 0;
  bool bf16_ = false;  // config.precision == "bf16" (TrainModel<float> only)
  Bf16Linear bf16_linear_;
};

extern template class TrainModel<float>;
extern template class TrainModel<double>;

}  // namespace ss::train
