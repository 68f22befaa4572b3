#include "train/train_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>
#include <type_traits>

#include "common/error.h"
#include "common/file_util.h"
#include "io/json_util.h"
#include "kernels/parallel.h"
#include "model/attention.h"
#include "model/precision.h"

namespace ss::train {

namespace {
// A float as the double its shortest decimal form names (1e-05, not 9.9999997e-06) for JSON.
double Clean(float f) { return std::stod(fmt::format("{}", f)); }
}  // namespace

int TrainConfig::EffectiveHiddenDim() const {
  if (hidden_dim > 0) return hidden_dim;
  // SwiGLU keeps the parameter count of a 4*dim MLP with 2/3 of the width (Shazeer 2020). In 64
  // bits: a huge dim overflowed int here before Validate could refuse it (found by fuzzing).
  const int64_t h = (8 * static_cast<int64_t>(dim) + 2) / 3;
  return static_cast<int>(std::min<int64_t>((h + 7) / 8 * 8, std::numeric_limits<int>::max()));
}

ModelConfig TrainConfig::ToModelConfig() const {
  ModelConfig c;
  c.arch = n_experts > 0 ? "qwen3_moe" : "llama";
  c.dim = dim;
  c.hidden_dim = EffectiveHiddenDim();
  c.n_layers = n_layers;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = dim / n_heads;
  c.vocab_size = vocab_size;
  c.max_seq_len = seq_len;
  c.norm_eps = norm_eps;
  c.rope = rope == "interleaved" ? RopeKind::kInterleaved : RopeKind::kHalf;
  c.rope_theta = rope_theta;
  c.tied_embeddings = tied_embeddings;
  c.n_experts = n_experts;
  c.n_experts_per_tok = n_experts_per_tok;
  c.norm_topk_prob = n_experts > 0 && norm_topk_prob;
  if (qk_norm) c.qk_norm = QkNormKind::kPerHead;
  if (const AttnVariant& v = FindAttnVariant(attention, "attention"); v.flag) c.*(v.flag) = true;
  if (data == DataKind::kBigramBackcopy) {
    c.bos_id = 0;  // the synthetic task's BOS (train/data.h)
    c.eos_id = -1;
  }
  return c;
}

void TrainConfig::Validate(const std::string& src) const {
  auto positive = [&](const char* name, double v) {
    if (!(v > 0)) Fail("{}: '{}' must be positive, found {}", src, name, v);
  };
  // The one domain check; q8_0 and native are ways to hold weights for inference, not to train
  // them.
  if (const Precision p = ParsePrecision(precision, fmt::format("{}: 'precision'", src));
      p == Precision::kQ8_0 || p == Precision::kNative)
    Fail("{}: 'precision': {} holds weights for inference only; train at f32 or bf16", src,
         PrecisionName(p));
  positive("dim", dim);
  positive("n_layers", n_layers);
  positive("n_heads", n_heads);
  positive("n_kv_heads", n_kv_heads);
  positive("vocab_size", vocab_size);
  positive("batch_size", batch_size);
  positive("seq_len", seq_len);
  // The evaluations measure the sink on position 0 against the later ones.
  if (seq_len < 2) Fail("{}: 'seq_len' must be at least 2, found {}", src, seq_len);
  positive("steps", steps);
  positive("eval_every", eval_every);
  positive("eval_batches", eval_batches);
  positive("checkpoint_every", checkpoint_every);
  if (dim % n_heads != 0)
    Fail("{}: n_heads {} does not divide dim {} (head size must be an integer)", src, n_heads, dim);
  if (n_heads % n_kv_heads != 0)
    Fail(
        "{}: n_kv_heads {} does not divide n_heads {} (grouped-query attention needs whole groups)",
        src, n_kv_heads, n_heads);
  if ((dim / n_heads) % 2 != 0)
    Fail("{}: head size dim/n_heads = {} must be even for RoPE", src, dim / n_heads);
  if (rope != "half" && rope != "interleaved")
    Fail("{}: 'rope' must be \"half\" or \"interleaved\", found \"{}\"", src, rope);
  if (hidden_dim < 0) Fail("{}: 'hidden_dim' must be >= 0, found {}", src, hidden_dim);
  FindAttnVariant(attention, src);  // a name model/attention.h lists
  if (sink_token && data == DataKind::kBigramBackcopy)
    Fail(
        "{}: sink_token=true: on Bigram-Backcopy the BOS token (--bos) already is a learned "
        "token at position 0 of every sample; use --bos / --no-bos",
        src);
  if (sink_token && bos)
    Fail(
        "{}: sink_token=true puts a learned token before windows at random offsets, bos=true "
        "puts BOS before document starts: choose one (--no-bos with sink_token=true)",
        src);
  if (n_experts < 0) Fail("{}: 'n_experts' must be >= 0, found {}", src, n_experts);
  if (n_experts > 0) {
    if (n_experts_per_tok < 1 || n_experts_per_tok > n_experts)
      Fail("{}: n_experts_per_tok (top-k) must be in [1, n_experts = {}], found {}", src, n_experts,
           n_experts_per_tok);
  } else if (n_experts_per_tok != 0) {
    Fail("{}: n_experts_per_tok = {} needs n_experts > 0", src, n_experts_per_tok);
  }
  if (vocab_size > 65535 && data == DataKind::kText)
    Fail("{}: vocab_size {} exceeds the uint16 token file (max 65535)", src, vocab_size);
  if (data == DataKind::kBigramBackcopy && (bb_triggers < 1 || bb_triggers >= vocab_size - 2))
    Fail("{}: bb_triggers must be in [1, vocab_size - 2), found {}", src, bb_triggers);
  if (data == DataKind::kText && corpus.empty())
    Fail("{}: data \"text\" needs 'corpus' (a text file)", src);
  if (!(lr > 0) || min_lr < 0 || min_lr > lr)
    Fail("{}: need 0 <= min_lr <= lr and lr > 0, found lr {} min_lr {}", src, lr, min_lr);
  if (warmup_steps < 0) Fail("{}: 'warmup_steps' must be >= 0", src);
  if (!(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1))
    Fail("{}: beta1 and beta2 must be in [0, 1), found {} and {}", src, beta1, beta2);
  if (weight_decay < 0 || grad_clip < 0) Fail("{}: weight_decay and grad_clip must be >= 0", src);
  if (val_fraction <= 0 || val_fraction >= 0.5)
    Fail("{}: val_fraction must be in (0, 0.5), found {}", src, val_fraction);
  if (threads < 0 || threads > kMaxThreads)
    Fail("{}: threads must be in [0, {}] (0: the default), found {}", src, kMaxThreads, threads);
  if (!(adam_eps > 0)) Fail("{}: 'adam_eps' must be positive, found {}", src, adam_eps);
  if (!(init_std > 0)) Fail("{}: 'init_std' must be positive, found {}", src, init_std);
  if (!(aux_loss_coef >= 0)) Fail("{}: 'aux_loss_coef' must be >= 0, found {}", src, aux_loss_coef);
  // The model this run builds, through the same check every model reader applies (norm_eps,
  // rope_theta, expert counts), with the training config's key names.
  ValidateConfig(
      ToModelConfig(), src,
      {{"hidden_dim", "hidden_dim"}, {"max_seq_len", "seq_len"}, {"head_dim", "dim / n_heads"}});
}

nlohmann::json ToJson(const TrainConfig& c) {
  nlohmann::json j;
  j["dim"] = c.dim;
  j["n_layers"] = c.n_layers;
  j["n_heads"] = c.n_heads;
  j["n_kv_heads"] = c.n_kv_heads;
  j["hidden_dim"] = c.hidden_dim;
  j["vocab_size"] = c.vocab_size;
  j["tied_embeddings"] = c.tied_embeddings;
  j["norm_eps"] = Clean(c.norm_eps);
  j["rope_theta"] = Clean(c.rope_theta);
  j["rope"] = c.rope;
  j["qk_norm"] = c.qk_norm;
  j["attention"] = c.attention;
  j["n_experts"] = c.n_experts;
  j["n_experts_per_tok"] = c.n_experts_per_tok;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["aux_loss_coef"] = Clean(c.aux_loss_coef);
  j["init_std"] = Clean(c.init_std);
  j["data"] = c.data == DataKind::kText ? "text" : "bigram-backcopy";
  j["bos"] = c.bos;
  j["sink_token"] = c.sink_token;
  j["bb_triggers"] = c.bb_triggers;
  j["bb_seed"] = c.bb_seed;
  j["corpus"] = c.corpus;
  j["tokenizer"] = c.tokenizer;
  j["val_fraction"] = c.val_fraction;
  j["batch_size"] = c.batch_size;
  j["seq_len"] = c.seq_len;
  j["steps"] = c.steps;
  j["lr"] = Clean(c.lr);
  j["min_lr"] = Clean(c.min_lr);
  j["warmup_steps"] = c.warmup_steps;
  j["beta1"] = Clean(c.beta1);
  j["beta2"] = Clean(c.beta2);
  j["adam_eps"] = Clean(c.adam_eps);
  j["weight_decay"] = Clean(c.weight_decay);
  j["grad_clip"] = Clean(c.grad_clip);
  j["seed"] = c.seed;
  j["eval_every"] = c.eval_every;
  j["eval_batches"] = c.eval_batches;
  j["checkpoint_every"] = c.checkpoint_every;
  j["threads"] = c.threads;
  j["precision"] = c.precision;
  j["out"] = c.out;
  return j;
}

namespace {
// Reads one key into its field. Integer fields take only integers within the field's range
// (nlohmann would truncate 2.5 to 2 and wrap -1 into a uint64 seed); number fields take any finite
// number; the others must have the field's JSON type.
template <typename T>
void Get(const nlohmann::json& j, const char* key, T& field, const std::string& src) {
  auto it = j.find(key);
  if (it == j.end()) return;
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    if (!it->is_number()) Fail("{}: '{}' has the wrong type ({})", src, key, it->type_name());
  }
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) Fail("{}: '{}' must be true or false, found {}", src, key, it->dump());
  } else if constexpr (std::is_integral_v<T>) {
    const bool fits =
        it->is_number_unsigned()
            ? it->template get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
        : it->is_number_integer()
            ? it->template get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                  (std::is_unsigned_v<T> || it->template get<int64_t>() <=
                                                static_cast<int64_t>(std::numeric_limits<T>::max()))
            : false;
    if (!it->is_number_integer())
      Fail("{}: '{}' must be an integer, found {}", src, key, it->dump());
    if (!fits)
      Fail("{}: '{}' must be an integer in [{}, {}], found {}", src, key,
           std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), it->dump());
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(static_cast<T>(it->template get<double>())))
      Fail("{}: '{}' must be a finite number, found {}", src, key, it->template get<double>());
  }
  try {
    field = it->template get<T>();
  } catch (const nlohmann::json::exception&) {
    Fail("{}: '{}' has the wrong type ({})", src, key, it->type_name());
  }
}
}  // namespace

