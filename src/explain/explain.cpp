#include "explain/explain.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <chrono>
#include <numeric>

#include "common/error.h"
#include "common/stats.h"
#include "model/precision.h"

namespace ss::explain {

std::string AblationName(Ablation a) { return a == Ablation::kZero ? "zero" : "mean"; }

std::string Component::Name() const {
  return kind == ComponentKind::kMlp ? "mlp." + std::to_string(layer)
                                     : "head." + std::to_string(layer) + "." + std::to_string(head);
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
    } else if (item.rfind("head.", 0) == 0) {
      c.kind = ComponentKind::kHead;
      rest = item.substr(5);
      const size_t dot = rest.find('.');
      if (dot == std::string::npos) Fail("{}: '{}' in '{}' is not head.LAYER.HEAD", flag, item, spec);
      c.layer = number(rest.substr(0, dot), item);
      c.head = number(rest.substr(dot + 1), item);
    } else {
      Fail("{}: '{}' in '{}' is not mlp.LAYER or head.LAYER.HEAD", flag, item, spec);
    }
    if (c.layer >= config.n_layers)
      Fail("{}: layer {} in '{}' is outside the model's layers 0..{}", flag, c.layer, spec,
           config.n_layers - 1);
    if (c.kind == ComponentKind::kHead && c.head >= config.n_heads)
      Fail("{}: head {} in '{}' is outside the model's heads 0..{}", flag, c.head, spec,
           config.n_heads - 1);
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
  if (o.verify_top < 1) Fail("--verify-top: expected at least 1 row to measure, got {}", o.verify_top);
}

