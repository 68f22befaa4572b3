// The trainer end to end on tiny configurations: the analysis forward pass reproduces the
// trainer's loss, runs are deterministic, resume is bit-exact, checkpoints reload, and bad input
// fails with a clear message while keeping what was saved.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "analysis/analyze.h"
#include "common/error.h"
#include "common/file_util.h"
#include "io/load.h"
#include "kernels/parallel.h"
#include "model/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/optimizer.h"
#include "train/telemetry.h"
#include "train/train_model.h"
#include "train/trainer.h"

namespace ss::train {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  const std::string dir = std::string(SINKSCOPE_BINARY_DIR) + "/test_tmp/train_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TrainConfig TinyRun(const std::string& out) {
  TrainConfig c = Preset("quick");
  c.dim = 16;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.vocab_size = 16;
  c.batch_size = 4;
  c.seq_len = 16;
  c.steps = 20;
  c.warmup_steps = 3;
  c.eval_every = 10;
  c.checkpoint_every = 10;
  c.eval_batches = 1;
  c.threads = 1;
  c.out = out;
  return c;
}

TrainerOptions Quiet() {
  TrainerOptions o;
  o.quiet = true;
  return o;
}

// Trainer forward loss vs. the analysis forward (ss::Forward) on the exported weights, sequence
// by sequence. Relative difference must be below 1e-5.
void ExpectInferenceMatchesTrainer(TrainConfig c, const std::string& label) {
  const int B = 3, T = 12;
  TrainModel<float> m(c, B, T);
  m.InitParams(11);
  // Train-like weights: a larger init so the attention is not uniform.
  for (auto& p : m.params) p *= 3.0f;
  // A kv-bias slot starts at 0: give it a key and a value so that it holds mass and adds a value.
  for (const ParamTensor& t : m.layout().tensors)
    if (t.name.ends_with("bias_key") || t.name.ends_with("bias_value"))
      for (int64_t i = 0; i < t.numel; ++i) m.params[t.offset + i] = 1.5f * std::sin(1.0f + i);
  Rng rng(5);
  std::vector<int> tokens(B * T), targets(B * T);
  for (auto& t : tokens) t = rng.Below(c.vocab_size);
  for (auto& t : targets) t = rng.Below(c.vocab_size);
  const double trainer_loss = m.Forward(tokens.data(), targets.data()) -
                              (c.n_experts ? c.aux_loss_coef * m.aux_loss() : 0.0);
  std::vector<float> trainer_probs(m.probs(), m.probs() + size_t(B) * T * c.vocab_size);
  const Model model = ExportModel(c, m.layout(), m.params);
  RunState state;
  double total = 0;
  std::vector<float> probs;
  for (int b = 0; b < B; ++b) {
    KVCache cache = KVCache::Create(model.config, T);
    ForwardRequest req;
    req.tokens = std::span<const int>(tokens.data() + b * T, T);
    Tensor logits = Forward(model, cache, state, req);
    for (int t = 0; t < T; ++t) {
      const float* row = logits.row(t);
      double mx = *std::max_element(row, row + c.vocab_size), z = 0;
      for (int v = 0; v < c.vocab_size; ++v) z += std::exp(row[v] - mx);
      for (int v = 0; v < c.vocab_size; ++v)
        probs.push_back(static_cast<float>(std::exp(row[v] - mx) / z));
      total += std::log(z) + mx - row[targets[b * T + t]];
    }
  }
  const double inference_loss = total / (B * T);
  const double rel = std::abs(inference_loss - trainer_loss) / trainer_loss;
  std::printf("%s: trainer loss %.9f, ss::Forward loss %.9f, rel diff %.3g\n", label.c_str(),
              trainer_loss, inference_loss, rel);
  EXPECT_LT(rel, 1e-5);
  EXPECT_LT(test::MaxDiff(probs, trainer_probs, label + " probabilities"), 1e-5);
}

TEST(TrainForward, DenseMatchesInference) {
  TrainConfig c = TinyRun("");
  ExpectInferenceMatchesTrainer(c, "dense tied gqa half-rope");
}

TEST(TrainForward, DenseInterleavedUntiedQkNormMatchesInference) {
  TrainConfig c = TinyRun("");
  c.rope = "interleaved";
  c.tied_embeddings = false;
  c.qk_norm = true;
  ExpectInferenceMatchesTrainer(c, "dense interleaved untied qk-norm");
}

TEST(TrainForward, MoeMatchesInference) {
  TrainConfig c = TinyRun("");
  c.n_experts = 4;
  c.n_experts_per_tok = 2;
  c.qk_norm = true;
  c.hidden_dim = 24;
  ExpectInferenceMatchesTrainer(c, "moe E4 top-2");
  c.norm_topk_prob = false;
  c.n_experts_per_tok = 1;
  ExpectInferenceMatchesTrainer(c, "moe E4 top-1 raw weights");
}

TEST(TrainOptim, ScheduleWarmupAndCosine) {
  TrainConfig c;
  c.lr = 1.0f;
  c.min_lr = 0.1f;
  c.warmup_steps = 10;
  c.steps = 110;
  EXPECT_NEAR(LearningRate(c, 0), 0.1, 1e-6);
  EXPECT_NEAR(LearningRate(c, 9), 1.0, 1e-6);
  EXPECT_NEAR(LearningRate(c, 10), 1.0, 1e-6);
  EXPECT_NEAR(LearningRate(c, 109), 0.1, 1e-6);
  EXPECT_NEAR(LearningRate(c, 10 + 99 / 2.0), 0.55, 0.01);
}

TEST(TrainOptim, AdamWMatchesClosedFormFirstStep) {
  // After one step from zero moments, the update is lr * g / (|g| + eps) plus decoupled decay.
  TrainConfig c = TinyRun("");
  ParamLayout layout = ParamLayout::Build(c);
  std::vector<float> p(layout.total, 0.5f), g(layout.total);
  for (int64_t i = 0; i < layout.total; ++i) g[i] = (i % 7 - 3) * 0.25f;
  AdamW adam;
  adam.Init(layout.total);
  adam.Step(p, g, layout, c, 0.01);
  double worst = 0;
  for (const ParamTensor& t : layout.tensors)
    for (int64_t i = t.offset; i < t.offset + t.numel; ++i) {
      const double decay = t.decay ? 1.0 - 0.01 * c.weight_decay : 1.0;
      const double expect = 0.5 * decay - 0.01 * g[i] / (std::abs(g[i]) + c.adam_eps);
      worst = std::max(worst, std::abs(expect - p[i]));
    }
  std::printf("adamw first step: max abs diff %.3g\n", worst);
  EXPECT_LT(worst, 1e-6);
}

