#include "analysis/analyze.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/error.h"
#include "common/stats.h"
#include "kernels/ops.h"

namespace ss::analysis {

std::vector<HeadRef> ParsePatternSpec(const std::string& spec, const ModelConfig& config,
                                      const std::string& flag) {
  std::vector<HeadRef> out;
  if (spec.empty()) return out;
  auto parse_int = [&](const std::string& s, const std::string& item) {
    if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), ::isdigit))
      Fail("{}: '{}' in '{}' is not LAYER:HEAD (e.g. 0:3 or 1:*)", flag, item, spec);
    return std::stoi(s);
  };
  size_t begin = 0;
  while (begin <= spec.size()) {
    size_t end = spec.find(',', begin);
    if (end == std::string::npos) end = spec.size();
    const std::string item = spec.substr(begin, end - begin);
    const size_t colon = item.find(':');
    if (colon == std::string::npos)
      Fail("{}: '{}' in '{}' is not LAYER:HEAD (e.g. 0:3 or 1:*)", flag, item, spec);
    const int layer = parse_int(item.substr(0, colon), item);
    if (layer >= config.n_layers)
      Fail("{}: layer {} in '{}' is outside the model's layers 0..{}", flag, layer, spec,
           config.n_layers - 1);
    const std::string head = item.substr(colon + 1);
    std::vector<int> heads;
    if (head == "*") {
      for (int h = 0; h < config.n_heads; ++h) heads.push_back(h);
    } else {
      const int h = parse_int(head, item);
      if (h >= config.n_heads)
        Fail("{}: head {} in '{}' is outside the model's heads 0..{}", flag, h, spec,
             config.n_heads - 1);
      heads.push_back(h);
    }
    for (int h : heads) {
      HeadRef ref{layer, h};
      if (std::find(out.begin(), out.end(), ref) == out.end()) out.push_back(ref);
    }
    begin = end + 1;
  }
  return out;
}

std::vector<std::pair<int, int>> ConditionResult::GateClosedSinks() const {
  std::vector<std::pair<int, int>> heads;
  if (!has_output_gate) return heads;
  for (int l = 0; l < n_layers; ++l)
    for (int h = 0; h < n_heads; ++h)  // NaN on linear layers fails both comparisons
      if (Alpha(0, l, h) > eps && gated_alpha0[static_cast<size_t>(l) * n_heads + h] <= eps)
        heads.emplace_back(l, h);
  return heads;
}

namespace {

// Sums of per-sample metrics for one condition; Finish() turns them into means.
class Accumulator {
 public:
  Accumulator(const ModelConfig& c, int T, const AnalyzeOptions& o)
      : L_(c.n_layers),
        H_(c.n_heads),
        D_(c.dim),
        K_(o.first_k),
        T_(T),
        eps_(o.eps),
        has_sink_slot_(c.HasSinkSlot()),
        has_gate_(c.attn_output_gate),
        sigmoid_(c.attn_sigmoid) {
    for (int l = 0; l < L_; ++l) linear_.push_back(c.LinearLayer(l));
    attn_layers_ = static_cast<int>(std::count(linear_.begin(), linear_.end(), false));
    raw0_sum_.assign(static_cast<size_t>(L_) * H_, 0.0);
    row_sum_sum_.assign(raw0_sum_.size(), 0.0);
    gate_p0_sum_.assign(L_, 0.0);
    gate_rest_sum_.assign(L_, 0.0);
    if (has_gate_) {
      const size_t lht = static_cast<size_t>(L_) * H_ * T_;
      sample_col0_.assign(lht, 0.0f);
      sample_gate_.assign(lht, 0.0f);
      gate_head_p0_sum_.assign(static_cast<size_t>(L_) * H_, 0.0);
      gate_head_rest_sum_.assign(gate_head_p0_sum_.size(), 0.0);
      gated_alpha0_sum_.assign(gate_head_p0_sum_.size(), 0.0);
    }
    for (int l = 0; l < L_; ++l) window_.push_back(c.Window(l));
    alpha_sink_sum_.assign(static_cast<size_t>(L_) * H_, 0.0);
    sample_alpha_sink_.assign(alpha_sink_sum_.size(), 0.0);
    slot_layer_sum_.assign(L_, 0.0);
    alpha_sum_.assign(static_cast<size_t>(K_) * L_ * H_, 0.0);
    sample_alpha_.assign(alpha_sum_.size(), 0.0);
    sink_sum_.assign(K_, 0.0);
    sink_layer_sum_.assign(static_cast<size_t>(K_) * L_, 0.0);
    sink_from_sum_.assign(static_cast<size_t>(K_) * L_, 0.0);
    top_share_sum_.assign(static_cast<size_t>(L_) * H_, 0.0);
    sample_top_share_.assign(top_share_sum_.size(), 0.0);
    top_counts_.assign(static_cast<size_t>(L_) * H_ * T_, 0);
    p0_sum_.assign(L_, 0.0);
    p1_sum_.assign(L_, 0.0);
    max_other_sum_.assign(L_, 0.0);
    median_sum_.assign(L_, 0.0);
    massive_count_.assign(L_, 0);
    top_acts_.assign(L_, {});
    u0_sum_.assign(static_cast<size_t>(L_) * D_, 0.0);
    uo_sum_.assign(static_cast<size_t>(L_) * D_, 0.0);
    uo_sq_sum_.assign(L_, 0.0);
  }

