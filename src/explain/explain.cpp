#include "explain/explain.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <tuple>

#include "common/error.h"
#include "common/file_util.h"
#include "common/stats.h"
#include "kernels/ops.h"
#include "model/precision.h"

namespace ss::explain {

std::string AblationName(Ablation a) { return a == Ablation::kZero ? "zero" : "mean"; }

std::string Component::Name() const {
  switch (kind) {
    case ComponentKind::kMlp:
      return "mlp." + std::to_string(layer);
    case ComponentKind::kHead:
      return "head." + std::to_string(layer) + "." + std::to_string(head);
    case ComponentKind::kMixer:
      return "mixer." + std::to_string(layer);
    case ComponentKind::kGate:
      return "gate." + std::to_string(layer);
  }
  return "";
}

std::vector<Component> ParseComponents(const std::string& spec, const ModelConfig& config,
                                       const std::string& flag) {
  std::vector<Component> out;
  if (spec.empty()) return out;
  auto number = [&](const std::string& s, const std::string& item) {
    if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), ::isdigit))
      Fail("{}: '{}' in '{}' is not mlp.LAYER or head.LAYER.HEAD", flag, item, spec);
    return std::stoi(s);
  };
  size_t begin = 0;
  while (begin <= spec.size()) {
    size_t end = spec.find(',', begin);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(begin, end - begin);
    Component c;
    std::string rest;
    if (item.rfind("mlp.", 0) == 0) {
      c.kind = ComponentKind::kMlp;
      c.layer = number(item.substr(4), item);
    } else if (item.rfind("mixer.", 0) == 0) {
      c.kind = ComponentKind::kMixer;
      c.layer = number(item.substr(6), item);
    } else if (item.rfind("gate.", 0) == 0) {
      c.kind = ComponentKind::kGate;
      c.layer = number(item.substr(5), item);
    } else if (item.rfind("head.", 0) == 0) {
      c.kind = ComponentKind::kHead;
      rest = item.substr(5);
      const size_t dot = rest.find('.');
      if (dot == std::string::npos)
        Fail("{}: '{}' in '{}' is not head.LAYER.HEAD", flag, item, spec);
      c.layer = number(rest.substr(0, dot), item);
      c.head = number(rest.substr(dot + 1), item);
    } else {
      Fail("{}: '{}' in '{}' is not mlp.LAYER, head.LAYER.HEAD, mixer.LAYER or gate.LAYER", flag,
           item, spec);
    }
    if (c.layer >= config.n_layers)
      Fail("{}: layer {} in '{}' is outside the model's layers 0..{}", flag, c.layer, spec,
           config.n_layers - 1);
    if (c.kind == ComponentKind::kHead && c.head >= config.n_heads)
      Fail("{}: head {} in '{}' is outside the model's heads 0..{}", flag, c.head, spec,
           config.n_heads - 1);
    const bool linear = config.LinearLayer(c.layer);
    if ((c.kind == ComponentKind::kHead || c.kind == ComponentKind::kGate) && linear)
      Fail(
          "{}: layer {} in '{}' is a Gated DeltaNet layer (no heads, no output gate); use mixer.{}",
          flag, c.layer, spec, c.layer);
    if (c.kind == ComponentKind::kMixer && !linear)
      Fail("{}: layer {} in '{}' is not a Gated DeltaNet layer: it has no mixer", flag, c.layer,
           spec);
    if (c.kind == ComponentKind::kGate && !config.attn_output_gate)
      Fail("{}: '{}' in '{}': the model's attention has no output gate", flag, item, spec);
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
    begin = end + 1;
  }
  return out;
}

void CheckOptions(const ExplainOptions& o) {
  if (!(o.eps > 0 && o.eps <= 1)) Fail("--eps: expected a threshold in (0, 1], got {}", o.eps);
  if (!(o.share > 0 && o.share <= 1)) Fail("--share: expected a share in (0, 1], got {}", o.share);
  // The onset layer is the first whose sink rate exceeds the threshold: 1 can never be exceeded.
  if (!(o.onset_threshold > 0 && o.onset_threshold < 1))
    Fail("--onset-threshold: expected a sink rate in (0, 1), got {}", o.onset_threshold);
  if (!(o.amplification_threshold > 0) || !std::isfinite(o.amplification_threshold))
    Fail("--amplification-threshold: expected a norm ratio > 0, got {}", o.amplification_threshold);
  if (o.max_components < 1) Fail("--max-components: expected at least 1, got {}", o.max_components);
  if (o.intervention_samples < 0)
    Fail("--intervention-samples: expected >= 0, got {}", o.intervention_samples);
  if (o.verify_top < 1)
    Fail("--verify-top: expected at least 1 row to measure, got {}", o.verify_top);
  if (o.estimate_samples < 0)
    Fail("--estimate-samples: expected >= 0 (0: every intervention sample), got {}",
         o.estimate_samples);
  if (!(o.confidence >= 0.5 && o.confidence < 1))
    Fail("--confidence: expected a confidence in [0.5, 1), got {}", o.confidence);
}

namespace {

// Intervention samples measured before the stopping rule may end the table (explain.h).
inline constexpr int kMinInterventionSamples = 2;
// 1 - p_i0 below this: the clean logit(p_i0) is taken from the scores, not the probability.
inline constexpr double kSaturated = 1e-3;

double Dot(const float* a, const float* b, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}
double Norm(const float* a, int n) { return std::sqrt(Dot(a, a, n)); }
double SafeCos(double dot, double na, double nb) {
  return na > 0 && nb > 0 ? dot / (na * nb) : 0.0;
}

// median_{i>=1} ||h_i|| of x (T, D): the P0 norm ratio's denominator.
double OthersMedianNorm(const float* x, int T, int D) {
  std::vector<double> norms(T - 1);
  for (int i = 1; i < T; ++i) norms[i - 1] = Norm(x + static_cast<int64_t>(i) * D, D);
  return ss::Median(norms);
}
double NormRatio(double p0_norm, double others_median) {
  return others_median > 0 ? p0_norm / others_median : 0.0;
}

// What one (possibly intervened) forward pass yields for the effect measures.
struct RunMetrics {
  std::vector<int> sink0;             // (L) heads with alpha_0 > eps
  std::vector<int> sink1;             // (L) heads with alpha_1 > eps
  std::vector<double> alpha0;         // (L) sum over the layer's heads of alpha_0
  std::vector<double> p0_ratio;       // (L) ||h'_0|| / median_{i>=1} ||h'_i||
  std::vector<double> p0_norm;        // (L) ||h'_0||
  std::vector<double> others_median;  // (L) median_{i>=1} ||h'_i||
  std::vector<double> slot;     // (L) mean alpha_sink over the layer's heads (learned sink logits)
  std::vector<int> slot_heads;  // (L) heads with alpha_sink > eps
};

// What ablation writes at position 0 into columns [c0, c0 + width) of a (T, row) activation: zero,
// or the mean of rows >= 1 (mean-ablation). out (width) may be row 0 of x itself.
void P0Replacement(const float* x, int64_t T, int64_t row, int64_t c0, int64_t width, Ablation mode,
                   float* out) {
  for (int64_t c = c0; c < c0 + width; ++c) {
    double mean = 0;
    if (mode == Ablation::kMean)
      for (int64_t i = 1; i < T; ++i) mean += x[i * row + c] / double(T - 1);
    out[c - c0] = static_cast<float>(mean);
  }
}

// Where an intervened forward may start: block `layer`, from the clean residual stream entering
// it (prefix: (L, T, D), the clean run's hook_resid_pre of every block), with `clean`'s metrics
// for the blocks before it.
struct Resume {
  int layer = 0;
  const std::vector<float>* prefix = nullptr;
  const RunMetrics* clean = nullptr;
  int64_t block_size = 0;  // T * D
  const float* ResidPre() const { return prefix->data() + layer * block_size; }
};

class Runner {
 public:
  Runner(const Model& model, int T, double eps)
      : model_(model),
        c_(model.config),
        T_(T),
        eps_(eps),
        cache_(KVCache::CreateSingleUse(model.config, T)) {
    stats_.first_k = 2;
  }

  // Runs `tokens` with `hooks` (may be extended with the measuring hook) and reduces the fused
  // statistics to RunMetrics. With `resume`, the forward starts at block resume->layer from the
  // clean residual stream of the same tokens, and blocks before it keep the clean metrics.
  RunMetrics Run(const std::vector<int>& tokens, Hooks hooks, const Resume* resume = nullptr) {
    const int L = c_.n_layers, H = c_.n_heads, D = c_.dim;
    RunMetrics m;
    m.sink0.assign(L, 0);
    m.sink1.assign(L, 0);
    m.alpha0.assign(L, 0.0);
    m.p0_ratio.assign(L, 0.0);
    m.p0_norm.assign(L, 0.0);
    m.others_median.assign(L, 0.0);
    hooks.Add(HookPoint::kResidPost, -1, [&](const HookContext& ctx, Tensor& x) {
      const int l = ctx.layer;
      m.others_median[l] = OthersMedianNorm(x.data(), T_, D);
      m.p0_norm[l] = Norm(x.data(), D);
      m.p0_ratio[l] = NormRatio(m.p0_norm[l], m.others_median[l]);
    });
    const int first = resume ? resume->layer : 0;
    Forward(tokens, &hooks, first, resume ? resume->ResidPre() : nullptr);
    for (int l = 0; l < first; ++l) {
      m.sink0[l] = resume->clean->sink0[l];
      m.sink1[l] = resume->clean->sink1[l];
      m.alpha0[l] = resume->clean->alpha0[l];
      m.p0_ratio[l] = resume->clean->p0_ratio[l];
      m.p0_norm[l] = resume->clean->p0_norm[l];
      m.others_median[l] = resume->clean->others_median[l];
    }
    for (int l = first; l < L; ++l)
      for (int h = 0; h < H && !c_.LinearLayer(l); ++h) {  // a linear layer has no map
        const double a0 = Alpha(l, h, 0);
        m.sink0[l] += a0 > eps_;
        m.alpha0[l] += a0;
        m.sink1[l] += Alpha(l, h, 1) > eps_;
      }
    if (c_.HasSinkSlot()) {  // the mass on each head's learned sink slot (the blocks run this pass)
      m.slot.assign(L, 0.0);
      m.slot_heads.assign(L, 0);
      for (int l = 0; l < L; ++l)
        for (int h = 0; h < H; ++h) {
          const double a = l < first ? 0.0 : SlotMass(l, h);
          m.slot[l] += a / H;
          m.slot_heads[l] += a > eps_;
        }
      for (int l = 0; l < first; ++l)
        m.slot[l] = resume->clean->slot[l], m.slot_heads[l] = resume->clean->slot_heads[l];
    }
    ++passes;
    blocks += L - first;
    return m;
  }

