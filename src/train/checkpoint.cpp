#include "train/checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/file_util.h"
#include "io/hf_config.h"
#include "io/json_util.h"
#include "io/load.h"
#include "io/safetensors.h"
#include "model/attention.h"
#include "train/data.h"
#include "train/train_config.h"

namespace ss::train {

namespace fs = std::filesystem;

namespace {

int g_fail_nth_file = 0;  // InjectCheckpointWriteFailure
int g_files_written = 0;

void MaybeInjectedFailure(const std::string& path) {
  if (g_fail_nth_file <= 0) return;
  if (++g_files_written == g_fail_nth_file) {
    g_fail_nth_file = 0;
    g_files_written = 0;
    Fail("{}: write failed: No space left on device (injected by the test hook)", path);
  }
}

void WriteText(const std::string& path, const std::string& text) {
  MaybeInjectedFailure(path);
  WriteFileAtomic(path, text);
}

// Rows of a (heads * Dh, cols) matrix: interleaved pairs (2i, 2i+1) -> half pairs (i, i + Dh/2).
// forward = true permutes for export; false applies the inverse.
void PermuteRopeRows(const float* in, float* out, int heads, int64_t rows_total, int64_t cols,
                     bool forward) {
  const int64_t Dh = rows_total / heads, half = Dh / 2;
  for (int h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int which = 0; which < 2; ++which) {
        const int64_t interleaved = h * Dh + 2 * i + which;
        const int64_t halved = h * Dh + i + which * half;
        const int64_t src = forward ? interleaved : halved, dst = forward ? halved : interleaved;
        std::memcpy(out + dst * cols, in + src * cols, sizeof(float) * cols);
      }
}

// Columns of a tensor whose rows RoPE reads (1 for a vector: the kv-bias slot's key).
int64_t Cols(const ParamTensor& t) { return t.shape.size() > 1 ? t.shape[1] : 1; }

Tensor ViewParam(std::vector<float>& params, int64_t offset, std::vector<int64_t> shape) {
  return Tensor::View(params.data() + offset, std::move(shape), nullptr);
}

// The tensors of model.safetensors: HF names, rows permuted for interleaved RoPE.
std::vector<std::pair<std::string, Tensor>> HfTensors(const TrainConfig& c,
                                                      const ParamLayout& layout,
                                                      const std::vector<float>& params) {
  std::vector<std::pair<std::string, Tensor>> out;
  const bool permute = c.rope == "interleaved";
  for (const ParamTensor& t : layout.tensors) {
    Tensor copy = Tensor::Zeros(t.shape);
    const float* src = params.data() + t.offset;
    const bool norm_gain =
        t.name.find("q_norm") != std::string::npos || t.name.find("k_norm") != std::string::npos;
    if (permute && t.rope_rows)
      PermuteRopeRows(src, copy.data(), t.rope_heads, t.shape[0], Cols(t), true);
    else if (permute && norm_gain)
      PermuteRopeRows(src, copy.data(), 1, t.shape[0], 1, true);
    else
      std::memcpy(copy.data(), src, sizeof(float) * t.numel);
    out.emplace_back(t.name, copy);
  }
  return out;
}

}  // namespace

void InjectCheckpointWriteFailure(int nth_file) {
  g_fail_nth_file = nth_file;
  g_files_written = 0;
}

Model ExportModel(const TrainConfig& c, const ParamLayout& layout, std::vector<float>& params) {
  Model m;
  m.config = c.ToModelConfig();
  m.source = "trainer";
  m.format = "hf";
  const int64_t D = c.dim, V = c.vocab_size, Dh = c.dim / c.n_heads, F = c.EffectiveHiddenDim();
  const int64_t E = c.n_experts, qd = int64_t(c.n_heads) * Dh, kvd = int64_t(c.n_kv_heads) * Dh;
  m.weights.token_embedding = ViewParam(params, layout.embed, {V, D});
  m.weights.lm_head = ViewParam(params, layout.lm_head, {V, D});
  m.weights.final_norm = ViewParam(params, layout.final_norm, {D});
  for (const LayerOffsets& o : layout.layers) {
    LayerWeights w;
    w.attn_norm = ViewParam(params, o.attn_norm, {D});
    w.wq = ViewParam(params, o.wq, {qd, D});
    w.wk = ViewParam(params, o.wk, {kvd, D});
    w.wv = ViewParam(params, o.wv, {kvd, D});
    w.wo = ViewParam(params, o.wo, {D, qd});
    const AttnVariant& variant = FindAttnVariant(c.attention, "attention");
    for (size_t i = 0; i < variant.params.size(); ++i) {
      const AttnParam& a = variant.params[i];
      w.*a.field =
          ViewParam(params, o.attn[i],
                    AttnParamShape(a.shape, {1, 0, c.n_heads, c.n_kv_heads, int(Dh), int(D)}));
    }
    if (o.q_norm >= 0) w.q_norm = ViewParam(params, o.q_norm, {Dh});
    if (o.k_norm >= 0) w.k_norm = ViewParam(params, o.k_norm, {Dh});
    w.ffn_norm = ViewParam(params, o.ffn_norm, {D});
    if (E == 0) {
      w.w1 = ViewParam(params, o.w1, {F, D});
      w.w2 = ViewParam(params, o.w2, {D, F});
      w.w3 = ViewParam(params, o.w3, {F, D});
    } else {
      w.moe_router = ViewParam(params, o.router, {E, D});
      w.moe_w1 = ViewParam(params, o.ew1, {E, F, D});
      w.moe_w2 = ViewParam(params, o.ew2, {E, D, F});
      w.moe_w3 = ViewParam(params, o.ew3, {E, F, D});
    }
    m.weights.layers.push_back(w);
  }
  return m;
}

ModelConfig HfModelConfig(const TrainConfig& c) {
  ModelConfig m = c.ToModelConfig();
  // The file always holds rotate_half order (weights permuted when trained interleaved).
  m.rope = RopeKind::kHalf;
  if (c.qk_norm && c.n_experts == 0) m.arch = "qwen3";
  if (c.n_experts > 0) m.dense_hidden_dim = m.hidden_dim;
  if (m.eos_id >= 0) m.eos_ids = {m.eos_id};
  m.torch_dtype = "float32";
  return m;
}

std::string CheckpointConfigJson(const TrainConfig& c) {
  // io/hf_config.h writes the family's fields and verifies that the text reads back to the same
  // ModelConfig, so what we write is what every HF reader of sinkscope will see.
  return ss::HfConfigJson(HfModelConfig(c));
}

void WriteSafetensorsF32(const std::string& path,
                         const std::vector<std::pair<std::string, Tensor>>& tensors) {
  MaybeInjectedFailure(path);
  WriteSafetensors(path, tensors, SafetensorsDtype::kF32, {{"format", "pt"}});
}

std::string SaveCheckpoint(const std::string& run_dir, const TrainConfig& c,
                           const ParamLayout& layout, const TrainerState& s,
                           const std::string& tokenizer) {
  const std::string final_dir = fmt::format("{}/step-{}", run_dir, s.step);
  const std::string tmp = TemporaryPath(fmt::format("{}/.step-{}", run_dir, s.step));
  // Temporaries of a run that was killed while saving (its pid no longer runs) go first.
  RemoveStaleTemporaries(run_dir,
                         [](std::string_view stem) { return stem.rfind(".step-", 0) == 0; });
  std::error_code ec;
  fs::remove_all(tmp, ec);
  CreateDirectories(tmp, "checkpoint");
  try {
    WriteText(tmp + "/config.json", CheckpointConfigJson(c));
    WriteSafetensorsF32(tmp + "/model.safetensors", HfTensors(c, layout, s.params));
    if (!tokenizer.empty()) {
      MaybeInjectedFailure(tmp + "/tokenizer.model");
      WriteFileAtomic(tmp + "/tokenizer.model", ReadFile(tokenizer));
      // tokenizer.json too, so analyze / explain / stream find the tokenizer as in any HF model.
      WriteText(tmp + "/tokenizer.json", SentencePieceToTokenizerJson(tokenizer));
      nlohmann::ordered_json tc = {{"tokenizer_class", "LlamaTokenizer"},
                                   {"bos_token", "<s>"},
                                   {"eos_token", "</s>"},
                                   {"unk_token", "<unk>"},
                                   {"add_bos_token", c.bos},
                                   {"add_eos_token", false},
                                   {"model_max_length", c.seq_len}};
      WriteText(tmp + "/tokenizer_config.json", tc.dump(2) + "\n");
    }
    WriteText(tmp + "/train_config.json", ToJson(c).dump(2) + "\n");
    nlohmann::ordered_json st;
    st["format"] = "sinkscope-trainer-state-1";
    st["step"] = s.step;
    st["adam_t"] = s.adam_t;
    st["tokens_seen"] = s.tokens_seen;
    // 64-bit words as hex strings: JSON numbers are doubles in many readers.
    for (uint64_t w : s.rng) st["rng"].push_back(fmt::format("{:016x}", w));
    st["parameters"] = layout.total;
    WriteText(tmp + "/trainer_state.json", st.dump(2) + "\n");
    std::vector<float> m = s.adam_m, v = s.adam_v;
    WriteSafetensorsF32(tmp + "/optimizer.safetensors",
                        {{"adam.m", Tensor::View(m.data(), {int64_t(m.size())}, nullptr)},
                         {"adam.v", Tensor::View(v.data(), {int64_t(v.size())}, nullptr)}});
    // Replace an older checkpoint of the same step (a resumed run repeating it) only now: moved
    // aside first, so that some complete step-<N> exists at every moment.
    const std::string old = TemporaryPath(fmt::format("{}/.step-{}.old", run_dir, s.step));
    if (fs::exists(final_dir)) fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    fs::remove_all(old, ec);
  } catch (const std::exception& e) {
    fs::remove_all(tmp, ec);
    Fail("checkpoint {} not written ({}); earlier checkpoints in {} are untouched", final_dir,
         e.what(), run_dir);
  }
  return final_dir;
}

std::string FindCheckpoint(const std::string& dir) {
  if (FileExists(dir + "/trainer_state.json")) return dir;
  if (!IsDirectory(dir)) Fail("--resume: {} is not a directory", dir);
  int best = -1;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) Fail("--resume: {}: cannot list: {}", dir, ec.message());
  for (; it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    // step-N with N decimal digits as SaveCheckpoint writes it: "step-007" or "step-7x" are not
    // a checkpoint of step 7.
    const std::string digits = name.rfind("step-", 0) == 0 ? name.substr(5) : "";
    if (digits.empty() || digits.size() > 9 ||
        digits.find_first_not_of("0123456789") != std::string::npos ||
        (digits.size() > 1 && digits[0] == '0') ||
        !FileExists(it->path().string() + "/trainer_state.json"))
      continue;
    best = std::max(best, std::stoi(digits));
  }
  if (ec) Fail("--resume: {}: cannot list: {}", dir, ec.message());
  if (best < 0) Fail("--resume: {} holds no checkpoint (no step-<N>/trainer_state.json)", dir);
  return fmt::format("{}/step-{}", dir, best);
}

