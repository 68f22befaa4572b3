// MXFP4, the experts' format of the published gpt-oss checkpoints (kernels/dequant.h; its
// decoders and quantiser are tested against the MX v1.0 spec in test_dequant.cpp):
//  - gpt-oss end to end on tiny random models in the published layout (U8 *_blocks / *_scales
//    beside BF16 attention, config.json's quantization_config) and through GGUF's MXFP4 experts:
//    --precision native and f32 against the naive reference on the decoded weights, the experts
//    kept in the file's bytes at native, and only the chosen experts' bytes read;
//  - bad input: shapes that disagree, rows that are not whole blocks, the wrong type, a NaN or
//    overflowing scale, truncated files, MXFP4 where the family expects another type, and the
//    quantization_config values sinkscope cannot honour, each a clear error naming the tensor or
//    key (and a non-zero exit from the CLI).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "common/error.h"
#include "common/file_util.h"
#include "gguf_writer.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/hf_config.h"
#include "io/load.h"
#include "io/model_files.h"
#include "kernels/dequant.h"
#include "model/model.h"
#include "model/precision.h"
#include "mxfp4_spec.h"
#include "naive_hf.h"
#include "tensor/half.h"
#include "test_util.h"

namespace ss {
namespace {

namespace fs = std::filesystem;
using test::SpecE8M0;
using test::SpecGgmlElement;
using test::SpecSplitElement;

// ---- gpt-oss in the published layout.

// A safetensors file with tensors of any dtype from raw bytes (the project's writer writes floats
// only), in the format's layout: the JSON header, spaces to a multiple of 8, the data.
struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
void WriteRawSafetensors(const std::string& path, const std::vector<RawTensor>& tensors) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  size_t offset = 0;
  for (const RawTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';
  std::string file(8, '\0');
  const uint64_t n = text.size();
  std::memcpy(file.data(), &n, 8);
  file += text;
  for (const RawTensor& t : tensors) file += t.bytes;
  WriteFileAtomic(path, file);
}

RawTensor Bf16Tensor(const std::string& name, const Tensor& t) {
  RawTensor r{name, "BF16", t.shape(), std::string(2 * t.numel(), '\0')};
  for (int64_t i = 0; i < t.numel(); ++i) {
    const uint16_t b = F32ToBF16(t[i]);
    std::memcpy(&r.bytes[2 * i], &b, 2);
  }
  return r;
}

// The published config's quantization_config.
const char* kQuantizationConfig = R"({"modules_to_not_convert": ["model.layers.*.self_attn",
    "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"})";

// A tiny gpt-oss: width 64, experts of 32 (whole 32-value blocks both ways), 4 experts top-2, two
// layers (sliding 4, then full), learned sinks, tied head off.
std::string TinyConfig(int hidden = 64, int ffn = 32,
                       const std::string& quantization = kQuantizationConfig) {
  return fmt::format(
      R"({{"architectures": ["GptOssForCausalLM"], "hidden_size": {}, "intermediate_size": {},
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
      "vocab_size": 61, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "num_local_experts": 4,
      "num_experts_per_tok": 2, "sliding_window": 4, "swiglu_limit": 2.0, "tie_word_embeddings": false{}}})",
      hidden, ffn, quantization.empty() ? "" : ", \"quantization_config\": " + quantization);
}