  void Forward(const std::vector<int>& tokens, const Hooks* hooks, int first_layer = 0,
               const float* resid_pre = nullptr) {
    SS_ASSERT(static_cast<int>(tokens.size()) == T_);
    cache_.Clear();
    ForwardRequest req;
    req.tokens = tokens;
    req.logits = LogitsMode::kNone;
    req.hooks = hooks;
    req.first_layer = first_layer;
    req.resid_pre = resid_pre;
    req.stats = &stats_;
    ss::Forward(model_, cache_, state_, req);
  }

  // alpha_k^{l,h} of the last run, from the fused statistics (k < 2).
  double Alpha(int l, int h, int k) const {
    double s = 0;
    for (int i = k; i < T_; ++i) s += Prob(l, h, i, k);
    return s / (T_ - k);
  }
  // p_ik^{l,h} of the last run: query i's attention on key k < 2.
  float Prob(int l, int h, int i, int k) const {
    return stats_.first_k_probs[((static_cast<int64_t>(l) * c_.n_heads + h) * T_ + i) * 2 + k];
  }
  // Query i's probability on the slot (learned sink logit or kv-bias) in the last run; 0 without.
  float SlotProb(int l, int h, int i) const {
    if (stats_.sink_prob.empty()) return 0.0f;
    return stats_.sink_prob[(static_cast<int64_t>(l) * c_.n_heads + h) * T_ + i];
  }
  // alpha_sink^{l,h} of the last run: mean over queries of the learned slot's mass.
  double SlotMass(int l, int h) const {
    const float* p = stats_.sink_prob.data() + (static_cast<int64_t>(l) * c_.n_heads + h) * T_;
    double s = 0;
    for (int i = 0; i < T_; ++i) s += p[i];
    return s / T_;
  }
  const float* SumSq(int l, int h) const {
    return stats_.sum_sq.data() + (static_cast<int64_t>(l) * c_.n_heads + h) * T_;
  }

  int64_t passes = 0;
  int64_t blocks = 0;  // transformer blocks evaluated over all passes

 private:
  const Model& model_;
  const ModelConfig& c_;
  int T_;
  double eps_;
  KVCache cache_;
  RunState state_;
  AttnStatsBuffers stats_;
};

// Per-head cone accumulators (pooled Pearson sums).
struct ConeAcc {
  double n = 0, sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
  double a = 0, p0_pred_max = 0, p0_meas_max = 0, pred0 = 0, meas0 = 0, pred_o = 0, meas_o = 0;
};

// The per-head terms of the norm decomposition, u.(W_O[:, h] z_h) = (u W_O)[h slice] . z_h at
// position 0 and at up to kOtherPositions other positions. The pass keeps u and z at those
// positions and reduces them in batches of kHeadTermSamples samples, one product per layer and
// batch: W_O is unpacked (from a bf16, Q8_0 or native weight) once per layer and batch instead of
// once per layer and sample, and u W_O is one sgemm instead of a loop of D x H Dh multiply-adds
// per position (on a 7B shape the loop cost about as much as the forward itself).
inline constexpr int kHeadTermSamples = 16;

class HeadTerms {
 public:
  HeadTerms(const Model& model, int T) : model_(model), c_(model.config), positions_{0} {
    const int n_other = std::min(T - 1, kOtherPositions);
    for (int j = 0; j < n_other; ++j)
      positions_.push_back(1 + static_cast<int>((static_cast<int64_t>(j) * (T - 1)) / n_other));
    u_.resize(c_.n_layers);
    z_.resize(c_.n_layers);
  }
  const std::vector<int>& Positions() const { return positions_; }

  // Keeps layer l's unit directions of h' (post: (T, D)) and z ((T, H Dh)) at the positions.
  void Keep(int l, const float* post, const float* z) {
    const int D = c_.dim, HD = c_.q_dim();
    for (int i : positions_) {
      const float* h = post + static_cast<int64_t>(i) * D;
      const double n = Norm(h, D);
      for (int d = 0; d < D; ++d) u_[l].push_back(n > 0 ? static_cast<float>(h[d] / n) : 0.0f);
      z_[l].insert(z_[l].end(), z + static_cast<int64_t>(i) * HD,
                   z + static_cast<int64_t>(i + 1) * HD);
    }
  }
  // Call after each sample: reduces the batch once it holds kHeadTermSamples samples.
  void EndSample(std::vector<LayerDecomposition>& layers) {
    if (++held_ >= kHeadTermSamples) Flush(layers);
  }
  // Adds the held samples' terms to layers[l].p0_head / other_head (sums over samples).
  void Flush(std::vector<LayerDecomposition>& layers) {
    const int L = c_.n_layers, D = c_.dim, HD = c_.q_dim(), H = c_.n_heads, Dh = c_.head_dim;
    const int P = static_cast<int>(positions_.size());
    if (held_ == 0) return;
    std::vector<float> wo_t(static_cast<size_t>(HD) * D), g;
    for (int l = 0; l < L; ++l) {
      if (c_.LinearLayer(l)) continue;  // a Gated DeltaNet layer has no heads
      const LayerWeights& w = model_.weights.layers[l];
      const Tensor wo = ProjectionF32(w.wo, w.packed ? &w.packed->wo : nullptr);  // (D, H Dh)
      for (int d = 0; d < D; ++d)
        for (int j = 0; j < HD; ++j)
          wo_t[static_cast<size_t>(j) * D + d] = wo.data()[static_cast<int64_t>(d) * HD + j];
      const int rows = held_ * P;
      g.assign(static_cast<size_t>(rows) * HD, 0.0f);
      MatMul(u_[l].data(), wo_t.data(), nullptr, g.data(), rows, D, HD);  // (rows, H Dh) = u W_O
      LayerDecomposition& dec = layers[l];
      if (dec.p0_head.empty()) {
        dec.p0_head.assign(H, 0.0);
        dec.other_head.assign(H, 0.0);
      }
      for (int r = 0; r < rows; ++r) {
        const float* gr = &g[static_cast<size_t>(r) * HD];
        const float* zr = &z_[l][static_cast<size_t>(r) * HD];
        for (int h = 0; h < H; ++h) {
          const double t = Dot(gr + h * Dh, zr + h * Dh, Dh);
          if (r % P == 0)
            dec.p0_head[h] += t;
          else
            dec.other_head[h] += t / (P - 1);
        }
      }
      u_[l].clear();
      z_[l].clear();
    }
    held_ = 0;
  }