  // Attention of layer l for the current sample. prob(h, i, k) = A[i, k] for k < K;
  // top(h, i) = (argmax_j A[i, j], max_j A[i, j]) with the first maximum on ties, as the kernel.
  template <typename Prob, typename Top>
  void AddAttention(int l, Prob prob, Top top) {
    if (linear_[l]) return MarkNoMap(l);
    for (int h = 0; h < H_; ++h) {
      // alpha_k^{l,h} = mean over queries i in [k, T-1] of A[i, k] (Gu et al., ICLR 2025, "When
      // Attention Sink Emerges in Language Models", section 3).
      for (int k = 0; k < K_; ++k) {
        double sum = 0;
        for (int i = k; i < T_; ++i) sum += prob(h, i, k);
        sample_alpha_[(static_cast<size_t>(k) * L_ + l) * H_ + h] = sum / (T_ - k);
      }
      if (has_gate_) {  // A[i, 0] per query, weighted by the gate in EndSample
        float* col = &sample_col0_[(static_cast<size_t>(l) * H_ + h) * T_];
        for (int i = 0; i < T_; ++i) col[i] = static_cast<float>(prob(h, i, 0));
      }
      // Top key per query, over queries i >= 1 (query 0 sees only key 0).
      double share = 0;
      int64_t* counts = &top_counts_[(static_cast<size_t>(l) * H_ + h) * T_];
      for (int i = 1; i < T_; ++i) {
        const auto [key, p] = top(h, i);
        share += p;
        ++counts[key];
      }
      sample_top_share_[static_cast<size_t>(l) * H_ + h] = share / (T_ - 1);
    }
  }

  // Linear attention: no map, no alpha (NaN, never 0).
  void MarkNoMap(int l) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (int h = 0; h < H_; ++h) {
      for (int k = 0; k < K_; ++k) sample_alpha_[(static_cast<size_t>(k) * L_ + l) * H_ + h] = nan;
      sample_top_share_[static_cast<size_t>(l) * H_ + h] = nan;
    }
  }

  // The mass on the learned sink slot of layer l for the current sample: slot(h, i).
  template <typename Slot>
  void AddSinkSlot(int l, Slot slot) {
    for (int h = 0; h < H_; ++h) {
      double sum = 0;
      for (int i = 0; i < T_; ++i) sum += slot(h, i);
      sample_alpha_sink_[static_cast<size_t>(l) * H_ + h] = sum / T_;
    }
  }