// An MXFP4 checkpoint of `config_json`: random weights, the experts as random MXFP4 blocks and
// scales (E8M0 2^-5 .. 2^-2: magnitudes like the other random weights'), every float tensor BF16.
// `weights` gets what the reference reads: the BF16 values, and the experts decoded (by the spec
// decoder above) into transformers' dequantised (in, out) layout. `edit` may change the raw
// tensors before writing.
struct Checkpoint {
  std::string dir;
  ModelConfig config;
  test::HfTensors weights;
  std::map<std::string, RawTensor> raw;
};
Checkpoint WriteMxfp4Checkpoint(
    const std::string& config_json, const std::string& tag, uint32_t seed = 7,
    const std::function<void(std::map<std::string, RawTensor>&)>& edit = nullptr) {
  Checkpoint ck;
  ck.config = ParseHfConfig(config_json, tag);
  ck.weights = test::RandomHfWeights(ck.config, seed);
  const ModelConfig& c = ck.config;
  const int E = c.n_experts, F = c.hidden_dim, D = c.dim;
  std::mt19937 rng(seed + 100);
  std::uniform_int_distribution<int> byte(0, 255), scale(122, 125);
  for (auto& [name, t] : ck.weights) {  // round every float to BF16, as stored
    for (int64_t i = 0; i < t.numel(); ++i) t[i] = BF16ToF32(F32ToBF16(t[i]));
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string base = fmt::format("model.layers.{}.mlp.experts.", l);
    // (rows, in) of each stored tensor: gate_up (E, 2F, D), down (E, D, F), in (out, in) order.
    for (auto [proj, rows, in] :
         {std::tuple{"gate_up_proj", 2 * F, D}, std::tuple{"down_proj", D, F}}) {
      RawTensor blocks{base + proj + "_blocks",
                       "U8",
                       {E, rows, in / 32, 16},
                       std::string(static_cast<size_t>(E) * rows * in / 2, '\0')};
      RawTensor scales{base + proj + "_scales",
                       "U8",
                       {E, rows, in / 32},
                       std::string(static_cast<size_t>(E) * rows * in / 32, '\0')};
      for (char& b : blocks.bytes) b = static_cast<char>(byte(rng));
      for (char& s : scales.bytes) s = static_cast<char>(scale(rng));
      // Decoded, then transposed to transformers' (E, in, out) (convert_moe_packed_tensors).
      Tensor decoded = Tensor::Zeros({E, in, rows});
      const auto* nib = reinterpret_cast<const uint8_t*>(blocks.bytes.data());
      const auto* sc = reinterpret_cast<const uint8_t*>(scales.bytes.data());
      for (int e = 0; e < E; ++e)
        for (int r = 0; r < rows; ++r) {
          const size_t row = static_cast<size_t>(e) * rows + r;
          for (int i = 0; i < in; ++i)
            decoded[(static_cast<int64_t>(e) * in + i) * rows + r] =
                static_cast<float>(SpecSplitElement(nib + row * in / 2, sc + row * in / 32, i));
        }
      ck.weights[base + proj] = decoded;
      ck.raw[blocks.name] = blocks;
      ck.raw[scales.name] = scales;
    }
  }
  for (const auto& [name, t] : ck.weights)
    if (!name.ends_with("gate_up_proj") && !name.ends_with("down_proj"))
      ck.raw[name] = Bf16Tensor(name, t);
  if (edit) {
    edit(ck.raw);
    // What the reference reads follows the edit: every BF16 tensor decoded from its bytes.
    for (const auto& [name, t] : ck.raw) {
      auto it = ck.weights.find(name);
      if (t.dtype != "BF16" || it == ck.weights.end() ||
          static_cast<int64_t>(t.bytes.size()) != 2 * it->second.numel())
        continue;
      for (int64_t i = 0; i < it->second.numel(); ++i) {
        uint16_t b;
        std::memcpy(&b, &t.bytes[2 * i], 2);
        it->second[i] = BF16ToF32(b);
      }
    }
  }
  ck.dir = test::TempDir("mxfp4_" + tag) + "/model";
  fs::create_directories(ck.dir);
  std::vector<RawTensor> list;
  for (const auto& [name, t] : ck.raw) list.push_back(t);
  WriteRawSafetensors(ck.dir + "/model.safetensors", list);
  // config.json: the writer's, with the checkpoint's quantization_config put back (HfConfigJson
  // drops it: sinkscope writes experts decoded).
  ModelConfig plain = c;
  plain.mxfp4_experts = false;
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(HfConfigJson(plain));
  const nlohmann::json given = nlohmann::json::parse(config_json);
  if (given.contains("quantization_config"))
    j["quantization_config"] = given["quantization_config"];
  WriteFileAtomic(ck.dir + "/config.json", j.dump(2));
  return ck;
}

const std::vector<int> kTokens = {1, 17, 5, 60, 33, 2, 9, 41, 41, 0, 58, 12};

std::vector<float> RunAll(const Model& model, const std::vector<int>& tokens = kTokens) {
  KVCache cache = KVCache::Create(model.config, static_cast<int>(tokens.size()));
  RunState state;
  ForwardRequest req;
  req.tokens = tokens;
  Tensor logits = Forward(model, cache, state, req);
  return std::vector<float>(logits.data(), logits.data() + logits.numel());
}