 private:
  const Model& model_;
  const ModelConfig& c_;
  std::vector<int> positions_;             // 0, then the others
  std::vector<std::vector<float>> u_, z_;  // per layer: (held, P, D), (held, P, H Dh)
  int held_ = 0;
};

// Sums of the clean-pass quantities over samples.
struct CleanAcc {
  std::vector<LayerDecomposition> layers;
  std::vector<ConeAcc> cones;
};

// Everything the clean pass of one sample needs to keep between hooks of one layer.
struct LayerScratch {
  std::vector<float> pre, z, attn, mlp, v;  // (T, D), (T, H*Dh), (T, D), (T, D), (T, Hkv*Dh)
};

// The share of layer l's heads whose strongest sink on another position (max over k in [1, T/2]
// of alpha_k, from the pattern (H, T, S)) exceeds eps.
double OtherSinkRate(const Tensor& pattern, int H, int T, double eps) {
  const int S = static_cast<int>(pattern.dim(2));
  int count = 0;
  std::vector<double> col(T / 2 + 1);
  for (int h = 0; h < H; ++h) {
    std::fill(col.begin(), col.end(), 0.0);
    for (int i = 1; i < T; ++i) {
      const float* row = pattern.data() + (static_cast<int64_t>(h) * T + i) * S;
      for (int k = 1; k <= std::min(i, T / 2); ++k) col[k] += row[k];
    }
    double best = 0;
    for (int k = 1; k <= T / 2; ++k) best = std::max(best, col[k] / (T - k));
    count += best > eps;
  }
  return static_cast<double>(count) / H;
}

// Adds layer `dec`'s norm decomposition of one sample (explain.h): carry + attention + MLP along
// u = h'/||h'|| at position 0, and the mean over positions >= 1. The per-head terms go through
// HeadTerms.
void AddDecomposition(const LayerScratch& s, const float* post, int T, int D,
                      LayerDecomposition& dec) {
  double o_pre = 0, o_post = 0, o_carry = 0, o_attn = 0, o_mlp = 0, o_cos_a = 0, o_cos_m = 0;
  for (int i = 0; i < T; ++i) {
    const int64_t off = static_cast<int64_t>(i) * D;
    const float *hp = &s.pre[off], *a = &s.attn[off], *m = &s.mlp[off], *hq = post + off;
    const double n_post = Norm(hq, D), n_pre = Norm(hp, D), n_a = Norm(a, D), n_m = Norm(m, D);
    const double inv = n_post > 0 ? 1.0 / n_post : 0.0;
    const double carry = Dot(hq, hp, D) * inv, at = Dot(hq, a, D) * inv, ml = Dot(hq, m, D) * inv;
    if (i == 0) {
      dec.p0_norm_pre += n_pre;
      dec.p0_norm_post += n_post;
      dec.p0_carry += carry;
      dec.p0_attn += at;
      dec.p0_mlp += ml;
      dec.p0_unexplained += n_post - (carry + at + ml);
      dec.p0_cos_pre += SafeCos(carry * n_post, n_pre, n_post);
      dec.p0_cos_attn += SafeCos(at * n_post, n_a, n_post);
      dec.p0_cos_mlp += SafeCos(ml * n_post, n_m, n_post);
      dec.p0_attn_norm += n_a;
      dec.p0_mlp_norm += n_m;
    } else {
      o_pre += n_pre;
      o_post += n_post;
      o_carry += carry;
      o_attn += at;
      o_mlp += ml;
      o_cos_a += SafeCos(at * n_post, n_a, n_post);
      o_cos_m += SafeCos(ml * n_post, n_m, n_post);
    }
  }
  const double inv_o = 1.0 / (T - 1);
  dec.other_norm_pre += o_pre * inv_o;
  dec.other_norm_post += o_post * inv_o;
  dec.other_carry += o_carry * inv_o;
  dec.other_attn += o_attn * inv_o;
  dec.other_mlp += o_mlp * inv_o;
  dec.other_cos_attn += o_cos_a * inv_o;
  dec.other_cos_mlp += o_cos_m * inv_o;
}

// Adds layer l's cone fits of one sample (ConeFit): per head, the cone of its values (kv head
// h / group) and the predicted against measured output norms at every position.
void AddConeFits(const LayerScratch& s, const Runner& runner, const ModelConfig& c, int l, int T,
                 ConeAcc* cones) {
  const int H = c.n_heads, Dh = c.head_dim, Hkv = c.n_kv_heads, group = H / Hkv, HD = c.q_dim();
  std::vector<double> axis(Dh), vnorm(T);
  for (int h = 0; h < H; ++h) {
    const int kv = h / group;
    std::fill(axis.begin(), axis.end(), 0.0);
    double v_sq = 0;
    for (int j = 0; j < T; ++j) {
      const float* v = &s.v[(static_cast<int64_t>(j) * Hkv + kv) * Dh];
      vnorm[j] = Norm(v, Dh);
      v_sq += vnorm[j] * vnorm[j];
      if (vnorm[j] > 0)
        for (int e = 0; e < Dh; ++e) axis[e] += v[e] / vnorm[j];
    }
    double an = 0;
    for (double x : axis) an += x * x;
    an = std::sqrt(an);
    double a = 0;
    for (int j = 0; j < T; ++j) {
      if (vnorm[j] <= 0 || an <= 0) continue;
      const float* v = &s.v[(static_cast<int64_t>(j) * Hkv + kv) * Dh];
      double d = 0;
      for (int e = 0; e < Dh; ++e) d += v[e] * axis[e];
      a += d / (vnorm[j] * an);
    }
    a /= T;
    const double mean_v_sq = v_sq / T;
    const float* sum_sq = runner.SumSq(l, h);
    ConeAcc& ca = cones[h];
    ca.a += a;
    double best_pred = -1, best_meas = -1;
    int arg_pred = 0, arg_meas = 0;
    double pred_o = 0, meas_o = 0;
    for (int i = 0; i < T; ++i) {
      const double pred = a * a + (1 - a * a) * sum_sq[i];
      const float* z = &s.z[static_cast<int64_t>(i) * HD + h * Dh];
      const double meas = mean_v_sq > 0 ? Dot(z, z, Dh) / mean_v_sq : 0.0;
      ca.n += 1;
      ca.sx += pred;
      ca.sy += meas;
      ca.sxx += pred * pred;
      ca.syy += meas * meas;
      ca.sxy += pred * meas;
      // Ties go to position 0 (its predicted value 1 is the bound every position can reach).
      if (pred > best_pred + 1e-12) {
        best_pred = pred;
        arg_pred = i;
      }
      if (meas > best_meas) {
        best_meas = meas;
        arg_meas = i;
      }
      if (i == 0) {
        ca.pred0 += pred;
        ca.meas0 += meas;
      } else {
        pred_o += pred;
        meas_o += meas;
      }
    }
    ca.pred_o += pred_o / (T - 1);
    ca.meas_o += meas_o / (T - 1);
    ca.p0_pred_max += arg_pred == 0;
    ca.p0_meas_max += arg_meas == 0;
  }
}

// The clean forward of one sample with every observer the clean pass needs.
void CleanPass(Runner& runner, const Model& model, const std::vector<int>& tokens, double eps,
               CleanAcc& acc, HeadTerms& head_terms, RunMetrics& metrics) {
  const ModelConfig& c = model.config;
  const int L = c.n_layers, H = c.n_heads, D = c.dim, T = static_cast<int>(tokens.size());
  LayerScratch s;
  auto keep = [](std::vector<float>& dst) {
    return [&dst](const HookContext&, Tensor& t) { dst.assign(t.data(), t.data() + t.numel()); };
  };
  std::vector<double> other_rate(L, 0.0);
  // Output gates: each head's mean gate per query, (L, H, T).
  std::vector<float> gate(c.attn_output_gate ? static_cast<size_t>(L) * H * T : 0);
  Hooks hooks;
  if (c.attn_output_gate)
    hooks.Add(HookPoint::kAttnGate, -1, [&](const HookContext& ctx, Tensor& g) {
      const int Dh = c.head_dim;
      for (int i = 0; i < T; ++i)
        for (int h = 0; h < H; ++h) {
          const float* gh = g.data() + (static_cast<int64_t>(i) * H + h) * Dh;
          double sum = 0;
          for (int d = 0; d < Dh; ++d) sum += gh[d];
          gate[(static_cast<size_t>(ctx.layer) * H + h) * T + i] = static_cast<float>(sum / Dh);
        }
    });
  hooks.Add(HookPoint::kResidPre, -1, keep(s.pre));
  hooks.Add(HookPoint::kV, -1, keep(s.v));
  hooks.Add(HookPoint::kZ, -1, keep(s.z));
  hooks.Add(HookPoint::kAttnOut, -1, keep(s.attn));
  hooks.Add(HookPoint::kMlpOut, -1, keep(s.mlp));
  hooks.Add(HookPoint::kPattern, -1, [&](const HookContext& ctx, Tensor& p) {
    other_rate[ctx.layer] = OtherSinkRate(p, H, T, eps);
  });
  hooks.Add(HookPoint::kResidPost, -1, [&](const HookContext& ctx, Tensor& post) {
    const int l = ctx.layer;
    AddDecomposition(s, post.data(), T, D, acc.layers[l]);
    if (c.LinearLayer(l)) return;  // no heads: no head terms, no cones
    head_terms.Keep(l, post.data(), s.z.data());
    AddConeFits(s, runner, c, l, T, &acc.cones[static_cast<size_t>(l) * H]);
  });
  metrics = runner.Run(tokens, hooks);
  head_terms.EndSample(acc.layers);
  for (int l = 0; l < L; ++l) {
    LayerDecomposition& dec = acc.layers[l];
    if (c.LinearLayer(l)) {
      dec.linear = true;
      continue;
    }
    dec.other_sink_rate += other_rate[l];
    double alpha = 0;
    for (int h = 0; h < H; ++h) alpha += runner.Alpha(l, h, 0);
    dec.mean_alpha0 += alpha / H;
    if (gate.empty()) continue;
    if (dec.gated_alpha0.empty()) dec.gated_alpha0.assign(H, 0.0);
    int open = 0;
    for (int h = 0; h < H; ++h) {
      const float* g = &gate[(static_cast<size_t>(l) * H + h) * T];
      double weighted = 0;
      for (int i = 0; i < T; ++i) weighted += runner.Prob(l, h, i, 0) * static_cast<double>(g[i]);
      dec.gated_alpha0[h] += weighted / T;
      open += weighted / T > eps;
    }
    dec.gated_sink_rate += static_cast<double>(open) / H;
  }
}

// Means over the clean pass's N samples: the per-layer decomposition, sink rates, onset,
// amplification and slot layers, and the cone fits.
void SummarizeCleanPass(const CleanAcc& acc, const std::vector<RunMetrics>& clean,
                        const ExplainOptions& options, bool has_slot, ExplainResult& r) {
  const int L = r.n_layers, H = r.n_heads, N = static_cast<int>(clean.size());
  r.layers = acc.layers;
  int attn_layers = 0;
  for (const LayerDecomposition& d : r.layers) attn_layers += !d.linear;
  for (int l = 0; l < L; ++l) {
    LayerDecomposition& d = r.layers[l];
    auto mean = [N](double& x) { x /= N; };
    for (double* x : {&d.p0_norm_pre,     &d.p0_norm_post,   &d.p0_carry,        &d.p0_attn,
                      &d.p0_mlp,          &d.p0_unexplained, &d.p0_cos_pre,      &d.p0_cos_attn,
                      &d.p0_cos_mlp,      &d.p0_attn_norm,   &d.p0_mlp_norm,     &d.other_norm_pre,
                      &d.other_norm_post, &d.other_carry,    &d.other_attn,      &d.other_mlp,
                      &d.other_cos_attn,  &d.other_cos_mlp,  &d.other_sink_rate, &d.mean_alpha0})
      mean(*x);
    for (double& x : d.p0_head) x /= N;
    for (double& x : d.other_head) x /= N;
    for (double& x : d.gated_alpha0) x /= N;
    d.gated_sink_rate /= N;
    if (d.linear) {  // no attention map: NaN, never a rate of 0
      d.sink_rate = d.mean_alpha0 = d.other_sink_rate = std::numeric_limits<double>::quiet_NaN();
      d.p0_norm_ratio = 0;
      for (int n = 0; n < N; ++n) d.p0_norm_ratio += clean[n].p0_ratio[l] / N;
      if (r.amplification_layer < 0 && d.p0_norm_ratio > options.amplification_threshold)
        r.amplification_layer = l;
      continue;
    }
    double ratio = 0, rate = 0;
    for (int n = 0; n < N; ++n) {
      ratio += clean[n].p0_ratio[l];
      rate += static_cast<double>(clean[n].sink0[l]) / H;
    }
    d.p0_norm_ratio = ratio / N;
    d.sink_rate = rate / N;
    if (has_slot) {
      double slot = 0, slot_rate = 0;
      for (int n = 0; n < N; ++n) {
        slot += clean[n].slot[l];
        slot_rate += static_cast<double>(clean[n].slot_heads[l]) / H;
      }
      d.mean_alpha_sink = slot / N;
      d.sink_slot_rate = slot_rate / N;
      r.sink_slot_rate += d.sink_slot_rate / L;
      if (r.slot_onset_layer < 0 && d.sink_slot_rate > options.onset_threshold)
        r.slot_onset_layer = l;
    }
    r.sink_rate += d.sink_rate / attn_layers;
    if (r.amplification_layer < 0 && d.p0_norm_ratio > options.amplification_threshold)
      r.amplification_layer = l;
    if (r.onset_layer < 0 && d.sink_rate > options.onset_threshold) r.onset_layer = l;
    if (r.other_sink_layer < 0 && d.other_sink_rate > options.onset_threshold)
      r.other_sink_layer = l;
  }
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H && !r.layers[l].linear; ++h) {
      const ConeAcc& a = acc.cones[static_cast<size_t>(l) * H + h];
      ConeFit f;
      f.layer = l;
      f.head = h;
      f.a = a.a / N;
      const double vx = a.sxx - a.sx * a.sx / a.n, vy = a.syy - a.sy * a.sy / a.n;
      const double cxy = a.sxy - a.sx * a.sy / a.n;
      f.correlation = vx > 0 && vy > 0 ? cxy / std::sqrt(vx * vy) : 0.0;
      f.p0_predicted_max = a.p0_pred_max / N;
      f.p0_measured_max = a.p0_meas_max / N;
      f.predicted_p0 = a.pred0 / N;
      f.measured_p0 = a.meas0 / N;
      f.predicted_other = a.pred_o / N;
      f.measured_other = a.meas_o / N;
      r.cones.push_back(f);
    }
}

// A replacement token for position 0: differs from `first`, never BOS/EOS.
int OtherFirstToken(int first, const ModelConfig& c) {
  for (int step = 1; step < c.vocab_size; ++step) {
    const int t = (first + step * 7 + 3) % c.vocab_size;
    if (t != first && t != c.bos_id && t != c.eos_id) return t;
  }
  return first;
}