namespace {

double Dot(const float* a, const float* b, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}
double Norm(const float* a, int n) { return std::sqrt(Dot(a, a, n)); }
double SafeCos(double dot, double na, double nb) { return na > 0 && nb > 0 ? dot / (na * nb) : 0.0; }

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
  std::vector<int> sink0;       // (L) heads with alpha_0 > eps
  std::vector<int> sink1;       // (L) heads with alpha_1 > eps
  std::vector<double> alpha0;   // (L) sum over the layer's heads of alpha_0
  std::vector<double> p0_ratio; // (L) ||h'_0|| / median_{i>=1} ||h'_i||
  std::vector<double> p0_norm;  // (L) ||h'_0||
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
      : model_(model), c_(model.config), T_(T), eps_(eps),
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
      for (int h = 0; h < H; ++h) {
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
      for (int l = 0; l < first; ++l) m.slot[l] = resume->clean->slot[l], m.slot_heads[l] = resume->clean->slot_heads[l];
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

// Sums of the clean-pass quantities over samples.
struct CleanAcc {
  std::vector<LayerDecomposition> layers;
  std::vector<ConeAcc> cones;
};

// Everything the clean pass of one sample needs to keep between hooks of one layer.
struct LayerScratch {
  std::vector<float> pre, z, attn, mlp, v;  // (T, D), (T, H*Dh), (T, D), (T, D), (T, Hkv*Dh)
};

void CleanPass(Runner& runner, const Model& model, const std::vector<int>& tokens, double eps,
               CleanAcc& acc, RunMetrics& metrics) {
  const ModelConfig& c = model.config;
  const int L = c.n_layers, H = c.n_heads, D = c.dim, Dh = c.head_dim, T = static_cast<int>(tokens.size());
  const int Hkv = c.n_kv_heads, group = H / Hkv, HD = c.q_dim();
  LayerScratch s;
  auto keep = [](std::vector<float>& dst) {
    return [&dst](const HookContext&, Tensor& t) { dst.assign(t.data(), t.data() + t.numel()); };
  };
  std::vector<double> other_rate(L, 0.0);
  Hooks hooks;
  hooks.Add(HookPoint::kResidPre, -1, keep(s.pre));
  hooks.Add(HookPoint::kV, -1, keep(s.v));
  hooks.Add(HookPoint::kZ, -1, keep(s.z));
  hooks.Add(HookPoint::kAttnOut, -1, keep(s.attn));
  hooks.Add(HookPoint::kMlpOut, -1, keep(s.mlp));
  // Strongest sink on another position: per head, max over k in [1, T/2] of alpha_k.
  hooks.Add(HookPoint::kPattern, -1, [&](const HookContext& ctx, Tensor& p) {
    const int S = static_cast<int>(p.dim(2));
    int count = 0;
    std::vector<double> col(T / 2 + 1);
    for (int h = 0; h < H; ++h) {
      std::fill(col.begin(), col.end(), 0.0);
      for (int i = 1; i < T; ++i) {
        const float* row = p.data() + (static_cast<int64_t>(h) * T + i) * S;
        for (int k = 1; k <= std::min(i, T / 2); ++k) col[k] += row[k];
      }
      double best = 0;
      for (int k = 1; k <= T / 2; ++k) best = std::max(best, col[k] / (T - k));
      count += best > eps;
    }
    other_rate[ctx.layer] = static_cast<double>(count) / H;
  });
  hooks.Add(HookPoint::kResidPost, -1, [&](const HookContext& ctx, Tensor& post_t) {
    const int l = ctx.layer;
    const float* post = post_t.data();
    const LayerWeights& w = model.weights.layers[l];
    // W_O in f32 (unpacked from its bf16 or Q8_0 pack for a model held packed only). Unpacked
    // per call rather than kept: keeping every layer's would hold a 7B model's W_O in f32 (2 GiB)
    // to save a D x D conversion beside a forward of T x (params) multiply-adds.
    const Tensor wo = ProjectionF32(w.wo, w.packed ? &w.packed->wo : nullptr);
    LayerDecomposition& dec = acc.layers[l];
    if (dec.p0_head.empty()) {
      dec.p0_head.assign(H, 0.0);
      dec.other_head.assign(H, 0.0);
    }
    // Positions: 0, and up to kOtherPositions evenly spaced i >= 1 for the per-head terms.
    std::vector<int> head_positions{0};
    const int n_other = std::min(T - 1, kOtherPositions);
    for (int j = 0; j < n_other; ++j) head_positions.push_back(1 + static_cast<int>((static_cast<int64_t>(j) * (T - 1)) / n_other));
    std::vector<double> g(HD);
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
    // Per head: u.(W_O[:, h] z_h) = (W_O^T u)[h slice] . z_h; W_O is (D, H*Dh).
    for (size_t pi = 0; pi < head_positions.size(); ++pi) {
      const int i = head_positions[pi];
      const float* hq = post + static_cast<int64_t>(i) * D;
      const double n_post = Norm(hq, D);
      if (n_post <= 0) continue;
      std::fill(g.begin(), g.end(), 0.0);
      for (int d = 0; d < D; ++d) {
        const double ud = hq[d] / n_post;
        const float* wrow = wo.data() + static_cast<int64_t>(d) * HD;
        for (int j = 0; j < HD; ++j) g[j] += ud * wrow[j];
      }
      const float* z = &s.z[static_cast<int64_t>(i) * HD];
      for (int h = 0; h < H; ++h) {
        double t = 0;
        for (int e = 0; e < Dh; ++e) t += g[h * Dh + e] * z[h * Dh + e];
        if (i == 0) dec.p0_head[h] += t;
        else dec.other_head[h] += t / n_other;
      }
    }
    // Cone model per head (values of kv head h / group).
    const double* sq_unused = nullptr;
    (void)sq_unused;
    for (int h = 0; h < H; ++h) {
      const int kv = h / group;
      std::vector<double> axis(Dh, 0.0);
      double v_sq = 0;
      std::vector<double> vnorm(T);
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
      ConeAcc& ca = acc.cones[static_cast<size_t>(l) * H + h];
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
        if (pred > best_pred + 1e-12) { best_pred = pred; arg_pred = i; }
        if (meas > best_meas) { best_meas = meas; arg_meas = i; }
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
  });
  metrics = runner.Run(tokens, hooks);
  for (int l = 0; l < L; ++l) {
    acc.layers[l].other_sink_rate += other_rate[l];
    double alpha = 0;
    for (int h = 0; h < H; ++h) alpha += runner.Alpha(l, h, 0);
    acc.layers[l].mean_alpha0 += alpha / H;
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
    if (comp.kind == ComponentKind::kMlp) {
      hooks.Add(HookPoint::kMlpOut, comp.layer, [knock_out](const HookContext& ctx, Tensor& t) {
        if (ctx.start == 0 && t.dim(0) > 1) knock_out(t, 0, t.numel() / t.dim(0));
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
  std::vector<float> z_mean;     // (L, H * Dh) hook_z's mean over positions >= 1
  std::vector<float> mlp_mean;   // (L, D) hook_mlp_out's mean over positions >= 1
  // (L, H, T) logit(p_i0) - g(s_i0): query i's clean attention on key 0 with key 0's own weight
  // taken out, so that a new key 0 gets p'_i0 = sigmoid(base + g(s'_i0)). +-inf where p_i0 is 1
  // (position 0 itself) or 0 (outside a sliding window): it stays so.
  std::vector<double> attn_base;
  RunMetrics metrics;
};

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// g(s) for query q (Dh) and key k (Dh) in block `layer`, scored as the attention kernels score
// (QueryScale, 1 / sqrt(Dh), soft-cap): the log of the key's weight before normalisation, i.e. the
// score for softmax and log sigmoid(score) for sigmoid attention.
double LogWeight(const ModelConfig& c, int layer, const float* q, const float* k) {
  double s = Dot(q, k, c.head_dim) * c.QueryScale(layer) / std::sqrt(static_cast<double>(c.head_dim));
  if (c.attn_logit_softcap > 0) s = c.attn_logit_softcap * std::tanh(s / c.attn_logit_softcap);
  if (c.attn_sigmoid) return s > 0 ? -std::log1p(std::exp(-s)) : s - std::log1p(std::exp(s));
  return s;
}

// Runs the clean forward of `tokens`, recording the residual stream entering every block and, with
// `estimates`, what the P0 estimates read.
void RecordClean(Runner& runner, const ModelConfig& c, const std::vector<int>& tokens, bool estimates,
                 CleanRecord& rec) {
  const int L = c.n_layers, H = c.n_heads, D = c.dim, HD = c.q_dim(), KV = c.kv_dim();
  const int Dh = c.head_dim, group = c.n_heads / c.n_kv_heads, T = static_cast<int>(tokens.size());
  const int64_t block = static_cast<int64_t>(T) * D, q_block = static_cast<int64_t>(T) * HD;
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
    record.Add(HookPoint::kK, -1, [&](const HookContext& ctx, Tensor& t) {
      std::copy(t.data(), t.data() + KV, rec.k0.data() + static_cast<int64_t>(ctx.layer) * KV);
    });
    record.Add(HookPoint::kZ, -1, [&](const HookContext& ctx, Tensor& t) {
      P0Replacement(t.data(), T, HD, 0, HD, Ablation::kMean, &rec.z_mean[static_cast<size_t>(ctx.layer) * HD]);
    });
    record.Add(HookPoint::kMlpOut, -1, [&](const HookContext& ctx, Tensor& t) {
      P0Replacement(t.data(), T, D, 0, D, Ablation::kMean, &rec.mlp_mean[static_cast<size_t>(ctx.layer) * D]);
    });
  }
  rec.metrics = runner.Run(tokens, record);
  if (!estimates) return;
  rec.attn_base.assign(static_cast<size_t>(L) * H * T, 0.0);
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) {
      const float* k = &rec.k0[static_cast<size_t>(l) * KV + (h / group) * Dh];
      double* base = &rec.attn_base[(static_cast<size_t>(l) * H + h) * T];
      for (int i = 0; i < T; ++i) {
        const double p = runner.Prob(l, h, i, 0);
        const float* q = &rec.q[static_cast<size_t>(l) * q_block + static_cast<int64_t>(i) * HD + h * Dh];
        base[i] = p <= 0 ? -INFINITY : p >= 1 ? INFINITY : std::log(p) - std::log1p(-p) - LogWeight(c, l, q, k);
      }
    }
}

// Position 0 under `rows` interventions at once, from block `first` on: one forward of `rows`
// copies of the first token at position 0, each attending to itself alone
// (ForwardRequest::self_attention_only), which is what position 0 computes in the full forward
// under the causal mask. The interventions' hooks write their rows; the call keeps each row's key
// 0 in the blocks after `first` and ||h'_0|| from `first` on.
class P0Recompute {
 public:
  P0Recompute(const Model& model, int rows)
      : model_(model), rows_(rows), cache_(KVCache::CreateSingleUse(model.config, rows)) {}

  struct Rows {
    std::vector<float> k0;     // (rows, L, Hkv * Dh)
    std::vector<double> norm;  // (rows, L)
  };
  // h0: (D) h_0 entering block `first` (unused at block 0, which starts from the embedding).
  Rows Run(int token, const float* h0, int first, Hooks hooks) {
    const ModelConfig& c = model_.config;
    const int L = c.n_layers, D = c.dim, KV = c.kv_dim();
    Rows out;
    out.k0.assign(static_cast<size_t>(rows_) * L * KV, 0.0f);
    out.norm.assign(static_cast<size_t>(rows_) * L, 0.0);
    hooks.Add(HookPoint::kK, -1, [&](const HookContext& ctx, Tensor& t) {
      if (ctx.layer <= first) return;
      for (int r = 0; r < rows_; ++r)
        std::copy(t.data() + static_cast<int64_t>(r) * KV, t.data() + static_cast<int64_t>(r + 1) * KV,
                  &out.k0[(static_cast<size_t>(r) * L + ctx.layer) * KV]);
    });
    hooks.Add(HookPoint::kResidPost, -1, [&](const HookContext& ctx, Tensor& t) {
      for (int r = 0; r < rows_; ++r) out.norm[static_cast<size_t>(r) * L + ctx.layer] = Norm(t.data() + static_cast<int64_t>(r) * D, D);
    });
    const std::vector<int> tokens(rows_, token), positions(rows_, 0);
    std::vector<float> resid;
    if (first > 0)
      for (int r = 0; r < rows_; ++r) resid.insert(resid.end(), h0, h0 + D);
    cache_.Clear();
    ForwardRequest req;
    req.tokens = tokens;
    req.positions = positions;
    req.logits = LogitsMode::kNone;
    req.hooks = &hooks;
    req.first_layer = first;
    req.resid_pre = first > 0 ? resid.data() : nullptr;
    req.self_attention_only = true;
    ss::Forward(model_, cache_, state_, req);
    ++calls;
    blocks += static_cast<int64_t>(rows_) * (L - first);
    return out;
  }

  int64_t calls = 0, blocks = 0;

 private:
  const Model& model_;
  int rows_;
  KVCache cache_;
  RunState state_;
};

// The estimated metrics of an intervention that changes h_0 after block `layer`'s attention (an
// MLP or head ablation in block `layer`, or a patch of h_0 after it): blocks up to `layer` keep the
// clean attention, ||h'_0|| from `layer` on is `norm` (L) over the clean median of the other
// positions, and each later block's attention on position 0 follows the new key 0 (k0: (L,
// Hkv * Dh)) against the clean queries. Sink_1 and the slot stay clean (not estimated).
RunMetrics EstimateMetrics(const CleanRecord& rec, const ModelConfig& c, int T, double eps, int layer,
                           const float* k0, const double* norm) {
  RunMetrics m = rec.metrics;
  const int L = c.n_layers, H = c.n_heads, Dh = c.head_dim, KV = c.kv_dim(), HD = c.q_dim();
  const int group = c.n_heads / c.n_kv_heads;
  for (int l = std::max(layer, 0); l < L; ++l) {
    m.p0_norm[l] = norm[l];
    m.p0_ratio[l] = NormRatio(norm[l], m.others_median[l]);
  }
  for (int l = layer + 1; l < L; ++l) {
    int sinks = 0;
    double alpha_sum = 0;
    for (int h = 0; h < H; ++h) {
      const float* k = k0 + static_cast<int64_t>(l) * KV + (h / group) * Dh;
      const double* base = &rec.attn_base[(static_cast<size_t>(l) * H + h) * T];
      double alpha = 0;
      for (int i = 0; i < T; ++i) {
        if (base[i] == -INFINITY) continue;
        if (base[i] == INFINITY) {
          alpha += 1;
          continue;
        }
        const float* q = &rec.q[(static_cast<size_t>(l) * T + i) * HD + h * Dh];
        alpha += Sigmoid(base[i] + LogWeight(c, l, q, k));
      }
      alpha /= T;
      sinks += alpha > eps;
      alpha_sum += alpha;
    }
    m.sink0[l] = sinks;
    m.alpha0[l] = alpha_sum;
  }
  return m;
}

}  // namespace

ExplainResult Explain(const Model& model, const std::vector<std::vector<int>>& samples,
                      const ExplainOptions& options) {
  CheckOptions(options);
  const ModelConfig& c = model.config;
  if (samples.empty()) Fail("explain: no samples");
  const int T = static_cast<int>(samples[0].size());
  for (const auto& s : samples)
    if (static_cast<int>(s.size()) != T) Fail("explain: samples differ in length ({} vs {})", s.size(), T);
  if (T < 4) Fail("explain: {} tokens per sample; at least 4 are needed", T);
  if (c.n_layers < 1 || c.n_heads < 1) Fail("explain: the model has no attention layers");
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

  // Plan of forwards for the progress line: clean N; per intervention sample: 1 clean record, 1
  // donor, 1 shift, the --ablate set, and the measured rows of the 2 L MLP, L H head and L - 1
  // patch rows (all with exhaustive, else verify_top of them after one more clean record); plus
  // the search.
  const int candidates = 2 * L + L * H + (L - 1);
  const int verify = options.exhaustive ? candidates : std::min(options.verify_top, candidates);
  const bool record_again = !options.exhaustive && options.resume_at_block && L > 1;
  const int64_t planned =
      N + static_cast<int64_t>(NI) * (3 + !options.ablate.empty() + verify + record_again);
  Runner runner(model, T, options.eps);
  auto report = [&] {
    if (options.progress) options.progress(runner.passes, std::max(planned, runner.passes));
  };

  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  auto t_phase = Clock::now();
  // ---- Clean pass.
  CleanAcc acc;
  acc.layers.assign(L, {});
  acc.cones.assign(static_cast<size_t>(L) * H, {});
  std::vector<RunMetrics> clean(N);
  for (int n = 0; n < N; ++n) {
    CleanPass(runner, model, samples[n], options.eps, acc, clean[n]);
    report();
  }
  r.layers = acc.layers;
  r.clean_seconds = since(t_phase);
  t_phase = Clock::now();
  for (int l = 0; l < L; ++l) {
    LayerDecomposition& d = r.layers[l];
    auto mean = [N](double& x) { x /= N; };
    for (double* x : {&d.p0_norm_pre, &d.p0_norm_post, &d.p0_carry, &d.p0_attn, &d.p0_mlp,
                      &d.p0_unexplained, &d.p0_cos_pre, &d.p0_cos_attn, &d.p0_cos_mlp,
                      &d.p0_attn_norm, &d.p0_mlp_norm, &d.other_norm_pre, &d.other_norm_post,
                      &d.other_carry, &d.other_attn, &d.other_mlp, &d.other_cos_attn,
                      &d.other_cos_mlp, &d.other_sink_rate, &d.mean_alpha0})
      mean(*x);
    for (double& x : d.p0_head) x /= N;
    for (double& x : d.other_head) x /= N;
    double ratio = 0, rate = 0;
    for (int n = 0; n < N; ++n) {
      ratio += clean[n].p0_ratio[l];
      rate += static_cast<double>(clean[n].sink0[l]) / H;
    }
    d.p0_norm_ratio = ratio / N;
    d.sink_rate = rate / N;
    if (model.config.HasSinkSlot()) {
      double slot = 0, slot_rate = 0;
      for (int n = 0; n < N; ++n) {
        slot += clean[n].slot[l];
        slot_rate += static_cast<double>(clean[n].slot_heads[l]) / H;
      }
      d.mean_alpha_sink = slot / N;
      d.sink_slot_rate = slot_rate / N;
      r.sink_slot_rate += d.sink_slot_rate / L;
      if (r.slot_onset_layer < 0 && d.sink_slot_rate > options.onset_threshold) r.slot_onset_layer = l;
    }
    r.sink_rate += d.sink_rate / L;
    if (r.amplification_layer < 0 && d.p0_norm_ratio > options.amplification_threshold)
      r.amplification_layer = l;
    if (r.onset_layer < 0 && d.sink_rate > options.onset_threshold) r.onset_layer = l;
    if (r.other_sink_layer < 0 && d.other_sink_rate > options.onset_threshold) r.other_sink_layer = l;
  }
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) {
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

  // ---- Interventions on the first NI samples.
  const int Dh = c.head_dim, D = c.dim, HD = c.q_dim(), KV = c.kv_dim();
  const int64_t block_size = static_cast<int64_t>(T) * D;
  // Sums of one intervention's metrics over the samples (measured, or estimated).
  struct Sums {
    int samples = 0;
    std::vector<double> clean_layer, after_layer, ratio_clean, ratio_after, alpha_clean, alpha_after,
        norm_after;
    double sink1 = 0;
  };
  struct EffectAcc {
    InterventionEffect e;
    Sums measured, estimated;
  };
  auto add = [&](Sums& a, const RunMetrics& cl, const RunMetrics& af) {
    if (a.samples == 0)
      for (auto* v : {&a.clean_layer, &a.after_layer, &a.ratio_clean, &a.ratio_after, &a.alpha_clean,
                      &a.alpha_after, &a.norm_after})
        v->assign(L, 0.0);
    for (int l = 0; l < L; ++l) {
      a.clean_layer[l] += cl.sink0[l];
      a.after_layer[l] += af.sink0[l];
      a.ratio_clean[l] += cl.p0_ratio[l];
      a.ratio_after[l] += af.p0_ratio[l];
      a.alpha_clean[l] += cl.alpha0[l];
      a.alpha_after[l] += af.alpha0[l];
      a.norm_after[l] += af.p0_norm[l];
      a.sink1 += af.sink1[l];
    }
    ++a.samples;
  };
  // The search's target layers (explain.h, CircuitSearch), also where rows are ranked.
  const int target_from = std::max(1, r.onset_layer);
  // The effect quantities of summed metrics; clean figures into *sink_clean, *ratio_clean.
  auto summarize = [&](const Sums& a, int layer, double* sink_clean, double* ratio_clean) {
    EffectValues v;
    const int from = layer + 1, n = std::max(1, a.samples);
    double cl = 0, af = 0, tc = 0, ta = 0, ac = 0, aa = 0, rc = 0;
    for (int l = 0; l < L && a.samples > 0; ++l) {
      if (l >= from) cl += a.clean_layer[l], af += a.after_layer[l];
      if (l >= target_from)
        tc += a.clean_layer[l], ta += a.after_layer[l], ac += a.alpha_clean[l], aa += a.alpha_after[l];
      if (l >= std::max(layer, 0)) {
        rc = std::max(rc, a.ratio_clean[l] / n);
        v.norm_ratio_after = std::max(v.norm_ratio_after, a.ratio_after[l] / n);
      }
    }
    const double denom = std::max(1.0, static_cast<double>(a.samples) * H * (L - from));
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
  };
  std::vector<EffectAcc> effects;
  auto make = [&](std::string kind, int layer, int head, bool estimated) {
    EffectAcc a;
    a.e.kind = std::move(kind);
    a.e.layer = layer;
    a.e.head = head;
    a.e.estimated = estimated;
    a.e.measured = !estimated || options.exhaustive;
    effects.push_back(std::move(a));
    return effects.size() - 1;
  };
  const std::string mlp_kind = "mlp-" + AblationName(options.ablation);
  const std::string head_kind = "head-" + AblationName(options.ablation);
  std::vector<size_t> mlp_zero_row(L), mlp_mean_row(L), patch_row(std::max(0, L - 1));
  std::vector<std::vector<size_t>> head_row(L, std::vector<size_t>(H));
  for (int l = 0; l < L; ++l) {
    mlp_zero_row[l] = make("mlp-zero", l, -1, true);
    mlp_mean_row[l] = make("mlp-mean", l, -1, true);
    for (int h = 0; h < H; ++h) head_row[l][h] = make(head_kind, l, h, true);
  }
  for (int l = 0; l + 1 < L; ++l) patch_row[l] = make("patch-p0", l, -1, true);
  const size_t first_token_row = make("first-token", -1, -1, false);
  const size_t shift_row = make("shift", -1, -1, false);
  int set_layer = -1;
  for (const Component& comp : options.ablate) {
    if (comp.layer >= L || (comp.kind == ComponentKind::kHead && comp.head >= H))
      Fail("--ablate: {} is outside the model ({} layers x {} heads)", comp.Name(), L, H);
    set_layer = std::max(set_layer, comp.layer);
  }
  const size_t set_row = options.ablate.empty() ? 0 : make("set", set_layer, -1, false);

  // Resume at block l (from the clean residual stream `rec` recorded), or run from the embedding
  // when options.resume_at_block is off or l = 0.
  CleanRecord rec;
  std::vector<Resume> resume(L);
  for (int l = 0; l < L; ++l) resume[l] = {l, &rec.resid_pre, &rec.metrics, block_size};
  auto at = [&](int l) -> const Resume* {
    return options.resume_at_block && L > 1 && l > 0 ? &resume[l] : nullptr;
  };
  // The exact intervened forward of an MLP, head or patch row; donor_h0 (L, D) is the donor's h_0
  // after every block.
  auto run_exact = [&](const InterventionEffect& e, const std::vector<int>& tokens,
                       const std::vector<float>& donor_h0) {
    const int l = e.layer;
    if (e.kind == "patch-p0") {
      Hooks patch;
      patch.Add(HookPoint::kResidPost, l, [&, l](const HookContext&, Tensor& x) {
        std::copy(&donor_h0[static_cast<size_t>(l) * D], &donor_h0[static_cast<size_t>(l + 1) * D], x.data());
      });
      return runner.Run(tokens, patch, at(l));
    }
    const Ablation mode = e.kind == "mlp-zero"   ? Ablation::kZero
                          : e.kind == "mlp-mean" ? Ablation::kMean
                                                 : options.ablation;
    const Component comp = e.head >= 0 ? Component{ComponentKind::kHead, l, e.head}
                                       : Component{ComponentKind::kMlp, l, -1};
    return runner.Run(tokens, AblationHooks({comp}, Dh, mode), at(l));
  };

  P0Recompute recompute(model, H + 2);
  std::vector<std::vector<float>> donor_h0s(NI);  // per sample (L, D)
  for (int n = 0; n < NI; ++n) {
    const std::vector<int>& tokens = samples[n];
    RecordClean(runner, c, tokens, /*estimates=*/true, rec);
    // Donor: the same sample with another first token; keep its h_0 after every block.
    // Donor first token: a text token (position 1 of another sample, so an ordinary token of the
    // same text, not an arbitrary id that may be a rare byte token), else any other id.
    std::vector<int> donor = tokens;
    donor[0] = OtherFirstToken(tokens[0], c);
    for (int k = 1; k < N; ++k) {
      const int t = samples[(n + k) % N][1];
      if (t != tokens[0] && t != c.bos_id && t != c.eos_id) {
        donor[0] = t;
        break;
      }
    }
    std::vector<float>& donor_h0 = donor_h0s[n];
    donor_h0.assign(static_cast<size_t>(L) * D, 0.0f);
    std::vector<float> donor_k0(static_cast<size_t>(L) * KV, 0.0f);
    std::vector<double> donor_norm(L, 0.0);
    Hooks capture;
    capture.Add(HookPoint::kResidPost, -1, [&](const HookContext& ctx, Tensor& x) {
      std::copy(x.data(), x.data() + D, &donor_h0[static_cast<size_t>(ctx.layer) * D]);
      donor_norm[ctx.layer] = Norm(x.data(), D);
    });
    capture.Add(HookPoint::kK, -1, [&](const HookContext& ctx, Tensor& x) {
      std::copy(x.data(), x.data() + KV, &donor_k0[static_cast<size_t>(ctx.layer) * KV]);
    });
    const RunMetrics donor_metrics = runner.Run(donor, capture);

    // P0 estimates. Block l's rows in one recomputation: row h < H ablates head h, row H zeroes
    // the MLP output and row H + 1 mean-ablates it (the means are the clean run's, which is what
    // the exact intervention computes: positions >= 1 of block l do not see the intervention).
    auto t_est = Clock::now();
    for (int l = 0; l < L; ++l) {
      Hooks rows;
      rows.Add(HookPoint::kZ, l, [&, l](const HookContext&, Tensor& t) {
        for (int h = 0; h < H; ++h) {
          float* z = t.data() + static_cast<int64_t>(h) * HD + h * Dh;
          if (options.ablation == Ablation::kMean) {
            const float* mean = &rec.z_mean[static_cast<size_t>(l) * HD + h * Dh];
            std::copy(mean, mean + Dh, z);
          } else {
            std::fill(z, z + Dh, 0.0f);
          }
        }
      });
      rows.Add(HookPoint::kMlpOut, l, [&, l](const HookContext&, Tensor& t) {
        std::fill(t.data() + static_cast<int64_t>(H) * D, t.data() + static_cast<int64_t>(H + 1) * D, 0.0f);
        const float* mean = &rec.mlp_mean[static_cast<size_t>(l) * D];
        std::copy(mean, mean + D, t.data() + static_cast<int64_t>(H + 1) * D);
      });
      const P0Recompute::Rows out =
          recompute.Run(tokens[0], &rec.resid_pre[static_cast<size_t>(l) * block_size], l, rows);
      auto estimate = [&](size_t row, int r) {
        add(effects[row].estimated, clean[n],
            EstimateMetrics(rec, c, T, options.eps, l, &out.k0[static_cast<size_t>(r) * L * KV],
                            &out.norm[static_cast<size_t>(r) * L]));
      };
      for (int h = 0; h < H; ++h) estimate(head_row[l][h], h);
      estimate(mlp_zero_row[l], H);
      estimate(mlp_mean_row[l], H + 1);
    }
    // A patch after block l puts the donor's h_0 there, and position 0 then computes what it
    // computes in the donor's own forward: its keys and norms are the donor's.
    for (int l = 0; l + 1 < L; ++l)
      add(effects[patch_row[l]].estimated, clean[n],
          EstimateMetrics(rec, c, T, options.eps, l, donor_k0.data(), donor_norm.data()));
    r.estimate_seconds += since(t_est);

    if (options.exhaustive)
      for (EffectAcc& a : effects)
        if (a.e.estimated) add(a.measured, clean[n], run_exact(a.e, tokens, donor_h0));
    add(effects[first_token_row].measured, clean[n], donor_metrics);
    std::vector<int> shifted(T);
    shifted[0] = donor[0];
    std::copy(tokens.begin(), tokens.end() - 1, shifted.begin() + 1);
    add(effects[shift_row].measured, clean[n], runner.Run(shifted, Hooks()));
    if (!options.ablate.empty()) {
      int first = L - 1;
      for (const Component& comp : options.ablate) first = std::min(first, comp.layer);
      add(effects[set_row].measured, clean[n],
          runner.Run(tokens, AblationHooks(options.ablate, Dh, options.ablation), at(first)));
    }
    report();
  }

  // Rank the estimated rows (share of the search target removed, then of the attention mass on
  // position 0) and measure the best verify_top of them.
  auto t_rank = Clock::now();
  std::vector<size_t> ranked;
  for (size_t i = 0; i < effects.size(); ++i) {
    EffectAcc& a = effects[i];
    if (!a.e.estimated) continue;
    double sink_clean = 0, ratio_clean = 0;
    a.e.estimate = summarize(a.estimated, a.e.layer, &sink_clean, &ratio_clean);
    ranked.push_back(i);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [&](size_t x, size_t y) {
    const EffectValues &a = effects[x].e.estimate, &b = effects[y].e.estimate;
    if (a.target_share != b.target_share) return a.target_share > b.target_share;
    return a.alpha0_share > b.alpha0_share;
  });
  for (size_t k = 0; k < ranked.size(); ++k) {
    InterventionEffect& e = effects[ranked[k]].e;
    e.rank = static_cast<int>(k) + 1;
    e.measured = options.exhaustive || static_cast<int>(k) < options.verify_top;
  }
  r.estimate_seconds += since(t_rank);
  if (!options.exhaustive) {
    for (int n = 0; n < NI; ++n) {
      const std::vector<int>& tokens = samples[n];
      if (record_again) RecordClean(runner, c, tokens, /*estimates=*/false, rec);
      for (EffectAcc& a : effects)
        if (a.e.estimated && a.e.measured) add(a.measured, clean[n], run_exact(a.e, tokens, donor_h0s[n]));
      report();
    }
  }

  EstimateSummary& es = r.estimates;
  es.exhaustive = options.exhaustive;
  es.verify_top = options.verify_top;
  es.candidates = static_cast<int>(ranked.size());
  es.target_from_layer = target_from;
  std::vector<double> est_target, got_target, est_alpha, got_alpha, est_ratio, got_ratio;
  for (EffectAcc& a : effects) {
    InterventionEffect& ef = a.e;
    const EffectValues v = summarize(ef.measured ? a.measured : a.estimated, ef.layer, &ef.sink_clean,
                                     &ef.norm_ratio_clean);
    ef.samples = (ef.measured ? a.measured : a.estimated).samples;
    ef.sink_after = v.sink_after;
    ef.removed_share = v.removed_share;
    ef.norm_ratio_after = v.norm_ratio_after;
    ef.target_share = v.target_share;
    ef.alpha0_share = v.alpha0_share;
    ef.layer_sink_after = v.layer_sink_after;
    ef.layer_p0_norm_after = v.layer_p0_norm_after;
    ef.layer_norm_ratio_after = v.layer_norm_ratio_after;
    if (ef.kind == "shift")
      ef.sink1_after = a.measured.sink1 / std::max(1.0, static_cast<double>(a.measured.samples) * H * L);
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
  es.recompute_calls = recompute.calls;
  es.recompute_rows = recompute.blocks;

  r.intervention_seconds = since(t_phase);
  t_phase = Clock::now();
  // ---- Verdict and circuit search.
  if (r.onset_layer < 0) {
    // A learned sink slot (gpt-oss) holding the mass is the model's sink; it is not a position,
    // so there is no position-0 circuit to look for.
    r.verdict = r.slot_onset_layer >= 0   ? "sink-on-learned-slot"
                : r.other_sink_layer >= 0 ? "sink-not-at-p0"
                                          : "no-sink";
  } else {
    CircuitSearch& cs = r.circuit;
    cs.ran = true;
    cs.from_layer = std::max(1, r.onset_layer);
    double target = 0;
    for (int n = 0; n < NI; ++n)
      for (int l = cs.from_layer; l < L; ++l) target += clean[n].sink0[l];
    cs.target_clean = target / std::max(1.0, static_cast<double>(NI) * H * (L - cs.from_layer));
    // Removed share of the target by zero-ablating `set` at P0 (NI forwards).
    auto removed = [&](const std::vector<Component>& set) {
      if (target <= 0) return 0.0;
      double after = 0;
      for (int n = 0; n < NI; ++n) {
        const RunMetrics m = runner.Run(samples[n], AblationHooks(set, Dh, options.ablation));
        for (int l = cs.from_layer; l < L; ++l) after += m.sink0[l];
      }
      report();
      return 1.0 - after / target;
    };
    // Single effects on the target, from the measured ablation rows of the table (all of them
    // with exhaustive, else the verified ones: the search never rests on an estimate).
    std::vector<std::pair<double, Component>> singles;
    for (const EffectAcc& a : effects) {
      if (a.e.kind != mlp_kind && a.e.kind != head_kind) continue;
      if (a.e.layer + 1 >= L) continue;  // nothing downstream
      if (!a.e.measured) continue;
      double after = 0;
      for (int l = cs.from_layer; l < L; ++l) after += a.measured.after_layer[l];
      const double share = target > 0 ? 1.0 - after / target : 0.0;
      singles.push_back({share, a.e.kind == mlp_kind ? Component{ComponentKind::kMlp, a.e.layer, -1}
                                                       : Component{ComponentKind::kHead, a.e.layer, a.e.head}});
    }
    std::stable_sort(singles.begin(), singles.end(),
                     [](const auto& x, const auto& y) { return x.first > y.first; });
    std::vector<Component> set;
    double best = 0;
    if (!singles.empty() && singles[0].first > 0) {
      set.push_back(singles[0].second);
      best = singles[0].first;
      cs.removed_after_step.push_back(best);
    }
    while (!set.empty() && best < options.share && static_cast<int>(set.size()) < options.max_components) {
      double step_best = best;
      Component pick;
      bool picked = false;
      int tried = 0;
      for (const auto& [share, comp] : singles) {
        if (tried >= options.greedy_width) break;
        if (std::find(set.begin(), set.end(), comp) != set.end()) continue;
        ++tried;
        std::vector<Component> trial = set;
        trial.push_back(comp);
        const double got = removed(trial);
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
    if (best >= options.share) {
      // Prune: drop members the rest does not need.
      for (size_t i = set.size(); set.size() > 1 && i-- > 0;) {
        std::vector<Component> rest = set;
        rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(i));
        const double got = removed(rest);
        if (got >= options.share) {
          set = rest;
          best = got;
        }
      }
      cs.found = true;
    }
    cs.components = set;
    cs.removed_share = best;
    if (!cs.found) {
      r.verdict = "p0-sink-no-circuit-found";
    } else {
      const bool early = std::all_of(set.begin(), set.end(), [](const Component& x) { return x.layer <= 1; });
      r.verdict = early ? "p0-circuit-in-blocks-0-1" : "p0-circuit-elsewhere";
    }
  }
  r.forward_passes = runner.passes;
  r.block_evaluations = runner.blocks;
  r.search_seconds = since(t_phase);
  return r;
}

}  // namespace ss::explain
