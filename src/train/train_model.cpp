#include "train/train_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "common/error.h"
#include "train/rng.h"

namespace ss::train {

namespace {
template <typename Real>
void Resize(std::vector<Real>& v, int64_t n) {
  v.assign(static_cast<size_t>(n), Real(0));
}
template <typename Real>
bool AllFinite(const std::vector<Real>& v) {
  for (Real x : v)
    if (!std::isfinite(x)) return false;
  return true;
}
}  // namespace

template <typename Real>
void TrainModel<Real>::Linear(const Real* x, const Real* w, Real* y, int N, int in, int out) {
  if constexpr (std::is_same_v<Real, float>) {
    if (bf16_) return bf16_linear_.Forward(x, w, y, N, in, out);
  }
  LinearForward(x, w, y, N, in, out);
}

// Two projections of the same x (q and k, the MLP's gate and up) through RunSideBySide
// (grad_ops.h), except on bf16 weights, whose products are not sgemm's.
template <typename Real>
void TrainModel<Real>::LinearPair(const Real* x, const Real* wa, Real* ya, int out_a,
                                  const Real* wb, Real* yb, int out_b, int N, int in) {
  bool packed = false;
  if constexpr (std::is_same_v<Real, float>) packed = bf16_;
  if (packed) {
    Linear(x, wa, ya, N, in, out_a);
    Linear(x, wb, yb, N, in, out_b);
    return;
  }
  RunSideBySide(
      int64_t(N) * in * std::min(out_a, out_b), [&] { LinearForward(x, wa, ya, N, in, out_a); },
      [&] { LinearForward(x, wb, yb, N, in, out_b); });
}

template <typename Real>
void TrainModel<Real>::LinearBack(const Real* dy, const Real* x, const Real* w, Real* dx, Real* dw,
                                  int N, int in, int out, bool accumulate_dx) {
  if constexpr (std::is_same_v<Real, float>) {
    if (bf16_) {
      if (dx) bf16_linear_.BackwardInput(dy, w, dx, N, in, out, accumulate_dx);
      LinearBackward(dy, x, w, static_cast<Real*>(nullptr), dw, N, in, out);
      return;
    }
  }
  LinearBackward(dy, x, w, dx, dw, N, in, out, accumulate_dx);
}

template <typename Real>
TrainModel<Real>::TrainModel(const TrainConfig& config, int batch, int seq_len)
    : config_(config),
      variant_(FindAttnVariant(config.attention, "attention")),
      layout_(ParamLayout::Build(config)),
      B_(batch),
      T_(seq_len),
      N_(batch * seq_len),
      D_(config.dim),
      H_(config.n_heads),
      Hkv_(config.n_kv_heads),
      Dh_(config.dim / config.n_heads),
      F_(config.EffectiveHiddenDim()),
      V_(config.vocab_size),
      E_(config.n_experts),
      K_(config.n_experts_per_tok),
      rope_kind_(config.rope == "interleaved" ? RopeKind::kInterleaved : RopeKind::kHalf),
      rope_(seq_len, config.dim / config.n_heads, config.rope_theta) {
  Resize(params, layout_.total);
  Resize(grads, layout_.total);
  bf16_ = std::is_same_v<Real, float> && config.precision == "bf16";
  const int64_t N = N_, qd = int64_t(H_) * Dh_, kvd = int64_t(Hkv_) * Dh_;
  acts_.resize(config.n_layers);
  for (auto& a : acts_) {
    Resize(a.x_in, N * D_);
    Resize(a.xn1, N * D_);
    Resize(a.rstd1, N);
    if (config.qk_norm) {
      Resize(a.q_pre, N * qd);
      Resize(a.k_pre, N * kvd);
      Resize(a.q_rstd, N * H_);
      Resize(a.k_rstd, N * Hkv_);
    }
    Resize(a.q, N * qd);
    Resize(a.k, N * kvd);
    Resize(a.v, N * kvd);
    Resize(a.probs, int64_t(B_) * H_ * T_ * T_);
    Resize(a.z, N * qd);
    if (variant_.rule().SavesRow()) Resize(a.attn_saved, int64_t(B_) * H_ * T_ * T_);
    if (variant_.gate_param >= 0) {
      Resize(a.gate, N * qd);
      Resize(a.zg, N * qd);
    }
    if (variant_.slot != AttnSlot::kNone) {
      Resize(a.slot_p, int64_t(B_) * H_ * T_);
      Resize(a.slot_logits, int64_t(B_) * H_ * T_);
    }
    if (variant_.slot == AttnSlot::kPerQuery) Resize(a.q_unrot, N * qd);
    Resize(a.x_mid, N * D_);
    Resize(a.xn2, N * D_);
    Resize(a.rstd2, N);
    if (E_ == 0) {
      Resize(a.h1, N * F_);
      Resize(a.h3, N * F_);
      Resize(a.g, N * F_);
    } else {
      Resize(a.router_probs, N * E_);
      a.topk_expert.assign(N * K_, 0);
      Resize(a.topk_weight, N * K_);
      a.rows.resize(E_);
      a.ex_in.resize(E_);
      a.ex_h1.resize(E_);
      a.ex_h3.resize(E_);
      a.ex_g.resize(E_);
      a.ex_y.resize(E_);
      Resize(a.counts, E_);
    }
  }
  Resize(x_final_, N * D_);
  Resize(xnf_, N * D_);
  Resize(rstdf_, N);
  Resize(probs_, N * V_);
  Resize(dx_, N * D_);
  Resize(dxn_, N * D_);
  Resize(dq_, N * qd);
  Resize(dk_, N * kvd);
  Resize(dv_, N * kvd);
  Resize(dz_, N * qd);
  if (variant_.gate_param >= 0) Resize(dgate_, N * qd);
  if (variant_.slot != AttnSlot::kNone) Resize(dslot_, int64_t(B_) * H_ * T_);
  Resize(dtmp_, N * std::max<int64_t>(D_, qd));
  if (E_ == 0) {
    Resize(dh1_, N * F_);
    Resize(dh3_, N * F_);
    Resize(dg_, N * F_);
  }
  tokens_.resize(N);
  targets_.resize(N);
}

template <typename Real>
void TrainModel<Real>::InitParams(uint64_t seed) {
  Rng rng(seed);
  const double residual_scale = 1.0 / std::sqrt(2.0 * config_.n_layers);
  // The attention variant's tensors that start at 0 (sink logits: a key scored 0; a kv-bias slot at
  // k* = v* = 0, softmax1 at init); the others start as projections do.
  std::vector<int64_t> zeros;
  for (const LayerOffsets& o : layout_.layers)
    for (size_t i = 0; i < o.attn.size(); ++i)
      if (variant_.params[i].zero_init) zeros.push_back(o.attn[i]);
  for (const ParamTensor& t : layout_.tensors) {
    Real* p = params.data() + t.offset;
    if (std::find(zeros.begin(), zeros.end(), t.offset) != zeros.end()) {
      std::fill(p, p + t.numel, Real(0));
      continue;
    }
    if (t.shape.size() == 1) {  // norm gains
      std::fill(p, p + t.numel, Real(1));
      continue;
    }
    double std_dev = config_.init_std;
    if (t.name.find("o_proj") != std::string::npos || t.name.find("down_proj") != std::string::npos)
      std_dev *= residual_scale;
    for (int64_t i = 0; i < t.numel; ++i) p[i] = static_cast<Real>(rng.Normal() * std_dev);
  }
}

template <typename Real>
AttnRows<Real> TrainModel<Real>::Rows(int l) {
  const LayerOffsets& o = layout_.layers[l];
  LayerActs& a = acts_[l];
  AttnRows<Real> r;
  r.rule = &variant_.rule();
  if (variant_.slot != AttnSlot::kNone) {
    r.slot_logits = a.slot_logits.data();
    r.slot_probs = a.slot_p.data();
  }
  if (variant_.slot_value >= 0) r.slot_values = params.data() + o.attn[variant_.slot_value];
  if (!a.attn_saved.empty()) r.saved = a.attn_saved.data();
  return r;
}

template <typename Real>
std::vector<const Real*> TrainModel<Real>::AttnParams(int l) const {
  std::vector<const Real*> out;
  for (int64_t off : layout_.layers[l].attn) out.push_back(params.data() + off);
  return out;
}

template <typename Real>
std::vector<Real*> TrainModel<Real>::AttnGrads(int l) {
  std::vector<Real*> out;
  for (int64_t off : layout_.layers[l].attn) out.push_back(grads.data() + off);
  return out;
}

template <typename Real>
double TrainModel<Real>::Forward(const int* tokens, const int* targets) {
  const int N = N_, D = D_, H = H_, Hkv = Hkv_, Dh = Dh_, F = F_, V = V_;
  const int qd = H * Dh, kvd = Hkv * Dh;
  const float eps = config_.norm_eps;
  std::copy(tokens, tokens + N, tokens_.begin());
  std::copy(targets, targets + N, targets_.begin());
  const Real* P = params.data();

  // Embedding: x[n] = E[token[n]].
  Real* x = acts_.empty() ? x_final_.data() : acts_[0].x_in.data();
  for (int n = 0; n < N; ++n) {
    SS_ASSERT(tokens[n] >= 0 && tokens[n] < V && targets[n] >= 0 && targets[n] < V);
    std::memcpy(x + int64_t(n) * D, P + layout_.embed + int64_t(tokens[n]) * D, sizeof(Real) * D);
  }
  aux_loss_ = 0;
  for (int l = 0; l < config_.n_layers; ++l) {
    const LayerOffsets& o = layout_.layers[l];
    LayerActs& a = acts_[l];
    Real* x_out = l + 1 < config_.n_layers ? acts_[l + 1].x_in.data() : x_final_.data();
    // Attention sublayer: x_mid = x + Wo Attn(RoPE(norm(Wq xn)), RoPE(norm(Wk xn)), Wv xn).
    RmsNormForward(a.x_in.data(), P + o.attn_norm, a.xn1.data(), a.rstd1.data(), N, D, eps);
    if (config_.qk_norm) {
      LinearPair(a.xn1.data(), P + o.wq, a.q_pre.data(), qd, P + o.wk, a.k_pre.data(), kvd, N, D);
      RmsNormForward(a.q_pre.data(), P + o.q_norm, a.q.data(), a.q_rstd.data(), N * H, Dh, eps);
      RmsNormForward(a.k_pre.data(), P + o.k_norm, a.k.data(), a.k_rstd.data(), N * Hkv, Dh, eps);
    } else {
      LinearPair(a.xn1.data(), P + o.wq, a.q.data(), qd, P + o.wk, a.k.data(), kvd, N, D);
    }
    Linear(a.xn1.data(), P + o.wv, a.v.data(), N, D, kvd);
    // The variant's slot logits: from the query before RoPE (kv-bias), or each head's logit.
    if (variant_.slot == AttnSlot::kPerQuery) {
      std::copy(a.q.begin(), a.q.end(), a.q_unrot.begin());
      variant_.Ops<Real>().slot_logits(AttnParams(l).data(), a.q_unrot.data(), a.slot_logits.data(),
                                       Shape());
    } else if (variant_.slot == AttnSlot::kPerHead) {
      BroadcastHeadSlot(P + o.attn[0], a.slot_logits.data(), Shape());
    }
    RopeApply(a.q.data(), rope_, N, H, Dh, rope_kind_, false);
    RopeApply(a.k.data(), rope_, N, Hkv, Dh, rope_kind_, false);
    AttentionForward(a.q.data(), a.k.data(), a.v.data(), a.probs.data(), a.z.data(), B_, T_, H, Hkv,
                     Dh, Rows(l));
    const Real* z_out = a.z.data();
    if (variant_.gate_param >= 0) {  // an output gate of xn1 Wg^T, elementwise per head dimension
      Linear(a.xn1.data(), P + o.attn[variant_.gate_param], a.gate.data(), N, D, qd);
      variant_.Ops<Real>().gate(a.gate.data(), int64_t(N) * qd);
      for (int64_t i = 0; i < int64_t(N) * qd; ++i) a.zg[i] = a.z[i] * a.gate[i];
      z_out = a.zg.data();
    }
    Linear(z_out, P + o.wo, a.x_mid.data(), N, qd, D);
    for (int64_t i = 0; i < int64_t(N) * D; ++i) a.x_mid[i] += a.x_in[i];
    // FFN sublayer: x_out = x_mid + FFN(norm(x_mid)).
    RmsNormForward(a.x_mid.data(), P + o.ffn_norm, a.xn2.data(), a.rstd2.data(), N, D, eps);
    if (E_ == 0) {
      LinearPair(a.xn2.data(), P + o.w1, a.h1.data(), F, P + o.w3, a.h3.data(), F, N, D);
      SwigluForward(a.h1.data(), a.h3.data(), a.g.data(), int64_t(N) * F);
      Linear(a.g.data(), P + o.w2, x_out, N, F, D);
    } else {
      MoeForward(l, a.xn2.data(), x_out);
    }
    for (int64_t i = 0; i < int64_t(N) * D; ++i) x_out[i] += a.x_mid[i];
  }
  // Head: logits = norm(x) W_head^T, mean cross-entropy.
  RmsNormForward(x_final_.data(), P + layout_.final_norm, xnf_.data(), rstdf_.data(), N, D, eps);
  Linear(xnf_.data(), P + layout_.lm_head, probs_.data(), N, D, V);
  ce_loss_ = CrossEntropyForward(probs_.data(), targets, N, V);
  return ce_loss_ + (E_ > 0 ? config_.aux_loss_coef * aux_loss_ : 0.0);
}

// Router and experts of layer l on in (N, D) -> out (N, D) (overwritten).
//   probs = softmax(in Wr^T) (N, E); top-k experts per token (lower index first on ties);
//   weight w = p (or p / sum of the k selected p when norm_topk_prob);
//   out[t] = sum_j w_tj * Expert_{e_tj}(in[t]), Expert(x) = W2 (silu(W1 x) * W3 x).
//   Load-balancing loss (Fedus et al. 2021, "Switch Transformers", eq. 4, generalised to top-k):
//   aux = E * sum_e f_e P_e, f_e = share of the N*k assignments routed to e, P_e = mean_t p_te;
//   1 when balanced. Its gradient flows through P_e only (f_e is a count).
template <typename Real>
void TrainModel<Real>::MoeForward(int l, const Real* in, Real* out) {
  const int N = N_, D = D_, F = F_, E = E_, K = K_;
  const LayerOffsets& o = layout_.layers[l];
  LayerActs& a = acts_[l];
  const Real* P = params.data();
  LinearForward(in, P + o.router, a.router_probs.data(), N, D, E);
  std::vector<int> order(E);
  for (int e = 0; e < E; ++e) a.rows[e].clear();
  std::fill(a.counts.begin(), a.counts.end(), Real(0));
  for (int n = 0; n < N; ++n) {
    Real* p = a.router_probs.data() + int64_t(n) * E;
    const Real mx = *std::max_element(p, p + E);
    Real sum = 0;
    for (int e = 0; e < E; ++e) {
      p[e] = std::exp(p[e] - mx);
      sum += p[e];
    }
    for (int e = 0; e < E; ++e) p[e] /= sum;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return p[x] > p[y]; });
    Real norm = 0;
    for (int j = 0; j < K; ++j) norm += p[order[j]];
    for (int j = 0; j < K; ++j) {
      const int e = order[j];
      a.topk_expert[int64_t(n) * K + j] = e;
      a.topk_weight[int64_t(n) * K + j] = config_.norm_topk_prob ? p[e] / norm : p[e];
      a.rows[e].push_back(n * K + j);
      a.counts[e] += 1;
    }
  }
  std::fill(out, out + int64_t(N) * D, Real(0));
  for (int e = 0; e < E; ++e) {
    const int ne = static_cast<int>(a.rows[e].size());
    Resize(a.ex_in[e], int64_t(ne) * D);
    Resize(a.ex_h1[e], int64_t(ne) * F);
    Resize(a.ex_h3[e], int64_t(ne) * F);
    Resize(a.ex_g[e], int64_t(ne) * F);
    Resize(a.ex_y[e], int64_t(ne) * D);
    if (ne == 0) continue;
    for (int r = 0; r < ne; ++r)
      std::memcpy(&a.ex_in[e][int64_t(r) * D], in + int64_t(a.rows[e][r] / K) * D,
                  sizeof(Real) * D);
    LinearForward(a.ex_in[e].data(), P + o.ew1 + int64_t(e) * F * D, a.ex_h1[e].data(), ne, D, F);
    LinearForward(a.ex_in[e].data(), P + o.ew3 + int64_t(e) * F * D, a.ex_h3[e].data(), ne, D, F);
    SwigluForward(a.ex_h1[e].data(), a.ex_h3[e].data(), a.ex_g[e].data(), int64_t(ne) * F);
    LinearForward(a.ex_g[e].data(), P + o.ew2 + int64_t(e) * D * F, a.ex_y[e].data(), ne, F, D);
  }
  // Combine in token order (each output row written by one token, experts in slot order).
  for (int n = 0; n < N; ++n) {
    Real* orow = out + int64_t(n) * D;
    for (int j = 0; j < K; ++j) {
      const int e = a.topk_expert[int64_t(n) * K + j];
      const int r = static_cast<int>(
          std::lower_bound(a.rows[e].begin(), a.rows[e].end(), n * K + j) - a.rows[e].begin());
      const Real w = a.topk_weight[int64_t(n) * K + j];
      const Real* y = &a.ex_y[e][int64_t(r) * D];
      for (int d = 0; d < D; ++d) orow[d] += w * y[d];
    }
  }
  // Counts and probability sums of the global batch (N_g = ranks x N tokens): summed over ranks
  // when training data-parallel, so f_e and P_e (and the gradient through P_e, which uses f_e) are
  // the single-process values.
  std::vector<double> sums(2 * E, 0.0);  // counts (E), then sum_t p_te (E)
  for (int e = 0; e < E; ++e) {
    sums[e] = a.counts[e];
    for (int n = 0; n < N; ++n) sums[E + e] += a.router_probs[int64_t(n) * E + e];
  }
  if (all_reduce_sum && ranks > 1) all_reduce_sum(sums.data(), 2 * E);
  const double Ng = double(N) * ranks;
  double aux = 0;
  for (int e = 0; e < E; ++e) {
    a.counts[e] = static_cast<Real>(sums[e]);
    aux += (sums[e] / (Ng * K)) * (sums[E + e] / Ng);
  }
  aux_loss_ += E * aux;
}