Hooks AblationHooks(const std::vector<Component>& set, int Dh, Ablation mode) {
  // Row 0 of columns [c0, c0 + width) of a (T, row) activation: zero, or the mean of rows >= 1.
  auto knock_out = [mode](Tensor& t, int64_t c0, int64_t width) {
    const int64_t T = t.dim(0), row = t.numel() / T;
    P0Replacement(t.data(), T, row, c0, width, mode, t.data() + c0);
  };
  Hooks hooks;
  for (const Component& comp : set) {
    if (comp.kind == ComponentKind::kMlp || comp.kind == ComponentKind::kMixer) {
      // A mixer's output: what its out_proj adds to the residual stream (hook_attn_out).
      const HookPoint at =
          comp.kind == ComponentKind::kMlp ? HookPoint::kMlpOut : HookPoint::kAttnOut;
      hooks.Add(at, comp.layer, [knock_out](const HookContext& ctx, Tensor& t) {
        if (ctx.start == 0 && t.dim(0) > 1) knock_out(t, 0, t.numel() / t.dim(0));
      });
    } else if (comp.kind == ComponentKind::kGate) {
      // A gate knocked out: open (1; the head's output as without the gate) or its mean.
      hooks.Add(HookPoint::kAttnGate, comp.layer,
                [knock_out, mode](const HookContext& ctx, Tensor& g) {
                  if (ctx.start != 0 || g.dim(0) < 2) return;
                  const int64_t width = g.numel() / g.dim(0);
                  if (mode == Ablation::kMean) return knock_out(g, 0, width);
                  std::fill(g.data(), g.data() + width, 1.0f);
                });
    } else {
      const int h = comp.head;
      hooks.Add(HookPoint::kZ, comp.layer, [knock_out, h, Dh](const HookContext& ctx, Tensor& t) {
        if (ctx.start == 0 && t.dim(0) > 1) knock_out(t, int64_t(h) * Dh, Dh);
      });
    }
  }
  return hooks;
}

// ---- P0 estimates (explain.h): the clean state of an intervention sample that they read, and
// position 0 recomputed under interventions.

// The clean forward of one intervention sample, recorded for resuming and for the estimates.
struct CleanRecord {
  std::vector<float> resid_pre;  // (L, T, D) hook_resid_pre of every block
  std::vector<float> q;          // (L, T, H * Dh) hook_q: after RoPE, before QueryScale
  std::vector<float> k0;         // (L, Hkv * Dh) hook_k of position 0
  std::vector<float> k;          // (L, T, Hkv * Dh) hook_k of every position (saturated rows)
  std::vector<float> z_mean;     // (L, H * Dh) hook_z's mean over positions >= 1
  std::vector<float> mlp_mean;   // (L, D) hook_mlp_out's mean over positions >= 1
  // (L, H, T) logit(p_i0) - g(s_i0): query i's clean attention on key 0 with key 0's own weight
  // taken out, so that a new key 0 gets p'_i0 = sigmoid(base + g(s'_i0)). +-inf where p_i0 is 1
  // (position 0 itself) or 0 (outside a sliding window): it stays so.
  std::vector<double> attn_base;
  RunMetrics metrics;
  bool has_estimate_inputs = false;

  // Bytes held, for the estimate inputs (q and the rest) or the resume input alone.
  static int64_t Bytes(const ModelConfig& c, int T, bool estimates) {
    const int64_t L = c.n_layers;
    int64_t floats = L * T * c.dim;
    if (estimates)
      floats += L * T * (c.q_dim() + c.kv_dim()) + L * (c.kv_dim() + c.q_dim() + c.dim) +
                2 * L * c.n_heads * T;
    return floats * static_cast<int64_t>(sizeof(float));
  }
};

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// g(s) from the dot product q.k of a query and a key in block `layer`, scored as the attention
// kernels score (QueryScale, 1 / sqrt(Dh), soft-cap): the log of the key's weight before
// normalisation, i.e. the score for softmax and log sigmoid(score) for sigmoid attention.
double LogWeightOfDot(const ModelConfig& c, int layer, double dot) {
  double s = dot * c.QueryScale(layer) / std::sqrt(static_cast<double>(c.head_dim));
  if (c.attn_logit_softcap > 0) s = c.attn_logit_softcap * std::tanh(s / c.attn_logit_softcap);
  if (c.attn_sigmoid) return s > 0 ? -std::log1p(std::exp(-s)) : s - std::log1p(std::exp(s));
  return s;
}

// Runs the clean forward of `tokens`, recording the residual stream entering every block and, with
// `estimates`, what the P0 estimates read.
void RecordClean(Runner& runner, const ModelConfig& c, const std::vector<int>& tokens,
                 bool estimates, CleanRecord& rec) {
  const int L = c.n_layers, H = c.n_heads, D = c.dim, HD = c.q_dim(), KV = c.kv_dim();
  const int Dh = c.head_dim, group = c.n_heads / c.n_kv_heads, T = static_cast<int>(tokens.size());
  const int64_t block = static_cast<int64_t>(T) * D, q_block = static_cast<int64_t>(T) * HD;
  rec.has_estimate_inputs = estimates;
  rec.resid_pre.assign(static_cast<size_t>(L) * block, 0.0f);
  Hooks record;
  record.Add(HookPoint::kResidPre, -1, [&](const HookContext& ctx, Tensor& x) {
    std::copy(x.data(), x.data() + block, rec.resid_pre.data() + ctx.layer * block);
  });
  if (estimates) {
    rec.q.assign(static_cast<size_t>(L) * q_block, 0.0f);
    rec.k0.assign(static_cast<size_t>(L) * KV, 0.0f);
    rec.z_mean.assign(static_cast<size_t>(L) * HD, 0.0f);
    rec.mlp_mean.assign(static_cast<size_t>(L) * D, 0.0f);
    record.Add(HookPoint::kQ, -1, [&](const HookContext& ctx, Tensor& t) {
      std::copy(t.data(), t.data() + q_block, rec.q.data() + ctx.layer * q_block);
    });
    rec.k.assign(static_cast<size_t>(L) * T * KV, 0.0f);
    record.Add(HookPoint::kK, -1, [&](const HookContext& ctx, Tensor& t) {
      std::copy(t.data(), t.data() + KV, rec.k0.data() + static_cast<int64_t>(ctx.layer) * KV);
      std::copy(t.data(), t.data() + static_cast<int64_t>(T) * KV,
                rec.k.data() + static_cast<int64_t>(ctx.layer) * T * KV);
    });
    record.Add(HookPoint::kZ, -1, [&](const HookContext& ctx, Tensor& t) {
      P0Replacement(t.data(), T, HD, 0, HD, Ablation::kMean,
                    &rec.z_mean[static_cast<size_t>(ctx.layer) * HD]);
    });
    record.Add(HookPoint::kMlpOut, -1, [&](const HookContext& ctx, Tensor& t) {
      P0Replacement(t.data(), T, D, 0, D, Ablation::kMean,
                    &rec.mlp_mean[static_cast<size_t>(ctx.layer) * D]);
    });
  }
  rec.metrics = runner.Run(tokens, record);
  if (!estimates) return;
  rec.attn_base.assign(static_cast<size_t>(L) * H * T, 0.0);
  std::vector<float> qh, kh, scores;
  std::vector<double> rest;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) {
      const float* k = &rec.k0[static_cast<size_t>(l) * KV + (h / group) * Dh];
      double* base = &rec.attn_base[(static_cast<size_t>(l) * H + h) * T];
      bool saturated = false;
      for (int i = 0; i < T; ++i) {
        const double p = runner.Prob(l, h, i, 0);
        const float* q =
            &rec.q[static_cast<size_t>(l) * q_block + static_cast<int64_t>(i) * HD + h * Dh];
        base[i] = p <= 0   ? -INFINITY
                  : p >= 1 ? INFINITY
                           : std::log(p) - std::log1p(-p) - LogWeightOfDot(c, l, Dot(q, k, Dh));
        saturated = saturated || (i > 0 && p > 1.0 - kSaturated);
      }
      if (!saturated) continue;
      // A query that puts nearly all its weight on key 0 (a strong sink: 1 - p_i0 below the
      // float resolution of p near 1) carries no usable logit(p_i0) in the statistics, and taken
      // as p = 1 its estimate could never move. Its base comes from the scores instead: with g_j
      // the log weights of the visible keys >= 1, and the slot's log weight g_0 + log(p_slot /
      // p_i0) (its weight relative to key 0's is p_slot / p_i0),
      //     base = logit(p_i0) - g_0 = -log sum_rest e^{g} = -logsumexp(g_rest),
      // taken about its largest term, so no score gap is too large (a gap beyond 745 would
      // underflow e^{g_j - g_0} in double).
      qh.resize(static_cast<size_t>(T) * Dh);
      kh.resize(static_cast<size_t>(T) * Dh);
      scores.resize(static_cast<size_t>(T) * T);
      for (int i = 0; i < T; ++i) {
        std::copy_n(
            &rec.q[static_cast<size_t>(l) * q_block + static_cast<int64_t>(i) * HD + h * Dh], Dh,
            &qh[static_cast<size_t>(i) * Dh]);
        std::copy_n(&rec.k[(static_cast<size_t>(l) * T + i) * KV + (h / group) * Dh], Dh,
                    &kh[static_cast<size_t>(i) * Dh]);
      }
      MatMul(qh.data(), kh.data(), nullptr, scores.data(), T, Dh, T);  // (T, T) q_i . k_j
      const int window = c.Window(l);
      for (int i = 1; i < T; ++i) {
        const double p = runner.Prob(l, h, i, 0);
        if (!(p > 1.0 - kSaturated)) continue;
        const float* row = &scores[static_cast<size_t>(i) * T];
        rest.clear();
        if (const double slot = runner.SlotProb(l, h, i); slot > 0)
          rest.push_back(LogWeightOfDot(c, l, row[0]) + std::log(slot / p));
        for (int j = window > 0 ? std::max(1, i - window + 1) : 1; j <= i; ++j)
          rest.push_back(LogWeightOfDot(c, l, row[j]));
        const double top = *std::max_element(rest.begin(), rest.end());
        double sum = 0;
        for (double g : rest) sum += std::exp(g - top);
        base[i] = -(top + std::log(sum));
      }
    }
}

// The donor run of an intervention sample: the sample with another first token, whose h_0, key 0
// and ||h'_0|| after every block the patch rows read.
struct DonorRun {
  RunMetrics metrics;
  std::vector<float> h0;     // (L, D)
  std::vector<float> k0;     // (L, Hkv * Dh)
  std::vector<double> norm;  // (L)
  int first_token = 0;
};

// The estimated metrics of R interventions that change h_0 after block `layer[r]`'s attention (an
// MLP or head ablation in that block, or a patch of h_0 after it): blocks up to the row's layer
// keep the clean attention, ||h'_0|| from that layer on is the row's recomputed norm over the
// clean median of the other positions, and each later block's attention on position 0 follows
// the row's new key 0 against the clean queries,
//     p'_i0 = sigmoid(attn_base_i + g(q_i . k'_0)),
// the scores of each (block, head) one product Q (T, Dh) K'^T over the rows that reach it. Keys
// come in block by block (AddKeys), as the sweep computes them, so no row's keys are kept beyond
// their block. Sink_1 and the slot stay clean (not estimated).
class P0Estimate {
 public:
  P0Estimate(const CleanRecord& rec, const ModelConfig& c, int T, double eps,
             std::vector<int> layer)
      : rec_(rec),
        c_(c),
        T_(T),
        eps_(eps),
        layer_(std::move(layer)),
        out_(layer_.size(), rec.metrics) {}