// Prefill of the first half, then one token at a time.
std::vector<float> RunIncremental(const Model& model) {
  KVCache cache = KVCache::Create(model.config, static_cast<int>(kTokens.size()));
  RunState state;
  std::vector<float> out;
  for (size_t start = 0; start < kTokens.size();) {
    const size_t n = start == 0 ? kTokens.size() / 2 : 1;
    ForwardRequest req;
    req.tokens = std::span<const int>(kTokens).subspan(start, n);
    Tensor logits = Forward(model, cache, state, req);
    out.insert(out.end(), logits.data(), logits.data() + logits.numel());
    start += n;
  }
  return out;
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_HAS(text, needle) \
  EXPECT_NE(std::string(text).find(needle), std::string::npos) << (text)

TEST(Mxfp4GptOss, PublishedLayoutMatchesTheNaiveReferenceAtNativeAndF32) {
  const Checkpoint ck = WriteMxfp4Checkpoint(TinyConfig(), "published");
  EXPECT_TRUE(ck.config.mxfp4_experts);
  const std::vector<float> reference = test::NaiveHfForward(ck.config, ck.weights, kTokens);
  for (Precision p : {Precision::kNative, Precision::kF32, Precision::kBf16}) {
    const Model model = LoadModel(ck.dir, p);
    const std::string label = std::string("MXFP4 safetensors at ") + PrecisionName(p);
    // bf16 rounds the attention's operands: its own, looser bound (as the other families').
    const double bound = p == Precision::kBf16 ? 2e-2 : 1e-5;
    EXPECT_LT(test::MaxRelDiff(RunAll(model), reference, label + " vs naive (decoded experts)"),
              bound);
    EXPECT_LT(
        test::MaxRelDiff(RunIncremental(model), reference, label + ", cached decode, vs naive"),
        bound);
    const LayerWeights& l0 = model.weights.layers[0];
    if (p == Precision::kNative) {
      // Kept in the file's bytes: gate the even rows of gate_up_proj_blocks, up the odd ones.
      ASSERT_TRUE(l0.packed);
      const GgmlMatrix &gate = l0.packed->moe_w1.ggml, &up = l0.packed->moe_w3.ggml,
                       &down = l0.packed->moe_w2.ggml;
      EXPECT_TRUE(l0.moe_w1.empty() && l0.moe_w2.empty() && l0.moe_w3.empty());
      EXPECT_EQ(gate.type, kTypeMxfp4Split);
      EXPECT_EQ(gate.out, 4 * 32);
      EXPECT_EQ(gate.in, 64);
      EXPECT_EQ(gate.row_stride, 2 * gate.row_bytes);
      EXPECT_EQ(up.data, gate.data + gate.row_bytes);
      EXPECT_EQ(down.type, kTypeMxfp4Split);
      EXPECT_EQ(down.out, 4 * 64);
      EXPECT_EQ(down.row_stride, down.row_bytes);
    } else {
      EXPECT_FALSE(l0.moe_w1.empty());
    }
  }
  EXPECT_EQ(LoadModel(ck.dir, Precision::kNative).ParameterCount(),
            LoadModel(ck.dir).ParameterCount());
  // Through GGUF with the experts in MXFP4 and everything else F32: the same logits.
  GgufWriter writer;
  AddGgufModel(LoadModel(ck.dir), writer, kGgmlTypeF32, kGgmlTypeMXFP4);
  const std::string gguf = test::TempDir("mxfp4_published") + "/experts_mxfp4.gguf";
  writer.Write(gguf);
  for (Precision p : {Precision::kNative, Precision::kF32}) {
    const Model model = LoadModel(gguf, p);
    const std::string label = std::string("GGUF, MXFP4 experts, at ") + PrecisionName(p);
    EXPECT_LT(test::MaxRelDiff(RunAll(model), reference, label + " vs naive"), 1e-5);
    EXPECT_LT(
        test::MaxRelDiff(RunIncremental(model), reference, label + ", cached decode, vs naive"),
        1e-5);
    if (p == Precision::kNative) {
      EXPECT_EQ(model.weights.layers[0].packed->moe_w2.ggml.type, kGgmlTypeMXFP4);
    }
  }
}

// Native MoE reads only the chosen experts' bytes: expert 2 of every layer is never chosen
// (router bias -1e4, its router row zero) and the pages inside its blocks are made unreadable;
// the forward runs as before (a read of those pages would end the test with SIGSEGV).
TEST(Mxfp4GptOss, NativeMoeReadsOnlyTheChosenExpertsBytes) {
  auto silence_expert_2 = [](std::map<std::string, RawTensor>& raw) {
    for (int l = 0; l < 2; ++l) {
      RawTensor& bias = raw[fmt::format("model.layers.{}.mlp.router.bias", l)];
      const uint16_t minus = F32ToBF16(-1e4f);
      std::memcpy(&bias.bytes[2 * 2], &minus, 2);
      RawTensor& w = raw[fmt::format("model.layers.{}.mlp.router.weight", l)];
      const size_t row = w.bytes.size() / 4;
      std::fill(w.bytes.begin() + 2 * row, w.bytes.begin() + 3 * row, '\0');
    }
  };
  // Width 256, experts of 256: each expert's gate_up blocks span 64 KiB, its down blocks 32 KiB.
  const Checkpoint ck =
      WriteMxfp4Checkpoint(TinyConfig(256, 256), "untouched", 9, silence_expert_2);
  const Model model = LoadModel(ck.dir, Precision::kNative);
  const std::vector<float> before = RunAll(model);
  const long page = sysconf(_SC_PAGESIZE);
  std::vector<std::pair<uint8_t*, size_t>> locked;
  for (const LayerWeights& l : model.weights.layers)
    for (const GgmlMatrix* m : {&l.packed->moe_w1.ggml, &l.packed->moe_w2.ggml}) {
      const int rows =
          m->out / 4;  // expert 2's rows (gate: every other stored row, and up's between)
      const uint8_t* first = m->row(2 * rows);
      const uint8_t* last = m->row(3 * rows - 1) + m->row_bytes;
      if (m == &l.packed->moe_w1.ggml) last += m->row_bytes;  // up's last row follows gate's
      auto* begin =
          reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(first) + page - 1) / page * page);
      auto* end = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(last) / page * page);
      ASSERT_LT(begin, end);
      ASSERT_EQ(mprotect(begin, end - begin, PROT_NONE), 0);
      locked.emplace_back(begin, end - begin);
    }
  std::printf("made %zu ranges of expert 2's blocks unreadable\n", locked.size());
  const std::vector<float> after = RunAll(model);
  const std::vector<float> decoded = RunIncremental(model);
  for (auto [p, n] : locked) ASSERT_EQ(mprotect(p, n, PROT_READ), 0);
  EXPECT_EQ(test::MaxDiff(after, before, "native MoE with an unchosen expert's pages unreadable"),
            0.0);
  EXPECT_LT(test::MaxRelDiff(decoded, RunAll(LoadModel(ck.dir)),
                             "width 256, native cached decode with an unreadable expert, vs f32"),
            1e-5);
  // Width 256 with random weights of std 0.2 gives logits of about 10 and sums of 256 terms: the
  // f32 forward itself is 1e-5 from the double reference here, so the bound is wider.
  const std::vector<float> reference = test::NaiveHfForward(ck.config, ck.weights, kTokens);
  EXPECT_LT(test::MaxRelDiff(RunAll(LoadModel(ck.dir)), reference, "width 256, f32 vs naive"),
            5e-5);
  EXPECT_LT(test::MaxRelDiff(decoded, reference, "width 256, native cached decode vs naive"), 5e-5);
}