  // Sigmoid attention's weights of layer l for the current sample: raw0(h, i) the weight on
  // position 0, row(h, i) the row's total.
  template <typename Raw0, typename Row>
  void AddSigmoidWeights(int l, Raw0 raw0, Row row) {
    for (int h = 0; h < H_; ++h) {
      double w0 = 0, total = 0;
      for (int i = 0; i < T_; ++i) w0 += raw0(h, i), total += row(h, i);
      raw0_sum_[static_cast<size_t>(l) * H_ + h] += w0 / T_;
      row_sum_sum_[static_cast<size_t>(l) * H_ + h] += total / T_;
    }
  }

  // The output gate of layer l for the current sample: g (T, H, Dh).
  void AddGate(int l, const float* g, int head_dim) {
    const int64_t width = static_cast<int64_t>(H_) * head_dim;
    double p0 = 0, rest = 0;
    for (int64_t i = 0; i < width; ++i) p0 += g[i];
    for (int64_t i = width; i < static_cast<int64_t>(T_) * width; ++i) rest += g[i];
    gate_p0_sum_[l] += p0 / width;
    gate_rest_sum_[l] += T_ > 1 ? rest / (static_cast<double>(T_ - 1) * width) : 0.0;
    for (int i = 0; i < T_; ++i)
      for (int h = 0; h < H_; ++h) {
        const float* gh = g + i * width + static_cast<int64_t>(h) * head_dim;
        double sum = 0;
        for (int d = 0; d < head_dim; ++d) sum += gh[d];
        sample_gate_[(static_cast<size_t>(l) * H_ + h) * T_ + i] =
            static_cast<float>(sum / head_dim);
      }
  }

  // Residual stream after block l for the current sample: x (T, D).
  // Per-layer hidden-state metrics of one sample. Rows, and blocks of the width, run in parallel
  // (this was serial work between the parallel matrix products); every sum keeps the order of the
  // serial loops, so results do not depend on the thread count.
  void AddResidual(int l, const float* x) {
    const int64_t n = static_cast<int64_t>(T_) * D_;
    const bool parallel = n >= (int64_t{1} << 16);
    std::vector<double> norms(T_);
    std::vector<float> mags(n);
#pragma omp parallel for schedule(static) if (parallel)
    for (int i = 0; i < T_; ++i) {
      const float* xr = x + static_cast<int64_t>(i) * D_;
      float* mr = mags.data() + static_cast<int64_t>(i) * D_;
      double s = 0;
      for (int d = 0; d < D_; ++d) {
        s += static_cast<double>(xr[d]) * xr[d];
        mr[d] = std::fabs(xr[d]);
      }
      norms[i] = std::sqrt(s);
    }
    {
      std::vector<double> others(norms.begin() + 1, norms.end());
      const double med = Median(others);
      p0_sum_[l] += norms[0] / med;
      p1_sum_[l] += norms[1] / med;
      max_other_sum_[l] += *std::max_element(norms.begin() + 1, norms.end()) / med;
    }
    // Massive activations (Sun et al. 2024): |x| > 100 and > 1000 x the median |x| of the layer.
    // The three largest |x| (the earliest index on ties) are picked per thread, then merged.
    const double med_abs = MedianOfMagnitudes(mags);
    median_sum_[l] += med_abs;
    auto before = [](const std::pair<float, int64_t>& p, const std::pair<float, int64_t>& q) {
      return p.first != q.first ? p.first > q.first : p.second < q.second;
    };
    std::vector<std::pair<float, int64_t>> best;  // (|x|, index)
    int64_t massive = 0;
#pragma omp parallel if (parallel) reduction(+ : massive)
    {
      std::vector<std::pair<float, int64_t>> local;
#pragma omp for schedule(static) nowait
      for (int64_t i = 0; i < n; ++i) {
        const float a = std::fabs(x[i]);
        massive += a > kMassiveAbsolute && a > kMassiveRelative * med_abs;
        if (local.size() == 3 && a <= local.back().first) continue;
        local.emplace_back(a, i);
        std::sort(local.begin(), local.end(), before);
        if (local.size() > 3) local.pop_back();
      }
#pragma omp critical
      best.insert(best.end(), local.begin(), local.end());
    }
    massive_count_[l] += massive;
    std::sort(best.begin(), best.end(), before);
    std::vector<Activation>& top = top_acts_[l];
    for (size_t j = 0; j < std::min<size_t>(3, best.size()); ++j) {
      const int64_t i = best[j].second;
      const float a = best[j].first;
      top.push_back(Activation{l, sample_, static_cast<int>(i / D_), static_cast<int>(i % D_), x[i],
                               med_abs, a > kMassiveAbsolute && a > kMassiveRelative * med_abs});
    }
    // Stable: on a tie the earlier sample's activation stays ahead, as in a serial scan.
    std::stable_sort(top.begin(), top.end(), [](const Activation& p, const Activation& q) {
      return std::fabs(p.value) > std::fabs(q.value);
    });
    if (top.size() > 3) top.resize(3);
    // Direction consistency: sums of unit vectors. The mean pairwise cosine over N vectors u_a is
    // (||sum_a u_a||^2 - N) / (N (N - 1)), so no vector has to be kept. Blocks of the width in
    // parallel, each summing over positions in order.
    double* u0 = &u0_sum_[static_cast<size_t>(l) * D_];
    double* uo = &uo_sum_[static_cast<size_t>(l) * D_];
    std::vector<double> U(D_, 0.0);
    constexpr int kBlock = 64;
#pragma omp parallel for schedule(static) if (parallel)
    for (int d0 = 0; d0 < D_; d0 += kBlock) {
      const int d1 = std::min(D_, d0 + kBlock);
      for (int i = 0; i < T_; ++i) {
        const double inv = norms[i] > 0 ? 1.0 / norms[i] : 0.0;
        double* dst = i == 0 ? u0 : U.data();
        const float* xr = x + static_cast<int64_t>(i) * D_;
        for (int d = d0; d < d1; ++d) dst[d] += xr[d] * inv;
      }
    }
    double sq = 0;
    for (int d = 0; d < D_; ++d) {
      uo[d] += U[d];
      sq += U[d] * U[d];
    }
    uo_sq_sum_[l] += sq;
  }