TEST(TrainOptim, ClipGradNorm) {
  std::vector<float> g = {3.0f, 4.0f};
  EXPECT_NEAR(ClipGradNorm(g, 1.0f), 5.0, 1e-6);
  EXPECT_NEAR(std::hypot(g[0], g[1]), 1.0, 1e-5);
}

TEST(TrainData, BigramBackcopyCopiesAfterTriggers) {
  for (bool bos : {true, false}) {
    BigramBackcopy bb(32, 3, 7, bos);
    Rng rng(1);
    std::vector<int> seq(400);
    bb.Sample(rng, 400, seq.data());
    EXPECT_EQ(seq[0] == BigramBackcopy::kBos, bos);
    int triggers = 0;
    for (int i = 1; i + 1 < 400; ++i)
      if (bb.IsTrigger(seq[i])) {
        ++triggers;
        EXPECT_EQ(seq[i + 1], seq[i - 1]) << "position " << i;
      }
    for (int i = 1; i < 400; ++i) EXPECT_NE(seq[i], BigramBackcopy::kBos);
    std::printf("bigram-backcopy (bos %d): %d triggers in 400 tokens\n", bos, triggers);
    EXPECT_GT(triggers, 10);  // the triggers are the most frequent tokens
  }
}

// The checkpoint's tokenizer.json (converted from the trained SentencePiece model) encodes every
// document exactly as SentencePiece did when the corpus was encoded for training. On a real corpus
// excerpt (War and Peace, with punctuation, digits, accents, indentation and line breaks) when the
// shared data is present, else on a synthetic text.
// Trains a SentencePiece model on `text` as the trainer does and returns how many documents the
// converted tokenizer.json encodes differently from SentencePiece's encoding used for training.
size_t TokenizerJsonMismatches(const std::string& name, const std::string& text, int vocab) {
  const std::string dir = TempDir("spm_json_" + name);
  TrainConfig c = TinyRun(dir);
  c.data = DataKind::kText;
  c.corpus = dir + "/corpus.txt";
  c.vocab_size = vocab;
  WriteFileAtomic(c.corpus, text);
  const TextCorpusFiles files = PrepareTextCorpus(c, dir + "/data", 1);
  bool exact = false;
  const std::string json = SentencePieceToTokenizerJson(files.tokenizer, &exact);
  EXPECT_TRUE(exact) << name;
  const auto tok = ParseTokenizerJson("converted", json);
  auto map = MapFile(files.tokens);
  auto docs = MapFile(files.docs);
  const uint16_t* ids = reinterpret_cast<const uint16_t*>(map->data);
  const uint32_t* starts = reinterpret_cast<const uint32_t*>(docs->data);
  const size_t n_docs = docs->size / 4, n_tokens = map->size / 2;
  // The same documents as training cut them: separated by blank lines.
  std::vector<std::string> split;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find("\n\n", pos);
    if (end == std::string::npos) end = text.size();
    const std::string doc = text.substr(pos, end - pos);
    if (doc.find_first_not_of(" \t\r\n") != std::string::npos) split.push_back(doc);
    pos = end;
    while (pos < text.size() && text[pos] == '\n') ++pos;
  }
  EXPECT_EQ(split.size(), n_docs) << name;
  if (split.size() != n_docs) return n_docs;
  size_t mismatched = 0, compared = 0;
  for (size_t d = 0; d < n_docs; ++d) {
    const size_t end = d + 1 < n_docs ? starts[d + 1] : n_tokens;
    const std::vector<int> want(ids + starts[d], ids + end);
    mismatched += tok->Encode(split[d], false) != want;
    compared += want.size();
  }
  std::printf("%s: tokenizer.json vs SentencePiece: %zu of %zu documents differ (%zu tokens)\n",
              name.c_str(), mismatched, n_docs, compared);
  return mismatched;
}

// The checkpoint's tokenizer.json (converted from the trained SentencePiece model) encodes every
// document exactly as SentencePiece did when the corpus was encoded for training: on the shipped
// default text (with indentation, tabs, digits and accents added) and, when the shared data is
// present, on a War and Peace excerpt (punctuation, accents, line breaks).
TEST(TrainData, TokenizerJsonReproducesSentencePiece) {
  std::string text = ReadFile(test::RepoPath("data/default_text.txt"));
  for (int d = 0; d < 20; ++d)
    text += "\n\n  Chapter " + std::to_string(d) +
            ".\n\"Caf\xC3\xA9,\" she said --  twice;\tthen 3.14 times.";
  EXPECT_EQ(TokenizerJsonMismatches("default_text", text, 400), 0u);
  const std::string real = test::SharedDataPath("corpora/war_and_peace.txt");
  if (!FileExists(real)) {
    std::printf("shared corpora not found: War and Peace case skipped\n");
    return;
  }
  EXPECT_EQ(TokenizerJsonMismatches("war_and_peace", ReadFile(real).substr(200000, 120000), 512),
            0u);
}