// GGUF: convert's MXFP4 (AddGgufModel at MXFP4: experts MXFP4, the rest Q8_0) repacks the
// experts losslessly (the test's spec decoder reads the GGUF blocks and gets the safetensors'
// values, gate the even rows of gate_up, up the odd ones); the file at native equals its own f32
// forward and keeps the experts in their ggml blocks.
TEST(Mxfp4GptOss, GgufMxfp4ExpertsRoundTripAndRunNative) {
  const Checkpoint ck = WriteMxfp4Checkpoint(TinyConfig(), "gguf");
  const Model source = LoadModel(ck.dir);
  GgufWriter writer;
  AddGgufModel(source, writer, kGgmlTypeMXFP4);
  const std::string path = test::TempDir("mxfp4_gguf") + "/model.gguf";
  writer.Write(path);
  const GgufFile gguf = GgufFile::Open(path);
  const int E = 4, F = 32, D = 64;
  int mxfp4 = 0;
  for (int l = 0; l < 2; ++l) {
    const Tensor& gate_up =
        ck.weights.at(fmt::format("model.layers.{}.mlp.experts.gate_up_proj", l));  // (E, D, 2F)
    const Tensor& down =
        ck.weights.at(fmt::format("model.layers.{}.mlp.experts.down_proj", l));  // (E, F, D)
    for (auto [name, rows, in] :
         {std::tuple{"ffn_gate_exps", F, D}, std::tuple{"ffn_up_exps", F, D},
          std::tuple{"ffn_down_exps", D, F}}) {
      const GgufTensorInfo* t = gguf.FindTensor(fmt::format("blk.{}.{}.weight", l, name));
      ASSERT_NE(t, nullptr) << name;
      ASSERT_EQ(t->type, kGgmlTypeMXFP4) << name;
      ++mxfp4;
      const std::string which = name;
      for (int e = 0; e < E; ++e)
        for (int r = 0; r < rows; ++r)
          for (int i = 0; i < in; ++i) {
            const size_t row = static_cast<size_t>(e) * rows + r;
            const double got = SpecGgmlElement(t->data + (row * in / 32 + i / 32) * 17, i % 32);
            const double want = which == "ffn_down_exps"
                                    ? down[(static_cast<int64_t>(e) * F + i) * D + r]
                                    : gate_up[(static_cast<int64_t>(e) * D + i) * 2 * F + 2 * r +
                                              (which == "ffn_up_exps")];
            ASSERT_EQ(got, want) << name << " expert " << e << " row " << r << " value " << i;
          }
    }
  }
  EXPECT_EQ(gguf.FindTensor("blk.0.attn_q.weight")->type, kGgmlTypeQ8_0);
  EXPECT_EQ(gguf.FindTensor("blk.0.attn_sinks.weight")->type, kGgmlTypeF32);
  const Model native = LoadModel(path, Precision::kNative), f32 = LoadModel(path);
  EXPECT_EQ(native.weights.layers[1].packed->moe_w3.ggml.type, kGgmlTypeMXFP4);
  EXPECT_TRUE(native.weights.layers[1].moe_w3.empty());
  const std::vector<float> want = RunAll(f32);
  EXPECT_LT(
      test::MaxRelDiff(RunAll(native), want, "GGUF MXFP4 experts at native vs its f32 forward"),
      1e-5);
  EXPECT_LT(
      test::MaxRelDiff(RunIncremental(native), want, "GGUF MXFP4, native cached decode, vs f32"),
      1e-5);
  // The experts are lossless: against the naive reference this file differs by the Q8_0 rounding
  // of attention, embedding and head alone, which --type q8_0 (experts F32) gives too on this
  // random model (9 %; the tight check with F32 elsewhere is in the test above).
  const double q8 = test::MaxRelDiff(
      want, test::NaiveHfForward(ck.config, ck.weights, kTokens),
      "GGUF MXFP4_MOE (Q8_0 attention and head) vs naive on the safetensors' weights");
  EXPECT_LT(q8, 0.2);
  EXPECT_EQ(gguf.FindTensor("blk.0.ffn_gate_inp.weight")->type, kGgmlTypeF32);
  EXPECT_EQ(mxfp4, 6);
}