  // Row r's ||h'_0|| per block (L; read from the row's own layer on).
  void SetNorms(int r, const double* norm) {
    for (int l = std::max(layer_[r], 0); l < c_.n_layers; ++l) {
      out_[r].p0_norm[l] = norm[l];
      out_[r].p0_ratio[l] = NormRatio(norm[l], out_[r].others_median[l]);
    }
  }
  // Block l's key 0 of rows `rows` (each with layer < l): keys (rows.size(), Hkv * Dh).
  void AddKeys(int l, const std::vector<int>& rows, const float* keys) {
    const int H = c_.n_heads, Dh = c_.head_dim, KV = c_.kv_dim(), HD = c_.q_dim();
    const int group = c_.n_heads / c_.n_kv_heads, n = static_cast<int>(rows.size());
    if (n == 0) return;
    for (int r : rows) {
      SS_ASSERT(layer_[r] < l);
      out_[r].sink0[l] = 0;
      out_[r].alpha0[l] = 0;
    }
    q_.resize(static_cast<size_t>(T_) * Dh);
    k_.resize(static_cast<size_t>(n) * Dh);
    scores_.resize(static_cast<size_t>(T_) * n);
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < T_; ++i)
        std::copy_n(&rec_.q[(static_cast<size_t>(l) * T_ + i) * HD + h * Dh], Dh,
                    &q_[static_cast<size_t>(i) * Dh]);
      for (int j = 0; j < n; ++j)
        std::copy_n(keys + static_cast<int64_t>(j) * KV + (h / group) * Dh, Dh,
                    &k_[static_cast<size_t>(j) * Dh]);
      MatMul(q_.data(), k_.data(), nullptr, scores_.data(), T_, Dh, n);  // (T, n) = q . k'
      const double* base = &rec_.attn_base[(static_cast<size_t>(l) * H + h) * T_];
      for (int j = 0; j < n; ++j) {
        double alpha = 0;
        for (int i = 0; i < T_; ++i) {
          if (base[i] == -INFINITY) continue;
          if (base[i] == INFINITY) {
            alpha += 1;
            continue;
          }
          alpha +=
              Sigmoid(base[i] + LogWeightOfDot(c_, l, scores_[static_cast<size_t>(i) * n + j]));
        }
        alpha /= T_;
        RunMetrics& m = out_[rows[j]];
        m.sink0[l] += alpha > eps_;
        m.alpha0[l] += alpha;
      }
    }
  }
  const RunMetrics& Result(int r) const { return out_[r]; }

 private:
  const CleanRecord& rec_;
  const ModelConfig& c_;
  int T_;
  double eps_;
  std::vector<int> layer_;
  std::vector<RunMetrics> out_;
  std::vector<float> q_, k_, scores_;
};

// Position 0 under every MLP and head row of the table, all blocks in one sweep (explain.h):
// group l holds block l's H + 2 rows (row h < H ablates head h, row H zeroes the MLP output, row
// H + 1 mean-ablates it), rows l (H + 2) .. l (H + 2) + H + 1 of the estimate. Block b runs the
// (b + 1) (H + 2) rows of groups 0..b as one forward of one-token rows at position 0, each
// attending to itself alone (ForwardRequest::self_attention_only, which is what position 0
// computes in the full forward under the causal mask), stopped after block b
// (ForwardRequest::last_layer); group b joins with the clean h_0 entering block b and its
// interventions applied in block b. So each block's weights are read once per sample, in one
// product over all the rows that pass through it, where running each group from its block to the
// end read block b's weights b + 1 times. Hands the estimate every row's key 0 in the blocks after
// its own and ||h'_0|| from its own block on.
class P0Sweep {
 public:
  explicit P0Sweep(const Model& model)
      : model_(model),
        c_(model.config),
        group_(c_.n_heads + 2),
        cache_(KVCache::CreateSingleUse(model.config, c_.n_layers * group_)) {}

  int RowsPerGroup() const { return group_; }
  // Bytes the sweep holds beside its forward's state: the rows' residual stream and norms.
  static int64_t Bytes(const ModelConfig& c) {
    const int64_t rows = static_cast<int64_t>(c.n_layers) * (c.n_heads + 2);
    return rows * (c.dim * static_cast<int64_t>(sizeof(float)) +
                   c.n_layers * static_cast<int64_t>(sizeof(double)));
  }

  // rec: the sample's clean record (h_0 entering every block, the means for mean-ablation).
  void Run(int token, const CleanRecord& rec, Ablation head_ablation, P0Estimate& estimate) {
    const int L = c_.n_layers, H = c_.n_heads, D = c_.dim, HD = c_.q_dim(), Dh = c_.head_dim;
    const int T = static_cast<int>(rec.resid_pre.size() / (static_cast<size_t>(L) * D));
    const int rows_all = L * group_;
    std::vector<double> norm(static_cast<size_t>(rows_all) * L, 0.0);
    std::vector<float> stream(static_cast<size_t>(rows_all) * D, 0.0f);
    std::vector<int> earlier;
    for (int b = 0; b < L; ++b) {
      const int rows = (b + 1) * group_;
      const int64_t first = static_cast<int64_t>(b) * group_;  // group b's first row
      for (int r = 0; r < group_; ++r)  // group b starts from the clean h_0 entering block b
        std::copy_n(&rec.resid_pre[static_cast<size_t>(b) * T * D], D,
                    &stream[static_cast<size_t>(first + r) * D]);
      Hooks hooks;
      hooks.Add(HookPoint::kZ, b, [&](const HookContext&, Tensor& t) {
        for (int h = 0; h < H; ++h) {
          float* z = t.data() + (first + h) * HD + h * Dh;
          if (head_ablation == Ablation::kMean)
            std::copy_n(&rec.z_mean[static_cast<size_t>(b) * HD + h * Dh], Dh, z);
          else
            std::fill(z, z + Dh, 0.0f);
        }
      });
      hooks.Add(HookPoint::kMlpOut, b, [&](const HookContext&, Tensor& t) {
        std::fill(t.data() + (first + H) * D, t.data() + (first + H + 1) * D, 0.0f);
        std::copy_n(&rec.mlp_mean[static_cast<size_t>(b) * D], D, t.data() + (first + H + 1) * D);
      });
      hooks.Add(HookPoint::kK, b, [&](const HookContext&, Tensor& t) {
        estimate.AddKeys(b, earlier, t.data());  // rows of the earlier groups are rows 0..first-1
      });
      hooks.Add(HookPoint::kResidPost, b, [&](const HookContext&, Tensor& t) {
        for (int r = 0; r < rows; ++r)
          norm[static_cast<size_t>(r) * L + b] = Norm(t.data() + static_cast<int64_t>(r) * D, D);
        std::copy_n(t.data(), static_cast<int64_t>(rows) * D, stream.data());
      });
      const std::vector<int> tokens(rows, token), positions(rows, 0);
      cache_.Clear();
      ForwardRequest req;
      req.tokens = tokens;
      req.positions = positions;
      req.logits = LogitsMode::kNone;
      req.hooks = &hooks;
      req.first_layer = b;
      req.last_layer = b;
      req.resid_pre = b > 0 ? stream.data() : nullptr;
      req.self_attention_only = true;
      ss::Forward(model_, cache_, state_, req);
      ++calls;
      blocks += rows;
      for (int r = 0; r < group_; ++r) earlier.push_back(static_cast<int>(first) + r);
    }
    for (int r = 0; r < rows_all; ++r) estimate.SetNorms(r, &norm[static_cast<size_t>(r) * L]);
  }

  int64_t calls = 0, blocks = 0;

 private:
  const Model& model_;
  const ModelConfig& c_;
  int group_;
  KVCache cache_;
  RunState state_;
};

// ---- The intervention table: rows, their sums over samples, estimation and measurement.

// Sums of one intervention's metrics over samples (measured, or estimated), and its per-sample
// Sink_0 count over the target layers (for the circuit search's bounds).
struct Sums {
  int samples = 0;
  std::vector<double> clean_layer, after_layer, ratio_clean, ratio_after, alpha_clean, alpha_after,
      norm_after;
  double sink1 = 0;
  std::vector<double> target_after;  // (samples) sum over layers >= target_from of Sink_0 heads

  void Add(const RunMetrics& cl, const RunMetrics& af, int target_from) {
    const int L = static_cast<int>(cl.sink0.size());
    if (samples == 0)
      for (auto* v : {&clean_layer, &after_layer, &ratio_clean, &ratio_after, &alpha_clean,
                      &alpha_after, &norm_after})
        v->assign(L, 0.0);
    double target = 0;
    for (int l = 0; l < L; ++l) {
      clean_layer[l] += cl.sink0[l];
      after_layer[l] += af.sink0[l];
      ratio_clean[l] += cl.p0_ratio[l];
      ratio_after[l] += af.p0_ratio[l];
      alpha_clean[l] += cl.alpha0[l];
      alpha_after[l] += af.alpha0[l];
      norm_after[l] += af.p0_norm[l];
      sink1 += af.sink1[l];
      if (l >= target_from) target += af.sink0[l];
    }
    target_after.push_back(target);
    ++samples;
  }
};

struct Row {
  InterventionEffect e;
  Sums measured, estimated;
  bool exact = false;  // a component or patch row that RunExact measures
};

// Where the interventions of one sample start from: its clean record (the resume point and the
// estimates' input) and its donor run. Kept from the estimate phase to the measurement phase
// when the records fit in kKeptRecordBytes; else recorded again.
struct SampleRuns {
  CleanRecord rec;
  DonorRun donor;
  bool have_rec = false, have_donor = false;
};
inline constexpr int64_t kKeptRecordBytes = int64_t{1} << 30;

class InterventionTable {
 public:
  InterventionTable(const Model& model, const std::vector<std::vector<int>>& samples,
                    const ExplainOptions& options, Runner& runner,
                    const std::vector<RunMetrics>& clean, int target_from)
      : c_(model.config),
        samples_(samples),
        options_(options),
        runner_(runner),
        clean_(clean),
        target_from_(target_from),
        T_(static_cast<int>(samples[0].size())),
        mlp_kind_("mlp-" + AblationName(options.ablation)),
        head_kind_("head-" + AblationName(options.ablation)),
        sweep_(model) {
    const int L = c_.n_layers, H = c_.n_heads;
    mlp_zero_row_.resize(L);
    mlp_mean_row_.resize(L);
    head_row_.assign(L, std::vector<size_t>(H));
    patch_row_.resize(std::max(0, L - 1));
    // The position-0 estimates follow a changed key 0 through later blocks; a Gated DeltaNet
    // layer carries it in its state instead, which they do not model: such a model's rows are
    // all measured.
    const bool estimate = !c_.HasLinearLayers();
    for (int l = 0; l < L; ++l) {
      mlp_zero_row_[l] = Make("mlp-zero", l, -1, estimate, true);
      mlp_mean_row_[l] = Make("mlp-mean", l, -1, estimate, true);
      if (c_.LinearLayer(l)) {
        Make("mixer-zero", l, -1, false, true);
        Make("mixer-mean", l, -1, false, true);
        continue;
      }
      for (int h = 0; h < H; ++h) head_row_[l][h] = Make(head_kind_, l, h, estimate, true);
      if (c_.attn_output_gate) {
        Make("gate-open", l, -1, false, true);
        Make("gate-mean", l, -1, false, true);
      }
    }
    for (int l = 0; l + 1 < L; ++l) patch_row_[l] = Make("patch-p0", l, -1, estimate, true);
    first_token_row_ = Make("first-token", -1, -1, false);
    shift_row_ = Make("shift", -1, -1, false);
    int set_layer = -1;
    for (const Component& comp : options.ablate) {
      if (comp.layer >= L || (comp.kind == ComponentKind::kHead && comp.head >= H))
        Fail("--ablate: {} is outside the model ({} layers x {} heads)", comp.Name(), L, H);
      set_layer = std::max(set_layer, comp.layer);
    }
    if (!options.ablate.empty()) set_row_ = Make("set", set_layer, -1, false);
    const int NI = static_cast<int>(clean.size());
    runs_.resize(NI);
    const int E = EstimateSamples(options, NI);
    keep_records_ = CleanRecord::Bytes(c_, T_, true) * E <= kKeptRecordBytes;
  }