// Backward of MoeForward: dout (N, D) -> din (N, D) (added).
template <typename Real>
void TrainModel<Real>::MoeBackward(int l, const Real* dout, Real* din) {
  const int N = N_, D = D_, F = F_, E = E_, K = K_;
  const LayerOffsets& o = layout_.layers[l];
  LayerActs& a = acts_[l];
  const Real* P = params.data();
  Real* G = grads.data();
  // d(weight_tj) = dout[t] . y_tj, and the experts' output gradients dy = w * dout[t].
  std::vector<Real> dweight(int64_t(N) * K, Real(0));
  std::vector<Real> dy, dh1, dh3, dg, dxe;
  for (int e = 0; e < E; ++e) {
    const int ne = static_cast<int>(a.rows[e].size());
    if (ne == 0) continue;
    Resize(dy, int64_t(ne) * D);
    for (int r = 0; r < ne; ++r) {
      const int slot = a.rows[e][r], n = slot / K;
      const Real w = a.topk_weight[slot];
      const Real* drow = dout + int64_t(n) * D;
      const Real* y = &a.ex_y[e][int64_t(r) * D];
      Real dot = 0;
      for (int d = 0; d < D; ++d) {
        dy[int64_t(r) * D + d] = w * drow[d];
        dot += drow[d] * y[d];
      }
      dweight[slot] = dot;
    }
    Resize(dg, int64_t(ne) * F);
    Resize(dh1, int64_t(ne) * F);
    Resize(dh3, int64_t(ne) * F);
    Resize(dxe, int64_t(ne) * D);
    LinearBackward(dy.data(), a.ex_g[e].data(), P + o.ew2 + int64_t(e) * D * F, dg.data(),
                   G + o.ew2 + int64_t(e) * D * F, ne, F, D);
    SwigluBackward(dg.data(), a.ex_h1[e].data(), a.ex_h3[e].data(), dh1.data(), dh3.data(),
                   int64_t(ne) * F);
    LinearBackward(dh1.data(), a.ex_in[e].data(), P + o.ew1 + int64_t(e) * F * D, dxe.data(),
                   G + o.ew1 + int64_t(e) * F * D, ne, D, F);
    LinearBackward(dh3.data(), a.ex_in[e].data(), P + o.ew3 + int64_t(e) * F * D, dxe.data(),
                   G + o.ew3 + int64_t(e) * F * D, ne, D, F, /*accumulate_dx=*/true);
    for (int r = 0; r < ne; ++r) {
      Real* drow = din + int64_t(a.rows[e][r] / K) * D;
      for (int d = 0; d < D; ++d) drow[d] += dxe[int64_t(r) * D + d];
    }
  }
  // Router: through the (renormalised) top-k weights, plus the auxiliary loss, then the softmax.
  std::vector<Real> dlogits(int64_t(N) * E);
  // d aux / d p_te = E f_e / N_g with the global f_e; each rank's gradient is later averaged over
  // the ranks (x 1/ranks), so it carries ranks x that: E counts_e / (N_g K) / N.
  const double aux_scale = config_.aux_loss_coef * E / (double(N) * ranks * K) / N;
  for (int n = 0; n < N; ++n) {
    const Real* p = a.router_probs.data() + int64_t(n) * E;
    Real* dl = dlogits.data() + int64_t(n) * E;
    std::vector<Real> dp(E, Real(0));
    for (int e = 0; e < E; ++e) dp[e] = static_cast<Real>(aux_scale * a.counts[e]);
    if (config_.norm_topk_prob) {
      // w_j = p_j / S, S = sum_i p_i over the k selected: dp_j += (dw_j - sum_i dw_i w_i) / S.
      Real S = 0, dot = 0;
      for (int j = 0; j < K; ++j) {
        S += p[a.topk_expert[int64_t(n) * K + j]];
        dot += dweight[int64_t(n) * K + j] * a.topk_weight[int64_t(n) * K + j];
      }
      for (int j = 0; j < K; ++j)
        dp[a.topk_expert[int64_t(n) * K + j]] += (dweight[int64_t(n) * K + j] - dot) / S;
    } else {
      for (int j = 0; j < K; ++j)
        dp[a.topk_expert[int64_t(n) * K + j]] += dweight[int64_t(n) * K + j];
    }
    Real sum = 0;
    for (int e = 0; e < E; ++e) sum += p[e] * dp[e];
    for (int e = 0; e < E; ++e) dl[e] = p[e] * (dp[e] - sum);
  }
  LinearBackward(dlogits.data(), a.xn2.data(), P + o.router, din, G + o.router, N, D, E,
                 /*accumulate_dx=*/true);
}