// Native MoE on GGUF experts of the other stored types (qwen3_moe, mixtral): kept as stored, one
// matrix over the stacked experts, and the same logits as the file's f32 forward. Mixtral's down
// rows of 24 values are not whole blocks: they fall back to F16.
TEST(Mxfp4GptOss, NativeKeepsStackedExpertsOfEveryType) {
  const std::string qwen = R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64,
      "moe_intermediate_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 61,
      "max_position_embeddings": 64, "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": true})";
  const std::string mixtral = R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 64,
      "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "vocab_size": 61, "max_position_embeddings": 64, "num_local_experts": 4, "num_experts_per_tok": 2})";
  for (const auto& [name, json] : {std::pair{"qwen3_moe", qwen}, std::pair{"mixtral", mixtral}}) {
    const Model model = test::LoadRandomHf(json, 5, std::string("experts_") + name);
    for (uint32_t type : {kGgmlTypeQ8_0, kGgmlTypeQ4_0, kGgmlTypeBF16, kGgmlTypeMXFP4}) {
      GgufWriter writer;
      AddGgufModel(model, writer, kGgmlTypeF32, type);
      const std::string path = test::TempDir(std::string("experts_") + name) + "/model.gguf";
      writer.Write(path);
      const Model native = LoadModel(path, Precision::kNative), f32 = LoadModel(path);
      const LayerWeights& l = native.weights.layers[1];
      // gate / up rows hold the width (64); down's rows the expert width (32, or 24: F16).
      const uint32_t down =
          model.config.hidden_dim % 32 == 0 || type == kGgmlTypeBF16 ? type : kGgmlTypeF16;
      ASSERT_TRUE(l.packed);
      EXPECT_EQ(l.packed->moe_w1.ggml.type, type) << name;
      EXPECT_EQ(l.packed->moe_w3.ggml.type, type) << name;
      EXPECT_EQ(l.packed->moe_w2.ggml.type, down) << name;
      EXPECT_EQ(l.packed->moe_w1.ggml.out, 4 * model.config.hidden_dim);
      EXPECT_TRUE(l.moe_w1.empty() && l.moe_w2.empty() && l.moe_w3.empty());
      const std::vector<float> want_logits = RunAll(f32);
      const std::string label =
          fmt::format("{} GGUF, {} experts, native vs f32", name, GgmlTypeName(type));
      EXPECT_LT(test::MaxRelDiff(RunAll(native), want_logits, label), 1e-5);
      EXPECT_LT(test::MaxRelDiff(RunIncremental(native), want_logits, label + ", cached decode"),
                1e-5);
    }
  }
}

// ---- Bad input.

