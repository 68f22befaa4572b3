// GGUF reader: the real vocabulary files, every value type, tensor layout, and malformed files
// (each must fail with an ss::Error that names the file and the problem).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "common/file_util.h"
#include "gguf_writer.h"
#include "io/gguf.h"
#include "test_util.h"

namespace ss {
namespace {

using test::GgufWriter;

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("sinkscope_test_gguf_" + std::to_string(getpid()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string Write(const std::string& name, const std::string& bytes) const {
    std::string p = (path_ / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }

 private:
  std::filesystem::path path_;
};

// Opens `bytes` written to a file and returns the error message ("" if it opened).
std::string OpenError(const TempDir& dir, const std::string& name, const std::string& bytes) {
  std::string path = dir.Write(name, bytes);
  try {
    GgufFile::Open(path);
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << "message does not name the file: " << msg;
    return msg;
  }
  return "";
}

TEST(Gguf, RealVocabularyFiles) {
  struct Case {
    const char* file;
    const char* model;
    size_t n_tokens;
  };
  for (const Case& c : {Case{"ggml-vocab-gpt-2.gguf", "gpt2", 50257},
                        Case{"ggml-vocab-gpt-neox.gguf", "gpt2", 50432},
                        Case{"ggml-vocab-llama-spm.gguf", "llama", 32000}}) {
    GgufFile f = GgufFile::Open(test::RepoPath(std::string("tests/data/tokenizers/") + c.file));
    EXPECT_TRUE(f.version() == 2 || f.version() == 3) << c.file;
    EXPECT_TRUE(f.tensors().empty()) << c.file;
    EXPECT_EQ(f.GetString("tokenizer.ggml.model"), c.model) << c.file;
    EXPECT_EQ(f.GetStringArray("tokenizer.ggml.tokens").size(), c.n_tokens) << c.file;
    std::printf("%s: GGUF v%u, %zu keys, general.architecture=%s, pre=%s\n", c.file, f.version(),
                f.keys().size(), f.GetString("general.architecture", "?").c_str(),
                f.GetString("tokenizer.ggml.pre", "(none)").c_str());
  }
}

TEST(Gguf, AllValueTypesAndTensors) {
  GgufWriter w;
  w.KeyU32("u32", 4000000000u);
  w.KeyI32("i32", -7);
  w.KeyF32("f32", 0.5f);
  w.KeyBool("flag", true);
  w.KeyString("name", "héllo");
  w.KeyU64("u64", 1ull << 40);
  w.KeyF64("f64", -2.25);
  w.KeyStrings("strs", {"a", "", "ccc"});
  w.KeyF32s("floats", {1.f, -2.f});
  w.KeyI32s("ints", {3, -4, 5});
  w.KeyRaw("u8", 0, std::string(1, '\xff'));
  w.KeyRaw("i8", 1, std::string(1, '\xff'));
  w.KeyRaw("u16", 2, std::string("\x01\x02", 2));
  w.KeyRaw("i16", 3, std::string("\xfe\xff", 2));
  // An array of arrays: [[1, 2], []] of uint8.
  std::string nested;
  GgufWriter::Put<uint32_t>(nested, 9);
  GgufWriter::Put<uint64_t>(nested, 2);
  GgufWriter::Put<uint32_t>(nested, 0);
  GgufWriter::Put<uint64_t>(nested, 2);
  nested += "\x01\x02";
  GgufWriter::Put<uint32_t>(nested, 0);
  GgufWriter::Put<uint64_t>(nested, 0);
  w.KeyRaw("nested", 9, nested);
  w.KeyU32("general.alignment", 64);
  // F32 [4, 2] = 32 bytes at 0; Q4_0 [64] = 2 blocks x 18 = 36 bytes at 64.
  w.Tensor("a", {4, 2}, 0, 0);
  w.Tensor("b.weight", {64}, 2, 64);
  std::string data(128, '\0');
  float v = 3.5f;
  std::memcpy(data.data(), &v, 4);
  std::string bytes = w.Build(data, 64);
  GgufFile f = GgufFile::Parse("mem.gguf", reinterpret_cast<const uint8_t*>(bytes.data()),
                               bytes.size(), nullptr);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.GetInt("u32"), 4000000000LL);
  EXPECT_EQ(f.GetInt("i32"), -7);
  EXPECT_EQ(f.GetFloat("f32"), 0.5);
  EXPECT_TRUE(f.GetBool("flag"));
  EXPECT_EQ(f.GetString("name"), "héllo");
  EXPECT_EQ(f.GetInt("u64"), 1LL << 40);
  EXPECT_EQ(f.GetFloat("f64"), -2.25);
  EXPECT_EQ(f.GetStringArray("strs"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f.GetFloatArray("floats"), (std::vector<double>{1, -2}));
  EXPECT_EQ(f.GetIntArray("ints"), (std::vector<int64_t>{3, -4, 5}));
  EXPECT_EQ(f.GetInt("u8"), 255);
  EXPECT_EQ(f.GetInt("i8"), -1);
  EXPECT_EQ(f.GetInt("u16"), 0x0201);
  EXPECT_EQ(f.GetInt("i16"), -2);
  EXPECT_EQ(f.Find("nested")->array_count, 2u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensorInfo* a = f.FindTensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(a->n_bytes, 32u);
  float read;
  std::memcpy(&read, a->data, 4);
  EXPECT_EQ(read, 3.5f);
  const GgufTensorInfo* b = f.FindTensor("b.weight");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->n_bytes, 36u);
  EXPECT_EQ(b->data, a->data + 64);
  EXPECT_EQ(f.FindTensor("missing"), nullptr);

  // Typed getters name the file, the key and both types.
  try {
    f.GetString("i32");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "mem.gguf: metadata key 'i32': expected a string, found int32");
  }
  try {
    f.GetInt("missing.key");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing metadata key 'missing.key'"), std::string::npos);
  }
  EXPECT_EQ(f.GetInt("missing.key", 5), 5);
}

TEST(Gguf, GgmlTypeTable) {
  EXPECT_STREQ(FindGgmlType(0)->name, "F32");
  EXPECT_EQ(FindGgmlType(8)->block_bytes, 34);    // Q8_0: half scale + 32 int8
  EXPECT_EQ(FindGgmlType(14)->block_bytes, 210);  // Q6_K
  EXPECT_EQ(FindGgmlType(30)->block_bytes, 2);    // BF16
  EXPECT_EQ(FindGgmlType(4), nullptr);            // removed Q4_2
  EXPECT_STREQ(FindGgmlType(39)->name, "MXFP4");  // ggml.h: GGML_TYPE_MXFP4 = 39
  EXPECT_EQ(FindGgmlType(39)->block_size, 32);
  EXPECT_EQ(FindGgmlType(39)->block_bytes, 17);  // block_mxfp4: uint8 e + 16 bytes of nibbles
  EXPECT_EQ(FindGgmlType(38), nullptr);          // removed IQ4_NL_8_8
  EXPECT_EQ(FindGgmlType(1000), nullptr);
}

TEST(Gguf, VocabularyOnlyFileIsValid) {
  GgufWriter w(2);
  w.KeyString("general.architecture", "llama");
  std::string bytes = w.Build();
  GgufFile f = GgufFile::Parse("v.gguf", reinterpret_cast<const uint8_t*>(bytes.data()),
                               bytes.size(), nullptr);
  EXPECT_EQ(f.version(), 2u);
  EXPECT_TRUE(f.tensors().empty());
}

std::string SmallFileWithTensor() {
  GgufWriter w;
  w.KeyString("general.architecture", "llama");
  w.KeyStrings("tokenizer.ggml.tokens", {"a", "b"});
  w.Tensor("t", {8}, 0, 0);
  return w.Build(std::string(32, '\x01'));
}

TEST(Gguf, EveryTruncationFailsCleanly) {
  TempDir dir;
  std::string full = SmallFileWithTensor();
  ASSERT_EQ(OpenError(dir, "full.gguf", full), "");
  for (size_t n = 0; n < full.size(); ++n) {
    std::string msg = OpenError(dir, "cut.gguf", full.substr(0, n));
    EXPECT_NE(msg, "") << "truncated to " << n << " bytes but opened";
  }
  // The real vocabulary, cut at a spread of places (the header is all of it: 0 tensors).
  std::string vocab = ReadFile(test::RepoPath("tests/data/tokenizers/ggml-vocab-llama-spm.gguf"));
  for (size_t n : {size_t{3}, size_t{10}, size_t{23}, size_t{100}, vocab.size() / 3,
                   vocab.size() / 2, vocab.size() - 1}) {
    std::string msg = OpenError(dir, "vocab-cut.gguf", vocab.substr(0, n));
    EXPECT_NE(msg, "") << "vocabulary truncated to " << n << " bytes but opened";
    std::printf("cut at %zu: %s\n", n, msg.c_str());
  }
}

TEST(Gguf, MalformedHeaders) {
  TempDir dir;
  auto expect = [&](const std::string& bytes, const std::string& needle) {
    std::string msg = OpenError(dir, "bad.gguf", bytes);
    EXPECT_NE(msg.find(needle), std::string::npos)
        << "message: '" << msg << "' lacks '" << needle << "'";
  };
  std::string good = SmallFileWithTensor();

  std::string bad_magic = good;
  bad_magic[0] = 'X';
  expect(bad_magic, "not a GGUF file: expected magic \"GGUF\", found \"XGUF\"");

  std::string v1 = good;
  v1[4] = 1;
  expect(v1, "GGUF version 1 (32-bit counts) is not supported");
  std::string v9 = good;
  v9[4] = 9;
  expect(v9, "unsupported GGUF version 9");

  {  // A string length far beyond the file.
    GgufWriter w;
    std::string value;
    GgufWriter::Put<uint64_t>(value, 1ull << 62);
    w.KeyRaw("name", 8, value);
    expect(w.Build(), "has length 4611686018427387904 but only 0 bytes remain");
  }
  {  // An absurd array count: must fail before allocating.
    GgufWriter w;
    std::string value;
    GgufWriter::Put<uint32_t>(value, 8);
    GgufWriter::Put<uint64_t>(value, 1ull << 61);
    w.KeyRaw("tokenizer.ggml.tokens", 9, value);
    expect(w.Build(), "array count 2305843009213693952");
  }
  {  // Absurd key count.
    std::string bytes = "GGUF";
    GgufWriter::Put<uint32_t>(bytes, 3);
    GgufWriter::Put<uint64_t>(bytes, 0);
    GgufWriter::Put<uint64_t>(bytes, ~0ull);
    expect(bytes, "metadata count 18446744073709551615");
  }
  {
    GgufWriter w;
    w.KeyRaw("weird", 13, "");
    expect(w.Build(), "key 'weird': unknown value type 13");
  }
  {
    GgufWriter w;
    std::string value;
    GgufWriter::Put<uint32_t>(value, 77);
    GgufWriter::Put<uint64_t>(value, 0);
    w.KeyRaw("arr", 9, value);
    expect(w.Build(), "key 'arr': unknown array element type 77");
  }
  {
    GgufWriter w;
    w.KeyRaw("b", 7, std::string(1, '\x05'));
    expect(w.Build(), "key 'b': bool value is 5");
  }
  {
    GgufWriter w;
    w.Tensor("blk.0.weird", {32}, 99, 0);
    expect(w.Build(std::string(256, '\0')), "tensor 'blk.0.weird' has unknown ggml type 99");
  }
  {
    GgufWriter w;
    w.Tensor("big", {1024, 1024}, 0, 0);
    expect(w.Build(std::string(64, '\0')),
           "tensor 'big' (4194304 bytes at data offset 0) extends beyond the end");
  }
  {
    GgufWriter w;
    w.Tensor("far", {8}, 0, 1ull << 40);
    expect(w.Build(std::string(64, '\0')), "tensor 'far' (32 bytes at data offset 1099511627776)");
  }
  {
    GgufWriter w;
    w.Tensor("x", {16}, 0, 0);
    w.Tensor("y", {16}, 0, 32);
    expect(w.Build(std::string(128, '\0')), "tensors 'x' (bytes 0..64) and 'y' (from 32) overlap");
  }
  {
    GgufWriter w;
    w.Tensor("huge", {1ull << 40, 1ull << 40}, 0, 0);
    expect(w.Build(std::string(64, '\0')), "tensor 'huge': dimensions overflow");
  }
  {
    GgufWriter w;
    w.Tensor("q", {33}, 2, 0);
    expect(w.Build(std::string(64, '\0')),
           "first dimension 33 is not a multiple of the block size 32");
  }
  {
    GgufWriter w;
    w.Tensor("m", {4}, 0, 8);
    expect(w.Build(std::string(64, '\0')),
           "tensor 'm': data offset 8 is not a multiple of the alignment 32");
  }
  {
    GgufWriter w;
    w.Tensor("d", {4, 1, 1, 1, 1}, 0, 0);
    expect(w.Build(std::string(64, '\0')), "tensor 'd' has 5 dimensions");
  }
  {
    GgufWriter w;
    w.KeyU32("general.alignment", 24);
    expect(w.Build(), "general.alignment is 24");
  }
  {
    GgufWriter w;
    w.KeyU32("k", 1);
    w.KeyU32("k", 2);
    expect(w.Build(), "duplicate metadata key 'k'");
  }
  expect("", "not a GGUF file");
}

}  // namespace
}  // namespace ss