void ApplyJson(TrainConfig& c, const nlohmann::json& j, const std::string& src) {
  if (!j.is_object()) Fail("{}: expected a JSON object, found {}", src, j.type_name());
  const nlohmann::json known = ToJson(TrainConfig{});
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known.contains(it.key()) && it.key() != "preset" && it.key() != "comment")
      Fail("{}: unknown key '{}'", src, it.key());
  if (j.contains("preset")) {
    if (!j["preset"].is_string()) Fail("{}: 'preset' must be a string", src);
    c = Preset(j["preset"].get<std::string>());
  }
  Get(j, "dim", c.dim, src);
  Get(j, "n_layers", c.n_layers, src);
  Get(j, "n_heads", c.n_heads, src);
  Get(j, "n_kv_heads", c.n_kv_heads, src);
  Get(j, "hidden_dim", c.hidden_dim, src);
  Get(j, "vocab_size", c.vocab_size, src);
  Get(j, "tied_embeddings", c.tied_embeddings, src);
  Get(j, "norm_eps", c.norm_eps, src);
  Get(j, "rope_theta", c.rope_theta, src);
  Get(j, "rope", c.rope, src);
  Get(j, "qk_norm", c.qk_norm, src);
  Get(j, "attention", c.attention, src);
  Get(j, "n_experts", c.n_experts, src);
  Get(j, "n_experts_per_tok", c.n_experts_per_tok, src);
  Get(j, "norm_topk_prob", c.norm_topk_prob, src);
  Get(j, "aux_loss_coef", c.aux_loss_coef, src);
  Get(j, "init_std", c.init_std, src);
  if (j.contains("data")) {
    std::string d;
    Get(j, "data", d, src);
    if (d == "text")
      c.data = DataKind::kText;
    else if (d == "bigram-backcopy")
      c.data = DataKind::kBigramBackcopy;
    else
      Fail("{}: 'data' must be \"bigram-backcopy\" or \"text\", found \"{}\"", src, d);
  }
  Get(j, "bos", c.bos, src);
  Get(j, "sink_token", c.sink_token, src);
  Get(j, "bb_triggers", c.bb_triggers, src);
  Get(j, "bb_seed", c.bb_seed, src);
  Get(j, "corpus", c.corpus, src);
  Get(j, "tokenizer", c.tokenizer, src);
  Get(j, "val_fraction", c.val_fraction, src);
  Get(j, "batch_size", c.batch_size, src);
  Get(j, "seq_len", c.seq_len, src);
  Get(j, "steps", c.steps, src);
  Get(j, "lr", c.lr, src);
  Get(j, "min_lr", c.min_lr, src);
  Get(j, "warmup_steps", c.warmup_steps, src);
  Get(j, "beta1", c.beta1, src);
  Get(j, "beta2", c.beta2, src);
  Get(j, "adam_eps", c.adam_eps, src);
  Get(j, "weight_decay", c.weight_decay, src);
  Get(j, "grad_clip", c.grad_clip, src);
  Get(j, "seed", c.seed, src);
  Get(j, "eval_every", c.eval_every, src);
  Get(j, "eval_batches", c.eval_batches, src);
  Get(j, "checkpoint_every", c.checkpoint_every, src);
  Get(j, "threads", c.threads, src);
  Get(j, "precision", c.precision, src);
  Get(j, "out", c.out, src);
}

