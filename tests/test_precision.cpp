// --precision bf16: the model's projections through MatMulBf16 on weights packed once. Checks that
// the bf16 path actually runs (results differ from f32), stays within the bf16 rounding of f32 on
// the real stories260K model and on a GPT-2-shaped random model (logits and every analysis metric
// the reports show: alpha, norm ratios, median |x|), that the portable path computes the same
// numbers as the AVX-512 BF16 one, that switching back to f32 restores the f32 results bit for bit,
// and the CLI's --precision flag. Each test prints its largest difference.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>

#include "analysis/analyze.h"
#include "common/error.h"
#include "common/file_util.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "io/load.h"
#include "io/model_files.h"
#include "kernels/dequant.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_int8.h"
#include "kernels/gemm_q8.h"
#include "kernels/vecmath.h"
#include "model/model.h"
#include "model/precision.h"
#include "naive_hf.h"
#include "random_model.h"
#include "test_util.h"

namespace ss {
namespace {

const std::string kStories = test::RepoPath("models/stories260K/stories260K.bin");
// A tiny gpt-oss (config.json): 4 experts, 2 a token, sliding and global layers.
constexpr const char* kTinyGptOss =
    R"({"architectures": ["GptOssForCausalLM"], "hidden_size": 64, "intermediate_size": 32,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
      "vocab_size": 61, "max_position_embeddings": 64, "num_local_experts": 4,
      "num_experts_per_tok": 2, "sliding_window": 8})";

std::vector<int> Tokens(int T, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> t(T);
  for (int& id : t) id = 3 + static_cast<int>(rng() % (vocab - 3));
  return t;
}

std::vector<float> Logits(const Model& model, const std::vector<int>& tokens) {
  KVCache cache = KVCache::Create(model.config, static_cast<int>(tokens.size()));
  RunState state;
  ForwardRequest req;
  req.tokens = tokens;
  const Tensor logits = Forward(model, cache, state, req);
  return std::vector<float>(logits.data(), logits.data() + logits.numel());
}

TEST(Precision, ParseAndNames) {
  EXPECT_EQ(ParsePrecision("f32"), Precision::kF32);
  EXPECT_EQ(ParsePrecision("bf16"), Precision::kBf16);
  EXPECT_STREQ(PrecisionName(Precision::kBf16), "bf16");
  EXPECT_STREQ(PrecisionName(Precision::kF32), "f32");
  EXPECT_EQ(ParsePrecision("q8_0"), Precision::kQ8_0);
  EXPECT_STREQ(PrecisionName(Precision::kQ8_0), "q8_0");
  EXPECT_EQ(ParsePrecision("native"), Precision::kNative);
  EXPECT_STREQ(PrecisionName(Precision::kNative), "native");
  for (const char* bad : {"", "fp32", "BF16", "f16", "bf16 ", "Q8_0", "q8"}) {
    try {
      ParsePrecision(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--precision: expected f32, bf16, q8_0 or native"),
                std::string::npos)
          << e.what();
    }
  }
}

// Logits of a model at bf16 against f32: different (the bf16 path ran), within bf16 rounding, and
// back to the f32 logits bit for bit after SetPrecision(kF32).
void CheckLogits(Model& model, const std::string& label, double tolerance) {
  const std::vector<int> tokens = Tokens(96, model.config.vocab_size, 7);
  const std::vector<float> f32 = Logits(model, tokens);
  SetPrecision(model, Precision::kBf16);
  ASSERT_TRUE(model.weights.layers[0].packed);
  const std::vector<float> bf16 = Logits(model, tokens);
  // Relative to the largest |logit|.
  const double rel = test::MaxRelDiff(bf16, f32, label + " logits bf16 vs f32");
  EXPECT_GT(rel, 0.0) << "bf16 gave the f32 logits exactly: the bf16 path did not run";
  EXPECT_LT(rel, tolerance);
  SetPrecision(model, Precision::kF32);
  EXPECT_FALSE(model.weights.layers[0].packed);
  EXPECT_EQ(Logits(model, tokens), f32);
}

TEST(Precision, LogitsOnStories260K) {
  Model model = LoadModel(kStories);
  CheckLogits(model, "stories260K", 3e-2);
}

// A small random GPT-2 (4 heads, MLP 4 x dim).
Model SmallGpt2(int layers, int dim, int vocab, int context) {
  test::RandomModelShape shape;
  shape.n_layers = layers;
  shape.n_heads = shape.n_kv_heads = 4;
  shape.dim = dim;
  shape.hidden_dim = 4 * dim;
  shape.vocab_size = vocab;
  shape.max_seq_len = context;
  return test::RandomGpt2(shape);
}

TEST(Precision, LogitsOnRandomGpt2) {
  Model model = SmallGpt2(3, 64, 300, 128);
  CheckLogits(model, "random GPT-2", 3e-2);
}