TEST(TrainData, TextWindowsWithAndWithoutBos) {
  const std::string dir = TempDir("text");
  std::string text;
  for (int d = 0; d < 60; ++d)
    text += "Document " + std::to_string(d) +
            " begins here. The quick brown fox jumps over the lazy dog " + std::to_string(d * 7) +
            " times.\n\n";
  TrainConfig c = TinyRun(dir);
  c.data = DataKind::kText;
  c.corpus = dir + "/corpus.txt";
  c.vocab_size = 300;
  c.seq_len = 8;
  c.val_fraction = 0.2;
  WriteFileAtomic(c.corpus, text);
  const TextCorpusFiles files = PrepareTextCorpus(c, dir + "/data", 1);
  auto map = MapFile(files.tokens);
  auto docs = MapFile(files.docs);
  const uint16_t* tok = reinterpret_cast<const uint16_t*>(map->data);
  const uint32_t* starts = reinterpret_cast<const uint32_t*>(docs->data);
  EXPECT_EQ(docs->size / 4, 60u);
  for (bool bos : {false, true}) {
    c.bos = bos;
    TextData data(files, c);
    Rng rng(3);
    std::vector<int> tokens(4 * 8), targets(4 * 8);
    data.TrainBatch(rng, 4, 8, tokens.data(), targets.data());
    for (int b = 0; b < 4; ++b) {
      const int* t = &tokens[b * 8];
      const int* y = &targets[b * 8];
      for (int i = 0; i + 1 < 8; ++i) EXPECT_EQ(y[i], t[i + 1]);  // targets are the next tokens
      if (bos) {
        EXPECT_EQ(t[0], 1);
        bool at_start = false;
        for (size_t d = 0; d < docs->size / 4; ++d)
          at_start |= tok[starts[d]] == y[0] && tok[starts[d] + 1] == y[1];
        EXPECT_TRUE(at_start) << "window " << b << " does not begin a document";
      } else {
        EXPECT_NE(t[0], 1);  // no BOS in the stream
      }
    }
  }
  // sink_token=true (StreamingLLM's learnable placeholder): BOS id 1 before windows at random
  // offsets, in training and validation batches; most windows then begin inside a document.
  c.bos = false;
  c.sink_token = true;
  TextData data(files, c);
  Rng rng(3);
  std::vector<int> tokens(16 * 8), targets(16 * 8);
  int inside = 0;
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 0)
      data.TrainBatch(rng, 16, 8, tokens.data(), targets.data());
    else
      data.ValBatch(0, 16, 8, tokens.data(), targets.data());
    for (int b = 0; b < 16; ++b) {
      const int* t = &tokens[b * 8];
      EXPECT_EQ(t[0], 1) << "window " << b;
      for (int i = 1; i < 8; ++i) EXPECT_NE(t[i], 1);
      for (int i = 0; i + 1 < 8; ++i) EXPECT_EQ(targets[b * 8 + i], t[i + 1]);
      bool at_start = false;
      for (size_t d = 0; d < docs->size / 4; ++d)
        at_start |= tok[starts[d]] == targets[b * 8] && tok[starts[d] + 1] == targets[b * 8 + 1];
      inside += !at_start;
    }
  }
  EXPECT_GT(inside, 16);
  EXPECT_NE(data.Describe().find("sink token"), std::string::npos);
  // Refused with --bos, and on Bigram-Backcopy (where --bos is the sink token).
  c.bos = true;
  EXPECT_THROW(c.Validate("t"), Error);
  TrainConfig bb = TinyRun("");
  bb.sink_token = true;
  try {
    bb.Validate("cfg");
    ADD_FAILURE() << "sink_token on Bigram-Backcopy accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("use --bos"), std::string::npos) << e.what();
  }
}

TEST(TrainRun, DeterministicLossSequence) {
  const std::string dir = TempDir("determinism");
  TrainConfig c = TinyRun(dir + "/a");
  const TrainResult a = RunTraining(c, Quiet());
  c.out = dir + "/b";
  const TrainResult b = RunTraining(c, Quiet());
  ASSERT_EQ(a.losses.size(), 20u);
  ASSERT_EQ(a.losses.size(), b.losses.size());
  int differing = 0;
  for (size_t i = 0; i < a.losses.size(); ++i) differing += a.losses[i] != b.losses[i];
  std::printf("determinism: %d of %zu losses differ bit-wise (first %.17g, last %.17g)\n",
              differing, a.losses.size(), a.losses.front(), a.losses.back());
  EXPECT_EQ(differing, 0);
  EXPECT_LT(a.losses.back(), a.losses.front());  // it learns
}

// --precision bf16: at the same parameters and batch, the loss and every gradient stay within bf16
// rounding of f32 (and differ from it: the bf16 products ran); a short run's loss curve follows the
// f32 run's. Each check prints its largest difference.
TEST(TrainBf16, LossAndGradientsWithinBf16OfF32) {
  TrainConfig c = Preset("quick");
  c.dim = 64;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 96;
  c.n_layers = 2;
  const int B = 4, T = 32;
  TrainModel<float> f32(c, B, T);
  c.precision = "bf16";
  TrainModel<float> bf16(c, B, T);
  f32.InitParams(5);
  bf16.params = f32.params;
  std::vector<int> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    tokens[i] = (i * 37 + 11) % c.vocab_size;
    targets[i] = (i * 53 + 7) % c.vocab_size;
  }
  const double lf = f32.Forward(tokens.data(), targets.data());
  const double lb = bf16.Forward(tokens.data(), targets.data());
  f32.Backward();
  bf16.Backward();
  std::printf("bf16 training: loss %.6f vs f32 %.6f (rel %.3g)\n", lb, lf, std::abs(lb - lf) / lf);
  EXPECT_NE(lb, lf);
  EXPECT_LT(std::abs(lb - lf) / lf, 5e-3);
  const double g = test::MaxRelDiff(bf16.grads, f32.grads, "bf16 training gradients vs f32");
  EXPECT_GT(g, 0.0);
  EXPECT_LT(g, 3e-2);
}

// On two threads the paired products (q and k, the MLP's gate and up, each backward's input and
// weight gradients) run one per thread: the loss and gradients equal one thread's within f32
// summation-order differences. The shapes are large enough for the pairing (2^20 multiply-adds).
TEST(TrainThreads, TwoThreadsMatchOne) {
  TrainConfig c = Preset("quick");
  c.dim = 128;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.vocab_size = 256;
  c.n_layers = 2;
  const int B = 8, T = 64;
  std::vector<int> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    tokens[i] = (i * 37 + 11) % c.vocab_size;
    targets[i] = (i * 53 + 7) % c.vocab_size;
  }
  const int threads = ThreadCount();
  double loss[2];
  std::vector<float> grads[2];
  for (int k = 0; k < 2; ++k) {
    SetThreadCount(k + 1);
    TrainModel<float> m(c, B, T);
    m.InitParams(5);
    loss[k] = m.Forward(tokens.data(), targets.data());
    m.Backward();
    grads[k] = m.grads;
  }
  SetThreadCount(threads);
  std::printf("training on 2 threads vs 1: loss %.9f vs %.9f\n", loss[1], loss[0]);
  EXPECT_LT(std::abs(loss[1] - loss[0]) / loss[0], 1e-6);
  EXPECT_LT(test::MaxRelDiff(grads[1], grads[0], "2-thread training gradients vs 1 thread"), 1e-5);
}

