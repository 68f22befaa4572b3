// sinkscope explain on hand-built toy transformers whose sink circuit is known by construction:
// the circuit search must name exactly the planted component, its ablation must remove the planted
// sink, and models without a P0 sink must not get a circuit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <span>

#include "analysis/conditions.h"
#include "common/stats.h"
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

// A toy whose sink circuit is a head (the paper's mechanism without an MLP): block 0's head 1 keys
// on minus the marker, so positions >= 1 put almost no weight on the marked position 0, which
// under the causal mask attends to itself alone; its value reads the marker and W_O writes it
// large into kMassiveDim, so only h_0 gets it. Block 1's heads key on kMassiveDim as in ToyModel;
// every MLP is zero.
Model ToyHeadModel(int n_layers) {
  Model m = ToyModel(n_layers, /*amp=*/0, /*marker=*/1);
  LayerWeights& w = m.weights.layers[0];
  w.w1.Fill(0.0f);
  w.w3.Fill(0.0f);
  w.w2.Fill(0.0f);
  const int Dh = m.config.head_dim, h = 1;
  w.wq.row(h * Dh + 2)[kConstDim] = 3.0f;
  w.wk.row(h * Dh + 2)[kMarkerDim] = -3.0f;
  float* v = w.wv.row(h * Dh + 3);
  std::fill(v, v + m.config.dim, 0.0f);
  v[kMarkerDim] = 1.0f;
  w.wo.row(kMassiveDim)[h * Dh + 3] = 10.0f;
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

const InterventionEffect& Find(const ExplainResult& r, const std::string& kind, int layer,
                               int head = -1) {
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
  const Model m = test::LoadRandomHf(test::SmallGptOssConfig(), 5, "explain_gpt_oss",
                                     test::SetSinkLogits(12.0f));
  const ExplainResult r = Explain(m, Samples(3, 32, 1, -1, 4), Quick());
  std::printf("verdict %s: slot rate %.3f, Sink_0 %.3f\n", r.verdict.c_str(), r.sink_slot_rate,
              r.sink_rate);
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
// sum of squares), the measured ||o_i||^2 / mean_j ||v_j||^2, the pooled Pearson correlation and
// the argmax shares, all in double from scratch. Resuming intervened forwards at the intervened
// block (the default) gives the same intervention table as running each one from the embedding,
// with fewer block evaluations.
TEST(Explain, ResumingAtTheIntervenedBlockChangesNothing) {
  const Model m = ToyModel(3, /*amp=*/1, /*marker=*/1);
  const auto samples = Samples(3, 32, 1, -1, 12);
  ExplainOptions full = Quick();
  full.exhaustive = true;
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
  struct Pooled {
    std::vector<double> pred, meas;
    double a = 0, p0_pred = 0, p0_meas = 0;
  };
  std::vector<Pooled> want(static_cast<size_t>(L) * H);
  for (int s = 0; s < N; ++s) {
    std::vector<std::vector<float>> v(L), pat(L), z(L);
    Hooks hooks;
    for (int l = 0; l < L; ++l) {
      hooks.Add(HookPoint::kV, l, [&, l](const HookContext&, Tensor& t) {
        v[l].assign(t.data(), t.data() + t.numel());
      });
      hooks.Add(HookPoint::kPattern, l, [&, l](const HookContext&, Tensor& t) {
        pat[l].assign(t.data(), t.data() + t.numel());
      });
      hooks.Add(HookPoint::kZ, l, [&, l](const HookContext&, Tensor& t) {
        z[l].assign(t.data(), t.data() + t.numel());
      });
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
        auto V = [&](int j, int e) {
          return double(v[l][(static_cast<size_t>(j) * Hkv + h / group) * Dh + e]);
        };
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

TEST(Explain, FindsPlantedHeadInBlock0) {
  const Model m = ToyHeadModel(3);
  const ExplainResult r = Explain(m, Samples(4, 32, 1, -1, 1), Quick());
  std::printf("verdict %s, amplification %d, onset %d\n", r.verdict.c_str(), r.amplification_layer,
              r.onset_layer);
  EXPECT_EQ(r.verdict, "p0-circuit-in-blocks-0-1");
  EXPECT_EQ(r.onset_layer, 1);
  ASSERT_EQ(r.circuit.components.size(), 1u);
  EXPECT_EQ(r.circuit.components[0], (Component{ComponentKind::kHead, 0, 1}));
  EXPECT_DOUBLE_EQ(Find(r, "head-mean", 0, 1).removed_share, 1.0);
  EXPECT_DOUBLE_EQ(Find(r, "head-mean", 0, 0).removed_share, 0.0);
  EXPECT_DOUBLE_EQ(Find(r, "mlp-mean", 0).removed_share, 0.0);
}

// The models the suite explains, for the fast-vs-exhaustive comparisons: planted circuits (an MLP
// in block 1 or 2, a head in block 0, a sink off position 0), random Llama and GPT-2 models, a
// gpt-oss model whose sink is its learned slot, and the trained stories260K.
struct ExplainCase {
  std::string name;
  std::function<Model()> model;
  std::vector<std::vector<int>> samples;
  ExplainOptions options;
};

std::vector<ExplainCase> Cases() {
  std::vector<ExplainCase> out;
  ExplainOptions zero = Quick();
  zero.ablation = Ablation::kZero;
  out.push_back(
      {"planted mlp.1", [] { return ToyModel(3, 1, 1); }, Samples(4, 32, 1, -1, 1), Quick()});
  out.push_back({"planted mlp.1, zero-ablation", [] { return ToyModel(3, 1, 1); },
                 Samples(4, 32, 1, -1, 1), zero});
  ExplainOptions with_set = Quick();
  with_set.ablate = {{ComponentKind::kMlp, 1, -1}, {ComponentKind::kHead, 0, 1}};
  out.push_back({"planted mlp.1, --ablate", [] { return ToyModel(3, 1, 1); },
                 Samples(3, 32, 1, -1, 6), with_set});
  out.push_back({"planted mlp.2 (4 layers)", [] { return ToyModel(4, 2, 1); },
                 Samples(3, 24, 1, -1, 2), Quick()});
  out.push_back({"planted mlp.2 (6 layers)", [] { return ToyModel(6, 2, 1); },
                 Samples(3, 24, 1, -1, 7), Quick()});
  out.push_back(
      {"planted head.0.1", [] { return ToyHeadModel(3); }, Samples(4, 32, 1, -1, 1), Quick()});
  out.push_back({"planted head.0.1, zero-ablation", [] { return ToyHeadModel(3); },
                 Samples(4, 32, 1, -1, 1), zero});
  out.push_back({"planted head.0.1 (5 layers)", [] { return ToyHeadModel(5); },
                 Samples(3, 24, 1, -1, 8), Quick()});
  out.push_back({"sink not at p0", [] { return ToyModel(3, 1, kMarkerToken); },
                 Samples(3, 32, -1, 3, 3), Quick()});
  out.push_back({"random llama",
                 [] {
                   test::RandomModelShape shape;
                   shape.n_layers = 3;
                   return test::RandomLlama(shape);
                 },
                 Samples(3, 32, 1, -1, 4), Quick()});
  out.push_back({"random gpt2",
                 [] {
                   test::RandomModelShape shape;
                   shape.n_layers = 3;
                   return test::RandomGpt2(shape);
                 },
                 Samples(2, 24, 1, -1, 5), Quick()});
  out.push_back({"gpt-oss sink slot",
                 [] {
                   return test::LoadRandomHf(test::SmallGptOssConfig(), 5, "explain_fast_gpt_oss",
                                             test::SetSinkLogits(12.0f));
                 },
                 Samples(3, 32, 1, -1, 4), Quick()});
  ExplainOptions one = Quick();
  one.intervention_samples = 1;
  out.push_back({"stories260K (trained)",
                 [] { return LoadLlama2c(test::RepoPath("models/stories260K/stories260K.bin")); },
                 {},
                 one});
  analysis::SplitMix64 rng(11);
  std::vector<std::vector<int>> text(4, std::vector<int>(48));
  for (auto& s : text) {
    for (int& t : s) t = 3 + static_cast<int>(rng.Below(512 - 3));
    s[0] = 1;
  }
  out.back().samples = text;
  return out;
}

std::string RowName(const InterventionEffect& e) {
  return e.kind + " " + std::to_string(e.layer) + " " + std::to_string(e.head);
}

// The fast path (estimate every row, measure the best verify_top) reaches the exhaustive path's
// verdict and circuit, and every row it measures is the exhaustive measurement bit for bit (the
// same intervened forwards); its estimates are the exhaustive run's estimates too. verify_top 4 is
// below the row count of every case, so the fast path really skips rows.
TEST(Explain, FastPathMatchesExhaustiveOnEveryModel) {
  for (const ExplainCase& ec : Cases()) {
    const Model m = ec.model();
    ExplainOptions all = ec.options;
    all.exhaustive = true;
    all.early_stop = false;
    const ExplainResult want = Explain(m, ec.samples, all);
    const EstimateSummary& we = want.estimates;
    EXPECT_EQ(we.verified, we.candidates) << ec.name;
    std::printf(
        "%-32s verdict %-26s %3d rows: Spearman over all, target %.3f, alpha_0 %.3f, ratio %.3f; "
        "%lld forwards\n",
        ec.name.c_str(), want.verdict.c_str(), we.candidates, we.spearman_target,
        we.spearman_alpha0, we.spearman_norm_ratio, static_cast<long long>(want.forward_passes));
    for (int k : {16, 4}) {
      ExplainOptions fast = ec.options;
      fast.verify_top = k;
      fast.early_stop = false;
      const ExplainResult got = Explain(m, ec.samples, fast);
      SCOPED_TRACE(ec.name + ", verify_top " + std::to_string(k));
      EXPECT_EQ(got.verdict, want.verdict);
      EXPECT_EQ(got.circuit.components, want.circuit.components);
      EXPECT_EQ(got.circuit.removed_share, want.circuit.removed_share);
      EXPECT_EQ(got.circuit.removed_after_step, want.circuit.removed_after_step);
      EXPECT_EQ(got.estimates.verified, std::min(k, got.estimates.candidates));
      ASSERT_EQ(got.interventions.size(), want.interventions.size());
      for (size_t i = 0; i < got.interventions.size(); ++i) {
        const InterventionEffect &x = got.interventions[i], &y = want.interventions[i];
        SCOPED_TRACE(RowName(x));
        ASSERT_EQ(RowName(x), RowName(y));
        EXPECT_EQ(x.estimated, y.estimated);
        EXPECT_TRUE(y.measured);
        if (x.estimated) {
          EXPECT_EQ(x.rank, y.rank);
          EXPECT_EQ(x.estimate.target_share, y.estimate.target_share);
          EXPECT_EQ(x.estimate.layer_p0_norm_after, y.estimate.layer_p0_norm_after);
          EXPECT_EQ(x.estimate.layer_sink_after, y.estimate.layer_sink_after);
        }
        if (!x.measured) continue;
        EXPECT_EQ(x.samples, y.samples);
        EXPECT_EQ(x.sink_clean, y.sink_clean);
        EXPECT_EQ(x.sink_after, y.sink_after);
        EXPECT_EQ(x.removed_share, y.removed_share);
        EXPECT_EQ(x.norm_ratio_clean, y.norm_ratio_clean);
        EXPECT_EQ(x.norm_ratio_after, y.norm_ratio_after);
        EXPECT_EQ(x.target_share, y.target_share);
        EXPECT_EQ(x.alpha0_share, y.alpha0_share);
        EXPECT_EQ(x.layer_sink_after, y.layer_sink_after);
        EXPECT_EQ(x.layer_p0_norm_after, y.layer_p0_norm_after);
        EXPECT_EQ(x.sink1_after, y.sink1_after);
      }
      if (got.estimates.candidates > k + 1) {
        EXPECT_LT(got.forward_passes, want.forward_passes);
      }
      std::printf(
          "  verify_top %2d: %d of %d rows measured, %lld forwards (exhaustive %lld), Spearman "
          "over the measured: target %.3f, alpha_0 %.3f, ratio %.3f\n",
          k, got.estimates.verified, got.estimates.candidates,
          static_cast<long long>(got.forward_passes), static_cast<long long>(want.forward_passes),
          got.estimates.spearman_target, got.estimates.spearman_alpha0,
          got.estimates.spearman_norm_ratio);
    }
  }
}

// With early stopping on (the default) both paths stop on the same rule: the fast path still
// reaches the exhaustive verdict and circuit, on no more samples than the upper bound, and a
// model without a P0 sink stops after the minimum of two intervention samples.
TEST(Explain, EarlyStoppingKeepsTheVerdictAndCircuit) {
  for (ExplainCase ec : Cases()) {
    const Model m = ec.model();
    ec.options.intervention_samples =
        0;  // every sample is an intervention sample: stopping decides
    ExplainOptions all = ec.options;
    all.exhaustive = true;
    all.early_stop = false;
    const ExplainResult want = Explain(m, ec.samples, all);
    ExplainOptions fast = ec.options;
    const ExplainResult got = Explain(m, ec.samples, fast);
    SCOPED_TRACE(ec.name);
    EXPECT_EQ(got.verdict, want.verdict);
    EXPECT_EQ(got.circuit.components, want.circuit.components);
    EXPECT_EQ(got.circuit.found, want.circuit.found);
    const StoppingSummary& st = got.stopping;
    EXPECT_EQ(st.upper_bound, static_cast<int>(ec.samples.size()));
    EXPECT_LE(st.used, st.upper_bound);
    EXPECT_GE(st.used, st.min_samples);
    EXPECT_EQ(want.stopping.used, want.stopping.upper_bound);
    EXPECT_EQ(want.stopping.reason, "early stopping off");
    if (!got.circuit.ran && st.upper_bound > 2) {
      EXPECT_EQ(st.used, 2);
      EXPECT_EQ(st.reason, "verdict from the clean pass");
    }
    // Every measured row holds exactly the samples the table measured.
    for (const InterventionEffect& e : got.interventions)
      if (e.measured) {
        EXPECT_EQ(e.samples, st.used) << RowName(e);
      }
    std::printf(
        "%-32s verdict %-26s stopped after %d of %d samples (%s; bounds %.3f / %.3f / %.3f), "
        "%lld forwards against %lld\n",
        ec.name.c_str(), got.verdict.c_str(), st.used, st.upper_bound, st.reason.c_str(),
        st.circuit_lower, st.circuit_upper, st.subset_upper,
        static_cast<long long>(got.forward_passes), static_cast<long long>(want.forward_passes));
  }
}

// A planted circuit removes every sample's sink, so the bounds equal the mean share (1) and two
// samples settle it; the rest of the upper bound is not run.
TEST(Explain, PlantedCircuitSettlesAfterTwoSamples) {
  const Model m = ToyModel(3, /*amp=*/1, /*marker=*/1);
  ExplainOptions o;
  o.intervention_samples = 6;
  const ExplainResult r = Explain(m, Samples(6, 32, 1, -1, 1), o);
  EXPECT_EQ(r.verdict, "p0-circuit-in-blocks-0-1");
  ASSERT_EQ(r.circuit.components.size(), 1u);
  EXPECT_EQ(r.stopping.used, 2);
  EXPECT_EQ(r.stopping.reason, "circuit settled");
  EXPECT_DOUBLE_EQ(r.stopping.circuit_lower, 1.0);
  EXPECT_EQ(r.estimates.samples, 2);
  o.early_stop = false;
  const ExplainResult all = Explain(m, Samples(6, 32, 1, -1, 1), o);
  EXPECT_EQ(all.stopping.used, 6);
  EXPECT_EQ(all.circuit.components, r.circuit.components);
  EXPECT_LT(r.forward_passes, all.forward_passes);
}

// A sink so strong that every query's probability on position 0 rounds to 1 in float (the
// planted toy with its keys and queries 10x larger: score gaps in the hundreds). The estimate
// must still see that ablating the amplifier MLP removes it: its clean logit(p_i0) comes from the
// scores, not from p = 1, so the amplifier ranks first and is measured, and the circuit is found
// with the fewest rows measured.
TEST(Explain, EstimateMovesASaturatedSink) {
  Model m = ToyModel(4, /*amp=*/1, /*marker=*/1);
  for (int l = 2; l < 4; ++l) {
    for (float& x : std::span(m.weights.layers[l].wq.data(), m.weights.layers[l].wq.numel()))
      x *= 10;
    for (float& x : std::span(m.weights.layers[l].wk.data(), m.weights.layers[l].wk.numel()))
      x *= 10;
  }
  const auto samples = Samples(3, 32, 1, -1, 5);
  ExplainOptions o = Quick();
  o.verify_top = 2;  // mlp-zero 1 and mlp-mean 1, the search's candidate (mean-ablation)
  const ExplainResult r = Explain(m, samples, o);
  const InterventionEffect& amp = Find(r, "mlp-mean", 1);
  std::printf("estimated target share of mlp-mean 1: %.6f (rank %d); verdict %s\n",
              amp.estimate.target_share, amp.rank, r.verdict.c_str());
  EXPECT_DOUBLE_EQ(r.layers[2].sink_rate, 1.0);
  EXPECT_DOUBLE_EQ(amp.estimate.target_share, 1.0);
  EXPECT_LE(amp.rank, 2);  // beside mlp-zero 1, which removes it too
  EXPECT_EQ(r.verdict, "p0-circuit-in-blocks-0-1");
  ASSERT_EQ(r.circuit.components.size(), 1u);
  EXPECT_EQ(r.circuit.components[0].layer, 1);
}

// Student's t quantiles (scipy.stats.t.ppf) and the incomplete beta function behind them
// (scipy.special.betainc), which the stopping rule's bounds use.
TEST(Explain, StudentTQuantiles) {
  EXPECT_NEAR(RegularizedIncompleteBeta(0.4, 2, 3), 0.5248,
              1e-12);  // sum_{j=2}^{4} C(4,j) x^j (1-x)^(4-j)
  EXPECT_NEAR(RegularizedIncompleteBeta(0.9, 0.5, 0.5), 0.7951672353008665, 1e-12);
  struct Case {
    double p, dof, want;
  };
  for (const Case& c :
       {Case{0.95, 1, 6.313751514675043}, Case{0.95, 7, 1.894578605061305},
        Case{0.99, 3, 4.540702858698419}, Case{0.975, 30, 2.0422724563012373}, Case{0.5, 5, 0.0}})
    EXPECT_NEAR(StudentTQuantile(c.p, c.dof), c.want, 1e-9 * std::max(1.0, c.want))
        << c.p << " " << c.dof;
}

// What the estimate gets exactly (explain.h): h_0 from the intervened block on (position 0 sees
// only itself), so ||h'_0|| in every later layer, and the P0 norm ratio in the intervened layer
// (whose other positions the intervention cannot reach yet); and Sink_0 in the block right after
// it, whose queries and keys >= 1 are still clean. Compared with the exhaustive measurement of
// every row on every model of the suite, plus a random model with sigmoid attention.
TEST(Explain, EstimateOfPositionZeroIsExact) {
  std::vector<ExplainCase> cases = Cases();
  cases.push_back({"random llama, sigmoid attention",
                   [] {
                     test::RandomModelShape shape;
                     shape.n_layers = 3;
                     Model m = test::RandomLlama(shape);
                     m.config.attn_sigmoid = true;
                     return m;
                   },
                   Samples(2, 24, 1, -1, 9), Quick()});
  for (const ExplainCase& ec : cases) {
    const Model m = ec.model();
    ExplainOptions all = ec.options;
    all.exhaustive = true;
    all.early_stop = false;  // estimates and measurements over the same samples
    all.estimate_samples = 0;
    const ExplainResult r = Explain(m, ec.samples, all);
    double worst_norm = 0, worst_ratio = 0;
    int rows = 0;
    for (const InterventionEffect& e : r.interventions) {
      if (!e.estimated) continue;
      SCOPED_TRACE(ec.name + ": " + RowName(e));
      ++rows;
      const int L = r.n_layers;
      for (int l = e.layer; l < L; ++l) {
        const double want = e.layer_p0_norm_after[l], got = e.estimate.layer_p0_norm_after[l];
        worst_norm = std::max(worst_norm, std::fabs(got - want) / std::max(1.0, want));
        EXPECT_NEAR(got, want, 1e-5 * std::max(1.0, want)) << "||h'_0|| in layer " << l;
      }
      const double want = e.layer_norm_ratio_after[e.layer],
                   got = e.estimate.layer_norm_ratio_after[e.layer];
      worst_ratio = std::max(worst_ratio, std::fabs(got - want) / std::max(1.0, want));
      EXPECT_NEAR(got, want, 1e-5 * std::max(1.0, want)) << "P0 norm ratio in the intervened layer";
      if (e.layer + 1 < L) {
        EXPECT_EQ(e.estimate.layer_sink_after[e.layer + 1], e.layer_sink_after[e.layer + 1])
            << "Sink_0 in the block after the intervention";
      }
      for (int l = 0; l <= e.layer; ++l)
        EXPECT_EQ(e.estimate.layer_sink_after[l], e.layer_sink_after[l]);
    }
    std::printf(
        "%-32s %3d rows: largest relative difference, estimated vs measured ||h'_0|| %.2g, "
        "P0 norm ratio in the intervened layer %.2g\n",
        ec.name.c_str(), rows, worst_norm, worst_ratio);
  }
}

TEST(Explain, SpearmanCorrelation) {
  // scipy.stats.spearmanr([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]).statistic = 0.8207826816681233 (ties
  // at their mean rank).
  EXPECT_NEAR(SpearmanCorrelation({1, 2, 3, 4, 5}, {5, 6, 7, 8, 7}), 0.8207826816681233, 1e-12);
  EXPECT_NEAR(SpearmanCorrelation({1, 2, 3}, {30, 20, 10}), -1.0, 1e-12);
  EXPECT_TRUE(std::isnan(SpearmanCorrelation({1, 2, 3}, {4, 4, 4})));
  EXPECT_TRUE(std::isnan(SpearmanCorrelation({1}, {2})));
}

ExplainReport Report(const ExplainResult& r) {
  ExplainReport rep;
  rep.result = r;
  return rep;
}

// ToyModel with an output gate on every head (gated attention): the gate projection reads the
// constant dimension, so every query's gate is sigmoid(+-8 x_n[const]): shut (about 0) or wide
// open (about 1).
Model GatedToyModel(float gate_weight) {
  Model m = ToyModel(3, /*amp=*/1, /*marker=*/1);
  m.config.attn_output_gate = true;
  for (LayerWeights& w : m.weights.layers) {
    w.attn_gate = Tensor::Zeros({m.config.q_dim(), m.config.dim});
    for (int r = 0; r < m.config.q_dim(); ++r) w.attn_gate.row(r)[kConstDim] = gate_weight;
  }
  return m;
}

// The planted P0 sink of ToyModel behind shut gates: block 2's maps still sink (Sink_0 = 1), but
// the gate-weighted alpha_0 is about 0, so the verdict is the gate's; with the gates wide open the
// same circuit gives the ordinary verdict. The gate rows are measured: forcing the gates open at
// position 0 leaves the downstream map as it is (the gates act after the map).
TEST(Explain, ShutOutputGatesSuppressAPlantedSink) {
  const auto samples = Samples(4, 32, /*BOS*/ 1, -1, 1);
  const ExplainResult shut = Explain(GatedToyModel(-8.0f), samples, Quick());
  const ExplainResult open = Explain(GatedToyModel(8.0f), samples, Quick());
  for (const ExplainResult* r : {&shut, &open})
    std::printf("verdict %s: Sink_0 of layer 2 %.3f, gated %.3f, gate-weighted alpha_0 %.4f\n",
                r->verdict.c_str(), r->layers[2].sink_rate, r->layers[2].gated_sink_rate,
                r->layers[2].gated_alpha0[0]);
  EXPECT_EQ(shut.verdict, "sink-suppressed-by-output-gate");
  EXPECT_DOUBLE_EQ(shut.layers[2].sink_rate, 1.0);
  EXPECT_DOUBLE_EQ(shut.layers[2].gated_sink_rate, 0.0);
  // Only position 0's own query keeps its gate about half open (its normed input is the amplified
  // dimension, not the constant one): about 0.5 / T = 0.016.
  EXPECT_LT(shut.layers[2].gated_alpha0[0], 0.02);
  EXPECT_GT(shut.layers[2].mean_alpha0, 0.9);
  EXPECT_EQ(open.verdict, "p0-circuit-in-blocks-0-1");
  EXPECT_DOUBLE_EQ(open.layers[2].gated_sink_rate, 1.0);
  EXPECT_GT(open.layers[2].gated_alpha0[0], 0.9);
  ASSERT_EQ(open.circuit.components.size(), 1u);
  EXPECT_EQ(open.circuit.components[0], (Component{ComponentKind::kMlp, 1, -1}));
  for (int l = 0; l < 3; ++l) {
    EXPECT_TRUE(Find(shut, "gate-open", l).measured);
    EXPECT_TRUE(Find(shut, "gate-mean", l).measured);
  }
  EXPECT_DOUBLE_EQ(Find(shut, "gate-open", 1).removed_share, 0.0);
  const std::string text = ReportSummary(Report(shut));
  EXPECT_NE(text.find("the output gates close on it"), std::string::npos) << text;
  EXPECT_NE(text.find("gated Sink_0"), std::string::npos) << text;
  EXPECT_EQ(ParseComponents("gate.2", GatedToyModel(1).config, "--ablate")[0],
            (Component{ComponentKind::kGate, 2, -1}));
  EXPECT_THROW(ParseComponents("gate.1", ToyModel(3, 1, 1).config, "--ablate"), Error);
  EXPECT_THROW(ParseComponents("mixer.1", ToyModel(3, 1, 1).config, "--ablate"), Error);
}

// Qwen3.5 (Gated DeltaNet layers 0 and 2, gated attention in 1 and 3): explain runs, the mixers
// get zero / mean rows and the gated layers gate rows, all measured exactly; the linear layers
// have no heads, no head rows, no cones and NaN attention metrics. A mixer row's effect is that
// of a forward whose hook_attn_out of that layer is zeroed at position 0, run here by hand.
TEST(Explain, Qwen35MixerAndGateRowsAreMeasured) {
  const Model m = test::LoadRandomHf(R"({"architectures": ["Qwen3_5ForCausalLM"],
    "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 4, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 8, "vocab_size": 32, "max_position_embeddings": 64,
    "partial_rotary_factor": 0.5, "full_attention_interval": 2, "linear_num_key_heads": 1,
    "linear_num_value_heads": 2, "linear_key_head_dim": 8, "linear_value_head_dim": 4})",
                                     9, "explain_qwen35");
  ASSERT_TRUE(m.config.LinearLayer(0) && !m.config.LinearLayer(1));
  const auto samples = Samples(3, 16, -1, -1, 4);
  ExplainOptions o = Quick();
  o.early_stop = false;
  const ExplainResult r = Explain(m, samples, o);
  EXPECT_EQ(r.verdict, "no-sink");
  for (int l : {0, 2}) {
    EXPECT_TRUE(r.layers[l].linear);
    EXPECT_TRUE(std::isnan(r.layers[l].sink_rate));
    EXPECT_TRUE(r.layers[l].p0_head.empty());
    EXPECT_TRUE(Find(r, "mixer-zero", l).measured);
    EXPECT_TRUE(Find(r, "mixer-mean", l).measured);
  }
  int head_rows = 0;
  for (const auto& e : r.interventions) {
    if (e.kind == "head-mean") {
      ++head_rows;
      EXPECT_FALSE(m.config.LinearLayer(e.layer)) << e.layer;
      EXPECT_TRUE(e.measured);
    }
    EXPECT_NE(e.kind.rfind("gate-", 0) == 0 && m.config.LinearLayer(e.layer), true) << e.kind;
  }
  EXPECT_EQ(head_rows, 2 * 2);
  EXPECT_EQ(r.cones.size(), 2u * 2u);
  EXPECT_EQ(r.estimates.verified, 0);  // nothing estimated: every row measured
  // mixer-zero 0 against a forward with the mixer's output zeroed at position 0, by hand.
  const InterventionEffect& mixer = Find(r, "mixer-zero", 0);
  std::vector<double> ratio(4, 0.0);
  for (int n = 0; n < o.intervention_samples; ++n) {
    Hooks hooks;
    hooks.Add(HookPoint::kAttnOut, 0, [](const HookContext&, Tensor& t) {
      std::fill(t.data(), t.data() + t.dim(1), 0.0f);
    });
    hooks.Add(HookPoint::kResidPost, -1, [&](const HookContext& ctx, Tensor& x) {
      std::vector<double> norms;
      for (int i = 1; i < 16; ++i) {
        double s = 0;
        for (int d = 0; d < 32; ++d) s += double(x.row(i)[d]) * x.row(i)[d];
        norms.push_back(std::sqrt(s));
      }
      double s0 = 0;
      for (int d = 0; d < 32; ++d) s0 += double(x.row(0)[d]) * x.row(0)[d];
      ratio[ctx.layer] += std::sqrt(s0) / ss::Median(norms) / o.intervention_samples;
    });
    KVCache cache = KVCache::Create(m.config, 16);
    RunState state;
    ForwardRequest req;
    req.tokens = samples[n];
    req.hooks = &hooks;
    Forward(m, cache, state, req);
  }
  for (int l = 0; l < 4; ++l)
    EXPECT_NEAR(mixer.layer_norm_ratio_after[l], ratio[l], 1e-5 * ratio[l]) << l;
  EXPECT_GT(std::fabs(mixer.norm_ratio_after - mixer.norm_ratio_clean), 1e-4);
  EXPECT_EQ(ParseComponents("mixer.2,gate.3", m.config, "--ablate").size(), 2u);
  EXPECT_THROW(ParseComponents("head.0.1", m.config, "--ablate"), Error);
  EXPECT_THROW(ParseComponents("mixer.1", m.config, "--ablate"), Error);
  EXPECT_THROW(ParseComponents("gate.2", m.config, "--ablate"), Error);
  const nlohmann::json j = ReportJson(Report(r));
  EXPECT_EQ(j["layers"][0]["kind"], "linear_attention");
  // Every layer Gated DeltaNet: nothing to explain, said so.
  const Model all_linear = test::LoadRandomHf(R"({"architectures": ["Qwen3_5ForCausalLM"],
    "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 8, "vocab_size": 32, "max_position_embeddings": 64,
    "partial_rotary_factor": 0.5, "layer_types": ["linear_attention", "linear_attention"],
    "linear_num_key_heads": 1, "linear_num_value_heads": 2, "linear_key_head_dim": 8,
    "linear_value_head_dim": 4})",
                                              9, "explain_all_linear");
  try {
    Explain(all_linear, samples, o);
    ADD_FAILURE() << "an all-linear model was explained";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no attention layers"), std::string::npos) << e.what();
  }
  EXPECT_EQ(j["layers"][1]["kind"], "attention");
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
  for (int k : {0, -1}) {
    o = {};
    o.verify_top = k;
    EXPECT_THROW(CheckOptions(o), Error) << k;
  }
  o = {};
  o.verify_top = 1;
  EXPECT_NO_THROW(CheckOptions(o));
  for (double c : {0.4, 1.0, -1.0, std::nan("")}) {
    o = {};
    o.confidence = c;
    EXPECT_THROW(CheckOptions(o), Error) << c;
  }
  o = {};
  o.estimate_samples = -1;
  EXPECT_THROW(CheckOptions(o), Error);
}

}  // namespace
}  // namespace ss::explain