// Loading at bf16 or q8_0 (LoadModel's precision) holds the projections in that form only: the
// same packs as loading in f32 and calling SetPrecision, so the logits are the same bit for bit,
// while the f32 tensors of q, k, v, o, the MLP and an untied LM head are never kept.
void ExpectPackedOnlyMatchesPacked(const std::string& path, const std::string& label,
                                   Precision p = Precision::kBf16) {
  SCOPED_TRACE(PrecisionName(p));
  Model packed = LoadModel(path);
  SetPrecision(packed, p);
  Model only = LoadModel(path, p);
  EXPECT_TRUE(only.packed_only) << label;
  EXPECT_FALSE(packed.packed_only) << label;
  EXPECT_EQ(only.precision, p);
  for (const LayerWeights& l : only.weights.layers) {
    ASSERT_TRUE(l.packed) << label;
    for (const Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3})
      EXPECT_TRUE(t->empty()) << label << ": a projection kept its f32 tensor";
  }
  ASSERT_TRUE(only.weights.lm_head_packed);
  if (!only.config.tied_embeddings) {
    EXPECT_TRUE(only.weights.lm_head.empty()) << label;
  }
  EXPECT_EQ(only.ParameterCount(), packed.ParameterCount()) << label;
  const std::vector<int> tokens = Tokens(64, only.config.vocab_size, 5);
  EXPECT_EQ(Logits(only, tokens), Logits(packed, tokens)) << label;
  SetPrecision(only, p);  // a no-op: the packs are there
  EXPECT_EQ(Logits(only, tokens), Logits(packed, tokens)) << label;
  for (Precision other :
       {Precision::kF32, p == Precision::kBf16 ? Precision::kQ8_0 : Precision::kBf16}) {
    try {
      SetPrecision(only, other);
      ADD_FAILURE() << label << ": went to " << PrecisionName(other) << " without f32 weights";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("loaded with its projections in ") +
                                           PrecisionName(p) + " only"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(Precision, PackedOnlyLoadOfEveryFormat) {
  const std::string dir = test::TempDir("packed_only");
  // llama2.c (f32 file, tied head), and the same model as HF BF16 safetensors and as GGUF F16 and
  // Q8_0 (whose 172-wide MLP rows fall back to F16).
  const Model stories = LoadModel(kStories);
  std::filesystem::create_directories(dir + "/hf_bf16");
  WriteHfModel(stories, dir + "/hf_bf16", SafetensorsDtype::kBF16);
  for (const char* type : {"f16", "q8_0"}) {
    const test::CliResult gguf = test::RunCli("convert --model " + kStories + " --to gguf --out " +
                                              dir + "/s_" + type + ".gguf --type " + type);
    ASSERT_EQ(gguf.code, 0) << gguf.err;
  }
  // GPT-2: fused, transposed c_attn split into q, k, v as it is bound; an untied head.
  Model gpt2 = SmallGpt2(2, 64, 300, 128);
  gpt2.config.tied_embeddings = false;
  gpt2.weights.lm_head = gpt2.weights.token_embedding.Copy();
  std::filesystem::create_directories(dir + "/gpt2_bf16");
  WriteHfModel(gpt2, dir + "/gpt2_bf16", SafetensorsDtype::kBF16);
  for (Precision p : {Precision::kBf16, Precision::kQ8_0}) {
    ExpectPackedOnlyMatchesPacked(kStories, "stories260K llama2.c", p);
    ExpectPackedOnlyMatchesPacked(dir + "/hf_bf16", "stories260K HF BF16", p);
    ExpectPackedOnlyMatchesPacked(dir + "/s_f16.gguf", "stories260K GGUF F16", p);
    ExpectPackedOnlyMatchesPacked(dir + "/s_q8_0.gguf", "stories260K GGUF Q8_0", p);
    ExpectPackedOnlyMatchesPacked(dir + "/gpt2_bf16", "random GPT-2 HF BF16", p);
  }
}

// The model with every projection (and the LM head) replaced by its Q8_0-dequantised values, in
// f32: what --precision q8_0 must compute.
Model DequantisedQ8Twin(const Model& source) {
  Model m = source;
  auto round_trip = [](const Tensor& t) {
    const PackedQ8 p = PackQ8_0(t.data(), static_cast<int>(t.dim(0)), static_cast<int>(t.dim(1)));
    Tensor out = Tensor::Zeros({t.dim(0), t.dim(1)});
    DequantizeQ8Rows(p, 0, p.out, out.data());
    return out;
  };
  for (LayerWeights& l : m.weights.layers)
    for (Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3})
      if (!t->empty()) *t = round_trip(*t);
  m.weights.lm_head = round_trip(source.weights.lm_head);  // the embedding lookup stays f32
  return m;
}

// Logits one token at a time through the KV cache: the decode path (the fused Q8_0 kernel).
std::vector<float> DecodeLogits(const Model& model, const std::vector<int>& tokens) {
  KVCache cache = KVCache::Create(model.config, static_cast<int>(tokens.size()));
  RunState state;
  std::vector<float> all;
  for (size_t t = 0; t < tokens.size(); ++t) {
    ForwardRequest req;
    req.tokens = std::span<const int>(&tokens[t], 1);
    const Tensor logits = Forward(model, cache, state, req);
    all.insert(all.end(), logits.data(), logits.data() + logits.numel());
  }
  return all;
}

// --precision q8_0 is the f32 forward on the Q8_0-rounded projections: prefill (the dequantise-
// then-sgemm path) and decode (the fused kernel) within f32 summation order of it, on the real
// stories260K (rows of 172, padded to whole blocks) and on random Llama and GPT-2 models; and not
// the f32 model's logits (the quantisation happened).
TEST(Precision, Q8_0IsTheF32ForwardOnQuantisedWeights) {
  Model llama = test::RandomLlama({2, 4, 2, 128, 352, 300, 256, 9});
  Model gpt2 = SmallGpt2(2, 64, 300, 128);
  struct Case {
    const char* label;
    Model model;
  };
  std::vector<Case> cases;
  cases.push_back({"stories260K", LoadModel(kStories)});
  cases.push_back({"random Llama", std::move(llama)});
  cases.push_back({"random GPT-2", std::move(gpt2)});
  for (Case& c : cases) {
    const Model twin = DequantisedQ8Twin(c.model);
    const std::vector<int> tokens = Tokens(40, c.model.config.vocab_size, 11);
    const std::vector<float> f32 = Logits(c.model, tokens);
    const std::vector<float> want = Logits(twin, tokens);
    const std::vector<float> want_decode = DecodeLogits(twin, tokens);
    SetPrecision(c.model, Precision::kQ8_0);
    ASSERT_TRUE(c.model.weights.layers[0].packed &&
                !c.model.weights.layers[0].packed->wq.q8.empty());
    const std::string label = c.label;
    EXPECT_LT(test::MaxRelDiff(Logits(c.model, tokens), want,
                               label + " q8_0 prefill vs f32 on Q8_0 weights"),
              1e-5);
    EXPECT_LT(test::MaxRelDiff(DecodeLogits(c.model, tokens), want_decode,
                               label + " q8_0 decode vs f32 on Q8_0 weights"),
              1e-5);
    const double moved = test::MaxRelDiff(want, f32, label + " f32 on Q8_0 weights vs f32");
    EXPECT_GT(moved, 0.0);
    EXPECT_LT(moved, 3e-2);
    SetPrecision(c.model, Precision::kF32);
    EXPECT_EQ(Logits(c.model, tokens), f32) << label;
  }
}

// --precision q8_0 with x in int8 (generate's default): the blocks laid out for the int8 products
// alone where rows are whole blocks (stories260K's down projection, rows of 172, keeps the f32
// layout), the same blocks as with f32 x; the logits move by the rounding of x (printed) and no
// more; back at f32 x the same model gives the f32 layout's logits bit for bit. And the products
// are a Q8_0 file's at native precision: a random Llama (its embedding Q8_0-rounded, as the file's
// lookup gives it) gives the GGUF file's logits bit for bit, prefill and decode. (Decode against
// prefill is not a bit-for-bit check with x in int8: the attention sums in another order, and a
// value of x that sits at a rounding boundary may then round the other way, a step of 1/127 of
// its block; stories260K's Q8_0 file at native does so at one of 30 tokens.)
TEST(Precision, Q8_0WithInt8ActivationsLaysTheBlocksOutForThem) {
  if (!Int8Supported(kGgmlTypeQ8_0)) GTEST_SKIP() << "no int8 products (no AVX2, or portable)";
  Model random = test::RandomLlama({2, 4, 2, 128, 352, 300, 256, 9});
  {
    const Tensor& e = random.weights.token_embedding;
    const PackedQ8 rounded =
        PackQ8_0(e.data(), static_cast<int>(e.dim(0)), static_cast<int>(e.dim(1)));
    Tensor back = Tensor::Zeros({e.dim(0), e.dim(1)});
    DequantizeQ8Rows(rounded, 0, rounded.out, back.data());
    ASSERT_TRUE(random.config.tied_embeddings);
    random.weights.token_embedding = random.weights.lm_head = back;
  }
  struct Case {
    const char* label;
    Model model;
  };
  std::vector<Case> cases;
  cases.push_back({"stories260K", LoadModel(kStories)});
  cases.push_back({"random Llama", random});
  for (const Case& c : cases) {
    const std::string label = c.label;
    const std::vector<int> tokens = Tokens(30, c.model.config.vocab_size, 13);
    Model f32x = c.model, int8x = c.model;
    SetGgmlActivationsForAll(GgmlActivations::kF32);
    SetPrecision(f32x, Precision::kQ8_0);
    SetGgmlActivationsForAll(GgmlActivations::kInt8);
    SetPrecision(int8x, Precision::kQ8_0);
    const LayerPacked& p = *int8x.weights.layers[0].packed;
    EXPECT_TRUE(p.wq.q8.int8_layout()) << label;
    EXPECT_EQ(p.w2.q8.int8_layout(), c.model.config.hidden_dim % kQ8Block == 0) << label;
    EXPECT_FALSE(f32x.weights.layers[0].packed->wq.q8.int8_layout()) << label;
    for (int row = 0; row < p.wq.q8.out; ++row)
      ASSERT_EQ(Q8RowBlocks(p.wq.q8, row), Q8RowBlocks(f32x.weights.layers[0].packed->wq.q8, row))
          << label << " row " << row;
    EXPECT_EQ(ActivationsName(int8x), "int8") << label;
    const std::vector<float> reference = Logits(f32x, tokens);
    const std::vector<float> reference_decode = DecodeLogits(f32x, tokens);
    const std::vector<float> prefill = Logits(int8x, tokens), decode = DecodeLogits(int8x, tokens);
    for (const auto& [mine, want, what] :
         {std::tuple{&prefill, &reference, " prefill"}, {&decode, &reference_decode, " decode"}}) {
      const double rounding =
          test::MaxRelDiff(*mine, *want, label + " q8_0 int8 x vs f32 x" + what);
      EXPECT_GT(rounding, 0.0) << label << what;  // x was rounded
      EXPECT_LT(rounding, 0.05) << label << what;
    }
    if (label == "random Llama") {
      const std::string path = test::TempDir("q8_int8") + "/m.gguf";
      GgufWriter writer;
      AddGgufModel(c.model, writer, kGgmlTypeQ8_0);
      writer.Write(path);
      const Model file = LoadModel(path, Precision::kNative);
      EXPECT_EQ(prefill, Logits(file, tokens)) << label;
      EXPECT_EQ(decode, DecodeLogits(file, tokens)) << label;
    }
    SetGgmlActivationsForAll(GgmlActivations::kF32);
    EXPECT_EQ(ActivationsName(int8x), "f32") << label;
    EXPECT_EQ(Logits(int8x, tokens), reference) << label;
    EXPECT_EQ(DecodeLogits(int8x, tokens), reference_decode) << label;
  }
}

// A Q8_0 GGUF file's blocks are what the model holds at --precision q8_0, byte for byte (they reach
// the packer dequantised and re-quantise exactly), with about a quarter of f32's memory.
TEST(Precision, Q8_0KeepsTheBlocksOfAQ8_0File) {
  const std::string dir = test::TempDir("q8_gguf");
  const Model random = test::RandomLlama({2, 4, 2, 128, 352, 300, 256, 4});
  GgufWriter writer;
  AddGgufModel(random, writer, kGgmlTypeQ8_0);
  writer.Write(dir + "/m.gguf");
  const GgufFile file = GgufFile::Open(dir + "/m.gguf");
  const Model model = LoadModel(dir + "/m.gguf", Precision::kQ8_0);
  ASSERT_TRUE(model.packed_only);
  int checked = 0;
  for (int l = 0; l < 2; ++l) {
    const LayerPacked& p = *model.weights.layers[l].packed;
    // q and k rows are permuted from GGUF's RoPE order at load; v, o and the MLP are not.
    for (auto [name, w] : {std::pair{"attn_v", &p.wv},
                           {"attn_output", &p.wo},
                           {"ffn_gate", &p.w1},
                           {"ffn_down", &p.w2},
                           {"ffn_up", &p.w3}}) {
      const GgufTensorInfo* t =
          file.FindTensor("blk." + std::to_string(l) + "." + name + ".weight");
      ASSERT_NE(t, nullptr) << name;
      ASSERT_EQ(t->type, kGgmlTypeQ8_0) << name;
      ASSERT_FALSE(w->q8.empty()) << name;
      const size_t row_bytes = t->n_bytes / w->q8.out;
      for (int row = 0; row < w->q8.out; ++row, ++checked) {
        const std::vector<uint8_t> mine = Q8RowBlocks(w->q8, row);
        ASSERT_EQ(mine.size(), row_bytes);
        ASSERT_TRUE(std::equal(mine.begin(), mine.end(), t->data + row * row_bytes))
            << name << " layer " << l << " row " << row;
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

// --precision native keeps each projection in the bytes the file stores (a view of the mapping,
// never expanded to f32) and computes the f32 forward on those weights: against the same file
// loaded in f32 (dequantised), prefill (dequantise a block, sgemm) and decode (the fused kernels)
// agree to f32 summation order, for every type the kernels multiply, from GGUF and from HF
// safetensors; the projections are the file's bytes, byte for byte.
// The token embedding at native: no f32 copy, the file's bytes, and every row the lookup
// dequantises is bit for bit the row the f32 load holds.
static void ExpectEmbeddingKeptAsStored(const Model& native, const Model& f32, const GgufFile& file,
                                        uint32_t type, const std::string& label) {
  EXPECT_TRUE(native.weights.token_embedding.empty()) << label;
  ASSERT_TRUE(native.weights.embedding_packed) << label;
  const GgmlMatrix& e = native.weights.embedding_packed->ggml;
  const GgufTensorInfo* t = file.FindTensor("token_embd.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(e.type, type) << label;
  ASSERT_EQ(e.bytes(), t->n_bytes) << label;
  EXPECT_TRUE(std::equal(e.data, e.data + e.bytes(), t->data)) << label;
  std::vector<float> row(e.in);
  for (int token = 0; token < e.out; ++token) {
    DequantizeGgmlRows(e, token, 1, row.data());
    ASSERT_TRUE(std::equal(row.begin(), row.end(), f32.weights.token_embedding.row(token)))
        << label << " token " << token;
  }
}

TEST(Precision, NativeIsTheF32ForwardOnTheStoredWeights) {
  const std::string dir = test::TempDir("native");
  // Rows of 256 and 512: whole blocks of every type, the K types included.
  Model random = test::RandomLlama({2, 4, 2, 256, 512, 300, 256, 5});
  random.config.tied_embeddings = false;  // a head of its own, kept as stored too
  std::mt19937_64 rng(9);
  random.weights.lm_head = test::RandomTensor({300, 256}, 0.05f, rng);
  const std::vector<int> tokens = Tokens(24, random.config.vocab_size, 3);
  for (uint32_t type :
       {kGgmlTypeF16, kGgmlTypeBF16, kGgmlTypeQ8_0, kGgmlTypeQ4_0, kGgmlTypeQ4_K, kGgmlTypeQ6_K}) {
    const std::string path = dir + "/m_" + GgmlTypeName(type) + ".gguf";
    GgufWriter writer;
    AddGgufModel(random, writer, type);
    writer.Write(path);
    const std::string label = std::string("GGUF ") + GgmlTypeName(type);
    const Model f32 = LoadModel(path);
    const Model native = LoadModel(path, Precision::kNative);
    ASSERT_EQ(native.precision, Precision::kNative);
    ASSERT_TRUE(native.packed_only);
    // Every projection and the head kept as stored: the file's bytes.
    const GgufFile file = GgufFile::Open(path);
    int kept = 0;
    for (int l = 0; l < 2; ++l) {
      const LayerPacked& p = *native.weights.layers[l].packed;
      for (auto [name, w] : {std::pair{"attn_q", &p.wq},
                             {"attn_k", &p.wk},
                             {"attn_v", &p.wv},
                             {"attn_output", &p.wo},
                             {"ffn_gate", &p.w1},
                             {"ffn_down", &p.w2},
                             {"ffn_up", &p.w3}}) {
        const GgufTensorInfo* t =
            file.FindTensor("blk." + std::to_string(l) + "." + name + ".weight");
        ASSERT_NE(t, nullptr) << name;
        ASSERT_EQ(w->ggml.type, type) << label << " " << name;
        ASSERT_EQ(w->ggml.bytes(), t->n_bytes) << label << " " << name;
        EXPECT_TRUE(std::equal(w->ggml.data, w->ggml.data + w->ggml.bytes(), t->data))
            << label << " " << name;
        EXPECT_TRUE(native.weights.layers[l].wq.empty());
        ++kept;
      }
    }
    EXPECT_EQ(kept, 14);
    ASSERT_TRUE(native.weights.lm_head_packed);
    EXPECT_EQ(native.weights.lm_head_packed->ggml.type, type) << label;
    ExpectEmbeddingKeptAsStored(native, f32, file, type, label);
    EXPECT_EQ(native.ParameterCount(), f32.ParameterCount()) << label;
    EXPECT_LT(test::MaxRelDiff(Logits(native, tokens), Logits(f32, tokens),
                               label + " native prefill vs f32 load"),
              1e-5);
    EXPECT_LT(test::MaxRelDiff(DecodeLogits(native, tokens), DecodeLogits(f32, tokens),
                               label + " native decode vs f32 load"),
              1e-5);
  }
  // HF safetensors in BF16 and F16: the same rows (ggml's BF16 / F16 are the safetensors bytes).
  for (SafetensorsDtype dtype : {SafetensorsDtype::kBF16, SafetensorsDtype::kF16}) {
    const std::string hf = dir + "/hf_" + SafetensorsDtypeName(dtype);
    std::filesystem::create_directories(hf);
    WriteHfModel(random, hf, dtype);
    const Model f32 = LoadModel(hf);
    const Model native = LoadModel(hf, Precision::kNative);
    EXPECT_EQ(native.weights.layers[1].packed->w2.ggml.type,
              dtype == SafetensorsDtype::kBF16 ? kGgmlTypeBF16 : kGgmlTypeF16);
    const std::string label = std::string("HF ") + SafetensorsDtypeName(dtype);
    EXPECT_LT(test::MaxRelDiff(Logits(native, tokens), Logits(f32, tokens),
                               label + " native prefill vs f32 load"),
              1e-5);
    EXPECT_LT(test::MaxRelDiff(DecodeLogits(native, tokens), DecodeLogits(f32, tokens),
                               label + " native decode vs f32 load"),
              1e-5);
  }
}

// x in int8 (--activations int8, kernels/gemm_ggml.h): a Q8_0 or Q4_0 file's projections and head,
// and a gpt-oss GGUF's MXFP4 experts, are packed as they load (PackForInt8) and their mapped pages
// released. The logits move by the rounding of x (printed) and no more; decode gives the prefill's
// numbers; back at f32 x the same model reads the file's rows again (mapped anew) and gives the
// f32 forward's numbers.
TEST(Precision, Int8ActivationsPackTheWeightsAtLoad) {
  if (ActiveSimdLevel() == SimdLevel::kPortable)
    GTEST_SKIP() << "no AVX2 (the CPU, or SINKSCOPE_SIMD=portable)";
  const std::string dir = test::TempDir("int8_load");
  Model random = test::RandomLlama({2, 4, 2, 256, 512, 300, 256, 5});
  random.config.tied_embeddings = false;
  std::mt19937_64 rng(12);
  random.weights.lm_head = test::RandomTensor({300, 256}, 0.05f, rng);
  const std::vector<int> tokens = Tokens(24, random.config.vocab_size, 5);
  for (uint32_t type : {kGgmlTypeQ8_0, kGgmlTypeQ4_0}) {
    const std::string name = GgmlTypeName(type);
    const std::string path = dir + "/" + name + ".gguf";
    GgufWriter writer;
    AddGgufModel(random, writer, type);
    writer.Write(path);
    SetGgmlActivationsForAll(GgmlActivations::kF32);
    const Model f32 = LoadModel(path);
    SetGgmlActivationsForAll(GgmlActivations::kInt8);
    const Model int8 = LoadModel(path, Precision::kNative);
    for (const LayerWeights& l : int8.weights.layers)
      for (const PackedWeight* w : {&l.packed->wq, &l.packed->wk, &l.packed->wv, &l.packed->wo,
                                    &l.packed->w1, &l.packed->w2, &l.packed->w3}) {
        ASSERT_EQ(w->ggml.type, type);
        EXPECT_NE(w->ggml.int8, nullptr);
      }
    EXPECT_NE(int8.weights.lm_head_packed->ggml.int8, nullptr);
    EXPECT_EQ(ActivationsName(int8), "int8");
    const std::vector<float> reference = Logits(f32, tokens);
    const double rounding =
        test::MaxRelDiff(Logits(int8, tokens), reference, name + " int8 x vs f32");
    EXPECT_GT(rounding, 0.0);  // x was rounded
    EXPECT_LT(rounding, 0.05);
    EXPECT_LT(test::MaxRelDiff(DecodeLogits(int8, tokens), Logits(int8, tokens),
                               name + " int8 x: decode vs prefill"),
              1e-5);
    SetGgmlActivationsForAll(GgmlActivations::kF32);
    EXPECT_EQ(ActivationsName(int8), "f32");
    EXPECT_LT(test::MaxRelDiff(Logits(int8, tokens), reference, name + " back at f32 x vs f32"),
              1e-5);
  }
  // gpt-oss, experts MXFP4 (the rest Q8_0): the stacked experts packed, an expert's rows a view.
  const std::string oss = test::WriteRandomHf(kTinyGptOss, 3, "int8_load_oss");
  GgufWriter oss_writer;
  const Model oss_f32 = LoadModel(oss);
  AddGgufModel(oss_f32, oss_writer, kGgmlTypeMXFP4);
  oss_writer.Write(dir + "/oss.gguf");
  // The experts alone take x in int8 here: with the attention's Q8_0 products rounding x too, the
  // router's input moves enough on this random model to flip a top-2 choice at one of the 20
  // tokens (measured: that token's logits 1.28 off, the others 0.06-0.26), a jump no rounding
  // bound describes. The dense model above checks Q8_0's int8 products.
  SetGgmlActivations(kGgmlTypeMXFP4, GgmlActivations::kInt8);
  const Model oss_int8 = LoadModel(dir + "/oss.gguf", Precision::kNative);
  for (const LayerWeights& l : oss_int8.weights.layers)
    for (const PackedWeight* w : {&l.packed->moe_w1, &l.packed->moe_w2, &l.packed->moe_w3}) {
      ASSERT_EQ(w->ggml.type, kGgmlTypeMXFP4);
      EXPECT_NE(w->ggml.int8, nullptr);
    }
  const std::vector<int> oss_tokens = Tokens(20, 61, 7);
  const Model oss_dequantised = LoadModel(dir + "/oss.gguf");  // f32: the same MXFP4 values
  const double oss_rounding = test::MaxRelDiff(
      Logits(oss_int8, oss_tokens), Logits(oss_dequantised, oss_tokens), "MXFP4 int8 x vs f32");
  EXPECT_GT(oss_rounding, 0.0);
  EXPECT_LT(oss_rounding, 0.05);
  SetGgmlActivationsForAll(GgmlActivations::kF32);
}

// The real stories260K as GGUF Q8_0: its 64-wide rows are Q8_0, its 172-wide MLP rows fall back to
// F16 in the writer; native keeps both (a model of mixed types) and matches the f32 load. A
// llama2.c file is all f32: native leaves it f32, bit for bit.
TEST(Precision, NativeOnStories260K) {
  const std::string dir = test::TempDir("native_stories");
  const test::CliResult gguf = test::RunCli("convert --model " + kStories + " --to gguf --out " +
                                            dir + "/s.gguf --type q8_0");
  ASSERT_EQ(gguf.code, 0) << gguf.err;
  const Model f32 = LoadModel(dir + "/s.gguf");
  const Model native = LoadModel(dir + "/s.gguf", Precision::kNative);
  const LayerPacked& p = *native.weights.layers[0].packed;
  EXPECT_EQ(p.wq.ggml.type, kGgmlTypeQ8_0);
  EXPECT_EQ(p.w1.ggml.type, kGgmlTypeQ8_0);  // (172, 64): rows of 64
  EXPECT_EQ(p.w2.ggml.type, kGgmlTypeF16);   // (64, 172): rows of 172, not whole Q8_0 blocks
  // The head is tied to the embedding: it reads the embedding's stored Q8_0 rows, the very bytes
  // the lookup reads (no f32 copy of either).
  ASSERT_TRUE(native.weights.lm_head_packed);
  EXPECT_EQ(native.weights.lm_head_packed->ggml.type, kGgmlTypeQ8_0);
  ExpectEmbeddingKeptAsStored(native, f32, GgufFile::Open(dir + "/s.gguf"), kGgmlTypeQ8_0,
                              "stories260K");
  EXPECT_EQ(native.weights.lm_head_packed->ggml.data, native.weights.embedding_packed->ggml.data);
  EXPECT_TRUE(native.weights.lm_head.empty());
  EXPECT_EQ(native.ParameterCount(), f32.ParameterCount());
  const std::vector<int> tokens = Tokens(32, f32.config.vocab_size, 5);
  EXPECT_LT(test::MaxRelDiff(Logits(native, tokens), Logits(f32, tokens),
                             "stories260K GGUF native prefill vs f32"),
            1e-5);
  EXPECT_LT(test::MaxRelDiff(DecodeLogits(native, tokens), DecodeLogits(f32, tokens),
                             "stories260K GGUF native decode vs f32"),
            1e-5);
  const Model llama2c = LoadModel(kStories, Precision::kNative);
  EXPECT_EQ(llama2c.precision, Precision::kNative);
  EXPECT_EQ(Logits(llama2c, tokens), Logits(LoadModel(kStories), tokens));
}

// A block scale that decodes to infinity is refused at load, naming the file, tensor and type.
// The same for the token embedding, which native keeps as stored too (no f32 copy checks it).
TEST(Precision, NativeRefusesANonFiniteScale) {
  const std::string dir = test::TempDir("native_bad");
  const Model random = test::RandomLlama({2, 4, 2, 256, 512, 300, 256, 6});
  GgufWriter writer;
  AddGgufModel(random, writer, kGgmlTypeQ4_K);
  writer.Write(dir + "/m.gguf");
  for (const std::string tensor : {"blk.1.ffn_down.weight", "token_embd.weight"}) {
    uint64_t offset = 0;
    {
      const GgufFile file = GgufFile::Open(dir + "/m.gguf");
      const GgufTensorInfo* t = file.FindTensor(tensor);
      ASSERT_NE(t, nullptr);
      ASSERT_EQ(t->type, kGgmlTypeQ4_K);
      offset = file.data_offset() + t->offset + 3 * 144 + 2;  // the fourth block's dmin
    }
    std::string bytes = ReadFile(dir + "/m.gguf");
    bytes[offset] = 0x00;
    bytes[offset + 1] = static_cast<char>(0x7C);  // +infinity in binary16
    WriteFileAtomic(dir + "/bad.gguf", bytes);
    try {
      LoadModel(dir + "/bad.gguf", Precision::kNative);
      ADD_FAILURE() << "loaded a Q4_K tensor with an infinite scale in " << tensor;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("bad.gguf: tensor '" + tensor + "' (Q4_K) holds a non-finite"),
                std::string::npos)
          << what;
    }
  }
}

// explain reads W_O directly (per-head output directions): from the packs when the model is held
// in bf16 only, with the same result as the packed f32 model.
TEST(Precision, ExplainOnBf16OnlyModel) {
  const std::string dir = test::TempDir("packed_only_explain");
  const std::string common = " --model " + kStories + " --samples 2 --length 32 --seed 3";
  const test::CliResult a =
      test::RunCli("explain" + common + " --precision bf16 --json " + dir + "/a.json");
  ASSERT_EQ(a.code, 0) << a.err;
  const test::CliResult b = test::RunCli("explain" + common + " --json " + dir + "/b.json");
  ASSERT_EQ(b.code, 0) << b.err;
  const auto ja = nlohmann::json::parse(ReadFile(dir + "/a.json"));
  const auto jb = nlohmann::json::parse(ReadFile(dir + "/b.json"));
  EXPECT_EQ(ja["model"]["precision"], "bf16");
  // Per-head terms against the f32 run: within the bf16 rounding of W_O and the activations.
  double worst = 0;
  size_t terms = 0;
  ASSERT_EQ(ja["layers"].size(), jb["layers"].size());
  for (size_t l = 0; l < ja["layers"].size(); ++l)
    for (const char* where : {"p0", "others"}) {
      const auto& ha = ja["layers"][l][where]["heads"];
      const auto& hb = jb["layers"][l][where]["heads"];
      ASSERT_EQ(ha.size(), hb.size());
      for (size_t h = 0; h < ha.size(); ++h, ++terms)
        worst = std::max(worst, std::abs(ha[h].get<double>() - hb[h].get<double>()));
    }
  std::printf("explain per-head terms, bf16-only vs f32: max abs diff %.3g over %zu terms\n", worst,
              terms);
  EXPECT_GT(terms, 0u);
  EXPECT_LT(worst, 5e-2);
  EXPECT_EQ(ja["verdict"], jb["verdict"]);
}

// A checkpoint whose weights cannot fit is refused before anything is allocated, at either
// precision, with both figures: here an embedding of 2^31 x 256 F16 values (a 1 TiB sparse file).
TEST(Precision, ModelLargerThanMemoryIsRefusedBeforeLoading) {
  const std::string dir = test::TempDir("too_big");
  WriteFileAtomic(dir + "/config.json", R"({"architectures": ["LlamaForCausalLM"],
    "model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 1,
    "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000,
    "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "tie_word_embeddings": true})");
  const uint64_t rows = uint64_t{1} << 31, bytes = rows * 256 * 2;
  const std::string header = "{\"model.embed_tokens.weight\": {\"dtype\": \"F16\", \"shape\": [" +
                             std::to_string(rows) + ", 256], \"data_offsets\": [0, " +
                             std::to_string(bytes) + "]}}";
  const std::string file = dir + "/model.safetensors";
  {
    std::FILE* f = std::fopen(file.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const uint64_t n = header.size();
    std::fwrite(&n, 8, 1, f);
    std::fwrite(header.data(), 1, header.size(), f);
    std::fclose(f);
  }
  std::filesystem::resize_file(file, 8 + header.size() + bytes);  // sparse: no disk used
  for (Precision p : {Precision::kF32, Precision::kBf16}) {
    try {
      LoadModel(dir, p);
      ADD_FAILURE() << "loaded a 1 TiB model";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(dir + ": loading the weights"), std::string::npos) << m;
      EXPECT_NE(m.find("needs 2.0 TiB of memory, but only"), std::string::npos) << m;
    }
  }
}

// The portable path (SINKSCOPE_SIMD=portable, or a CPU without AVX-512 BF16) rounds the operands
// the same way and differs only in the order of the f32 sums (tests/test_gemm_bf16.cpp compares the
// two products directly). Through a whole forward the SIMD level also changes exp and GELU, and a
// last-bit change in an activation can move its bf16 rounding, so here both are held to the same
// bound against f32 instead.
TEST(Precision, PortablePathStaysWithinBf16OfF32) {
  if (!Bf16KernelActive())
    GTEST_SKIP() << "no vector bf16 path on this CPU: only the portable path runs";
  Model model = LoadModel(kStories);
  const std::vector<int> tokens = Tokens(80, model.config.vocab_size, 3);
  const std::vector<float> f32 = Logits(model, tokens);
  SetPrecision(model, Precision::kBf16);
  const std::vector<float> fast = Logits(model, tokens);
  const SimdLevel before = ActiveSimdLevel();
  ForceSimdLevel(SimdLevel::kPortable);
  EXPECT_FALSE(Bf16KernelActive());
  EXPECT_NE(PrecisionNote(Precision::kBf16), "");
  const std::vector<float> portable = Logits(model, tokens);
  ForceSimdLevel(before);
  test::MaxRelDiff(portable, fast, "bf16 portable vs vector-path logits");
  const double rel = test::MaxRelDiff(portable, f32, "bf16 portable vs f32 logits");
  EXPECT_GT(rel, 0.0);
  EXPECT_LT(rel, 3e-2);
  EXPECT_EQ(PrecisionNote(Precision::kBf16), "");
  EXPECT_EQ(PrecisionNote(Precision::kF32), "");
}

struct MetricDiffs {
  double alpha = 0, p0_norm_ratio = 0, median_abs = 0, top_share = 0;
};

// The analysis at bf16 against f32 on the same samples: the largest differences of the metrics
// the reports show (alpha absolute; norm ratios and median |x| relative).
MetricDiffs AnalysisDiffs(Model& model, int T) {
  std::vector<std::vector<int>> samples;
  for (int i = 0; i < 4; ++i) samples.push_back(Tokens(T, model.config.vocab_size, 100 + i));
  analysis::AnalyzeOptions options;
  SetPrecision(model, Precision::kF32);
  const auto f = analysis::AnalyzeSamples(model, analysis::Condition::kNoBos, samples, options);
  SetPrecision(model, Precision::kBf16);
  const auto b = analysis::AnalyzeSamples(model, analysis::Condition::kNoBos, samples, options);
  SetPrecision(model, Precision::kF32);
  MetricDiffs d;
  for (size_t i = 0; i < f.alpha.size(); ++i)
    d.alpha = std::max(d.alpha, std::abs(b.alpha[i] - f.alpha[i]));
  for (size_t i = 0; i < f.top_share.size(); ++i)
    d.top_share = std::max(d.top_share, std::abs(b.top_share[i] - f.top_share[i]));
  for (size_t l = 0; l < f.p0_norm_ratio.size(); ++l) {
    d.p0_norm_ratio =
        std::max(d.p0_norm_ratio, std::abs(b.p0_norm_ratio[l] / f.p0_norm_ratio[l] - 1));
    d.median_abs = std::max(d.median_abs, std::abs(b.median_abs[l] / f.median_abs[l] - 1));
  }
  std::printf(
      "bf16 vs f32 analysis: max |d alpha| %.3g, max |d top share| %.3g, max rel d p0 norm "
      "ratio %.3g, max rel d median |x| %.3g\n",
      d.alpha, d.top_share, d.p0_norm_ratio, d.median_abs);
  return d;
}

// Different from f32 (the bf16 path ran), and within 0.02 on every metric.
void ExpectWithinBf16(const MetricDiffs& d) {
  EXPECT_GT(d.alpha, 0.0);
  EXPECT_LT(d.alpha, 0.02);
  EXPECT_LT(d.top_share, 0.02);
  EXPECT_LT(d.p0_norm_ratio, 0.02);
  EXPECT_LT(d.median_abs, 0.02);
}

TEST(Precision, AnalysisMetricsOnStories260K) {
  Model model = LoadModel(kStories);
  ExpectWithinBf16(AnalysisDiffs(model, 128));
}

TEST(Precision, AnalysisMetricsOnRandomGpt2) {
  Model model = SmallGpt2(4, 128, 500, 256);
  ExpectWithinBf16(AnalysisDiffs(model, 256));
}

// ---- the CLI

// Runs the CLI with stdout and stderr together (test::RunCli), with SINKSCOPE_SIMD set for it when
// `simd` is not empty.
struct CliRun {
  int code = -1;
  std::string output;
};

CliRun Cli(const std::string& args, const std::string& simd = "") {
  if (!simd.empty()) setenv("SINKSCOPE_SIMD", simd.c_str(), 1);
  const test::CliResult r = test::RunCli(args);
  if (!simd.empty()) unsetenv("SINKSCOPE_SIMD");
  return {r.code, r.out + r.err};
}

TEST(PrecisionCli, UnknownPrecisionIsRefusedOnEveryVerb) {
  const std::string dir = test::TempDir("precision_cli");
  const std::string json = " --json " + dir + "/out.json";
  for (const std::string& verb :
       {"analyze --model " + kStories + json, "explain --model " + kStories + json,
        "trace --checkpoints " + kStories + json,
        "train --preset quick --steps 2 --out " + dir + "/run"}) {
    const CliRun r = Cli(verb + " --precision fp8");
    EXPECT_EQ(r.code, 1) << verb << "\n" << r.output;
    EXPECT_NE(r.output.find(
                  "sinkscope: error: --precision: expected f32, bf16, q8_0 or native, got 'fp8'"),
              std::string::npos)
        << r.output;
    EXPECT_FALSE(FileExists(dir + "/out.json")) << verb;
    EXPECT_FALSE(FileExists(dir + "/run")) << verb;
  }
}

TEST(PrecisionCli, AnalyzeRecordsThePrecisionAndSaysWhenItIsSlow) {
  const std::string dir = test::TempDir("precision_cli_json");
  const std::string args =
      "analyze --model " + kStories + " --samples 2 --length 32 --json " + dir + "/";
  CliRun r = Cli(args + "bf16.json --precision bf16");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto j = nlohmann::json::parse(ReadFile(dir + "/bf16.json"));
  EXPECT_EQ(j["model"]["precision"], "bf16");
  EXPECT_EQ(r.output.find("portable path"), std::string::npos) << r.output;
  r = Cli(args + "f32.json");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(ReadFile(dir + "/f32.json"))["model"]["precision"], "f32");
  // Forced onto the portable path: the run goes on, and says why it is slow.
  r = Cli(args + "portable.json --precision bf16", "portable");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("note: --precision bf16:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("portable path"), std::string::npos) << r.output;
}

// Without --precision a model runs at the file's own precision: f32 for a file that stores every
// weight as F32 (the llama2.c file, HF and GGUF F32), native for one that stores them in a type the
// kernels multiply (HF BF16 / F16, GGUF Q8_0 / Q4_K, gpt-oss's MXFP4 experts in GGUF). The choice
// is logged and recorded in the JSON, and the results are exactly those of the explicit flag.
TEST(PrecisionCli, DefaultIsTheFilesPrecision) {
  const std::string dir = test::TempDir("precision_default");
  std::vector<std::pair<std::string, Precision>> files = {{kStories, Precision::kF32}};
  // A random Llama with rows of 256 and 512 (whole blocks of every type, Q4_K's included).
  Model random = test::RandomLlama({2, 4, 2, 256, 512, 300, 256, 5});
  for (auto [name, dtype, p] : {std::tuple{"hf_f32", SafetensorsDtype::kF32, Precision::kF32},
                                {"hf_bf16", SafetensorsDtype::kBF16, Precision::kNative},
                                {"hf_f16", SafetensorsDtype::kF16, Precision::kNative}}) {
    std::filesystem::create_directories(dir + "/" + name);
    WriteHfModel(random, dir + "/" + name, dtype);
    files.emplace_back(dir + "/" + name, p);
  }
  for (auto [type, p] : {std::pair{kGgmlTypeF32, Precision::kF32},
                         {kGgmlTypeQ8_0, Precision::kNative},
                         {kGgmlTypeQ4_K, Precision::kNative}}) {
    const std::string path = dir + "/m_" + GgmlTypeName(type) + ".gguf";
    GgufWriter writer;
    AddGgufModel(random, writer, type);
    writer.Write(path);
    files.emplace_back(path, p);
  }
  // gpt-oss with its experts in MXFP4 (convert's --type mxfp4: the experts MXFP4, the rest Q8_0).
  const std::string oss = test::WriteRandomHf(kTinyGptOss, 3, "precision_default_oss");
  GgufWriter oss_writer;
  AddGgufModel(LoadModel(oss), oss_writer, kGgmlTypeMXFP4);
  oss_writer.Write(dir + "/oss.gguf");
  files.emplace_back(dir + "/oss.gguf", Precision::kNative);
  files.emplace_back(oss, Precision::kF32);  // the same model as written: F32 safetensors

  const std::string tokens = dir + "/tokens.txt";
  std::string ids;
  for (int i = 0; i < 40; ++i) ids += std::to_string(3 + (7 * i) % 55) + " ";
  WriteFileAtomic(tokens, ids);
  for (const auto& [path, want] : files) {
    std::string why;
    EXPECT_EQ(FilePrecision(path, &why), want) << path << ": " << why;
    const std::string args = "analyze --model " + path + " --tokens " + tokens +
                             " --samples 2 --length 16 --conditions no-bos --json " + dir + "/";
    const CliRun by_default = Cli(args + "default.json");
    ASSERT_EQ(by_default.code, 0) << path << "\n" << by_default.output;
    EXPECT_NE(
        by_default.output.find(std::string("precision ") + PrecisionName(want) + " (the file's: "),
        std::string::npos)
        << by_default.output;
    const CliRun given = Cli(args + "given.json --precision " + PrecisionName(want));
    ASSERT_EQ(given.code, 0) << path << "\n" << given.output;
    EXPECT_NE(given.output.find(std::string("precision ") + PrecisionName(want) + " (--precision)"),
              std::string::npos)
        << given.output;
    const auto a = nlohmann::json::parse(ReadFile(dir + "/default.json"));
    const auto b = nlohmann::json::parse(ReadFile(dir + "/given.json"));
    EXPECT_EQ(a["model"]["precision"], PrecisionName(want)) << path;
    EXPECT_EQ(a["conditions"], b["conditions"])
        << path << ": the default differs from --precision " << PrecisionName(want);
    if (want == Precision::kF32) {  // native on an all-F32 file is the f32 forward too
      ASSERT_EQ(Cli(args + "native.json --precision native").code, 0) << path;
      EXPECT_EQ(a["conditions"],
                nlohmann::json::parse(ReadFile(dir + "/native.json"))["conditions"])
          << path;
    }
    std::printf("%s: default precision %s (%s); its analysis equals --precision %s's\n",
                path.c_str(), PrecisionName(want), why.c_str(), PrecisionName(want));
  }
}

// --activations on the command line: refused unless f32 or int8; int8 logged with the types and
// recorded in the JSON ("activations"), f32 (the default) too.
TEST(PrecisionCli, ActivationsAreLoggedAndRecorded) {
  if (CpuSimdLevel() == SimdLevel::kPortable) GTEST_SKIP() << "the CPU has no AVX2";
  const std::string dir = test::TempDir("activations_cli");
  const CliRun bad = Cli("analyze --model " + kStories + " --activations int4");
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_NE(bad.output.find("sinkscope: error: --activations: expected f32 or int8, got 'int4'"),
            std::string::npos)
      << bad.output;
  Model random = test::RandomLlama({2, 4, 2, 256, 512, 300, 256, 5});
  GgufWriter writer;
  AddGgufModel(random, writer, kGgmlTypeQ4_0);
  writer.Write(dir + "/q4_0.gguf");
  std::string ids;
  for (int i = 0; i < 20; ++i) ids += std::to_string(3 + (7 * i) % 290) + " ";
  WriteFileAtomic(dir + "/tokens.txt", ids);
  const std::string args = "analyze --model " + dir + "/q4_0.gguf --tokens " + dir + "/tokens.txt" +
                           " --samples 1 --length 16 --conditions no-bos --json " + dir + "/";
  const CliRun int8 = Cli(args + "int8.json --activations int8");
  ASSERT_EQ(int8.code, 0) << int8.output;
  EXPECT_NE(int8.output.find("x in int8 for Q4_0, Q4_K, Q6_K, Q8_0, MXFP4 weights (--activations;"),
            std::string::npos)
      << int8.output;
  EXPECT_EQ(nlohmann::json::parse(ReadFile(dir + "/int8.json"))["model"]["activations"], "int8");
  const CliRun plain = Cli(args + "f32.json");
  ASSERT_EQ(plain.code, 0) << plain.output;
  EXPECT_EQ(plain.output.find("x in int8"), std::string::npos) << plain.output;
  EXPECT_EQ(nlohmann::json::parse(ReadFile(dir + "/f32.json"))["model"]["activations"], "f32");

  // The verb's default: stream (a decode verb) takes x in int8 unless told f32; a measuring verb's
  // default is f32, as the analyze run above without --activations showed.
  const std::string stream = "stream --model " + dir + "/q4_0.gguf --tokens " + dir +
                             "/tokens.txt --sinks 2 --window 8 --json " + dir + "/";
  const CliRun by_default = Cli(stream + "stream_default.json");
  ASSERT_EQ(by_default.code, 0) << by_default.output;
  EXPECT_NE(by_default.output.find("x in int8 for Q4_0"), std::string::npos) << by_default.output;
  const auto settings = [&](const std::string& name) {
    return nlohmann::json::parse(ReadFile(dir + "/" + name))["settings"];
  };
  EXPECT_EQ(settings("stream_default.json")["activations"], "int8");
  const CliRun told_f32 = Cli(stream + "stream_f32.json --activations f32");
  ASSERT_EQ(told_f32.code, 0) << told_f32.output;
  EXPECT_EQ(told_f32.output.find("x in int8"), std::string::npos) << told_f32.output;
  EXPECT_EQ(settings("stream_f32.json")["activations"], "f32");
  // Both runs score the same tokens; int8 x moves the mean NLL by a small fraction of it (the
  // random model's logits are large, so its NLL is too; printed).
  const auto mean_nll = [&](const std::string& name) {
    return nlohmann::json::parse(ReadFile(dir + "/" + name))["runs"][0]["mean_nll"].get<double>();
  };
  const double nll_int8 = mean_nll("stream_default.json"), nll_f32 = mean_nll("stream_f32.json");
  std::printf("stream on a Q4_0 file: mean NLL %.6f with x in int8 (default), %.6f in f32\n",
              nll_int8, nll_f32);
  EXPECT_NEAR(nll_int8, nll_f32, 1e-3 * std::abs(nll_f32));

  // --precision q8_0 on the shipped f32 model: its Q8_0 blocks take x in int8 on stream too, unless
  // told f32.
  const std::string q8 = "stream --model " + kStories + " --precision q8_0 --tokens " + dir +
                         "/tokens.txt --sinks 2 --window 8 --json " + dir + "/";
  const CliRun q8_default = Cli(q8 + "q8_default.json");
  ASSERT_EQ(q8_default.code, 0) << q8_default.output;
  EXPECT_NE(q8_default.output.find("x in int8 for Q8_0 weights (--activations;"), std::string::npos)
      << q8_default.output;
  EXPECT_EQ(settings("q8_default.json")["activations"], "int8");
  const CliRun q8_f32 = Cli(q8 + "q8_f32.json --activations f32");
  ASSERT_EQ(q8_f32.code, 0) << q8_f32.output;
  EXPECT_EQ(q8_f32.output.find("x in int8"), std::string::npos) << q8_f32.output;
  EXPECT_EQ(settings("q8_f32.json")["activations"], "f32");
}

// ppl at q8_0 on the shipped model: the per-token NLL of the f32 run within the Q8_0 rounding
// (printed), the precision recorded; training refuses q8_0 by name and writes nothing.
TEST(PrecisionCli, PerplexityAtQ8_0AndTrainingRefusesIt) {
  const std::string dir = test::TempDir("precision_cli_q8");
  const std::string text = dir + "/text.txt";  // within the model's context of 512
  WriteFileAtomic(text, ReadFile(test::RepoPath("data/default_text.txt")).substr(0, 1000));
  const std::string args = "ppl --model " + kStories + " --text " + text + " --json " + dir + "/";
  CliRun r = Cli(args + "q8.json --precision q8_0");
  ASSERT_EQ(r.code, 0) << r.output;
  r = Cli(args + "f32.json");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto q8 = nlohmann::json::parse(ReadFile(dir + "/q8.json"));
  const auto f32 = nlohmann::json::parse(ReadFile(dir + "/f32.json"));
  ASSERT_EQ(q8["nll"].size(), f32["nll"].size());
  ASSERT_GT(q8["nll"].size(), 100u);
  double worst = 0;
  for (size_t i = 0; i < q8["nll"].size(); ++i)
    worst = std::max(worst, std::abs(q8["nll"][i].get<double>() - f32["nll"][i].get<double>()));
  std::printf(
      "ppl q8_0 vs f32 on stories260K: mean NLL %.5f vs %.5f, max |d NLL| %.3g over %zu tokens\n",
      q8["mean_nll"].get<double>(), f32["mean_nll"].get<double>(), worst, q8["nll"].size());
  EXPECT_GT(worst, 0.0);
  EXPECT_LT(worst, 0.3);
  EXPECT_LT(std::abs(q8["mean_nll"].get<double>() - f32["mean_nll"].get<double>()), 0.01);
  r = Cli("train --preset quick --steps 2 --precision q8_0 --out " + dir + "/run");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("q8_0 holds weights for inference only"), std::string::npos) << r.output;
  EXPECT_FALSE(FileExists(dir + "/run"));
}

}  // namespace
}  // namespace ss