TEST(TrainBf16, ShortRunFollowsTheF32LossCurve) {
  const std::string dir = TempDir("bf16_run");
  TrainConfig c = TinyRun(dir + "/f32");
  c.steps = 40;
  const TrainResult a = RunTraining(c, Quiet());
  c.out = dir + "/bf16";
  c.precision = "bf16";
  const TrainResult b = RunTraining(c, Quiet());
  ASSERT_EQ(a.losses.size(), b.losses.size());
  double worst = 0;
  for (size_t i = 0; i < a.losses.size(); ++i)
    worst = std::max(worst, std::abs(b.losses[i] - a.losses[i]) / a.losses[i]);
  std::printf(
      "bf16 run: %zu steps, largest rel diff of the training loss %.3g; final %.5f vs f32 %.5f; "
      "val %.5f vs %.5f\n",
      a.losses.size(), worst, b.losses.back(), a.losses.back(), b.val_loss, a.val_loss);
  EXPECT_GT(worst, 0.0);
  EXPECT_LT(worst, 2e-2);
  EXPECT_LT(b.losses.back(), b.losses.front());  // it learns
  EXPECT_LT(std::abs(b.val_loss - a.val_loss) / a.val_loss, 2e-2);
}

TEST(TrainRun, ResumeIsBitExact) {
  const std::string dir = TempDir("resume");
  TrainConfig c = TinyRun(dir + "/full");
  const TrainResult full = RunTraining(c, Quiet());
  c.out = dir + "/cut";
  TrainerOptions stop = Quiet();
  stop.stop_after = 13;  // dies after step 13: the newest checkpoint is step 10
  RunTraining(c, stop);
  TrainerOptions resume = Quiet();
  resume.resume = dir + "/cut";
  const TrainResult rest = RunTraining(c, resume);
  EXPECT_EQ(rest.start_step, 10);
  ASSERT_EQ(rest.losses.size(), 10u);
  int differing = 0;
  for (int i = 0; i < 10; ++i) differing += rest.losses[i] != full.losses[10 + i];
  std::printf("resume: %d of 10 losses after resuming differ bit-wise from the uninterrupted run\n",
              differing);
  EXPECT_EQ(differing, 0);
  // The loss log was rewritten after step 10: 20 steps + header, no duplicates.
  std::ifstream log(dir + "/cut/train_loss.tsv");
  int lines = 0;
  for (std::string l; std::getline(log, l);) ++lines;
  EXPECT_EQ(lines, 21);
}

TEST(TrainRun, CheckpointReloadsThroughAnalysisForward) {
  const std::string dir = TempDir("reload");
  for (const std::string rope : {"half", "interleaved"}) {
    TrainConfig c = TinyRun(dir + "/" + rope);
    c.rope = rope;
    const TrainResult r = RunTraining(c, Quiet());
    ASSERT_TRUE(FileExists(r.last_checkpoint + "/model.safetensors"));
    const double reloaded = EvaluateCheckpoint(r.last_checkpoint, c.eval_batches);
    std::printf("reload (%s rope): trainer val loss %.9f, reloaded checkpoint %.9f\n", rope.c_str(),
                r.val_loss, reloaded);
    EXPECT_LT(std::abs(reloaded - r.val_loss) / r.val_loss, 1e-5);
  }
}

TEST(TrainRun, MoeTrainsAndReloads) {
  const std::string dir = TempDir("moe");
  TrainConfig c = TinyRun(dir);
  c.n_experts = 4;
  c.n_experts_per_tok = 2;
  c.qk_norm = true;
  c.hidden_dim = 24;
  const TrainResult r = RunTraining(c, Quiet());
  EXPECT_LT(r.losses.back(), r.losses.front());
  const std::string cfg = ReadFile(r.last_checkpoint + "/config.json");
  EXPECT_NE(cfg.find("Qwen3MoeForCausalLM"), std::string::npos);
  EXPECT_NE(cfg.find("\"num_experts\": 4"), std::string::npos);
  const double reloaded = EvaluateCheckpoint(r.last_checkpoint, c.eval_batches);
  std::printf("moe reload: trainer val loss %.9f, reloaded %.9f\n", r.val_loss, reloaded);
  EXPECT_LT(std::abs(reloaded - r.val_loss) / r.val_loss, 1e-5);
}

// attention=sink-logit: the trainer's forward equals the inference engine's on the exported model;
// a short run's checkpoint carries self_attn.sinks and sinkscope_attn_sinks, reloads through
// LoadModel to the trainer's validation loss, and analyze reports its sink slot; other variants and
// a resume with a different variant are refused by name.
std::string ErrorOfRun(const TrainConfig& c) {
  try {
    RunTraining(c, Quiet());
  } catch (const Error& e) {
    std::printf("error: %s\n", e.what());
    return e.what();
  }
  return "";
}

TEST(TrainRun, SinkLogitTrainsReloadsAndAnalyzes) {
  TrainConfig c = TinyRun("");
  c.attention = "sink-logit";
  ExpectInferenceMatchesTrainer(c, "dense sink-logit");
  const std::string dir = TempDir("sink_logit");
  c = TinyRun(dir + "/run");
  c.attention = "sink-logit";
  const TrainResult r = RunTraining(c, Quiet());
  EXPECT_LT(r.losses.back(), r.losses.front());
  const std::string cfg = ReadFile(r.last_checkpoint + "/config.json");
  EXPECT_NE(cfg.find("\"sinkscope_attn_sinks\": true"), std::string::npos) << cfg;
  const double reloaded = EvaluateCheckpoint(r.last_checkpoint, c.eval_batches);
  EXPECT_LT(std::abs(reloaded - r.val_loss) / r.val_loss, 1e-5);
  const Model model = LoadModel(r.last_checkpoint);
  ASSERT_TRUE(model.config.attn_sinks);
  ASSERT_EQ(model.weights.layers[0].attn_sinks.numel(), c.n_heads);
  std::vector<std::vector<int>> samples(2, std::vector<int>(16));
  for (int n = 0; n < 2; ++n)
    for (int t = 0; t < 16; ++t) samples[n][t] = t == 0 ? 0 : 1 + (5 * t + n) % (c.vocab_size - 1);
  const analysis::ConditionResult a =
      analysis::AnalyzeSamples(model, analysis::Condition::kBos, samples, {});
  ASSERT_TRUE(a.has_sink_slot);
  double slot = 0;
  for (double v : a.alpha_sink) slot += v / a.alpha_sink.size();
  std::printf("sink-logit run: mean alpha_sink %.3f after %d steps\n", slot, c.steps);
  EXPECT_GT(slot, 0.0);
  // The in-run telemetry reports the slot's mass too.
  const SinkProfile probe = MeasureSinkProfile(model, samples);
  ASSERT_EQ(probe.alpha_sink.size(), static_cast<size_t>(c.n_layers));
  EXPECT_NEAR(
      probe.alpha_sink[0] * c.n_layers,
      [&] {
        double s = 0;
        for (int h = 0; h < c.n_heads; ++h) s += a.alpha_sink[h] / c.n_heads;
        return s * c.n_layers;
      }(),
      1e-5);
  EXPECT_TRUE(ToJson(probe).contains("alpha_sink"));

  TrainConfig bad = TinyRun(dir + "/bad");
  bad.attention = "sofmax";
  EXPECT_NE(ErrorOfRun(bad).find("unknown attention variant 'sofmax'"), std::string::npos);
  TrainConfig other = TinyRun(dir + "/run");
  TrainerOptions resume = Quiet();
  resume.resume = dir + "/run";
  try {
    RunTraining(other, resume);
    ADD_FAILURE() << "resuming a sink-logit run as softmax was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention"), std::string::npos) << e.what();
  }
}