  static int EstimateSamples(const ExplainOptions& o, int NI) {
    return o.estimate_samples > 0 ? std::min(NI, o.estimate_samples) : NI;
  }

  int RowCount() const { return static_cast<int>(rows_.size()); }
  const std::string& MlpKind() const { return mlp_kind_; }
  const std::string& HeadKind() const { return head_kind_; }
  const std::vector<Row>& Rows() const { return rows_; }
  int EstimatedSamples() const { return estimated_samples_; }

  // Estimates every MLP, head and patch row on sample n (one clean record, one donor run, one
  // sweep of position 0).
  void Estimate(int n) {
    SampleRuns& s = runs_[n];
    RecordClean(runner_, c_, samples_[n], /*estimates=*/true, s.rec);
    s.have_rec = true;
    RunDonor(n);
    const int L = c_.n_layers, H = c_.n_heads, group = sweep_.RowsPerGroup();
    // Estimate rows: the sweep's L (H + 2) rows in its order, then the L - 1 patch rows.
    std::vector<int> layer;
    std::vector<size_t> row;
    for (int l = 0; l < L; ++l)
      for (int j = 0; j < group; ++j) {
        row.push_back(j < H ? head_row_[l][j] : j == H ? mlp_zero_row_[l] : mlp_mean_row_[l]);
        layer.push_back(l);
      }
    for (int l = 0; l + 1 < L; ++l) {
      row.push_back(patch_row_[l]);
      layer.push_back(l);
    }
    P0Estimate estimate(s.rec, c_, T_, options_.eps, layer);
    sweep_.Run(samples_[n][0], s.rec, options_.ablation, estimate);
    // A patch after block l puts the donor's h_0 there, and position 0 then computes what it
    // computes in the donor's own forward: its keys and norms are the donor's.
    const int patches = L * group;
    std::vector<int> reach;
    for (int b = 1; b < L; ++b) {
      reach.clear();
      for (int l = 0; l < b; ++l) reach.push_back(patches + l);
      std::vector<float> keys;
      for (size_t j = 0; j < reach.size(); ++j)
        keys.insert(keys.end(), &s.donor.k0[static_cast<size_t>(b) * c_.kv_dim()],
                    &s.donor.k0[static_cast<size_t>(b + 1) * c_.kv_dim()]);
      estimate.AddKeys(b, reach, keys.data());
    }
    for (int l = 0; l + 1 < L; ++l) estimate.SetNorms(patches + l, s.donor.norm.data());
    for (size_t i = 0; i < row.size(); ++i)
      rows_[row[i]].estimated.Add(clean_[n], estimate.Result(static_cast<int>(i)), target_from_);
    estimated_samples_ = n + 1;
    if (!keep_records_) s = SampleRuns();
  }

  // Ranks the estimated rows (share of the search target removed, then of the attention mass on
  // position 0) and marks the verify_top best (all with exhaustive) to be measured.
  void Rank() {
    std::vector<size_t> ranked;
    for (size_t i = 0; i < rows_.size(); ++i) {
      Row& a = rows_[i];
      if (!a.e.estimated) continue;
      double sink_clean = 0, ratio_clean = 0;
      a.e.estimate = Summarize(a.estimated, a.e.layer, &sink_clean, &ratio_clean);
      ranked.push_back(i);
    }
    std::stable_sort(ranked.begin(), ranked.end(), [&](size_t x, size_t y) {
      const EffectValues &a = rows_[x].e.estimate, &b = rows_[y].e.estimate;
      if (a.target_share != b.target_share) return a.target_share > b.target_share;
      return a.alpha0_share > b.alpha0_share;
    });
    for (size_t k = 0; k < ranked.size(); ++k) {
      InterventionEffect& e = rows_[ranked[k]].e;
      e.rank = static_cast<int>(k) + 1;
      e.measured = options_.exhaustive || static_cast<int>(k) < options_.verify_top;
    }
    candidates_ = static_cast<int>(ranked.size());
  }

  // Measures sample n: the first-token, shift and --ablate rows and every row marked measured,
  // each an exact intervened forward (resumed at its block from the clean record).
  void Measure(int n) {
    SampleRuns& s = runs_[n];
    const std::vector<int>& tokens = samples_[n];
    const bool resumes = options_.resume_at_block && c_.n_layers > 1;
    if (!s.have_rec && resumes) {
      RecordClean(runner_, c_, tokens, /*estimates=*/false, s.rec);
      s.have_rec = true;
    }
    if (!s.have_donor) RunDonor(n);
    for (Row& a : rows_)
      if (a.exact && a.e.measured) a.measured.Add(clean_[n], RunExact(a.e, n), target_from_);
    rows_[first_token_row_].measured.Add(clean_[n], s.donor.metrics, target_from_);
    std::vector<int> shifted(T_);
    shifted[0] = s.donor.first_token;
    std::copy(tokens.begin(), tokens.end() - 1, shifted.begin() + 1);
    rows_[shift_row_].measured.Add(clean_[n], runner_.Run(shifted, Hooks()), target_from_);
    if (!options_.ablate.empty()) {
      int first = c_.n_layers - 1;
      for (const Component& comp : options_.ablate) first = std::min(first, comp.layer);
      rows_[set_row_].measured.Add(
          clean_[n],
          runner_.Run(tokens, AblationHooks(options_.ablate, c_.head_dim, options_.ablation),
                      At(s, first)),
          target_from_);
    }
    s = SampleRuns();  // this sample is done: free its record
    measured_samples_ = n + 1;
  }

  // The measured single-component rows the circuit search starts from (layer + 1 < L: something
  // downstream), with their per-sample Sink_0 counts over the target layers.
  struct Single {
    Component component;
    const std::vector<double>* target_after;
  };
  std::vector<Single> Singles() const {
    std::vector<Single> out;
    const bool zero = options_.ablation == Ablation::kZero;
    for (const Row& a : rows_) {
      if (a.e.layer + 1 >= c_.n_layers || !a.e.measured) continue;
      Component comp{ComponentKind::kMlp, a.e.layer, -1};
      if (a.e.kind == head_kind_) {
        comp = {ComponentKind::kHead, a.e.layer, a.e.head};
      } else if (a.e.kind == (zero ? "mixer-zero" : "mixer-mean")) {
        comp.kind = ComponentKind::kMixer;
      } else if (a.e.kind == (zero ? "gate-open" : "gate-mean")) {
        comp.kind = ComponentKind::kGate;
      } else if (a.e.kind != mlp_kind_) {
        continue;
      }
      out.push_back({comp, &a.measured.target_after});
    }
    return out;
  }

  // Fills r.interventions and r.estimates from the sums.
  void Report(ExplainResult& r) {
    EstimateSummary& es = r.estimates;
    es.exhaustive = options_.exhaustive;
    es.verify_top = options_.verify_top;
    es.candidates = candidates_;
    es.target_from_layer = target_from_;
    std::vector<double> est_target, got_target, est_alpha, got_alpha, est_ratio, got_ratio;
    for (Row& a : rows_) {
      InterventionEffect& ef = a.e;
      const Sums& sums = ef.measured ? a.measured : a.estimated;
      const EffectValues v = Summarize(sums, ef.layer, &ef.sink_clean, &ef.norm_ratio_clean);
      ef.samples = sums.samples;
      ef.sink_after = v.sink_after;
      ef.removed_share = v.removed_share;
      ef.norm_ratio_after = v.norm_ratio_after;
      ef.target_share = v.target_share;
      ef.alpha0_share = v.alpha0_share;
      ef.layer_sink_after = v.layer_sink_after;
      ef.layer_p0_norm_after = v.layer_p0_norm_after;
      ef.layer_norm_ratio_after = v.layer_norm_ratio_after;
      if (ef.kind == "shift")
        ef.sink1_after = a.measured.sink1 / std::max(1.0, static_cast<double>(a.measured.samples) *
                                                              c_.n_heads * AttentionLayers(0));
      if (ef.estimated && ef.measured) {
        ++es.verified;
        est_target.push_back(ef.estimate.target_share);
        got_target.push_back(v.target_share);
        est_alpha.push_back(ef.estimate.alpha0_share);
        got_alpha.push_back(v.alpha0_share);
        est_ratio.push_back(ef.estimate.norm_ratio_after);
        got_ratio.push_back(v.norm_ratio_after);
      }
      r.interventions.push_back(ef);
    }
    es.spearman_target = SpearmanCorrelation(est_target, got_target);
    es.spearman_alpha0 = SpearmanCorrelation(est_alpha, got_alpha);
    es.spearman_norm_ratio = SpearmanCorrelation(est_ratio, got_ratio);
    es.recompute_calls = sweep_.calls;
    es.recompute_rows = sweep_.blocks;
    es.samples = estimated_samples_;
  }

 private:
  // Layers >= from with an attention map.
  int AttentionLayers(int from) const {
    int n = 0;
    for (int l = std::max(from, 0); l < c_.n_layers; ++l) n += !c_.LinearLayer(l);
    return n;
  }

  size_t Make(std::string kind, int layer, int head, bool estimated, bool exact = false) {
    Row a;
    a.exact = exact;
    a.e.kind = std::move(kind);
    a.e.layer = layer;
    a.e.head = head;
    a.e.estimated = estimated;
    a.e.measured = !estimated || options_.exhaustive;
    rows_.push_back(std::move(a));
    return rows_.size() - 1;
  }

  // Resume at block l from the sample's clean record, or run from the embedding when resuming is
  // off or l = 0.
  const Resume* At(SampleRuns& s, int l) {
    if (!(options_.resume_at_block && c_.n_layers > 1 && l > 0)) return nullptr;
    resume_ = {l, &s.rec.resid_pre, &s.rec.metrics, static_cast<int64_t>(T_) * c_.dim};
    return &resume_;
  }