TrainConfig ParseTrainConfig(std::string_view text, const std::string& source) {
  // Strict: a key given twice is an error (a plain parser keeps the last one without a word).
  // Every nlohmann::json exception becomes an ss::Error, out_of_range for a number no double holds
  // included (found by fuzz_train_config).
  const nlohmann::json j = ParseJsonStrict(text, source, "training config");
  TrainConfig c;
  ApplyJson(c, j, source);
  return c;
}

TrainConfig LoadTrainConfig(const std::string& path) {
  return ParseTrainConfig(ReadFile(path), path);
}

std::vector<std::string> PresetNames() {
  return {"quick", "bigram-backcopy", "bigram-backcopy-nobos", "text", "moe-quick"};
}

TrainConfig Preset(const std::string& name) {
  TrainConfig c;
  if (name == "quick") {
    // A CPU check of about half a minute on an idle 2-core machine: Bigram-Backcopy with BOS,
    // 2 layers x 64 wide, 400 steps, four checkpoints (CI runs it end to end).
    c.dim = 64;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.vocab_size = 64;
    c.batch_size = 16;
    c.seq_len = 64;
    c.steps = 400;
    c.warmup_steps = 20;
    c.lr = 3e-3f;
    c.min_lr = 3e-4f;
    c.eval_every = 50;
    c.eval_batches = 1;
    c.checkpoint_every = 100;
    c.out = "runs/quick";
  } else if (name == "bigram-backcopy" || name == "bigram-backcopy-nobos") {
    // Guo et al. 2024 (arXiv 2410.13835) train 1-3 layer models on Bigram-Backcopy with k = 3
    // triggers, AdamW (lr 3e-4, weight decay 1e-4, betas 0.9/0.99), batch 512, 10k steps; a
    // CPU-sized version: 3 layers, width 64, 4 heads, batch 32 x 64 tokens, a higher lr.
    c.dim = 64;
    c.n_layers = 3;
    c.n_heads = 4;
    c.n_kv_heads = 4;
    c.vocab_size = 64;
    c.bb_triggers = 3;
    c.batch_size = 32;
    c.seq_len = 64;
    c.steps = 2000;
    c.warmup_steps = 100;
    c.lr = 3e-3f;
    c.min_lr = 3e-4f;
    c.beta2 = 0.99f;
    c.weight_decay = 1e-4f;
    c.eval_every = 100;
    c.eval_batches = 2;
    c.checkpoint_every = 500;
    c.bos = name == "bigram-backcopy";
    c.out = c.bos ? "runs/bigram-backcopy" : "runs/bigram-backcopy-nobos";
  } else if (name == "text") {
    c.data = DataKind::kText;
    c.corpus = "../shared/data/corpora/tinyshakespeare.txt";
    c.dim = 128;
    c.n_layers = 4;
    c.n_heads = 4;
    c.n_kv_heads = 4;
    c.vocab_size = 2048;
    c.batch_size = 16;
    c.seq_len = 128;
    c.steps = 2000;
    c.warmup_steps = 100;
    c.lr = 2e-3f;
    c.min_lr = 2e-4f;
    c.eval_every = 200;
    c.eval_batches = 4;
    c.checkpoint_every = 500;
    c.bos = false;
    c.out = "runs/text";
  } else if (name == "moe-quick") {
    c.dim = 32;
    c.n_layers = 2;
    c.n_heads = 2;
    c.n_kv_heads = 1;
    c.vocab_size = 32;
    c.n_experts = 4;
    c.n_experts_per_tok = 2;
    c.qk_norm = true;
    c.hidden_dim = 48;
    c.tied_embeddings = false;
    c.batch_size = 8;
    c.seq_len = 32;
    c.steps = 60;
    c.warmup_steps = 6;
    c.eval_every = 20;
    c.eval_batches = 1;
    c.checkpoint_every = 20;
    c.out = "runs/moe-quick";
  } else {
    Fail("--preset: unknown preset '{}' (known: {})", name, fmt::join(PresetNames(), ", "));
  }
  return c;
}

std::vector<std::string> IncompatibleFields(const TrainConfig& a, const TrainConfig& b) {
  // Everything but the run's length, cadence, threads, precision and output may not change on
  // resume (bf16 products on an f32 run's master weights, or back, continue the same run).
  const nlohmann::json ja = ToJson(a), jb = ToJson(b);
  std::vector<std::string> diff;
  for (auto it = ja.begin(); it != ja.end(); ++it) {
    const std::string& k = it.key();
    if (k == "steps" || k == "eval_every" || k == "eval_batches" || k == "checkpoint_every" ||
        k == "threads" || k == "precision" || k == "out")
      continue;
    if (!jb.contains(k) || jb[k] != *it) diff.push_back(k);
  }
  return diff;
}

}  // namespace ss::train