// attention=kv-bias and attention=sigmoid: the trainer equals the engine on the exported model;
// checkpoints carry the extension key (and kv-bias its bias_key / bias_value), reload to the
// trainer's loss, and analyze reports the same on its fused and materialised paths: kv-bias the
// slot's mass (equal to the telemetry's), sigmoid its weights divided by their sums.
double LargestDiff(const std::vector<double>& a, const std::vector<double>& b,
                   const std::string& what) {
  EXPECT_EQ(a.size(), b.size()) << what;
  double worst = a.size() == b.size() ? 0.0 : 1e30;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]));
  std::printf("%s: largest diff %.3g over %zu values\n", what.c_str(), worst, a.size());
  return worst;
}

TEST(TrainRun, KvBiasAndSigmoidTrainReloadAndAnalyze) {
  for (const char* variant : {"kv-bias", "sigmoid"}) {
    const std::string v = variant;
    TrainConfig c = TinyRun("");
    c.attention = v;
    ExpectInferenceMatchesTrainer(c, "dense " + v);
    c.qk_norm = true;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.dim = 32;
    ExpectInferenceMatchesTrainer(c, "dense qk-norm gqa " + v);
    c = TinyRun(TempDir(v == "sigmoid" ? "sigmoid" : "kv_bias") + "/run");
    c.attention = v;
    // Interleaved RoPE permutes q's dims on export: the slot's key must follow (the reload below).
    if (v == "kv-bias") c.rope = "interleaved";
    const TrainResult r = RunTraining(c, Quiet());
    EXPECT_LT(r.losses.back(), r.losses.front()) << v;
    const std::string cfg = ReadFile(r.last_checkpoint + "/config.json");
    const std::string key =
        v == "sigmoid" ? "\"sinkscope_attn_sigmoid\": true" : "\"sinkscope_attn_kv_bias\": true";
    EXPECT_NE(cfg.find(key), std::string::npos) << cfg;
    EXPECT_LT(
        std::abs(EvaluateCheckpoint(r.last_checkpoint, c.eval_batches) - r.val_loss) / r.val_loss,
        1e-5)
        << v;
    const Model model = LoadModel(r.last_checkpoint);
    EXPECT_EQ(model.config.attn_kv_bias, v == "kv-bias");
    EXPECT_EQ(model.config.attn_sigmoid, v == "sigmoid");
    if (v == "kv-bias") {
      ASSERT_EQ(model.weights.layers[0].attn_bias_key.numel(),
                int64_t(c.n_kv_heads) * c.dim / c.n_heads);
      ASSERT_EQ(model.weights.layers[0].attn_bias_value.numel(),
                int64_t(c.n_kv_heads) * c.dim / c.n_heads);
      // With a large slot key (trained ones start at 0), the saved checkpoint through LoadModel
      // gives the logits of the trainer's own weights: the key's dims follow q's permutation.
      const ParamLayout layout = ParamLayout::Build(c);
      TrainerState st = ReadCheckpointState(r.last_checkpoint, c, layout);
      for (const ParamTensor& t : layout.tensors)
        if (t.name.ends_with("bias_key"))
          for (int64_t i = 0; i < t.numel; ++i) st.params[t.offset + i] = 3.0f * std::sin(0.7f * i);
      const std::string saved = SaveCheckpoint(TempDir("kv_bias_key"), c, layout, st, "");
      const Model reloaded = LoadModel(saved), own = ExportModel(c, layout, st.params);
      std::vector<int> ids(16);
      for (int t = 0; t < 16; ++t) ids[t] = (7 * t + 3) % c.vocab_size;
      auto logits = [&](const Model& m) {
        KVCache cache = KVCache::CreateSingleUse(m.config, 16);
        RunState state;
        ForwardRequest req;
        req.tokens = ids;
        return Forward(m, cache, state, req);
      };
      const Tensor a = logits(reloaded), b = logits(own);
      EXPECT_LT(
          test::MaxDiff(a.data(), b.data(), a.numel(), "kv-bias interleaved checkpoint logits"),
          1e-4);
    }
    std::vector<std::vector<int>> samples(2, std::vector<int>(16));
    for (int n = 0; n < 2; ++n)
      for (int t = 0; t < 16; ++t)
        samples[n][t] = t == 0 ? 0 : 1 + (5 * t + n) % (c.vocab_size - 1);
    analysis::AnalyzeOptions fused, materialised;
    materialised.path = analysis::AttnPath::kMaterialisedKeepAll;
    const analysis::ConditionResult a =
        analysis::AnalyzeSamples(model, analysis::Condition::kBos, samples, fused);
    const analysis::ConditionResult b =
        analysis::AnalyzeSamples(model, analysis::Condition::kBos, samples, materialised);
    EXPECT_EQ(a.has_sink_slot, v == "kv-bias");
    EXPECT_LT(LargestDiff(a.alpha, b.alpha, v + " alpha fused vs materialised"), 1e-6);
    double alpha0 = 0;
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_heads; ++h) {
        EXPECT_GE(a.Alpha(0, l, h), 0.0);
        EXPECT_LE(a.Alpha(0, l, h), 1.0 + 1e-6);
        alpha0 += a.Alpha(0, l, h);
      }
    EXPECT_GT(alpha0, 0.0);
    const SinkProfile probe = MeasureSinkProfile(model, samples);
    // The telemetry's largest activation per layer is analyze's top activation, with its median.
    for (int l = 0; l < c.n_layers; ++l) {
      ASSERT_FALSE(a.top_activations[l].empty());
      const analysis::Activation& top = a.top_activations[l][0];
      EXPECT_NEAR(probe.top_abs[l], std::fabs(top.value), 1e-6 * std::fabs(top.value))
          << v << " layer " << l;
      EXPECT_NEAR(probe.top_abs_ratio[l], std::fabs(top.value) / top.median_abs,
                  1e-4 * probe.top_abs_ratio[l]);
      EXPECT_EQ(probe.top_abs_at_p0[l], top.position == 0 ? 1 : 0);
    }
    if (v == "kv-bias") {
      EXPECT_LT(LargestDiff(a.alpha_sink, b.alpha_sink, "kv-bias alpha_sink fused vs materialised"),
                1e-6);
      double slot = 0;
      for (double x : a.alpha_sink) slot += x / a.alpha_sink.size();
      EXPECT_GT(slot, 0.0);
      ASSERT_EQ(probe.alpha_sink.size(), static_cast<size_t>(c.n_layers));
      for (int l = 0; l < c.n_layers; ++l) {
        double mean = 0;
        for (int h = 0; h < c.n_heads; ++h) mean += a.alpha_sink[l * c.n_heads + h] / c.n_heads;
        EXPECT_NEAR(probe.alpha_sink[l], mean, 1e-6);
      }
    } else {
      EXPECT_TRUE(probe.alpha_sink.empty());
      // Sigmoid: the weights themselves beside the proxy, from the pattern hook.
      ASSERT_EQ(probe.alpha0_raw.size(), static_cast<size_t>(c.n_layers));
      std::vector<double> w0(c.n_layers, 0.0), sums(c.n_layers, 0.0);
      for (const auto& seq : samples) {
        Hooks hooks;
        const int T = static_cast<int>(seq.size());
        hooks.Add(HookPoint::kPattern, -1, [&](const HookContext& ctx, Tensor& p) {
          for (int h = 0; h < c.n_heads; ++h)
            for (int t = 0; t < T; ++t) {
              const float* row = p.data() + (static_cast<int64_t>(h) * T + t) * T;
              w0[ctx.layer] += row[0] / (double(T) * c.n_heads * samples.size());
              for (int j = 0; j <= t; ++j)
                sums[ctx.layer] += row[j] / (double(T) * c.n_heads * samples.size());
            }
        });
        KVCache cache = KVCache::CreateSingleUse(model.config, T);
        RunState state;
        ForwardRequest req;
        req.tokens = seq;
        req.logits = LogitsMode::kNone;
        req.hooks = &hooks;
        Forward(model, cache, state, req);
      }
      ASSERT_TRUE(a.has_sigmoid_weights && b.has_sigmoid_weights);
      EXPECT_LT(LargestDiff(a.alpha0_raw, b.alpha0_raw, "sigmoid alpha0_raw fused vs materialised"),
                1e-6);
      EXPECT_LT(LargestDiff(a.row_sum, b.row_sum, "sigmoid row_sum fused vs materialised"), 1e-5);
      for (int l = 0; l < c.n_layers; ++l) {
        EXPECT_NEAR(probe.alpha0_raw[l], w0[l], 1e-5) << l;
        EXPECT_NEAR(probe.row_sum[l], sums[l], 1e-4) << l;
        EXPECT_GT(std::abs(probe.row_sum[l] - 1.0), 1e-3);  // not normalised
        double a0 = 0, rs = 0;  // analyze's per-head means agree with the telemetry's layer means
        for (int h = 0; h < c.n_heads; ++h) {
          a0 += a.alpha0_raw[l * c.n_heads + h] / c.n_heads;
          rs += a.row_sum[l * c.n_heads + h] / c.n_heads;
        }
        EXPECT_NEAR(a0, w0[l], 1e-5) << l;
        EXPECT_NEAR(rs, sums[l], 1e-4) << l;
      }
      EXPECT_TRUE(ToJson(probe).contains("alpha0_raw"));
    }
  }
}