TEST(Mxfp4GptOss, BadSafetensorsAreNamed) {
  using Raw = std::map<std::string, RawTensor>;
  const std::string gu = "model.layers.1.mlp.experts.gate_up_proj";
  const std::string dn = "model.layers.0.mlp.experts.down_proj";
  struct Bad {
    const char* what;
    std::function<void(Raw&)> edit;
    std::vector<std::string> needles;
  };
  const std::vector<Bad> cases = {
      {"scales one group short",
       [&](Raw& r) {
         RawTensor& s = r[gu + "_scales"];  // (E, 2F, 2) -> (E, 2F, 1)
         s.shape[2] = 1;
         s.bytes.resize(s.bytes.size() / 2);
       },
       {gu + "_blocks", gu + "_scales", "disagree", "one scale per 16-byte block"}},
      {"blocks of 8 bytes",
       [&](Raw& r) {
         RawTensor& b = r[dn + "_blocks"];
         b.shape = {4, 64, 2, 8};
         b.bytes.resize(4 * 64 * 16);
       },
       {dn + "_blocks", "last dimension must be 16"}},
      {"blocks for another width",
       [&](Raw& r) {
         RawTensor& b = r[dn + "_blocks"];
         RawTensor& s = r[dn + "_scales"];
         b.shape = {4, 64, 2, 16};
         s.shape = {4, 64, 2};
         b.bytes.resize(4 * 64 * 32);
         s.bytes.resize(4 * 64 * 2);
       },
       {dn + "_blocks", "has shape [4, 64, 2, 16], expected [4, 64, 1, 16]"}},
      {"blocks stored as BF16",
       [&](Raw& r) {
         RawTensor& b = r[gu + "_blocks"];
         b.dtype = "BF16";
         b.shape.back() = 8;
       },
       {gu + "_blocks", "is stored as BF16, expected U8"}},
      {"a NaN scale",
       [&](Raw& r) { r[gu + "_scales"].bytes[77] = static_cast<char>(0xFF); },
       {gu + "_blocks", "block 77", "0xFF", "NaN"}},
      {"a scale whose values overflow f32",
       [&](Raw& r) {
         r[dn + "_scales"].bytes[5] = static_cast<char>(254);
         r[dn + "_blocks"].bytes[5 * 16 + 3] = 0x70;
       },
       {dn + "_blocks", "block 5", "0xFE", "largest f32"}},
      {"scales missing",
       [&](Raw& r) { r.erase(dn + "_scales"); },
       {"missing tensor '" + dn + "_scales'"}},
  };
  for (const Bad& bad : cases) {
    const Checkpoint ck = WriteMxfp4Checkpoint(TinyConfig(), "bad", 7, bad.edit);
    for (Precision p : {Precision::kF32, Precision::kNative}) {
      const std::string err = ErrorOf([&] { LoadModel(ck.dir, p); });
      for (const std::string& needle : bad.needles)
        EXPECT_HAS(err, needle) << bad.what << " at " << PrecisionName(p);
    }
  }
  // Rows that are not whole 32-value blocks: a width of 48 (the blocks written as the shape says,
  // one 16-byte block a row).
  {
    const Checkpoint ck = WriteMxfp4Checkpoint(TinyConfig(48, 32), "width48", 7, [](Raw& r) {
      for (int l = 0; l < 2; ++l) {
        r[fmt::format("model.layers.{}.mlp.experts.gate_up_proj_blocks", l)].bytes.resize(4 * 64 *
                                                                                          16);
        r[fmt::format("model.layers.{}.mlp.experts.gate_up_proj_scales", l)].bytes.resize(4 * 64);
      }
    });
    for (Precision p : {Precision::kF32, Precision::kNative})
      EXPECT_HAS(ErrorOf([&] { LoadModel(ck.dir, p); }),
                 "'model.layers.0.mlp.experts.gate_up_proj_blocks': rows of 48 values are not a "
                 "whole number of 32-value MXFP4 blocks");
  }
  // A truncated file: named, whatever the precision.
  {
    const Checkpoint ck = WriteMxfp4Checkpoint(TinyConfig(), "truncated");
    const std::string file = ck.dir + "/model.safetensors";
    std::string bytes = ReadFile(file);
    bytes.resize(bytes.size() - 1000);
    WriteFileAtomic(file, bytes);
    for (Precision p : {Precision::kF32, Precision::kNative})
      EXPECT_HAS(ErrorOf([&] { LoadModel(ck.dir, p); }), "model.safetensors");
  }
}

// A config that declares fewer layers than the MXFP4 file stores: the extra layer's blocks and
// scales are named, not dropped.
TEST(Mxfp4GptOss, ExtraStoredLayersAreNamed) {
  const Checkpoint ck = WriteMxfp4Checkpoint(TinyConfig(), "extra_layer");
  nlohmann::json j = nlohmann::json::parse(ReadFile(ck.dir + "/config.json"));
  j["num_hidden_layers"] = 1;
  j.erase("layer_types");
  WriteFileAtomic(ck.dir + "/config.json", j.dump());
  const std::string err = ErrorOf([&] { LoadModel(ck.dir, Precision::kNative); });
  EXPECT_HAS(err, "belongs to layer 1, but the config declares 1 layers");
}