  void EndSample() {
    // A linear layer has no map whichever path ran (the pattern hooks never fire there).
    for (int l = 0; l < L_; ++l)
      if (linear_[l]) MarkNoMap(l);
    // Sink_k^eps = share of (l, h) with alpha_k^{l,h} > eps (Gu et al. 2025), on this sample.
    for (int k = 0; k < K_; ++k) {
      int64_t total = 0;
      std::vector<int> per_layer(L_, 0);
      for (int l = 0; l < L_; ++l)
        for (int h = 0; h < H_; ++h)
          per_layer[l] += sample_alpha_[(static_cast<size_t>(k) * L_ + l) * H_ + h] > eps_;
      // Shares of the attention layers' heads (Gated DeltaNet layers have none to sink).
      int from = 0, from_layers = 0;
      for (int l = L_ - 1; l >= 0; --l) {
        from += per_layer[l];
        from_layers += linear_[l] ? 0 : 1;
        sink_from_sum_[static_cast<size_t>(k) * L_ + l] +=
            from_layers > 0 ? static_cast<double>(from) / (from_layers * H_) : 0.0;
        sink_layer_sum_[static_cast<size_t>(k) * L_ + l] +=
            linear_[l] ? std::numeric_limits<double>::quiet_NaN()
                       : static_cast<double>(per_layer[l]) / H_;
        total += per_layer[l];
      }
      sink_sum_[k] += attn_layers_ > 0 ? static_cast<double>(total) / (attn_layers_ * H_) : 0.0;
    }
    // Sink_0^eps over the global and the sliding layers apart.
    int64_t global_heads = 0, global_sinks = 0, sliding_heads = 0, sliding_sinks = 0;
    for (int l = 0; l < L_; ++l)
      for (int h = 0; h < H_; ++h) {
        const bool sink = sample_alpha_[static_cast<size_t>(l) * H_ + h] > eps_;  // k = 0
        if (linear_[l]) continue;
        if (window_[l] > 0) {
          ++sliding_heads, sliding_sinks += sink;
        } else {
          ++global_heads, global_sinks += sink;
        }
      }
    global_sum_ += global_heads ? static_cast<double>(global_sinks) / global_heads : 0.0;
    sliding_sum_ += sliding_heads ? static_cast<double>(sliding_sinks) / sliding_heads : 0.0;
    if (has_sink_slot_) {
      int64_t total = 0;
      for (int l = 0; l < L_; ++l) {
        int count = 0;
        for (int h = 0; h < H_; ++h)
          count += sample_alpha_sink_[static_cast<size_t>(l) * H_ + h] > eps_;
        slot_layer_sum_[l] += static_cast<double>(count) / H_;
        total += count;
      }
      slot_sum_ += static_cast<double>(total) / (L_ * H_);
      for (size_t i = 0; i < alpha_sink_sum_.size(); ++i)
        alpha_sink_sum_[i] += sample_alpha_sink_[i];
    }
    for (size_t i = 0; i < alpha_sum_.size(); ++i) alpha_sum_[i] += sample_alpha_[i];
    for (size_t i = 0; i < top_share_sum_.size(); ++i) top_share_sum_[i] += sample_top_share_[i];
    if (has_gate_)
      for (int l = 0; l < L_; ++l) {
        if (linear_[l]) continue;
        for (int h = 0; h < H_; ++h) {
          const size_t lh = static_cast<size_t>(l) * H_ + h;
          const float* g = &sample_gate_[lh * T_];
          const float* a0 = &sample_col0_[lh * T_];
          double weighted = 0, rest = 0;
          for (int i = 0; i < T_; ++i) weighted += static_cast<double>(a0[i]) * g[i];
          for (int i = 1; i < T_; ++i) rest += g[i];
          gated_alpha0_sum_[lh] += weighted / T_;
          gate_head_p0_sum_[lh] += g[0];
          gate_head_rest_sum_[lh] += rest / (T_ - 1);
        }
      }
    ++sample_;
  }

