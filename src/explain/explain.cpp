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
}

namespace {

double Dot(const float* a, const float* b, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}
double Norm(const float* a, int n) { return std::sqrt(Dot(a, a, n)); }
double SafeCos(double dot, double na, double nb) { return na > 0 && nb > 0 ? dot / (na * nb) : 0.0; }

// ||h_0|| / median_{i>=1} ||h_i|| of x (T, D).
double P0NormRatio(const float* x, int T, int D) {
  std::vector<double> norms(T - 1);
  for (int i = 1; i < T; ++i) norms[i - 1] = Norm(x + static_cast<int64_t>(i) * D, D);
  const double med = ss::Median(norms);
  return med > 0 ? Norm(x, D) / med : 0.0;
}

// What one (possibly intervened) forward pass yields for the effect measures.
struct RunMetrics {
  std::vector<int> sink0;       // (L) heads with alpha_0 > eps
  std::vector<int> sink1;       // (L) heads with alpha_1 > eps
  std::vector<double> p0_ratio; // (L)
  std::vector<double> slot;     // (L) mean alpha_sink over the layer's heads (learned sink logits)
  std::vector<int> slot_heads;  // (L) heads with alpha_sink > eps
};

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
    m.p0_ratio.assign(L, 0);
    hooks.Add(HookPoint::kResidPost, -1, [&](const HookContext& ctx, Tensor& x) {
      m.p0_ratio[ctx.layer] = P0NormRatio(x.data(), T_, D);
    });
    const int first = resume ? resume->layer : 0;
    Forward(tokens, &hooks, first, resume ? resume->ResidPre() : nullptr);
    for (int l = 0; l < first; ++l) {
      m.sink0[l] = resume->clean->sink0[l];
      m.sink1[l] = resume->clean->sink1[l];
      m.p0_ratio[l] = resume->clean->p0_ratio[l];
    }
    for (int l = first; l < L; ++l)
      for (int h = 0; h < H; ++h) {
        m.sink0[l] += Alpha(l, h, 0) > eps_;
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
    const float* p = stats_.first_k_probs.data() + ((static_cast<int64_t>(l) * c_.n_heads + h) * T_) * 2;
    double s = 0;
    for (int i = k; i < T_; ++i) s += p[static_cast<int64_t>(i) * 2 + k];
    return s / (T_ - k);
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
    float* x = t.data();
    for (int64_t c = c0; c < c0 + width; ++c) {
      double mean = 0;
      if (mode == Ablation::kMean)
        for (int64_t i = 1; i < T; ++i) mean += x[i * row + c] / double(T - 1);
      x[c] = static_cast<float>(mean);
    }
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

  // Plan of forwards for the progress line: clean N; per intervention sample: 2 L MLP, L H heads,
  // 1 donor, L - 1 patches, 1 shift; plus the search.
  const int64_t planned = N + static_cast<int64_t>(NI) * (2 * L + L * H + 1 + (L - 1) + 1 + (options.resume_at_block && L > 1));
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
  const int Dh = c.head_dim;
  // Accumulates one intervention's effect over the samples.
  struct EffectAcc {
    InterventionEffect e;
    std::vector<double> clean_layer, after_layer, ratio_clean, ratio_after;
    double sink1 = 0;
  };
  auto make = [&](std::string kind, int layer, int head) {
    EffectAcc a;
    a.e.kind = std::move(kind);
    a.e.layer = layer;
    a.e.head = head;
    a.clean_layer.assign(L, 0);
    a.after_layer.assign(L, 0);
    a.ratio_clean.assign(L, 0);
    a.ratio_after.assign(L, 0);
    return a;
  };
  auto add = [&](EffectAcc& a, const RunMetrics& cl, const RunMetrics& af) {
    for (int l = 0; l < L; ++l) {
      a.clean_layer[l] += cl.sink0[l];
      a.after_layer[l] += af.sink0[l];
      a.ratio_clean[l] += cl.p0_ratio[l];
      a.ratio_after[l] += af.p0_ratio[l];
      a.sink1 += af.sink1[l];
    }
    ++a.e.samples;
  };
  std::vector<EffectAcc> effects;
  const std::string mlp_kind = "mlp-" + AblationName(options.ablation);
  const std::string head_kind = "head-" + AblationName(options.ablation);
  for (int l = 0; l < L; ++l) {
    effects.push_back(make("mlp-zero", l, -1));
    effects.push_back(make("mlp-mean", l, -1));
    for (int h = 0; h < H; ++h) effects.push_back(make(head_kind, l, h));
  }
  for (int l = 0; l + 1 < L; ++l) effects.push_back(make("patch-p0", l, -1));
  effects.push_back(make("first-token", -1, -1));
  effects.push_back(make("shift", -1, -1));
  int set_layer = -1;
  for (const Component& comp : options.ablate) {
    if (comp.layer >= L || (comp.kind == ComponentKind::kHead && comp.head >= H))
      Fail("--ablate: {} is outside the model ({} layers x {} heads)", comp.Name(), L, H);
    set_layer = std::max(set_layer, comp.layer);
  }
  if (!options.ablate.empty()) effects.push_back(make("set", set_layer, -1));

  std::vector<float> prefix;  // (L, T, D) clean hook_resid_pre of the current sample
  RunMetrics prefix_clean;
  for (int n = 0; n < NI; ++n) {
    const std::vector<int>& tokens = samples[n];
    size_t e = 0;
    // Resume at block l (from the clean residual stream, recorded by one more clean forward), or
    // run from the embedding when options.resume_at_block is off or l = 0.
    const int64_t block_size = static_cast<int64_t>(T) * c.dim;
    if (options.resume_at_block && L > 1) {
      prefix.assign(static_cast<size_t>(L) * block_size, 0.0f);
      Hooks record;
      record.Add(HookPoint::kResidPre, -1, [&](const HookContext& ctx, Tensor& x) {
        std::copy(x.data(), x.data() + block_size, prefix.data() + ctx.layer * block_size);
      });
      prefix_clean = runner.Run(tokens, record);
    }
    std::vector<Resume> resume(L);
    for (int l = 0; l < L; ++l) resume[l] = {l, &prefix, &prefix_clean, block_size};
    auto at = [&](int l) -> const Resume* {
      return options.resume_at_block && L > 1 && l > 0 ? &resume[l] : nullptr;
    };
    for (int l = 0; l < L; ++l) {
      add(effects[e++], clean[n], runner.Run(tokens, AblationHooks({{ComponentKind::kMlp, l, -1}}, Dh, Ablation::kZero), at(l)));
      add(effects[e++], clean[n], runner.Run(tokens, AblationHooks({{ComponentKind::kMlp, l, -1}}, Dh, Ablation::kMean), at(l)));
      for (int h = 0; h < H; ++h)
        add(effects[e++], clean[n], runner.Run(tokens, AblationHooks({{ComponentKind::kHead, l, h}}, Dh, options.ablation), at(l)));
      report();
    }
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
    std::vector<std::vector<float>> donor_h0(L);
    Hooks capture;
    capture.Add(HookPoint::kResidPost, -1, [&](const HookContext& ctx, Tensor& x) {
      donor_h0[ctx.layer].assign(x.data(), x.data() + x.dim(1));
    });
    const RunMetrics donor_metrics = runner.Run(donor, capture);
    for (int l = 0; l + 1 < L; ++l) {
      Hooks patch;
      patch.Add(HookPoint::kResidPost, l, [&, l](const HookContext&, Tensor& x) {
        std::copy(donor_h0[l].begin(), donor_h0[l].end(), x.data());
      });
      add(effects[e++], clean[n], runner.Run(tokens, patch, at(l)));
    }
    add(effects[e++], clean[n], donor_metrics);
    std::vector<int> shifted(T);
    shifted[0] = donor[0];
    std::copy(tokens.begin(), tokens.end() - 1, shifted.begin() + 1);
    add(effects[e++], clean[n], runner.Run(shifted, Hooks()));
    if (!options.ablate.empty()) {
      int first = L - 1;
      for (const Component& comp : options.ablate) first = std::min(first, comp.layer);
      add(effects[e++], clean[n], runner.Run(tokens, AblationHooks(options.ablate, Dh, options.ablation), at(first)));
    }
    report();
  }
  for (EffectAcc& a : effects) {
    InterventionEffect& ef = a.e;
    const int from = ef.layer + 1;
    double cl = 0, af = 0;
    for (int l = from; l < L; ++l) {
      cl += a.clean_layer[l];
      af += a.after_layer[l];
    }
    const double denom = std::max(1.0, static_cast<double>(ef.samples) * H * (L - from));
    ef.sink_clean = cl / denom;
    ef.sink_after = af / denom;
    ef.removed_share = cl > 0 ? 1.0 - af / cl : 0.0;
    for (int l = std::max(ef.layer, 0); l < L; ++l) {
      ef.norm_ratio_clean = std::max(ef.norm_ratio_clean, a.ratio_clean[l] / std::max(1, ef.samples));
      ef.norm_ratio_after = std::max(ef.norm_ratio_after, a.ratio_after[l] / std::max(1, ef.samples));
    }
    if (ef.kind == "shift") ef.sink1_after = a.sink1 / std::max(1.0, static_cast<double>(ef.samples) * H * L);
    ef.layer_sink_after.resize(L);
    for (int l = 0; l < L; ++l)
      ef.layer_sink_after[l] = a.after_layer[l] / std::max(1.0, static_cast<double>(ef.samples) * H);
    r.interventions.push_back(ef);
  }

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
    // Single effects on the target, from the zero-ablation rows of the table.
    std::vector<std::pair<double, Component>> singles;
    for (const EffectAcc& a : effects) {
      if (a.e.kind != mlp_kind && a.e.kind != head_kind) continue;
      if (a.e.layer + 1 >= L) continue;  // nothing downstream
      double after = 0;
      for (int l = cs.from_layer; l < L; ++l) after += a.after_layer[l];
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
