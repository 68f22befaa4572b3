// Every attention variant (model/attention.h) walked through the registry, so that a new unit file
// is held to the same checks without a line here: its names are unique and found; its flag
// survives config.json; the trainer's forward (float, and float64 against it) equals the engine's
// on the exported weights, on the tiled path and with the pattern materialised; a checkpoint
// written by the trainer reloads through LoadModel to the same logits; the telemetry reports what
// the variant has (a slot's mass, a gate, sigmoid's raw weights).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "hooks/hooks.h"
#include "io/hf_config.h"
#include "io/load.h"
#include "model/attention.h"
#include "model/model.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/rng.h"
#include "train/telemetry.h"
#include "train/train_model.h"

namespace ss::train {
namespace {

namespace fs = std::filesystem;

TrainConfig Tiny(const AttnVariant& v) {
  TrainConfig c;
  c.dim = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 19;
  c.seq_len = 12;
  c.hidden_dim = 24;
  c.attention = v.name;
  return c;
}

// Train-like weights: a larger init so that the attention is not uniform, and the variant's
// zero-initialised tensors (a slot's logits, key and value) given values so that they act.
template <typename Real>
void Perturb(TrainModel<Real>& m) {
  m.InitParams(11);
  for (auto& p : m.params) p *= Real(3);
  for (const LayerOffsets& o : m.layout().layers)
    for (int64_t off : o.attn)
      for (const ParamTensor& t : m.layout().tensors)
        if (t.offset == off && !t.frozen)
          for (int64_t i = 0; i < t.numel; ++i) m.params[off + i] = Real(1.5 * std::sin(1.0 + i));
}

TEST(AttnRegistry, NamesAreUniqueAndFound) {
  std::set<std::string> names;
  for (const AttnVariant* v : AttnVariants()) {
    EXPECT_TRUE(names.insert(v->name).second) << v->name;
    EXPECT_EQ(&FindAttnVariant(v->name, "test"), v);
    if (v->flag) {
      ModelConfig c;
      c.*(v->flag) = true;
      EXPECT_EQ(ModelAttention(c).flag, v->flag) << v->name;
      EXPECT_NE(v->feature, nullptr) << v->name;
      EXPECT_NE(v->key.hf, nullptr) << v->name;
    }
    EXPECT_EQ(v->slot_value >= 0, v->slot == AttnSlot::kPerQuery) << v->name;
    EXPECT_TRUE(v->slot == AttnSlot::kNone || v->rule().TakesSlot()) << v->name;
  }
  EXPECT_STREQ(AttnVariants().front()->name, "softmax");
  try {
    FindAttnVariant("sofmax", "train_config.json");
    ADD_FAILURE() << "an unknown variant was found";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("train_config.json: unknown attention variant 'sofmax'"), std::string::npos)
        << what;
    for (const AttnVariant* v : AttnVariants())
      EXPECT_NE(what.find(v->name), std::string::npos) << what;
  }
}

// The trainer's loss against ss::Forward's on the exported weights, sequence by sequence (tiled
// attention, and with a pattern hook the materialised path); the float64 trainer against the float
// one; the checkpoint reloaded; the telemetry's fields.
TEST(AttnRegistry, TrainerEngineAndCheckpointAgreeForEveryVariant) {
  const int B = 3, T = 12;
  for (const AttnVariant* v : AttnVariants()) {
    SCOPED_TRACE(v->name);
    const TrainConfig c = Tiny(*v);
    TrainModel<float> m(c, B, T);
    Perturb(m);
    Rng rng(5);
    std::vector<int> tokens(B * T), targets(B * T);
    for (auto& t : tokens) t = static_cast<int>(rng.Below(c.vocab_size));
    for (auto& t : targets) t = static_cast<int>(rng.Below(c.vocab_size));
    const double trainer = m.Forward(tokens.data(), targets.data());
    TrainModel<double> md(c, B, T);
    Perturb(md);
    const double trainer64 = md.Forward(tokens.data(), targets.data());

    const Model model = ExportModel(c, m.layout(), m.params);
    EXPECT_EQ(ModelAttention(model.config).flag, v->flag);
    RunState state;
    double engine[2] = {0, 0};  // tiled, materialised
    std::vector<float> first_logits;
    for (int path = 0; path < 2; ++path) {
      Hooks hooks;
      if (path == 1) hooks.Add(HookPoint::kPattern, -1, [](const HookContext&, Tensor&) {});
      for (int b = 0; b < B; ++b) {
        KVCache cache = KVCache::Create(model.config, T);
        ForwardRequest req;
        req.tokens = std::span<const int>(tokens.data() + b * T, T);
        req.hooks = path == 1 ? &hooks : nullptr;
        Tensor logits = Forward(model, cache, state, req);
        for (int t = 0; t < T; ++t) {
          engine[path] += TokenNll(logits.row(t), c.vocab_size, targets[b * T + t]) / (B * T);
          if (path == 0 && b == 0)
            first_logits.insert(first_logits.end(), logits.row(t), logits.row(t) + c.vocab_size);
        }
      }
    }
    const double rel = std::abs(engine[0] - trainer) / trainer,
                 rel_m = std::abs(engine[1] - trainer) / trainer;
    const double rel64 = std::abs(trainer64 - trainer) / trainer;
    std::printf(
        "%-10s trainer loss %.7f, engine tiled %.3g, materialised %.3g, float64 trainer %.3g "
        "(rel)\n",
        v->name, trainer, rel, rel_m, rel64);
    EXPECT_LT(rel, 1e-5);
    EXPECT_LT(rel_m, 1e-5);
    EXPECT_LT(rel64, 1e-5);

    // The flag through config.json, and a checkpoint through LoadModel.
    const ModelConfig hf = HfModelConfig(c);
    if (v->flag) {
      EXPECT_TRUE(hf.*(v->flag));
      EXPECT_NE(CheckpointConfigJson(c).find(std::string("\"") + v->key.hf + "\": true"),
                std::string::npos);
    }
    const std::string dir =
        std::string(SINKSCOPE_BINARY_DIR) + "/test_tmp/attn_registry_" + v->name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    TrainerState s;
    s.step = 1;
    s.params = m.params;
    s.adam_m.assign(m.params.size(), 0.0f);
    s.adam_v.assign(m.params.size(), 0.0f);
    const Model loaded = LoadModel(SaveCheckpoint(dir, c, m.layout(), s, ""));
    EXPECT_EQ(ModelAttention(loaded.config).name, ModelAttention(model.config).name);
    KVCache cache = KVCache::Create(loaded.config, T);
    ForwardRequest req;
    req.tokens = std::span<const int>(tokens.data(), T);
    Tensor logits = Forward(loaded, cache, state, req);
    EXPECT_LT(test::MaxDiff(std::vector<float>(logits.data(), logits.data() + first_logits.size()),
                            first_logits, std::string(v->name) + " reloaded checkpoint logits"),
              1e-5);
    fs::remove_all(dir);

    // The telemetry (analyze's metrics) reports what the variant has.
    std::vector<std::vector<int>> seqs = {std::vector<int>(tokens.begin(), tokens.begin() + T)};
    const SinkProfile p = MeasureSinkProfile(model, seqs);
    EXPECT_EQ(p.alpha_sink.empty(), v->slot == AttnSlot::kNone);
    EXPECT_EQ(p.gate_p0.empty(), v->gate_param < 0);
    EXPECT_EQ(p.alpha0.size(), static_cast<size_t>(c.n_layers));
  }
}

}  // namespace
}  // namespace ss::train
