#include "train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/file_util.h"
#include "train/train_config.h"

namespace ss::train {

namespace {
// A float as the double its shortest decimal form names (1e-05, not 9.9999997e-06) for JSON.
double Clean(float f) { return std::stod(fmt::format("{}", f)); }
}  // namespace

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

Tensor ViewParam(std::vector<float>& params, int64_t offset, std::vector<int64_t> shape) {
  return Tensor::View(params.data() + offset, std::move(shape), nullptr);
}

// The tensors of model.safetensors: HF names, rows permuted for interleaved RoPE.
std::vector<std::pair<std::string, Tensor>> HfTensors(const TrainConfig& c, const ParamLayout& layout,
                                                      const std::vector<float>& params) {
  std::vector<std::pair<std::string, Tensor>> out;
  const bool permute = c.rope == "interleaved";
  for (const ParamTensor& t : layout.tensors) {
    Tensor copy = Tensor::Zeros(t.shape);
    const float* src = params.data() + t.offset;
    const bool norm_gain = t.name.find("q_norm") != std::string::npos || t.name.find("k_norm") != std::string::npos;
    if (permute && t.rope_rows) PermuteRopeRows(src, copy.data(), t.rope_heads, t.shape[0], t.shape[1], true);
    else if (permute && norm_gain) PermuteRopeRows(src, copy.data(), 1, t.shape[0], 1, true);
    else std::memcpy(copy.data(), src, sizeof(float) * t.numel);
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

std::string HfConfigJson(const TrainConfig& c) {
  nlohmann::ordered_json j;
  const bool moe = c.n_experts > 0;
  const bool text = c.data == DataKind::kText;
  j["architectures"] = {moe ? "Qwen3MoeForCausalLM" : c.qk_norm ? "Qwen3ForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = moe ? "qwen3_moe" : c.qk_norm ? "qwen3" : "llama";
  j["hidden_size"] = c.dim;
  j["intermediate_size"] = c.EffectiveHiddenDim();
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.dim / c.n_heads;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.seq_len;
  j["rms_norm_eps"] = Clean(c.norm_eps);
  j["rope_theta"] = Clean(c.rope_theta);
  j["rope_scaling"] = nullptr;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  if (!moe && !c.qk_norm) j["mlp_bias"] = false;
  j["tie_word_embeddings"] = c.tied_embeddings;
  j["bos_token_id"] = text ? 1 : 0;
  if (text) j["eos_token_id"] = 2;
  else j["eos_token_id"] = nullptr;
  j["initializer_range"] = Clean(c.init_std);
  j["torch_dtype"] = "float32";
  j["use_cache"] = true;
  if (moe) {
    j["moe_intermediate_size"] = c.EffectiveHiddenDim();
    j["num_experts"] = c.n_experts;
    j["num_experts_per_tok"] = c.n_experts_per_tok;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = nlohmann::json::array();
    j["router_aux_loss_coef"] = Clean(c.aux_loss_coef);
    j["output_router_logits"] = false;
  }
  if (moe || c.qk_norm) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
  }
  j["sinkscope"] = {{"trained_rope", c.rope},
                    {"note", "trained by sinkscope train; weights stored in rotate_half RoPE order"}};
  return j.dump(2) + "\n";
}

void WriteSafetensorsF32(const std::string& path,
                         const std::vector<std::pair<std::string, Tensor>>& tensors) {
  MaybeInjectedFailure(path);
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t bytes = uint64_t(t.numel()) * sizeof(float);
    header[name] = {{"dtype", "F32"}, {"shape", t.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  WriteFileAtomic(path, [&](std::FILE* f) {
    const uint64_t n = h.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    if (std::fwrite(len, 1, 8, f) != 8 || std::fwrite(h.data(), 1, n, f) != n)
      Fail("{}: write failed", path);
    for (const auto& [name, t] : tensors) {
      const size_t count = static_cast<size_t>(t.numel());
      if (std::fwrite(t.data(), sizeof(float), count, f) != count) Fail("{}: write failed", path);
    }
  });
}

std::vector<std::pair<std::string, Tensor>> ReadSafetensorsF32(const std::string& path) {
  auto map = MapFile(path);
  if (map->size < 8) Fail("{}: not a safetensors file ({} bytes)", path, map->size);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(map->data[i]) << (8 * i);
  if (n > map->size - 8) Fail("{}: header length {} beyond the file size {}", path, n, map->size);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(map->data) + 8, n));
  } catch (const nlohmann::json::exception& e) {
    Fail("{}: malformed safetensors header: {}", path, e.what());
  }
  std::vector<std::tuple<uint64_t, std::string, Tensor>> items;
  const uint64_t data_start = 8 + n;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto& info = it.value();
    if (info.value("dtype", "") != "F32") Fail("{}: tensor '{}' is not F32", path, it.key());
    std::vector<int64_t> shape = info.at("shape").get<std::vector<int64_t>>();
    const auto offs = info.at("data_offsets").get<std::vector<uint64_t>>();
    Tensor t = Tensor::Zeros(shape);
    if (offs.size() != 2 || offs[1] - offs[0] != uint64_t(t.numel()) * 4 || data_start + offs[1] > map->size)
      Fail("{}: tensor '{}' has a bad byte range", path, it.key());
    std::memcpy(t.data(), map->data + data_start + offs[0], offs[1] - offs[0]);
    items.emplace_back(offs[0], it.key(), t);
  }
  std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [off, name, t] : items) out.emplace_back(name, t);
  return out;
}