// MXFP4 where the family expects another type, and the reverse: named with the reason.
TEST(Mxfp4GptOss, Mxfp4WhereAnotherTypeIsExpected) {
  // MXFP4 experts, but config.json without quantization_config.
  {
    const Checkpoint ck = WriteMxfp4Checkpoint(TinyConfig(64, 32, ""), "no_quant_config");
    EXPECT_FALSE(ck.config.mxfp4_experts);
    const std::string err = ErrorOf([&] { LoadModel(ck.dir); });
    EXPECT_HAS(err, "missing tensor 'model.layers.0.mlp.experts.gate_up_proj'");
    EXPECT_HAS(err, "stores it as MXFP4 blocks ('model.layers.0.mlp.experts.gate_up_proj_blocks')");
  }
  // An attention projection stored as MXFP4 blocks.
  {
    const Checkpoint ck = WriteMxfp4Checkpoint(
        TinyConfig(), "q_proj_blocks", 7, [](std::map<std::string, RawTensor>& r) {
          r.erase("model.layers.0.self_attn.q_proj.weight");
          r["model.layers.0.self_attn.q_proj_blocks"] = {"model.layers.0.self_attn.q_proj_blocks",
                                                         "U8",
                                                         {64, 2, 16},
                                                         std::string(2048, '\x11')};
          r["model.layers.0.self_attn.q_proj_scales"] = {
              "model.layers.0.self_attn.q_proj_scales", "U8", {64, 2}, std::string(128, '\x7f')};
        });
    const std::string err = ErrorOf([&] { LoadModel(ck.dir, Precision::kNative); });
    EXPECT_HAS(err, "missing tensor 'model.layers.0.self_attn.q_proj.weight'");
    EXPECT_HAS(err, "MXFP4 blocks ('model.layers.0.self_attn.q_proj_blocks')");
  }
  // quantization_config says mxfp4, the experts are BF16.
  {
    const std::string dir = test::WriteRandomHf(TinyConfig(64, 32, ""), 3, "mxfp4_bf16_experts");
    nlohmann::json j = nlohmann::json::parse(ReadFile(dir + "/config.json"));
    j["quantization_config"] = nlohmann::json::parse(kQuantizationConfig);
    WriteFileAtomic(dir + "/config.json", j.dump());
    const std::string err = ErrorOf([&] { LoadModel(dir); });
    EXPECT_HAS(err, "missing tensor 'model.layers.0.mlp.experts.gate_up_proj_blocks'");
    EXPECT_HAS(err, "stores 'model.layers.0.mlp.experts.gate_up_proj' instead");
  }
  // The router as U8 where BF16 is expected: the dtype is named.
  {
    const Checkpoint ck =
        WriteMxfp4Checkpoint(TinyConfig(), "u8_router", 7, [](std::map<std::string, RawTensor>& r) {
          RawTensor& w = r["model.layers.1.mlp.router.weight"];
          w.dtype = "U8";
          w.bytes.resize(w.bytes.size() / 2);
        });
    const std::string err = ErrorOf([&] { LoadModel(ck.dir); });
    EXPECT_HAS(err, "model.layers.1.mlp.router.weight");
    EXPECT_HAS(err, "U8");
  }
}

TEST(Mxfp4GptOss, QuantizationConfigValuesSinkscopeCannotHonourAreRefusedByName) {
  const auto parse = [](const std::string& q) {
    return ErrorOf([&] { ParseHfConfig(TinyConfig(64, 32, q), "config.json"); });
  };
  EXPECT_HAS(parse(R"({"quant_method": "bitsandbytes"})"),
             "'quantization_config.quant_method' 'bitsandbytes' is not supported");
  EXPECT_HAS(
      parse(R"({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.1.mlp"]})"),
      "entry 'model.layers.1.mlp' keeps the experts of 1 of the 2 layers unquantised");
  EXPECT_HAS(
      parse(R"({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.[01].mlp"]})"),
      "regular-expression syntax");
  // The published list, and transformers' default (lm_head only): every layer's experts MXFP4.
  EXPECT_TRUE(ParseHfConfig(TinyConfig(), "c").mxfp4_experts);
  EXPECT_TRUE(ParseHfConfig(TinyConfig(64, 32, R"({"quant_method": "mxfp4"})"), "c").mxfp4_experts);
  // Every layer's experts listed: none is MXFP4, and BF16 experts load.
  const std::string all =
      R"({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.mlp"]})";
  EXPECT_FALSE(ParseHfConfig(TinyConfig(64, 32, all), "c").mxfp4_experts);
  const std::string dir = test::WriteRandomHf(TinyConfig(64, 32, ""), 3, "mxfp4_all_skipped");
  nlohmann::json j = nlohmann::json::parse(ReadFile(dir + "/config.json"));
  j["quantization_config"] = nlohmann::json::parse(all);
  WriteFileAtomic(dir + "/config.json", j.dump());
  EXPECT_NO_THROW(LoadModel(dir, Precision::kNative));
  // re.match semantics: "model.layers.1" also matches layers 10-19 (a prefix), but not layer 0.
  const std::string ten =
      fmt::format(R"({{"architectures": ["GptOssForCausalLM"], "hidden_size": 64,
      "intermediate_size": 32, "num_hidden_layers": 12, "num_attention_heads": 4, "num_key_value_heads": 2,
      "head_dim": 16, "vocab_size": 61, "max_position_embeddings": 64, "num_local_experts": 4,
      "num_experts_per_tok": 2, "sliding_window": 4, "quantization_config": {}}})",
                  R"({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.1"]})");
  EXPECT_HAS(ErrorOf([&] { ParseHfConfig(ten, "c"); }), "keeps the experts of 3 of the 12 layers");
  // Many '*' take no time (the matcher is memoised), and match as a regular expression would.
  std::string stars = R"({"quant_method": "mxfp4", "modules_to_not_convert": [")";
  for (int i = 0; i < 40; ++i) stars += "m*o*d*e*l*.*";
  stars += "Q\"]}";  // no Q in the name: nothing matches
  EXPECT_TRUE(ParseHfConfig(TinyConfig(64, 32, stars), "c").mxfp4_experts);
  EXPECT_FALSE(
      ParseHfConfig(
          TinyConfig(64, 32,
                     R"({"quant_method": "mxfp4", "modules_to_not_convert": ["m.*experts"]})"),
          "c")
          .mxfp4_experts);
}