TrainConfig ReadCheckpointConfig(const std::string& step_dir) {
  // A checkpoint's config is input like any other: the shapes it gives size the evaluation.
  const std::string path = step_dir + "/train_config.json";
  TrainConfig c = LoadTrainConfig(path);
  c.Validate(path);
  return c;
}

TrainerState ParseTrainerState(std::string_view text, const std::string& path, int64_t n_params) {
  TrainerState s;
  try {
    const nlohmann::json st = nlohmann::json::parse(text);
    s.step = static_cast<int>(JsonInteger(st, "step", 0, std::numeric_limits<int>::max(), path));
    s.adam_t = JsonInteger(st, "adam_t", 0, std::numeric_limits<int64_t>::max(), path);
    s.tokens_seen = JsonInteger(st, "tokens_seen", 0, std::numeric_limits<int64_t>::max(), path);
    for (int i = 0; i < 4; ++i) {
      // 64-bit words as hex strings (JSON numbers are doubles to many readers).
      const std::string word = st.at("rng").at(i).get<std::string>();
      const bool hex = !word.empty() && word.size() <= 16 &&
                       word.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
      if (!hex)
        Fail("{}: rng[{}] = '{}' is not a 64-bit hexadecimal word", path, i, word.substr(0, 40));
      s.rng[i] = std::stoull(word, nullptr, 16);
    }
    const int64_t params =
        JsonInteger(st, "parameters", 0, std::numeric_limits<int64_t>::max(), path);
    if (params != n_params) Fail("{}: {} parameters, the config needs {}", path, params, n_params);
  } catch (const nlohmann::json::exception& e) {
    Fail("{}: malformed trainer state: {}", path, e.what());
  }
  return s;
}