std::string SaveCheckpoint(const std::string& run_dir, const TrainConfig& c, const ParamLayout& layout,
                           const TrainerState& s, const std::string& tokenizer) {
  const std::string final_dir = fmt::format("{}/step-{}", run_dir, s.step);
  const std::string tmp = fmt::format("{}/.step-{}.tmp.{}", run_dir, s.step, getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  try {
    WriteText(tmp + "/config.json", HfConfigJson(c));
    WriteSafetensorsF32(tmp + "/model.safetensors", HfTensors(c, layout, s.params));
    if (!tokenizer.empty()) {
      MaybeInjectedFailure(tmp + "/tokenizer.model");
      WriteFileAtomic(tmp + "/tokenizer.model", ReadFile(tokenizer));
      nlohmann::ordered_json tc = {{"tokenizer_class", "LlamaTokenizer"},
                                   {"bos_token", "<s>"}, {"eos_token", "</s>"}, {"unk_token", "<unk>"},
                                   {"add_bos_token", c.bos}, {"add_eos_token", false},
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
    // Replace an older checkpoint of the same step (a resumed run repeating it) only now.
    if (fs::exists(final_dir)) fs::remove_all(final_dir);
    fs::rename(tmp, final_dir);
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
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !FileExists(e.path().string() + "/trainer_state.json")) continue;
    try {
      best = std::max(best, std::stoi(name.substr(5)));
    } catch (...) {
    }
  }
  if (best < 0) Fail("--resume: {} holds no checkpoint (no step-<N>/trainer_state.json)", dir);
  return fmt::format("{}/step-{}", dir, best);
}

TrainConfig ReadCheckpointConfig(const std::string& step_dir) {
  return LoadTrainConfig(step_dir + "/train_config.json");
}

TrainerState ReadCheckpointState(const std::string& dir, const TrainConfig& c, const ParamLayout& layout) {
  TrainerState s;
  const std::string path = dir + "/trainer_state.json";
  nlohmann::json st;
  try {
    st = nlohmann::json::parse(ReadFile(path));
    s.step = st.at("step").get<int>();
    s.adam_t = st.at("adam_t").get<int64_t>();
    s.tokens_seen = st.at("tokens_seen").get<int64_t>();
    for (int i = 0; i < 4; ++i) s.rng[i] = std::stoull(st.at("rng").at(i).get<std::string>(), nullptr, 16);
    if (st.at("parameters").get<int64_t>() != layout.total)
      Fail("{}: {} parameters, the config needs {}", path, st.at("parameters").get<int64_t>(), layout.total);
  } catch (const nlohmann::json::exception& e) {
    Fail("{}: malformed trainer state: {}", path, e.what());
  }
  s.params.assign(layout.total, 0.0f);
  const bool permute = c.rope == "interleaved";
  const std::string model_path = dir + "/model.safetensors";
  auto tensors = ReadSafetensorsF32(model_path);
  std::vector<bool> seen(layout.tensors.size(), false);
  for (const auto& [name, t] : tensors) {
    const ParamTensor* pt = layout.Find(name);
    if (!pt) Fail("{}: unexpected tensor '{}' for this config", model_path, name);
    if (t.shape() != pt->shape)
      Fail("{}: tensor '{}' has shape {}, the config needs {}", model_path, name, t.ShapeString(),
           ShapeString(pt->shape));
    float* dst = s.params.data() + pt->offset;
    const bool norm_gain = name.find("q_norm") != std::string::npos || name.find("k_norm") != std::string::npos;
    if (permute && pt->rope_rows) PermuteRopeRows(t.data(), dst, pt->rope_heads, pt->shape[0], pt->shape[1], false);
    else if (permute && norm_gain) PermuteRopeRows(t.data(), dst, 1, pt->shape[0], 1, false);
    else std::memcpy(dst, t.data(), sizeof(float) * pt->numel);
    seen[pt - layout.tensors.data()] = true;
  }
  for (size_t i = 0; i < seen.size(); ++i)
    if (!seen[i]) Fail("{}: tensor '{}' is missing", model_path, layout.tensors[i].name);
  auto opt = ReadSafetensorsF32(dir + "/optimizer.safetensors");
  for (const auto& [name, t] : opt) {
    if (t.numel() != layout.total) Fail("{}/optimizer.safetensors: '{}' has {} values, need {}", dir, name, t.numel(), layout.total);
    auto& dst = name == "adam.m" ? s.adam_m : s.adam_v;
    dst.assign(t.data(), t.data() + t.numel());
  }
  if (s.adam_m.empty() || s.adam_v.empty()) Fail("{}/optimizer.safetensors: adam.m or adam.v missing", dir);
  return s;
}

Model LoadCheckpointModel(const std::string& step_dir) {
  const TrainConfig c = ReadCheckpointConfig(step_dir);
  const ParamLayout layout = ParamLayout::Build(c);
  auto state = std::make_shared<TrainerState>(ReadCheckpointState(step_dir, c, layout));
  Model m = ExportModel(c, layout, state->params);
  // Re-point the views at storage the model owns.
  auto own = [&](Tensor& t) {
    if (!t.empty()) t = Tensor::View(t.data(), t.shape(), state);
  };
  own(m.weights.token_embedding);
  own(m.weights.lm_head);
  own(m.weights.final_norm);
  for (auto& w : m.weights.layers)
    for (Tensor* t : {&w.attn_norm, &w.wq, &w.wk, &w.wv, &w.wo, &w.q_norm, &w.k_norm, &w.ffn_norm,
                      &w.w1, &w.w2, &w.w3, &w.moe_router, &w.moe_w1, &w.moe_w2, &w.moe_w3})
      own(*t);
  m.source = step_dir;
  return m;
}

}  // namespace ss::train