// attention=gated: the trainer equals the engine on the exported model; the checkpoint carries
// self_attn.output_gate.weight and sinkscope_attn_output_gate, reloads to the trainer's loss, and
// the telemetry reports the gate at position 0 and elsewhere (recomputed here from hook_gate).
TEST(TrainRun, GatedTrainsReloadsAndReportsTheGate) {
  TrainConfig c = TinyRun("");
  c.attention = "gated";
  ExpectInferenceMatchesTrainer(c, "dense gated");
  c = TinyRun(TempDir("gated") + "/run");
  c.attention = "gated";
  const TrainResult r = RunTraining(c, Quiet());
  EXPECT_LT(r.losses.back(), r.losses.front());
  const std::string cfg = ReadFile(r.last_checkpoint + "/config.json");
  EXPECT_NE(cfg.find("\"sinkscope_attn_output_gate\": true"), std::string::npos) << cfg;
  EXPECT_LT(
      std::abs(EvaluateCheckpoint(r.last_checkpoint, c.eval_batches) - r.val_loss) / r.val_loss,
      1e-5);
  const Model model = LoadModel(r.last_checkpoint);
  ASSERT_TRUE(model.config.attn_output_gate);
  ASSERT_EQ(model.weights.layers[0].attn_gate.numel(), int64_t(c.dim) * c.dim);
  std::vector<std::vector<int>> samples(1, std::vector<int>(12));
  for (int t = 0; t < 12; ++t) samples[0][t] = t == 0 ? 0 : 1 + (5 * t) % (c.vocab_size - 1);
  const SinkProfile probe = MeasureSinkProfile(model, samples);
  ASSERT_EQ(probe.gate_p0.size(), static_cast<size_t>(c.n_layers));
  // The same means from the hook directly.
  Hooks hooks;
  std::vector<double> p0(c.n_layers), rest(c.n_layers);
  hooks.Add(HookPoint::kAttnGate, -1, [&](const HookContext& ctx, Tensor& g) {
    ASSERT_EQ(g.numel(), int64_t(12) * c.dim);
    for (int t = 0; t < 12; ++t)
      for (int i = 0; i < c.dim; ++i)
        (t == 0 ? p0 : rest)[ctx.layer] +=
            g.row(0)[t * c.dim + i] / (t == 0 ? c.dim : 11.0 * c.dim);
  });
  KVCache cache = KVCache::CreateSingleUse(model.config, 12);
  RunState state;
  ForwardRequest req;
  req.tokens = samples[0];
  req.hooks = &hooks;
  Forward(model, cache, state, req);
  for (int l = 0; l < c.n_layers; ++l) {
    EXPECT_NEAR(probe.gate_p0[l], p0[l], 1e-6);
    EXPECT_NEAR(probe.gate_rest[l], rest[l], 1e-6);
    EXPECT_GT(probe.gate_p0[l], 0.0);
    EXPECT_LT(probe.gate_p0[l], 1.0);
  }
  EXPECT_TRUE(ToJson(probe).contains("gate_p0"));
  // analyze reports the same gate means.
  const analysis::ConditionResult a =
      analysis::AnalyzeSamples(model, analysis::Condition::kBos, samples, {});
  ASSERT_TRUE(a.has_output_gate);
  for (int l = 0; l < c.n_layers; ++l) {
    EXPECT_NEAR(a.gate_p0[l], probe.gate_p0[l], 1e-6);
    EXPECT_NEAR(a.gate_rest[l], probe.gate_rest[l], 1e-6);
  }
  // The run's telemetry: the gate per layer, and the validation loss split at Bigram-Backcopy's
  // triggers (the token after a trigger is a copy) and elsewhere; val_loss is their token-weighted
  // mean, so it lies between them.
  const std::string last = [&] {
    std::istringstream in(ReadFile(c.out + "/telemetry.jsonl"));
    std::string line, back;
    while (std::getline(in, line))
      if (!line.empty()) back = line;
    return back;
  }();
  const nlohmann::json t = nlohmann::json::parse(last);
  ASSERT_TRUE(t.contains("gate_p0") && t.contains("trigger_loss") && t.contains("other_loss"))
      << last;
  const double lo = std::min(t["trigger_loss"].get<double>(), t["other_loss"].get<double>());
  const double hi = std::max(t["trigger_loss"].get<double>(), t["other_loss"].get<double>());
  EXPECT_LE(lo, t["val_loss"].get<double>() + 1e-9);
  EXPECT_GE(hi, t["val_loss"].get<double>() - 1e-9);
  EXPECT_LT(lo, hi);
}