  ConditionResult Finish(Condition condition) const {
    const double N = sample_;
    ConditionResult r;
    r.condition = condition;
    r.samples = sample_;
    r.length = T_;
    r.n_layers = L_;
    r.n_heads = H_;
    r.first_k = K_;
    r.eps = eps_;
    auto mean = [&](const std::vector<double>& sum) {
      std::vector<double> m(sum.size());
      for (size_t i = 0; i < sum.size(); ++i) m[i] = sum[i] / N;
      return m;
    };
    r.alpha = mean(alpha_sum_);
    r.layer_window = window_;
    r.sink_rate_global = global_sum_ / N;
    const bool any_sliding =
        std::any_of(window_.begin(), window_.end(), [](int w) { return w > 0; });
    r.sink_rate_sliding = any_sliding ? sliding_sum_ / N : std::numeric_limits<double>::quiet_NaN();
    r.has_output_gate = has_gate_;
    if (has_gate_) {
      r.gate_p0 = mean(gate_p0_sum_);
      r.gate_rest = mean(gate_rest_sum_);
      r.gate_head_p0 = mean(gate_head_p0_sum_);
      r.gate_head_rest = mean(gate_head_rest_sum_);
      r.gated_alpha0 = mean(gated_alpha0_sum_);
      const double nan = std::numeric_limits<double>::quiet_NaN();
      for (int l = 0; l < L_; ++l) {  // a Gated DeltaNet layer has no output gate
        if (!linear_[l]) continue;
        r.gate_p0[l] = r.gate_rest[l] = nan;
        for (int h = 0; h < H_; ++h) {
          const size_t lh = static_cast<size_t>(l) * H_ + h;
          r.gate_head_p0[lh] = r.gate_head_rest[lh] = r.gated_alpha0[lh] = nan;
        }
      }
    }
    r.has_sigmoid_weights = sigmoid_;
    if (sigmoid_) {
      r.alpha0_raw = mean(raw0_sum_);
      r.row_sum = mean(row_sum_sum_);
    }
    r.has_sink_slot = has_sink_slot_;
    if (has_sink_slot_) {
      r.alpha_sink = mean(alpha_sink_sum_);
      r.sink_slot_rate = slot_sum_ / N;
      r.sink_slot_rate_per_layer = mean(slot_layer_sum_);
    }
    r.sink_rate = mean(sink_sum_);
    r.sink_rate_per_layer = mean(sink_layer_sum_);
    r.sink_rate_from_layer = mean(sink_from_sum_);
    r.top_share = mean(top_share_sum_);
    r.sink_rate_of_mean_alpha.assign(K_, 0.0);
    r.sink_rate_of_mean_alpha_per_layer.assign(static_cast<size_t>(K_) * L_, 0.0);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (int k = 0; k < K_; ++k)
      for (int l = 0; l < L_; ++l) {
        if (linear_[l]) {
          r.sink_rate_of_mean_alpha_per_layer[static_cast<size_t>(k) * L_ + l] = nan;
          continue;
        }
        for (int h = 0; h < H_; ++h)
          if (r.Alpha(k, l, h) > eps_) {
            r.sink_rate_of_mean_alpha[k] += 1.0 / (attn_layers_ * H_);
            r.sink_rate_of_mean_alpha_per_layer[static_cast<size_t>(k) * L_ + l] += 1.0 / H_;
          }
      }
    r.linear_layers = std::vector<bool>(linear_.begin(), linear_.end());
    if (attn_layers_ == L_) r.linear_layers.clear();
    const double queries = N * (T_ - 1);
    for (int lh = 0; lh < L_ * H_; ++lh) {
      if (linear_[lh / H_]) {
        r.top_mode.push_back(-1);
        r.top_mode_rate.push_back(nan);
        r.top_p0_rate.push_back(nan);
        continue;
      }
      const int64_t* counts = &top_counts_[static_cast<size_t>(lh) * T_];
      const int mode = static_cast<int>(std::max_element(counts, counts + T_) - counts);
      r.top_mode.push_back(mode);
      r.top_mode_rate.push_back(counts[mode] / queries);
      r.top_p0_rate.push_back(counts[0] / queries);
    }
    r.p0_norm_ratio = mean(p0_sum_);
    r.p1_norm_ratio = mean(p1_sum_);
    r.max_other_norm_ratio = mean(max_other_sum_);
    r.median_abs = mean(median_sum_);
    r.massive_count = massive_count_;
    r.top_activations = top_acts_;
    for (int l = 0; l < L_; ++l) {
      double s0 = 0, so = 0;
      for (int d = 0; d < D_; ++d) {
        s0 += u0_sum_[static_cast<size_t>(l) * D_ + d] * u0_sum_[static_cast<size_t>(l) * D_ + d];
        so += uo_sum_[static_cast<size_t>(l) * D_ + d] * uo_sum_[static_cast<size_t>(l) * D_ + d];
      }
      // Pairs of different samples only: N (N - 1) ordered pairs of h_0, N (N - 1) (T - 1)^2 of
      // positions >= 1 (any position of one sample with any position of another).
      r.p0_cosine.push_back(sample_ > 1 ? (s0 - N) / (N * (N - 1)) : nan);
      r.other_cosine.push_back(
          sample_ > 1 ? (so - uo_sq_sum_[l]) / (N * (N - 1) * double(T_ - 1) * (T_ - 1)) : nan);
    }
    return r;
  }

