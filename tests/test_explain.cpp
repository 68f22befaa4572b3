// sinkscope explain on hand-built toy transformers whose sink circuit is known by construction:
// the circuit search must name exactly the planted component, its ablation must remove the planted
// sink, and models without a P0 sink must not get a circuit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "analysis/conditions.h"
#include "explain/explain.h"
#include "explain/explain_report.h"
#include "io/llama2c.h"
#include "naive_hf.h"
#include "random_model.h"
#include "test_util.h"

namespace ss::explain {
namespace {

constexpr int kMarkerDim = 0;   // set only on the marker token (BOS, or the token planted at kPos)
constexpr int kMassiveDim = 1;  // the amplifier MLP writes here
constexpr int kConstDim = 15;   // 1 on every token: a constant query
constexpr int kMarkerToken = 5;

// A Llama-style toy: every block does nothing (zero attention scores, zero outputs) except
//  - block `amp`: its MLP reads the marker dimension and writes a large value into kMassiveDim
//    (SwiGLU: w2 (silu(w1 x) * w3 x), one hidden unit), so only the marked position is amplified;
//  - block `amp + 1`: both heads' queries read the constant dimension and their keys read
//    kMassiveDim, so every query attends to the amplified position (in a dimension RoPE does not
//    rotate: rotary_dim = 2).
// `marker` is the token that carries the marker (BOS for a P0 sink).
Model ToyModel(int n_layers, int amp, int marker) {
  test::RandomModelShape shape;
  shape.n_layers = n_layers;
  shape.n_heads = 2;
  shape.n_kv_heads = 2;
  shape.dim = 16;
  shape.hidden_dim = 8;
  shape.vocab_size = 32;
  shape.seed = 7;
  Model m = test::RandomLlama(shape);
  m.config.rotary_dim = 2;
  const int D = 16, Dh = m.config.head_dim;
  Tensor& emb = m.weights.token_embedding;
  for (int t = 0; t < shape.vocab_size; ++t) {
    emb.row(t)[kMarkerDim] = t == marker ? 3.0f : 0.0f;
    emb.row(t)[kMassiveDim] = 0.0f;
    emb.row(t)[kConstDim] = 1.0f;
  }
  m.weights.lm_head = Tensor::Zeros({shape.vocab_size, D});  // untied: logits are not used
  for (int l = 0; l < n_layers; ++l) {
    LayerWeights& w = m.weights.layers[l];
    w.wq.Fill(0.0f);
    w.wk.Fill(0.0f);
    w.wo.Fill(0.0f);
    w.w1.Fill(0.0f);
    w.w3.Fill(0.0f);
    w.w2.Fill(0.0f);
    if (l == amp) {
      w.w1.row(0)[kMarkerDim] = 4.0f;
      w.w3.row(0)[kMarkerDim] = 4.0f;
      w.w2.row(kMassiveDim)[0] = 10.0f;
    }
    if (l == amp + 1) {
      for (int h = 0; h < 2; ++h) {
        w.wq.row(h * Dh + 2)[kConstDim] = 3.0f;
        w.wk.row(h * Dh + 2)[kMassiveDim] = 3.0f;
      }
    }
  }
  return m;
}

// N samples of T tokens: `first` at position 0 (or a text token when first < 0), tokens in
// [6, 32) elsewhere, and the marker at `marker_pos` when >= 0.
std::vector<std::vector<int>> Samples(int N, int T, int first, int marker_pos, uint64_t seed) {
  analysis::SplitMix64 rng(seed);
  std::vector<std::vector<int>> out(N, std::vector<int>(T));
  for (auto& s : out) {
    for (int& t : s) t = 6 + static_cast<int>(rng.Below(26));
    if (first >= 0) s[0] = first;
    if (marker_pos >= 0) s[marker_pos] = kMarkerToken;
  }
  return out;
}

ExplainOptions Quick() {
  ExplainOptions o;
  o.intervention_samples = 3;
  return o;
}

const InterventionEffect& Find(const ExplainResult& r, const std::string& kind, int layer, int head = -1) {
  for (const auto& e : r.interventions)
    if (e.kind == kind && e.layer == layer && e.head == head) return e;
  ADD_FAILURE() << "no intervention " << kind << " " << layer;
  return r.interventions.front();
}

TEST(Explain, FindsPlantedMlpInBlock1) {
  const Model m = ToyModel(3, /*amp=*/1, /*marker=*/1);
  const ExplainResult r = Explain(m, Samples(4, 32, /*BOS*/ 1, -1, 1), Quick());
  std::printf("verdict %s, amplification %d, onset %d, sink rate per layer %.3f %.3f %.3f\n",
              r.verdict.c_str(), r.amplification_layer, r.onset_layer, r.layers[0].sink_rate,
              r.layers[1].sink_rate, r.layers[2].sink_rate);
  EXPECT_EQ(r.verdict, "p0-circuit-in-blocks-0-1");
  EXPECT_EQ(r.amplification_layer, 1);
  EXPECT_EQ(r.onset_layer, 2);
  ASSERT_EQ(r.circuit.components.size(), 1u);
  EXPECT_EQ(r.circuit.components[0], (Component{ComponentKind::kMlp, 1, -1}));
  EXPECT_GE(r.circuit.removed_share, 0.8);
  // The planted sink: every head of block 2; ablating the MLP at P0 removes it, mean-ablating too
  // (the MLP's output at other positions is 0); block-0 components do nothing.
  EXPECT_DOUBLE_EQ(r.layers[2].sink_rate, 1.0);
  EXPECT_DOUBLE_EQ(Find(r, "mlp-zero", 1).removed_share, 1.0);
  EXPECT_DOUBLE_EQ(Find(r, "mlp-mean", 1).removed_share, 1.0);
  EXPECT_DOUBLE_EQ(Find(r, "mlp-zero", 0).removed_share, 0.0);
  EXPECT_DOUBLE_EQ(Find(r, "head-mean", 1, 0).removed_share, 0.0);
  // Zero-ablation finds the same circuit here (the MLP's mean output at positions >= 1 is 0).
  ExplainOptions zero = Quick();
  zero.ablation = Ablation::kZero;
  const ExplainResult rz = Explain(m, Samples(4, 32, 1, -1, 1), zero);
  EXPECT_DOUBLE_EQ(Find(rz, "head-zero", 1, 0).removed_share, 0.0);
  ASSERT_EQ(rz.circuit.components.size(), 1u);
  EXPECT_EQ(rz.circuit.components[0], (Component{ComponentKind::kMlp, 1, -1}));
  EXPECT_GT(Find(r, "mlp-zero", 1).norm_ratio_clean, 10.0);
  EXPECT_LT(Find(r, "mlp-zero", 1).norm_ratio_after, 3.0);
  // The toy's sink follows the marker token, not the position: another first token, a patched h_0
  // and a shift all move it; after the shift it sits on position 1.
  EXPECT_DOUBLE_EQ(Find(r, "first-token", -1).removed_share, 1.0);
  EXPECT_DOUBLE_EQ(Find(r, "patch-p0", 0).removed_share, 1.0);
  EXPECT_GT(Find(r, "shift", -1).sink1_after, 0.2);
  // The decomposition puts P0's growth in block 1 on the MLP, and none on attention.
  EXPECT_GT(r.layers[1].p0_mlp, 100.0);
  EXPECT_NEAR(r.layers[1].p0_attn, 0.0, 1e-6);
  EXPECT_LT(r.layers[1].other_mlp, 1e-6);
}

// A user-given set (--ablate) is measured like the rest: the planted MLP with a do-nothing head.
TEST(Explain, MeasuresGivenSet) {
  const Model m = ToyModel(3, 1, 1);
  ExplainOptions o = Quick();
  o.ablate = ParseComponents("mlp.1,head.0.1", m.config, "--ablate");
  ASSERT_EQ(o.ablate.size(), 2u);
  const ExplainResult r = Explain(m, Samples(3, 32, 1, -1, 6), o);
  const InterventionEffect& e = Find(r, "set", 1);
  EXPECT_DOUBLE_EQ(e.removed_share, 1.0);
  EXPECT_DOUBLE_EQ(e.sink_clean, 1.0);
  EXPECT_THROW(ParseComponents("mlp.3", m.config, "--ablate"), Error);
  EXPECT_THROW(ParseComponents("head.0.2", m.config, "--ablate"), Error);
  EXPECT_THROW(ParseComponents("head.0", m.config, "--ablate"), Error);
}

TEST(Explain, PlantedCircuitElsewhere) {
  const Model m = ToyModel(4, /*amp=*/2, /*marker=*/1);
  const ExplainResult r = Explain(m, Samples(3, 24, 1, -1, 2), Quick());
  EXPECT_EQ(r.verdict, "p0-circuit-elsewhere");
  ASSERT_EQ(r.circuit.components.size(), 1u);
  EXPECT_EQ(r.circuit.components[0], (Component{ComponentKind::kMlp, 2, -1}));
  EXPECT_EQ(r.onset_layer, 3);
}

TEST(Explain, SinkNotAtP0) {
  const Model m = ToyModel(3, 1, kMarkerToken);
  const ExplainResult r = Explain(m, Samples(3, 32, -1, /*marker at*/ 3, 3), Quick());
  std::printf("other sink rate layer 2: %.3f, Sink_0 %.3f\n", r.layers[2].other_sink_rate,
              r.layers[2].sink_rate);
  EXPECT_EQ(r.verdict, "sink-not-at-p0");
  EXPECT_EQ(r.other_sink_layer, 2);
  EXPECT_FALSE(r.circuit.ran);
  EXPECT_TRUE(r.circuit.components.empty());
}

// gpt-oss with large learned sink logits: the sink is the slot, the verdict says so and no
// position-0 circuit is searched for.
TEST(Explain, LearnedSinkSlotIsTheSink) {
  const Model m = test::LoadRandomHf(test::SmallGptOssConfig(), 5, "explain_gpt_oss", test::SetSinkLogits(12.0f));
  const ExplainResult r = Explain(m, Samples(3, 32, 1, -1, 4), Quick());
  std::printf("verdict %s: slot rate %.3f, Sink_0 %.3f\n", r.verdict.c_str(), r.sink_slot_rate, r.sink_rate);
  EXPECT_EQ(r.verdict, "sink-on-learned-slot");
  EXPECT_EQ(r.slot_onset_layer, 0);
  EXPECT_GT(r.layers[1].mean_alpha_sink, 0.9);
  EXPECT_FALSE(r.circuit.ran);
  ExplainReport report;
  report.result = r;
  const std::string summary = ReportSummary(report);
  EXPECT_NE(summary.find("learned sink slot"), std::string::npos) << summary;
  EXPECT_EQ(ReportJson(report)["slot_onset_layer"], 0);
}

TEST(Explain, RandomModelHasNoSink) {
  test::RandomModelShape shape;
  shape.n_layers = 3;
  const Model m = test::RandomLlama(shape);
  const ExplainResult r = Explain(m, Samples(3, 32, 1, -1, 4), Quick());
  EXPECT_EQ(r.verdict, "no-sink");
  EXPECT_TRUE(r.circuit.components.empty());
}

// The decomposition is exact: ||h'_0|| = carry + attention + MLP, and the heads sum to the
// attention term (no output bias here).
TEST(Explain, DecompositionAddsUp) {
  test::RandomModelShape shape;
  shape.n_layers = 3;
  const Model m = test::RandomLlama(shape);
  const ExplainResult r = Explain(m, Samples(2, 16, 1, -1, 5), Quick());
  std::vector<float> total, parts, attn, heads;
  for (const auto& d : r.layers) {
    total.push_back(d.p0_norm_post);
    parts.push_back(d.p0_carry + d.p0_attn + d.p0_mlp);
    attn.push_back(d.p0_attn);
    double s = 0;
    for (double v : d.p0_head) s += v;
    heads.push_back(s);
  }
  EXPECT_LT(test::MaxDiff(parts, total, "carry + attn + mlp vs ||h'_0||"), 1e-4);
  EXPECT_LT(test::MaxDiff(heads, attn, "sum of heads vs attention term"), 1e-4);
  // Cone model: position 0 sees only itself (sum p^2 = 1), so its prediction is exactly 1.
  for (const ConeFit& f : r.cones) {
    EXPECT_NEAR(f.predicted_p0, 1.0, 1e-5);
    EXPECT_GE(f.a, -1.0);
    EXPECT_LE(f.a, 1.0);
    EXPECT_DOUBLE_EQ(f.p0_predicted_max, 1.0);
  }
}

// The cone fit against a brute-force recomputation from the materialised tensors (hooks on the
// values, the full attention pattern and z), on two samples of a random GQA model: the axis u, the
// mean cosine a, the predictions a^2 + (1 - a^2) sum_j p_ij^2 from the full pattern (not the fused
// sum of squares), the measured ||o_i||^2 / mean_j ||v_j||^2, the pooled Pearson correlation and the
// argmax shares, all in double from scratch.
// Resuming intervened forwards at the intervened block (the default) gives the same intervention
// table as running each one from the embedding, with fewer block evaluations.
TEST(Explain, ResumingAtTheIntervenedBlockChangesNothing) {
  const Model m = ToyModel(3, /*amp=*/1, /*marker=*/1);
  const auto samples = Samples(3, 32, 1, -1, 12);
  ExplainOptions full = Quick();
  full.resume_at_block = false;
  full.ablate = {{ComponentKind::kMlp, 1, -1}, {ComponentKind::kHead, 2, 0}};
  ExplainOptions resumed = full;
  resumed.resume_at_block = true;
  const ExplainResult a = Explain(m, samples, full), b = Explain(m, samples, resumed);
  ASSERT_EQ(a.interventions.size(), b.interventions.size());
  int changed = 0;
  for (size_t i = 0; i < a.interventions.size(); ++i) {
    const InterventionEffect &x = a.interventions[i], &y = b.interventions[i];
    SCOPED_TRACE(x.kind + " " + std::to_string(x.layer) + " " + std::to_string(x.head));
    EXPECT_EQ(x.kind, y.kind);
    EXPECT_DOUBLE_EQ(x.sink_after, y.sink_after);
    EXPECT_DOUBLE_EQ(x.sink_clean, y.sink_clean);
    EXPECT_NEAR(x.norm_ratio_after, y.norm_ratio_after, 1e-9);
    EXPECT_EQ(x.layer_sink_after, y.layer_sink_after);
    changed += x.sink_after != x.sink_clean;
  }
  EXPECT_GT(changed, 0);  // the table is not trivially equal: some interventions move the sink
  EXPECT_EQ(a.verdict, b.verdict);
  EXPECT_EQ(a.circuit.components, b.circuit.components);
  std::printf("forwards: %lld from the embedding, %lld resumed (+1 clean record per sample)\n",
              static_cast<long long>(a.forward_passes), static_cast<long long>(b.forward_passes));
}

TEST(Explain, ConeFitMatchesBruteForce) {
  test::RandomModelShape shape;
  shape.n_layers = 2;  // 4 heads over 2 kv heads
  const Model m = test::RandomLlama(shape);
  const auto samples = Samples(2, 20, 1, -1, 9);
  const ExplainResult r = Explain(m, samples, Quick());
  const ModelConfig& c = m.config;
  const int L = c.n_layers, H = c.n_heads, Hkv = c.n_kv_heads, Dh = c.head_dim;
  const int T = 20, N = 2, group = H / Hkv;
  struct Pooled { std::vector<double> pred, meas; double a = 0, p0_pred = 0, p0_meas = 0; };
  std::vector<Pooled> want(static_cast<size_t>(L) * H);
  for (int s = 0; s < N; ++s) {
    std::vector<std::vector<float>> v(L), pat(L), z(L);
    Hooks hooks;
    for (int l = 0; l < L; ++l) {
      hooks.Add(HookPoint::kV, l, [&, l](const HookContext&, Tensor& t) { v[l].assign(t.data(), t.data() + t.numel()); });
      hooks.Add(HookPoint::kPattern, l, [&, l](const HookContext&, Tensor& t) { pat[l].assign(t.data(), t.data() + t.numel()); });
      hooks.Add(HookPoint::kZ, l, [&, l](const HookContext&, Tensor& t) { z[l].assign(t.data(), t.data() + t.numel()); });
    }
    KVCache cache = KVCache::Create(c, T);
    RunState state;
    ForwardRequest req;
    req.tokens = samples[s];
    req.logits = LogitsMode::kNone;
    req.hooks = &hooks;
    Forward(m, cache, state, req);
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h) {
        auto V = [&](int j, int e) { return double(v[l][(static_cast<size_t>(j) * Hkv + h / group) * Dh + e]); };
        std::vector<double> u(Dh, 0.0);
        double mean_sq = 0;
        for (int j = 0; j < T; ++j) {
          double n2 = 0;
          for (int e = 0; e < Dh; ++e) n2 += V(j, e) * V(j, e);
          mean_sq += n2 / T;
          for (int e = 0; e < Dh; ++e) u[e] += V(j, e) / std::sqrt(n2);
        }
        double un = 0;
        for (double x : u) un += x * x;
        for (double& x : u) x /= std::sqrt(un);
        double a = 0;
        for (int j = 0; j < T; ++j) {
          double dot = 0, n2 = 0;
          for (int e = 0; e < Dh; ++e) dot += V(j, e) * u[e], n2 += V(j, e) * V(j, e);
          a += dot / std::sqrt(n2) / T;
        }
        Pooled& w = want[static_cast<size_t>(l) * H + h];
        w.a += a / N;
        int best_pred = 0, best_meas = 0;
        std::vector<double> pred(T), meas(T);
        for (int i = 0; i < T; ++i) {
          double p2 = 0;
          for (int j = 0; j < T; ++j) {
            const double p = pat[l][(static_cast<size_t>(h) * T + i) * T + j];
            EXPECT_TRUE(j <= i || p == 0.0);
            p2 += p * p;
          }
          pred[i] = a * a + (1 - a * a) * p2;
          double o2 = 0;
          for (int e = 0; e < Dh; ++e) {
            const double o = z[l][(static_cast<size_t>(i) * H + h) * Dh + e];
            o2 += o * o;
          }
          meas[i] = o2 / mean_sq;
          if (pred[i] > pred[best_pred] + 1e-12) best_pred = i;
          if (meas[i] > meas[best_meas]) best_meas = i;
        }
        w.p0_pred += (best_pred == 0) / double(N);
        w.p0_meas += (best_meas == 0) / double(N);
        w.pred.insert(w.pred.end(), pred.begin(), pred.end());
        w.meas.insert(w.meas.end(), meas.begin(), meas.end());
      }
  }
  ASSERT_EQ(r.cones.size(), want.size());
  std::vector<float> got_a, want_a, got_r, want_r;
  for (size_t k = 0; k < want.size(); ++k) {
    const Pooled& w = want[k];
    const double n = w.pred.size();
    double mx = 0, my = 0;
    for (size_t i = 0; i < w.pred.size(); ++i) mx += w.pred[i] / n, my += w.meas[i] / n;
    double cxy = 0, vx = 0, vy = 0;
    for (size_t i = 0; i < w.pred.size(); ++i) {
      cxy += (w.pred[i] - mx) * (w.meas[i] - my);
      vx += (w.pred[i] - mx) * (w.pred[i] - mx);
      vy += (w.meas[i] - my) * (w.meas[i] - my);
    }
    got_a.push_back(r.cones[k].a);
    want_a.push_back(w.a);
    got_r.push_back(r.cones[k].correlation);
    want_r.push_back(cxy / std::sqrt(vx * vy));
    EXPECT_DOUBLE_EQ(r.cones[k].p0_predicted_max, w.p0_pred) << "head " << k;
    EXPECT_DOUBLE_EQ(r.cones[k].p0_measured_max, w.p0_meas) << "head " << k;
    double meas_p0 = 0, meas_o = 0;
    for (int s = 0; s < N; ++s) {
      meas_p0 += w.meas[static_cast<size_t>(s) * T] / N;
      for (int i = 1; i < T; ++i) meas_o += w.meas[static_cast<size_t>(s) * T + i] / (N * (T - 1));
    }
    EXPECT_NEAR(r.cones[k].measured_p0, meas_p0, 1e-4 * std::max(1.0, meas_p0));
    EXPECT_NEAR(r.cones[k].measured_other, meas_o, 1e-4 * std::max(1.0, meas_o));
  }
  EXPECT_LT(test::MaxDiff(got_a, want_a, "cone a vs brute force"), 1e-5);
  EXPECT_LT(test::MaxDiff(got_r, want_r, "cone correlation vs brute force"), 1e-4);
}

TEST(Explain, Stories260KHasNoSink) {
  const Model m = LoadLlama2c(test::RepoPath("models/stories260K/stories260K.bin"));
  analysis::SplitMix64 rng(11);
  std::vector<std::vector<int>> samples(4, std::vector<int>(48));
  for (auto& s : samples) {
    for (int& t : s) t = 3 + static_cast<int>(rng.Below(m.config.vocab_size - 3));
    s[0] = m.config.bos_id;
  }
  ExplainOptions o;
  o.intervention_samples = 1;
  const ExplainResult r = Explain(m, samples, o);
  EXPECT_EQ(r.verdict, "no-sink");
  EXPECT_TRUE(r.circuit.components.empty());
  const ExplainReport rep{{}, "test", "bos", 0, r};
  const auto j = ReportJson(rep);
  EXPECT_EQ(j["schema"], kExplainSchema);
  EXPECT_EQ(j["verdict"], "no-sink");
}

TEST(Explain, RejectsBadOptions) {
  ExplainOptions o;
  o.share = 1.5;
  EXPECT_THROW(CheckOptions(o), Error);
  o = {};
  o.share = 0;
  EXPECT_THROW(CheckOptions(o), Error);
  o = {};
  o.onset_threshold = -0.1;
  EXPECT_THROW(CheckOptions(o), Error);
  o = {};
  o.eps = 2;
  EXPECT_THROW(CheckOptions(o), Error);
}

}  // namespace
}  // namespace ss::explain