  // The donor: the same sample with another first token (position 1 of another sample, so an
  // ordinary token of the same text, not an arbitrary id that may be a rare byte token; else any
  // other id); keeps its h_0, key 0 and ||h'_0|| after every block.
  void RunDonor(int n) {
    const std::vector<int>& tokens = samples_[n];
    const int N = static_cast<int>(samples_.size()), L = c_.n_layers, D = c_.dim, KV = c_.kv_dim();
    std::vector<int> donor = tokens;
    donor[0] = OtherFirstToken(tokens[0], c_);
    for (int k = 1; k < N; ++k) {
      const int t = samples_[(n + k) % N][1];
      if (t != tokens[0] && t != c_.bos_id && t != c_.eos_id) {
        donor[0] = t;
        break;
      }
    }
    DonorRun& d = runs_[n].donor;
    d.first_token = donor[0];
    d.h0.assign(static_cast<size_t>(L) * D, 0.0f);
    d.k0.assign(static_cast<size_t>(L) * KV, 0.0f);
    d.norm.assign(L, 0.0);
    Hooks capture;
    capture.Add(HookPoint::kResidPost, -1, [&](const HookContext& ctx, Tensor& x) {
      std::copy(x.data(), x.data() + D, &d.h0[static_cast<size_t>(ctx.layer) * D]);
      d.norm[ctx.layer] = Norm(x.data(), D);
    });
    capture.Add(HookPoint::kK, -1, [&](const HookContext& ctx, Tensor& x) {
      std::copy(x.data(), x.data() + KV, &d.k0[static_cast<size_t>(ctx.layer) * KV]);
    });
    d.metrics = runner_.Run(donor, capture);
    runs_[n].have_donor = true;
  }

  // The exact intervened forward of an MLP, head or patch row on sample n.
  RunMetrics RunExact(const InterventionEffect& e, int n) {
    SampleRuns& s = runs_[n];
    const int l = e.layer, D = c_.dim;
    if (e.kind == "patch-p0") {
      Hooks patch;
      patch.Add(HookPoint::kResidPost, l, [&, l](const HookContext&, Tensor& x) {
        std::copy(&s.donor.h0[static_cast<size_t>(l) * D],
                  &s.donor.h0[static_cast<size_t>(l + 1) * D], x.data());
      });
      return runner_.Run(samples_[n], patch, At(s, l));
    }
    const bool zero = e.kind == "mlp-zero" || e.kind == "mixer-zero" || e.kind == "gate-open";
    const bool mean = e.kind == "mlp-mean" || e.kind == "mixer-mean" || e.kind == "gate-mean";
    const Ablation mode = zero ? Ablation::kZero : mean ? Ablation::kMean : options_.ablation;
    Component comp{ComponentKind::kMlp, l, -1};
    if (e.head >= 0) comp = {ComponentKind::kHead, l, e.head};
    if (e.kind.rfind("mixer-", 0) == 0) comp.kind = ComponentKind::kMixer;
    if (e.kind.rfind("gate-", 0) == 0) comp.kind = ComponentKind::kGate;
    return runner_.Run(samples_[n], AblationHooks({comp}, c_.head_dim, mode), At(s, l));
  }

  // The effect quantities of summed metrics; clean figures into *sink_clean, *ratio_clean.
  EffectValues Summarize(const Sums& a, int layer, double* sink_clean, double* ratio_clean) const {
    const int L = c_.n_layers, H = c_.n_heads;
    EffectValues v;
    const int from = layer + 1, n = std::max(1, a.samples);
    double cl = 0, af = 0, tc = 0, ta = 0, ac = 0, aa = 0, rc = 0;
    for (int l = 0; l < L && a.samples > 0; ++l) {
      if (l >= from) cl += a.clean_layer[l], af += a.after_layer[l];
      if (l >= target_from_)
        tc += a.clean_layer[l], ta += a.after_layer[l], ac += a.alpha_clean[l],
            aa += a.alpha_after[l];
      if (l >= std::max(layer, 0)) {
        rc = std::max(rc, a.ratio_clean[l] / n);
        v.norm_ratio_after = std::max(v.norm_ratio_after, a.ratio_after[l] / n);
      }
    }
    const double denom = std::max(1.0, static_cast<double>(a.samples) * H * AttentionLayers(from));
    *sink_clean = cl / denom;
    *ratio_clean = rc;
    v.sink_after = af / denom;
    v.removed_share = cl > 0 ? 1.0 - af / cl : 0.0;
    v.target_share = tc > 0 ? 1.0 - ta / tc : 0.0;
    v.alpha0_share = ac > 0 ? 1.0 - aa / ac : 0.0;
    v.layer_sink_after.assign(L, 0.0);
    v.layer_p0_norm_after.assign(L, 0.0);
    v.layer_norm_ratio_after.assign(L, 0.0);
    for (int l = 0; l < L && a.samples > 0; ++l) {
      v.layer_sink_after[l] = a.after_layer[l] / std::max(1.0, static_cast<double>(a.samples) * H);
      v.layer_p0_norm_after[l] = a.norm_after[l] / n;
      v.layer_norm_ratio_after[l] = a.ratio_after[l] / n;
    }
    return v;
  }

  const ModelConfig& c_;
  const std::vector<std::vector<int>>& samples_;
  const ExplainOptions& options_;
  Runner& runner_;
  const std::vector<RunMetrics>& clean_;  // (intervention samples) the clean pass's metrics
  int target_from_;
  int T_;
  std::string mlp_kind_, head_kind_;
  P0Sweep sweep_;
  std::vector<Row> rows_;
  std::vector<size_t> mlp_zero_row_, mlp_mean_row_, patch_row_;
  std::vector<std::vector<size_t>> head_row_;
  size_t first_token_row_ = 0, shift_row_ = 0, set_row_ = 0;
  std::vector<SampleRuns> runs_;
  bool keep_records_ = true;
  Resume resume_;
  int candidates_ = 0, estimated_samples_ = 0, measured_samples_ = 0;
};

// ---- Circuit search (explain.h, CircuitSearch) over the first n intervention samples, with every
// set's per-sample effect kept: searching again after one more sample runs only that sample's
// forwards for the sets seen before.
class CircuitSearcher {
 public:
  CircuitSearcher(const ModelConfig& c, const std::vector<std::vector<int>>& samples,
                  const ExplainOptions& options, Runner& runner,
                  const std::vector<RunMetrics>& clean, int from_layer,
                  std::function<void()> report)
      : c_(c),
        samples_(samples),
        options_(options),
        runner_(runner),
        clean_(clean),
        from_(from_layer),
        report_(std::move(report)) {}

  // The search over samples [0, n), the single-component rows measured on them.
  CircuitSearch Run(int n, const std::vector<InterventionTable::Single>& singles_in) {
    const int L = c_.n_layers, H = c_.n_heads;
    n_ = n;
    singles_.clear();
    for (const auto& s : singles_in) singles_[Key({s.component})] = s.target_after;
    CircuitSearch cs;
    cs.ran = true;
    cs.from_layer = from_;
    const double target = Target();
    cs.target_clean = target / std::max(1.0, static_cast<double>(n) * H * (L - from_));
    // Single effects on the target, from the measured ablation rows of the table (all of them
    // with exhaustive, else the verified ones: the search never rests on an estimate).
    std::vector<std::pair<double, Component>> singles;
    for (const auto& s : singles_in) singles.push_back({Removed({s.component}), s.component});
    std::stable_sort(singles.begin(), singles.end(),
                     [](const auto& x, const auto& y) { return x.first > y.first; });
    std::vector<Component> set;
    double best = 0;
    if (!singles.empty() && singles[0].first > 0) {
      set.push_back(singles[0].second);
      best = singles[0].first;
      cs.removed_after_step.push_back(best);
    }
    while (!set.empty() && best < options_.share &&
           static_cast<int>(set.size()) < options_.max_components) {
      double step_best = best;
      Component pick;
      bool picked = false;
      int tried = 0;
      for (const auto& [share, comp] : singles) {
        if (tried >= options_.greedy_width) break;
        if (std::find(set.begin(), set.end(), comp) != set.end()) continue;
        ++tried;
        std::vector<Component> trial = set;
        trial.push_back(comp);
        const double got = Removed(trial);
        if (got > step_best + 1e-12) {
          step_best = got;
          pick = comp;
          picked = true;
        }
      }
      if (!picked) break;
      set.push_back(pick);
      best = step_best;
      cs.removed_after_step.push_back(best);
    }
    if (best >= options_.share) {
      // Prune: drop members the rest does not need.
      for (size_t i = set.size(); set.size() > 1 && i-- > 0;) {
        std::vector<Component> rest = set;
        rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(i));
        const double got = Removed(rest);
        if (got >= options_.share) {
          set = rest;
          best = got;
        }
      }
      cs.found = true;
    }
    cs.components = set;
    cs.removed_share = best;
    return cs;
  }

  // Per sample s < n with a target, the share of its target the set removes (the set must have
  // been evaluated on them: a search result, its singles, or their rests).
  std::vector<double> Shares(const std::vector<Component>& set) {
    const std::vector<double>& after = After(set);
    std::vector<double> out;
    for (int s = 0; s < n_; ++s) {
      const double t = SampleTarget(s);
      if (t > 0) out.push_back(1.0 - after[s] / t);
    }
    return out;
  }

 private:
  static std::string Key(std::vector<Component> set) {
    std::sort(set.begin(), set.end(), [](const Component& a, const Component& b) {
      return std::tie(a.kind, a.layer, a.head) < std::tie(b.kind, b.layer, b.head);
    });
    std::string key;
    for (const Component& c : set) key += c.Name() + ",";
    return key;
  }
  double SampleTarget(int s) const {
    double t = 0;
    for (int l = from_; l < c_.n_layers; ++l) t += clean_[s].sink0[l];
    return t;
  }
  double Target() const {
    double t = 0;
    for (int s = 0; s < n_; ++s) t += SampleTarget(s);
    return t;
  }
  // Sink_0 counts over the target layers with `set` ablated at P0, per sample s < n: a single
  // component's from its measured row, a larger set's from forwards (whole ones, from the
  // embedding), each run once per sample.
  const std::vector<double>& After(const std::vector<Component>& set) {
    const std::string key = Key(set);
    if (set.size() == 1)
      if (auto it = singles_.find(key); it != singles_.end()) {
        SS_ASSERT(static_cast<int>(it->second->size()) >= n_);
        return *it->second;
      }
    std::vector<double>& after = memo_[key];
    if (static_cast<int>(after.size()) < n_) {
      for (int s = static_cast<int>(after.size()); s < n_; ++s) {
        const RunMetrics m =
            runner_.Run(samples_[s], AblationHooks(set, c_.head_dim, options_.ablation));
        double a = 0;
        for (int l = from_; l < c_.n_layers; ++l) a += m.sink0[l];
        after.push_back(a);
      }
      if (report_) report_();
    }
    return after;
  }
  // The share of the target over samples [0, n) that ablating `set` removes.
  double Removed(const std::vector<Component>& set) {
    const double target = Target();
    if (target <= 0) return 0.0;
    const std::vector<double>& after = After(set);
    double a = 0;
    for (int s = 0; s < n_; ++s) a += after[s];
    return 1.0 - a / target;
  }

  const ModelConfig& c_;
  const std::vector<std::vector<int>>& samples_;
  const ExplainOptions& options_;
  Runner& runner_;
  const std::vector<RunMetrics>& clean_;
  int from_;
  std::function<void()> report_;
  int n_ = 0;
  std::map<std::string, const std::vector<double>*> singles_;
  std::map<std::string, std::vector<double>> memo_;
};