 private:
  int L_, H_, D_, K_, T_;
  std::vector<char> linear_;  // (L) Gated DeltaNet layers
  int attn_layers_ = 0;       // layers with an attention map
  double eps_;
  bool has_sink_slot_;
  bool has_gate_;
  std::vector<double> gate_p0_sum_, gate_rest_sum_;  // (L)
  std::vector<float> sample_col0_, sample_gate_;     // (L, H, T) A[i, 0] and gbar_h(i), one sample
  std::vector<double> gate_head_p0_sum_, gate_head_rest_sum_, gated_alpha0_sum_;  // (L, H)
  bool sigmoid_;
  std::vector<double> raw0_sum_, row_sum_sum_;  // (L, H) sigmoid attention's weights
  std::vector<int> window_;                     // (L)
  int sample_ = 0;
  double global_sum_ = 0, sliding_sum_ = 0, slot_sum_ = 0;
  std::vector<double> alpha_sink_sum_, sample_alpha_sink_;            // (L, H)
  std::vector<double> slot_layer_sum_;                                // (L)
  std::vector<double> alpha_sum_, sample_alpha_;                      // (K, L, H)
  std::vector<double> sink_sum_;                                      // (K)
  std::vector<double> sink_layer_sum_, sink_from_sum_;                // (K, L)
  std::vector<double> top_share_sum_, sample_top_share_;              // (L, H)
  std::vector<int64_t> top_counts_;                                   // (L, H, T)
  std::vector<double> p0_sum_, p1_sum_, max_other_sum_, median_sum_;  // (L)
  std::vector<int64_t> massive_count_;                                // (L)
  std::vector<std::vector<Activation>> top_acts_;                     // (L)[<= 3]
  std::vector<double> u0_sum_, uo_sum_;                               // (L, D)
  std::vector<double> uo_sq_sum_;                                     // (L)
};