TEST(Mxfp4GptOss, BadGgufIsNamed) {
  const Checkpoint ck = WriteMxfp4Checkpoint(TinyConfig(), "gguf_bad");
  GgufWriter writer;
  AddGgufModel(LoadModel(ck.dir), writer, kGgmlTypeMXFP4);
  const std::string dir = test::TempDir("mxfp4_gguf_bad");
  const std::string good = dir + "/good.gguf";
  writer.Write(good);
  const std::string bytes = ReadFile(good);
  const GgufFile gguf = GgufFile::Open(good);
  const GgufTensorInfo* t = gguf.FindTensor("blk.1.ffn_down_exps.weight");
  const size_t offset = gguf.data_offset() + t->offset;  // the tensor's bytes in the file
  // A NaN scale in block 3.
  {
    std::string bad = bytes;
    bad[offset + 3 * 17] = static_cast<char>(0xFF);
    WriteFileAtomic(dir + "/nan.gguf", bad);
    for (Precision p : {Precision::kF32, Precision::kNative}) {
      const std::string err = ErrorOf([&] { LoadModel(dir + "/nan.gguf", p); });
      EXPECT_HAS(err, "blk.1.ffn_down_exps.weight") << PrecisionName(p);
      EXPECT_HAS(err, "NaN") << PrecisionName(p);
    }
  }
  // Truncated inside the experts.
  {
    WriteFileAtomic(dir + "/short.gguf", bytes.substr(0, offset + 100));
    for (Precision p : {Precision::kF32, Precision::kNative})
      EXPECT_HAS(ErrorOf([&] { LoadModel(dir + "/short.gguf", p); }),
                 "extends beyond the end of the file");
  }
  // An MXFP4 tensor whose rows are not whole 32-value blocks: refused when the header is read.
  {
    test::GgufWriter w;
    w.KeyString("general.architecture", "gpt-oss");
    w.Tensor("blk.0.ffn_down_exps.weight", {48, 64, 4}, 39, 0);
    const std::string path = dir + "/rows48.gguf";
    WriteFileAtomic(path, w.Build(std::string(48 * 64 * 4 / 32 * 17, '\0')));
    EXPECT_HAS(ErrorOf([&] { LoadModel(path); }),
               "tensor 'blk.0.ffn_down_exps.weight' of type MXFP4: first dimension 48 is not a "
               "multiple of the block size 32");
  }
}

// The CLI: inspect lists the MXFP4 tensors; a NaN scale is one error line and a non-zero exit,
// at native (inspect) and f32 (analyze).
TEST(Mxfp4GptOss, CliInspectAndErrors) {
  const Checkpoint ck = WriteMxfp4Checkpoint(TinyConfig(), "cli");
  test::CliResult r = test::RunCli("inspect --model " + ck.dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_HAS(r.out, "MXFP4 (blocks + scales) 4");
  EXPECT_HAS(r.out, "experts stored as MXFP4");
  const Checkpoint bad =
      WriteMxfp4Checkpoint(TinyConfig(), "cli_bad", 7, [](std::map<std::string, RawTensor>& raw) {
        raw["model.layers.0.mlp.experts.down_proj_scales"].bytes[0] = static_cast<char>(0xFF);
      });
  const std::string tokens = test::TempDir("mxfp4_cli") + "/tokens.txt";
  WriteFileAtomic(tokens, "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20\n");
  for (const std::string& args :
       {"inspect --model " + bad.dir, "analyze --model " + bad.dir + " --tokens " + tokens +
                                          " --samples 1 --length 8 --conditions no-bos"}) {
    r = test::RunCli(args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_HAS(r.err, "model.layers.0.mlp.experts.down_proj_blocks");
    EXPECT_HAS(r.err, "NaN");
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  // analyze at native on the good checkpoint runs.
  r = test::RunCli("analyze --model " + ck.dir + " --tokens " + tokens +
                   " --samples 1 --length 8 --conditions no-bos --precision native");
  EXPECT_EQ(r.code, 0) << r.err;
}

}  // namespace
}  // namespace ss