// attention=softmax1: the slot with its logit held at 0 (softmax-off-by-one). The trainer equals
// the engine, the logits stay exactly 0 through a run (frozen: zero gradient, no decay), and the
// checkpoint loads as a model with learned sinks that happen to be 0.
TEST(TrainRun, Softmax1KeepsTheSlotLogitAtZero) {
  TrainConfig c = TinyRun("");
  c.attention = "softmax1";
  ExpectInferenceMatchesTrainer(c, "dense softmax1");
  c = TinyRun(TempDir("softmax1") + "/run");
  c.attention = "softmax1";
  const TrainResult r = RunTraining(c, Quiet());
  EXPECT_LT(r.losses.back(), r.losses.front());
  const Model model = LoadModel(r.last_checkpoint);
  ASSERT_TRUE(model.config.attn_sinks);
  for (const auto& layer : model.weights.layers)
    for (int h = 0; h < c.n_heads; ++h) EXPECT_EQ(layer.attn_sinks[h], 0.0f);
}

// ---- bad input

std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    std::printf("error: %s\n", e.what());
    return e.what();
  }
  return "";
}

// trainer_state.json's rng words went straight to std::stoull, so a damaged word escaped as
// std::invalid_argument / std::out_of_range instead of an ss::Error naming the file.
TEST(TrainBadInput, TrainerStateRngWords) {
  auto state = [](const std::string& word) {
    return R"({"step": 3, "adam_t": 3, "tokens_seen": 96, "parameters": 10, "rng": [")" + word +
           R"(", "1", "2", "3"]})";
  };
  const TrainerState s = ParseTrainerState(state("00000000000000fF"), "s.json", 10);
  EXPECT_EQ(s.step, 3);
  EXPECT_EQ(s.rng[0], 255u);
  EXPECT_EQ(s.rng[3], 3u);
  for (const std::string bad : {"zz", "", "-1", "0x10", " 1", "10000000000000000"}) {
    std::string e;
    EXPECT_NO_THROW(e = ErrorOf([&] { ParseTrainerState(state(bad), "s.json", 10); })) << bad;
    EXPECT_NE(e.find("s.json: rng[0] = '" + bad + "' is not a 64-bit hexadecimal word"),
              std::string::npos)
        << e;
  }
  EXPECT_NE(ErrorOf([&] {
              ParseTrainerState(state("1"), "s.json", 11);
            }).find("10 parameters, the config needs 11"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              ParseTrainerState("{\"step\": 1}", "s.json", 10);
            }).find("s.json: missing 'adam_t'"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              ParseTrainerState("{\"step\": 1", "s.json", 10);
            }).find("malformed trainer state"),
            std::string::npos);
  // Integers must be JSON integers in range (a float was converted silently, out of range with
  // undefined behaviour).
  for (const std::string step : {"2.5", "3.3e44", "-1", "4294967296"}) {
    std::string text = state("1");
    text.replace(text.find("\"step\": 3"), 9, "\"step\": " + step);
    EXPECT_NE(ErrorOf([&] {
                ParseTrainerState(text, "s.json", 10);
              }).find("s.json: 'step' must be an integer"),
              std::string::npos)
        << step;
  }
}

// Found by fuzz_train_config: a number no double holds made nlohmann::json throw out_of_range
// (406), which escaped ParseTrainConfig (it caught parse_error only).
TEST(TrainBadInput, NumberTooLargeForADouble) {
  std::string e;
  EXPECT_NO_THROW(
      e = ErrorOf([] { ParseTrainConfig(R"({"lr": 11111E11111111191111})", "cfg.json"); }));
  EXPECT_NE(e.find("cfg.json: malformed training config"), std::string::npos) << e;
}