// One-sided bounds at `confidence` on the mean of `x` (Student's t over the samples; none from
// fewer than two values).
double LowerBound(const std::vector<double>& x, double confidence) {
  const int n = static_cast<int>(x.size());
  if (n < 2) return -INFINITY;
  double mean = 0, var = 0;
  for (double v : x) mean += v / n;
  for (double v : x) var += (v - mean) * (v - mean) / (n - 1);
  return mean - StudentTQuantile(confidence, n - 1) * std::sqrt(var / n);
}
double UpperBound(const std::vector<double>& x, double confidence) {
  std::vector<double> neg(x.size());
  for (size_t i = 0; i < x.size(); ++i) neg[i] = -x[i];
  return -LowerBound(neg, confidence);
}

bool SameSet(std::vector<Component> a, std::vector<Component> b) {
  auto order = [](const Component& x, const Component& y) {
    return std::tie(x.kind, x.layer, x.head) < std::tie(y.kind, y.layer, y.head);
  };
  std::sort(a.begin(), a.end(), order);
  std::sort(b.begin(), b.end(), order);
  return a == b;
}

// Whether the circuit found on n samples is settled (explain.h, StoppingSummary): the same outcome
// as on n - 1 samples, and bounds at the stopping confidence that put it clear of --share: a
// found circuit's per-sample removed share has its lower bound at or above the share and, for a
// circuit of several components, every one-smaller subset its upper bound below it; no circuit
// found: the best set's upper bound below the share. Fills the bounds into `stop`.
bool CircuitSettled(CircuitSearcher& searcher, const CircuitSearch& now,
                    const CircuitSearch& before, const ExplainOptions& o, StoppingSummary& stop) {
  stop.circuit_lower = stop.circuit_upper = stop.subset_upper = NAN;
  if (now.found != before.found || !SameSet(now.components, before.components)) return false;
  if (now.components.empty()) return true;  // no component removes anything, on two sample counts
  const std::vector<double> shares = searcher.Shares(now.components);
  stop.circuit_lower = LowerBound(shares, o.confidence);
  stop.circuit_upper = UpperBound(shares, o.confidence);
  if (!now.found) return stop.circuit_upper < o.share;
  if (stop.circuit_lower < o.share) return false;
  double worst = -INFINITY;
  for (size_t i = 0; i < now.components.size() && now.components.size() > 1; ++i) {
    std::vector<Component> rest = now.components;
    rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(i));
    worst = std::max(worst, UpperBound(searcher.Shares(rest), o.confidence));
  }
  if (now.components.size() > 1) stop.subset_upper = worst;
  return now.components.size() == 1 || worst < o.share;
}

}  // namespace

// What the interventions hold beside the model and the clean pass: the clean records kept between
// the phases (or one), the position-0 sweep's rows and its forward's buffers. Refused before they
// start when that exceeds the available memory.
static void CheckInterventionMemory(const ModelConfig& c, int T, int estimate_samples) {
  const int64_t one = CleanRecord::Bytes(c, T, /*estimates=*/true);
  const int64_t rows = static_cast<int64_t>(c.n_layers) * (c.n_heads + 2);
  const int64_t sweep_state =
      static_cast<int64_t>(sizeof(float)) * (rows * (3 * c.dim + 2 * c.q_dim() + 2 * c.kv_dim()) +
                                             2 * std::min<int64_t>(rows, kMlpRows) * c.hidden_dim);
  const int64_t records = one * (one * estimate_samples <= kKeptRecordBytes ? estimate_samples : 1);
  CheckMemory(static_cast<uint64_t>(records + P0Sweep::Bytes(c) + sweep_state),
              fmt::format("explain's clean records and position-0 sweep at --length {}", T));
}

static bool HasGatedLayer(const ExplainResult& r) {
  return std::any_of(r.layers.begin(), r.layers.end(),
                     [](const LayerDecomposition& d) { return !d.gated_alpha0.empty(); });
}

// The verdict (explain.h) from the clean pass's layers and, for a P0 sink, the circuit search.
static std::string Verdict(const ExplainResult& r, bool searched) {
  // A learned sink slot (gpt-oss) holding the mass is the model's sink; it is not a position, so
  // there is no position-0 circuit to look for.
  if (!searched)
    return r.slot_onset_layer >= 0   ? "sink-on-learned-slot"
           : r.other_sink_layer >= 0 ? "sink-not-at-p0"
                                     : "no-sink";
  // The maps sink, but the gates keep it out of the heads' outputs (Qiu et al. 2025): in no layer
  // do more than the onset threshold's share of heads pass more than eps through their gates.
  if (HasGatedLayer(r)) {
    const bool passed = std::any_of(r.layers.begin(), r.layers.end(), [&](const auto& d) {
      return !d.linear && d.gated_sink_rate > r.options.onset_threshold;
    });
    if (!passed) return "sink-suppressed-by-output-gate";
  }
  if (!r.circuit.found) return "p0-sink-no-circuit-found";
  const std::vector<Component>& set = r.circuit.components;
  const bool early =
      std::all_of(set.begin(), set.end(), [](const Component& x) { return x.layer <= 1; });
  return early ? "p0-circuit-in-blocks-0-1" : "p0-circuit-elsewhere";
}

ExplainResult Explain(const Model& model, const std::vector<std::vector<int>>& samples,
                      const ExplainOptions& options) {
  CheckOptions(options);
  const ModelConfig& c = model.config;
  if (samples.empty()) Fail("explain: no samples");
  const int T = static_cast<int>(samples[0].size());
  for (const auto& s : samples)
    if (static_cast<int>(s.size()) != T)
      Fail("explain: samples differ in length ({} vs {})", s.size(), T);
  if (T < 4) Fail("explain: {} tokens per sample; at least 4 are needed", T);
  int attention_layers = 0;
  for (int l = 0; l < c.n_layers; ++l) attention_layers += !c.LinearLayer(l);
  if (attention_layers < 1 || c.n_heads < 1) Fail("explain: the model has no attention layers");
  const int L = c.n_layers, H = c.n_heads, N = static_cast<int>(samples.size());
  const int NI = options.intervention_samples > 0 ? std::min(N, options.intervention_samples) : N;

  ExplainResult r;
  r.samples = N;
  r.length = T;
  r.n_layers = L;
  r.n_heads = H;
  r.has_sink_slot = model.config.HasSinkSlot();
  r.options = options;
  r.options.progress = nullptr;

  // Plan of forwards for the progress line, an upper bound: clean N; per intervention sample: 1
  // clean record, 1 donor, 1 shift, the --ablate set and the measured rows of the 2 L MLP, L H
  // head and L - 1 patch rows (all with exhaustive, else verify_top of them; one more record
  // where a kept record would not fit); plus the search.
  const int candidates = 2 * L + L * H + (L - 1);
  // With Gated DeltaNet layers every row is measured (no estimates), the mixers' and gates' too.
  const int verify =
      options.exhaustive || c.HasLinearLayers()
          ? candidates + 2 * L
          : std::min(options.verify_top, candidates) + (c.attn_output_gate ? 2 * L : 0);
  const int64_t planned = N + static_cast<int64_t>(NI) * (4 + !options.ablate.empty() + verify);
  Runner runner(model, T, options.eps);
  auto report = [&] {
    if (options.progress) options.progress(runner.passes, std::max(planned, runner.passes));
  };
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };

  // ---- Clean pass.
  auto t_phase = Clock::now();
  std::vector<RunMetrics> clean(N);
  {
    CleanAcc acc;
    acc.layers.assign(L, {});
    acc.cones.assign(static_cast<size_t>(L) * H, {});
    HeadTerms head_terms(model, T);
    for (int n = 0; n < N; ++n) {
      CleanPass(runner, model, samples[n], options.eps, acc, head_terms, clean[n]);
      report();
    }
    head_terms.Flush(acc.layers);
    SummarizeCleanPass(acc, clean, options, c.HasSinkSlot(), r);
  }
  r.clean_seconds = since(t_phase);

  // ---- Interventions: estimate every row on the first E samples, rank, then measure sample by
  // sample, searching the circuit after each, until the verdict and the circuit are settled.
  t_phase = Clock::now();
  const std::vector<RunMetrics> clean_iv(clean.begin(), clean.begin() + NI);
  const int target_from = std::max(1, r.onset_layer);
  // A model with Gated DeltaNet layers measures every row (InterventionTable): no estimates.
  const int E = c.HasLinearLayers() ? 0 : InterventionTable::EstimateSamples(options, NI);
  CheckInterventionMemory(c, T, E);
  InterventionTable table(model, samples, options, runner, clean_iv, target_from);
  auto t_est = Clock::now();
  for (int n = 0; n < E; ++n) {
    table.Estimate(n);
    report();
  }
  table.Rank();
  r.estimate_seconds = since(t_est);

  // A P0 sink (an onset layer) is what the circuit search explains; every other verdict rests on
  // the clean pass alone.
  const bool search = r.onset_layer >= 0;
  CircuitSearcher searcher(c, samples, options, runner, clean_iv, target_from, report);
  StoppingSummary& stop = r.stopping;
  stop.early_stop = options.early_stop;
  stop.confidence = options.confidence;
  stop.min_samples = std::min(NI, kMinInterventionSamples);
  stop.upper_bound = NI;
  CircuitSearch previous;
  for (int n = 0; n < NI; ++n) {
    table.Measure(n);
    report();
    stop.used = n + 1;
    if (search) {
      const auto t_search = Clock::now();
      CircuitSearch now = searcher.Run(n + 1, table.Singles());
      const bool settled = n > 0 && CircuitSettled(searcher, now, previous, options, stop);
      r.search_seconds += since(t_search);
      previous = now;
      if (settled && options.early_stop && n + 1 >= stop.min_samples && n + 1 < NI) {
        stop.reason = "circuit settled";
        break;
      }
    } else if (options.early_stop && n + 1 >= stop.min_samples && n + 1 < NI) {
      stop.reason = "verdict from the clean pass";
      break;
    }
  }
  if (stop.reason.empty())
    stop.reason = options.early_stop ? "upper bound reached" : "early stopping off";
  table.Report(r);
  r.intervention_seconds = since(t_phase) - r.search_seconds;

  if (search) r.circuit = previous;
  r.verdict = Verdict(r, search);
  r.forward_passes = runner.passes;
  r.block_evaluations = runner.blocks;
  return r;
}

}  // namespace ss::explain