template <typename Real>
void TrainModel<Real>::Backward() {
  const int N = N_, D = D_, H = H_, Hkv = Hkv_, Dh = Dh_, F = F_, V = V_;
  const int qd = H * Dh, kvd = Hkv * Dh;
  const Real* P = params.data();
  Real* G = grads.data();
  std::fill(grads.begin(), grads.end(), Real(0));

  // Head.
  CrossEntropyBackward(probs_.data(), targets_.data(), N, V, Real(1) / N);
  std::fill(dxn_.begin(), dxn_.end(), Real(0));
  LinearBack(probs_.data(), xnf_.data(), P + layout_.lm_head, dxn_.data(), G + layout_.lm_head, N,
             D, V);
  std::fill(dx_.begin(), dx_.end(), Real(0));
  RmsNormBackward(dxn_.data(), x_final_.data(), P + layout_.final_norm, rstdf_.data(), dx_.data(),
                  G + layout_.final_norm, N, D);

  // dx_ holds d loss / d x_out of the current layer throughout.
  for (int l = config_.n_layers - 1; l >= 0; --l) {
    const LayerOffsets& o = layout_.layers[l];
    LayerActs& a = acts_[l];
    // FFN: x_out = x_mid + FFN(norm(x_mid)); dx_ flows to x_mid unchanged plus through the FFN.
    std::fill(dxn_.begin(), dxn_.end(), Real(0));
    if (E_ == 0) {
      LinearBack(dx_.data(), a.g.data(), P + o.w2, dg_.data(), G + o.w2, N, F, D);
      SwigluBackward(dg_.data(), a.h1.data(), a.h3.data(), dh1_.data(), dh3_.data(),
                     int64_t(N) * F);
      LinearBack(dh1_.data(), a.xn2.data(), P + o.w1, dxn_.data(), G + o.w1, N, D, F);
      LinearBack(dh3_.data(), a.xn2.data(), P + o.w3, dxn_.data(), G + o.w3, N, D, F, true);
    } else {
      MoeBackward(l, dx_.data(), dxn_.data());
    }
    RmsNormBackward(dxn_.data(), a.x_mid.data(), P + o.ffn_norm, a.rstd2.data(), dx_.data(),
                    G + o.ffn_norm, N, D);
    // Attention: x_mid = x_in + Wo z.
    const bool gated = variant_.gate_param >= 0;
    LinearBack(dx_.data(), gated ? a.zg.data() : a.z.data(), P + o.wo, dz_.data(), G + o.wo, N, qd,
               D);
    if (gated)
      variant_.Ops<Real>().gate_backward(a.gate.data(), a.z.data(), dz_.data(), dgate_.data(),
                                         int64_t(N) * qd);
    const bool slot = variant_.slot != AttnSlot::kNone;
    AttentionBackward(dz_.data(), a.q.data(), a.k.data(), a.v.data(), a.probs.data(), dq_.data(),
                      dk_.data(), dv_.data(), B_, T_, H, Hkv, Dh, Rows(l),
                      slot ? dslot_.data() : nullptr,
                      variant_.slot_value >= 0 ? G + o.attn[variant_.slot_value] : nullptr);
    RopeApply(dq_.data(), rope_, N, H, Dh, rope_kind_, true);
    RopeApply(dk_.data(), rope_, N, Hkv, Dh, rope_kind_, true);
    // The slot logits' gradient: into the unrotated query and the variant's tensors (kv-bias), or
    // summed into each head's logit.
    if (variant_.slot == AttnSlot::kPerQuery)
      variant_.Ops<Real>().slot_logits_backward(AttnParams(l).data(), a.q_unrot.data(),
                                                dslot_.data(), dq_.data(), AttnGrads(l).data(),
                                                Shape());
    else if (variant_.slot == AttnSlot::kPerHead)
      HeadSlotBackward(dslot_.data(), G + o.attn[0], Shape());
    std::fill(dxn_.begin(), dxn_.end(), Real(0));
    if (config_.qk_norm) {
      // Through the per-head RMSNorm: dtmp_ = d q_pre, then into the projection.
      std::fill(dtmp_.begin(), dtmp_.begin() + int64_t(N) * qd, Real(0));
      RmsNormBackward(dq_.data(), a.q_pre.data(), P + o.q_norm, a.q_rstd.data(), dtmp_.data(),
                      G + o.q_norm, N * H, Dh);
      LinearBack(dtmp_.data(), a.xn1.data(), P + o.wq, dxn_.data(), G + o.wq, N, D, qd, true);
      std::fill(dtmp_.begin(), dtmp_.begin() + int64_t(N) * kvd, Real(0));
      RmsNormBackward(dk_.data(), a.k_pre.data(), P + o.k_norm, a.k_rstd.data(), dtmp_.data(),
                      G + o.k_norm, N * Hkv, Dh);
      LinearBack(dtmp_.data(), a.xn1.data(), P + o.wk, dxn_.data(), G + o.wk, N, D, kvd, true);
    } else {
      LinearBack(dq_.data(), a.xn1.data(), P + o.wq, dxn_.data(), G + o.wq, N, D, qd, true);
      LinearBack(dk_.data(), a.xn1.data(), P + o.wk, dxn_.data(), G + o.wk, N, D, kvd, true);
    }
    LinearBack(dv_.data(), a.xn1.data(), P + o.wv, dxn_.data(), G + o.wv, N, D, kvd, true);
    if (gated) {
      const int64_t g = o.attn[variant_.gate_param];
      LinearBack(dgate_.data(), a.xn1.data(), P + g, dxn_.data(), G + g, N, D, qd, true);
    }
    RmsNormBackward(dxn_.data(), a.x_in.data(), P + o.attn_norm, a.rstd1.data(), dx_.data(),
                    G + o.attn_norm, N, D);
  }
  // Embedding: serial scatter-add in token order (deterministic).
  for (int n = 0; n < N; ++n) {
    Real* ge = G + layout_.embed + int64_t(tokens_[n]) * D;
    const Real* d = dx_.data() + int64_t(n) * D;
    for (int i = 0; i < D; ++i) ge[i] += d[i];
  }
  // A frozen tensor (softmax1's sink logits) is never trained: its gradient is 0.
  for (const ParamTensor& t : layout_.tensors)
    if (t.frozen) std::fill(G + t.offset, G + t.offset + t.numel, Real(0));
}

template <typename Real>
std::string TrainModel<Real>::FirstNonFiniteActivation() const {
  for (size_t l = 0; l < acts_.size(); ++l) {
    const LayerActs& a = acts_[l];
    const std::pair<const char*, const std::vector<Real>*> items[] = {
        {"resid_pre", &a.x_in},
        {"q", &a.q},
        {"k", &a.k},
        {"v", &a.v},
        {"attn_probs", &a.probs},
        {"z", &a.z},
        {"attn_gate", &a.gate},
        {"resid_mid", &a.x_mid},
        {"mlp_hidden", &a.g},
        {"router_probs", &a.router_probs}};
    for (const auto& [name, vec] : items)
      if (!AllFinite(*vec)) return "blocks." + std::to_string(l) + "." + name;
  }
  if (!AllFinite(x_final_)) return "resid_final";
  if (!AllFinite(probs_)) return "logits";
  return "";
}

template class TrainModel<float>;
template class TrainModel<double>;

}  // namespace ss::train