// Top key of one row of a full pattern: the first maximum, as the fused kernel picks it.
std::pair<int, float> RowTop(const float* row, int i) {
  int best = 0;
  for (int j = 1; j <= i; ++j)
    if (row[j] > row[best]) best = j;
  return {best, row[best]};
}

}  // namespace

ConditionResult AnalyzeSamples(const Model& model, Condition condition,
                               const std::vector<std::vector<int>>& samples,
                               const AnalyzeOptions& options) {
  const ModelConfig& c = model.config;
  SS_ASSERT(!samples.empty());
  const int T = static_cast<int>(samples[0].size());
  const int K = options.first_k;
  SS_ASSERT(T >= 2 && T >= K && K >= 1);
  for (const auto& s : samples) SS_ASSERT(static_cast<int>(s.size()) == T);
  const int L = c.n_layers, H = c.n_heads;

  Accumulator acc(c, T, options);
  // Requested full patterns: per layer, which heads, and where their running sums live.
  std::vector<CapturedPattern> captured;
  std::vector<std::vector<std::pair<int, size_t>>> wanted(L);  // layer -> (head, index in captured)
  for (const HeadRef& ref : options.patterns) {
    SS_ASSERT(ref.layer < L && ref.head < H);
    wanted[ref.layer].push_back({ref.head, captured.size()});
    captured.push_back({ref, T, std::vector<float>(static_cast<size_t>(T) * T, 0.0f)});
  }

  const bool fused = options.path == AttnPath::kFused;
  const bool keep_all = options.path == AttnPath::kMaterialisedKeepAll;
  std::vector<std::vector<float>> kept(keep_all ? L : 0);  // (L)(H, T, T)
  std::vector<float> proxy;
  auto reduce_pattern = [&](int l, const float* p) {  // p (H, T, S = T)
    if (c.attn_sigmoid) {  // sigmoid weights: the statistics read them divided by their row sums
      acc.AddSigmoidWeights(
          l,
          [&](int h, int i) {
            return static_cast<double>(p[(static_cast<int64_t>(h) * T + i) * T]);
          },
          [&](int h, int i) {
            const float* row = p + (static_cast<int64_t>(h) * T + i) * T;
            return static_cast<double>(std::accumulate(row, row + T, 0.0f));
          });
      proxy.assign(p, p + static_cast<int64_t>(H) * T * T);
      for (int64_t row = 0; row < static_cast<int64_t>(H) * T; ++row) {
        float* r = proxy.data() + row * T;
        const float sum = std::accumulate(r, r + T, 0.0f);
        if (sum > 0)
          for (int j = 0; j < T; ++j) r[j] /= sum;
      }
      p = proxy.data();
    }
    acc.AddAttention(
        l, [&](int h, int i, int k) { return p[(static_cast<int64_t>(h) * T + i) * T + k]; },
        [&](int h, int i) { return RowTop(p + (static_cast<int64_t>(h) * T + i) * T, i); });
    // The sink slot's mass is what the row lacks (its probabilities sum to 1 - p_sink).
    if (c.HasSinkSlot())
      acc.AddSinkSlot(l, [&](int h, int i) {
        const float* row = p + (static_cast<int64_t>(h) * T + i) * T;
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += row[j];
        return 1.0 - sum;
      });
  };

  Hooks hooks;
  hooks.Add(HookPoint::kResidPost, -1,
            [&](const HookContext& ctx, Tensor& x) { acc.AddResidual(ctx.layer, x.data()); });
  if (c.attn_output_gate)
    hooks.Add(HookPoint::kAttnGate, -1, [&](const HookContext& ctx, Tensor& g) {
      acc.AddGate(ctx.layer, g.data(), c.head_dim);
    });
  for (int l = 0; l < L; ++l) {
    if (fused && wanted[l].empty()) continue;  // the fused path never asks for a full pattern
    hooks.Add(HookPoint::kPattern, l, [&, l](const HookContext&, Tensor& p) {
      SS_ASSERT(p.dim(0) == H && p.dim(1) == T && p.dim(2) == T);
      for (const auto& [h, index] : wanted[l]) {
        const float* src = p.data() + static_cast<int64_t>(h) * T * T;
        float* dst = captured[index].mean.data();
        for (int64_t e = 0; e < static_cast<int64_t>(T) * T; ++e) dst[e] += src[e];
      }
      if (options.path == AttnPath::kMaterialised) reduce_pattern(l, p.data());
      if (keep_all) kept[l].assign(p.data(), p.data() + p.numel());
    });
  }

  KVCache cache = KVCache::CreateSingleUse(c, T);
  RunState state;
  AttnStatsBuffers stats;
  stats.first_k = K;
  double nll_sum = 0;
  int64_t nll_count = 0;
  for (size_t s = 0; s < samples.size(); ++s) {
    cache.Clear();
    ForwardRequest request;
    request.tokens = samples[s];
    request.logits = options.loss ? LogitsMode::kAll : LogitsMode::kNone;
    request.hooks = &hooks;
    request.stats = fused ? &stats : nullptr;
    const Tensor logits = Forward(model, cache, state, request);  // (T, V) with options.loss
    if (options.loss)
      for (int t = 0; t + 1 < T; ++t) {
        nll_sum += TokenNll(logits.row(t), c.vocab_size, samples[s][t + 1]);
        ++nll_count;
      }
    if (fused) {
      for (int l = 0; l < L; ++l) {
        const int64_t base = static_cast<int64_t>(l) * H * T;
        acc.AddAttention(
            l,
            [&](int h, int i, int k) {
              return stats.first_k_probs[(base + static_cast<int64_t>(h) * T + i) * K + k];
            },
            [&](int h, int i) {
              const int64_t at = base + static_cast<int64_t>(h) * T + i;
              return std::pair<int, float>(stats.top_key[at], stats.top_prob[at]);
            });
        if (c.HasSinkSlot())
          acc.AddSinkSlot(l, [&](int h, int i) {
            return static_cast<double>(stats.sink_prob[base + static_cast<int64_t>(h) * T + i]);
          });
        if (c.attn_sigmoid) {
          auto row = [&](int h, int i) {
            return static_cast<double>(stats.row_sum[base + static_cast<int64_t>(h) * T + i]);
          };
          acc.AddSigmoidWeights(
              l,
              [&](int h, int i) {
                return stats.first_k_probs[(base + static_cast<int64_t>(h) * T + i) * K] *
                       row(h, i);
              },
              row);
        }
      }
    } else if (keep_all) {
      for (int l = 0; l < L; ++l) reduce_pattern(l, kept[l].data());
    }
    acc.EndSample();
    if (options.progress) options.progress(static_cast<int64_t>(s) + 1, samples.size());
  }

  ConditionResult result = acc.Finish(condition);
  if (options.loss && nll_count > 0) result.loss = nll_sum / static_cast<double>(nll_count);
  for (CapturedPattern& p : captured)
    for (float& v : p.mean) v /= static_cast<float>(samples.size());
  result.patterns = std::move(captured);
  return result;
}

}  // namespace ss::analysis