// Found by fuzz_sentencepiece (its input, verbatim): a model with an empty piece made
// libsentencepiece throw Darts' "zero-length key" out of Load, past every ss::Error handler.
TEST(TrainBadInput, SentencePieceModelWithAnEmptyPiece) {
  const std::string model(
      "\x0a\x0e\x0a\x05\x3c\x75\x6e\x6b\x3e\x15\x00\x00\x00\x00\x18\x02\x0a\x0c\x0a\x03\x3c\x73\x3e"
      "\x15"
      "\x00\x00\x00\x00\x18\x03\x0a\x0d\x0a\x04\x3c\x2f\x73\x3e\x15\x00\x00\x00\x00\x18\x03\x0a\x0c"
      "\x0a"
      "\x03\xe2\x96\x81\x15\x00\x00\x80\xbf\x18\x01\x0a\x0a\x0a\x01\x61\x15\x00\x00\x00\xc0\x18\x01"
      "\x0a"
      "\x0a\x0a\x01\x00\x62\x00\x15\x40\xc0\x02\x00\xc8\x02\x01\xd0\x02\x02\xd8\x02\xff\xff\xff\xff"
      "\xff"
      "\xff\xff\xff\xff\x01\x1a\x0e\x0a\x08\x69\x64\x65\x6e\x74\x69\x74\x79\x18\x01\x20\x00",
      117);
  const std::string path = test::TempDir("spm_empty_piece") + "/tokenizer.model";
  WriteFileAtomic(path, model);
  std::string e;
  bool exact = false;
  EXPECT_NO_THROW(e = ErrorOf([&] { SentencePieceToTokenizerJson(path, &exact); }));
  EXPECT_NE(e.find(path + ": cannot load the SentencePiece model"), std::string::npos) << e;
}

TEST(TrainBadInput, ImpossibleShapes) {
  TrainConfig c = TinyRun("");
  c.n_heads = 3;
  EXPECT_NE(ErrorOf([&] { c.Validate("cfg.json"); }).find("n_heads 3 does not divide dim 16"),
            std::string::npos);
  c = TinyRun("");
  c.n_kv_heads = 3;
  c.n_heads = 4;
  EXPECT_NE(ErrorOf([&] { c.Validate("cfg.json"); }).find("n_kv_heads 3 does not divide n_heads 4"),
            std::string::npos);
  c = TinyRun("");
  c.n_experts = 4;
  c.n_experts_per_tok = 5;
  EXPECT_NE(ErrorOf([&] { c.Validate("cfg.json"); }).find("top-k"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { Preset("nope"); }).find("unknown preset 'nope'"), std::string::npos);
  // Found by fuzz_train_config (UBSan): 8 * dim overflowed int in the MLP width of a huge dim.
  c = TinyRun("");
  c.dim = 651111008;
  c.n_heads = 1;
  c.n_kv_heads = 1;
  EXPECT_GT(c.EffectiveHiddenDim(), c.dim);
  // Training it is refused before any allocation, with the figures.
  EXPECT_NE(ErrorOf([&] { RunTraining(c, Quiet()); }).find("parameters, 16 bytes each"),
            std::string::npos);
  TrainConfig d;
  EXPECT_NE(ErrorOf([&] {
              ApplyJson(d, nlohmann::json{{"dimm", 3}}, "x.json");
            }).find("unknown key 'dimm'"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              ApplyJson(d, nlohmann::json{{"dim", "wide"}}, "x.json");
            }).find("'dim' has the wrong type"),
            std::string::npos);
}

TEST(TrainBadInput, EmptyAndTooSmallCorpus) {
  const std::string dir = TempDir("corpus");
  TrainConfig c = TinyRun(dir + "/run");
  c.data = DataKind::kText;
  c.vocab_size = 300;
  c.corpus = dir + "/empty.txt";
  WriteFileAtomic(c.corpus, "\n\n  \n");
  EXPECT_NE(ErrorOf([&] { RunTraining(c, Quiet()); }).find("the corpus is empty"),
            std::string::npos);
  c.corpus = dir + "/small.txt";
  c.out = dir + "/run2";
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the cat sat on the mat, and the dog barked at it. ";
  WriteFileAtomic(c.corpus, text);
  c.vocab_size = 280;
  c.seq_len = 512;
  EXPECT_NE(ErrorOf([&] { RunTraining(c, Quiet()); }).find("too small"), std::string::npos);
}

TEST(TrainBadInput, ResumeFromDifferentConfig) {
  const std::string dir = TempDir("resume_mismatch");
  TrainConfig c = TinyRun(dir);
  c.steps = 10;
  RunTraining(c, Quiet());
  c.dim = 32;
  TrainerOptions o = Quiet();
  o.resume = dir;
  const std::string err = ErrorOf([&] { RunTraining(c, o); });
  EXPECT_NE(err.find("different configuration"), std::string::npos);
  EXPECT_NE(err.find("dim"), std::string::npos);
}

TEST(TrainBadInput, NonFiniteLossStopsAndKeepsCheckpoint) {
  const std::string dir = TempDir("nan");
  TrainConfig c = TinyRun(dir);
  c.steps = 40;
  c.lr = 1e30f;  // the weights overflow within a few steps
  c.min_lr = 1e30f;
  c.warmup_steps = 0;
  c.grad_clip = 0;
  c.checkpoint_every = 1;
  const std::string err = ErrorOf([&] { RunTraining(c, Quiet()); });
  EXPECT_NE(err.find("non-finite"), std::string::npos);
  EXPECT_NE(err.find("last good checkpoint is"), std::string::npos);
  // Every checkpoint on disk is complete and finite.
  const std::string last = FindCheckpoint(dir);
  const TrainConfig saved = ReadCheckpointConfig(last);
  const TrainerState s = ReadCheckpointState(last, saved, ParamLayout::Build(saved));
  for (float p : s.params) ASSERT_TRUE(std::isfinite(p));
}

TEST(TrainBadInput, DiskFullWhileSavingKeepsPreviousCheckpoint) {
  const std::string dir = TempDir("diskfull");
  TrainConfig c = TinyRun(dir);
  // Checkpoint at step 10 succeeds; the one at step 20 fails on its second file.
  TrainerOptions o = Quiet();
  o.stop_after = 10;
  RunTraining(c, o);
  InjectCheckpointWriteFailure(2);
  o = Quiet();
  o.resume = dir;
  const std::string err = ErrorOf([&] { RunTraining(c, o); });
  EXPECT_NE(err.find("No space left on device"), std::string::npos);
  EXPECT_NE(err.find("step-20 not written"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir + "/step-20"));
  EXPECT_EQ(FindCheckpoint(dir), dir + "/step-10");
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  EXPECT_GT(EvaluateCheckpoint(dir + "/step-10", 1), 0.0);  // intact
}

}  // namespace
}  // namespace ss::train