TrainerState ReadCheckpointState(const std::string& dir, const TrainConfig& c,
                                 const ParamLayout& layout) {
  const std::string path = dir + "/trainer_state.json";
  TrainerState s = ParseTrainerState(ReadFile(path), path, layout.total);
  // A checkpoint renamed or edited by hand: resuming would continue from one step and write over
  // the checkpoint of another.
  fs::path step_dir = fs::path(dir).lexically_normal();
  if (!step_dir.has_filename()) step_dir = step_dir.parent_path();  // "run/step-5/"
  const std::string name = step_dir.filename().string();
  if (name.rfind("step-", 0) == 0 && name.size() > 5 &&
      name.find_first_not_of("0123456789", 5) == std::string::npos && name.size() < 15 &&
      std::stoll(name.substr(5)) != s.step)
    Fail(
        "{}: step {} disagrees with its directory name {}; refusing to use a checkpoint whose "
        "state "
        "and name differ",
        path, s.step, name);
  s.params.assign(layout.total, 0.0f);
  const bool permute = c.rope == "interleaved";
  const std::string model_path = dir + "/model.safetensors";
  const SafetensorsFile file = SafetensorsFile::Open(model_path);
  std::vector<bool> seen(layout.tensors.size(), false);
  for (const std::string& name : file.names()) {
    const Tensor t = file.Load(name);
    const ParamTensor* pt = layout.Find(name);
    if (!pt) Fail("{}: unexpected tensor '{}' for this config", model_path, name);
    if (t.shape() != pt->shape)
      Fail("{}: tensor '{}' has shape {}, the config needs {}", model_path, name, t.ShapeString(),
           ShapeString(pt->shape));
    float* dst = s.params.data() + pt->offset;
    const bool norm_gain =
        name.find("q_norm") != std::string::npos || name.find("k_norm") != std::string::npos;
    if (permute && pt->rope_rows)
      PermuteRopeRows(t.data(), dst, pt->rope_heads, pt->shape[0], Cols(*pt), false);
    else if (permute && norm_gain)
      PermuteRopeRows(t.data(), dst, 1, pt->shape[0], 1, false);
    else
      std::memcpy(dst, t.data(), sizeof(float) * pt->numel);
    seen[pt - layout.tensors.data()] = true;
  }
  for (size_t i = 0; i < seen.size(); ++i)
    if (!seen[i]) Fail("{}: tensor '{}' is missing", model_path, layout.tensors[i].name);
  const SafetensorsFile opt = SafetensorsFile::Open(dir + "/optimizer.safetensors");
  for (const std::string& name : opt.names()) {
    const Tensor t = opt.Load(name);
    if (t.numel() != layout.total)
      Fail("{}/optimizer.safetensors: '{}' has {} values, need {}", dir, name, t.numel(),
           layout.total);
    auto& dst = name == "adam.m" ? s.adam_m : s.adam_v;
    dst.assign(t.data(), t.data() + t.numel());
  }
  if (s.adam_m.empty() || s.adam_v.empty())
    Fail("{}/optimizer.safetensors: adam.m or adam.v missing", dir);
  return s;
}

Model LoadCheckpointModel(const std::string& step_dir) {
  // The Hugging Face directory through the same loader every verb uses (config.json, then the
  // family's tensor map); nothing from train_config.json.
  Model m = LoadModel(step_dir);
  if (m.config.arch != "llama" && m.config.arch != "qwen3" && m.config.arch != "qwen3_moe")
    Fail("{}: architecture {} is not one the trainer writes", step_dir, m.config.arch);
  return m;
}

}  // namespace ss::train
