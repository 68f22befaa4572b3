// safetensors reader and writer: round trips, sharded checkpoints, and one test per kind of broken
// file, each checking that the message names the file and (where one is at fault) the tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/file_util.h"
#include "io/safetensors.h"
#include "tensor/half.h"
#include "test_util.h"

namespace ss {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("sinkscope_st_{}_{}", getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // A file from a header text and a data section; header_len overrides the length field.
  std::string MakeFile(const std::string& name, const std::string& header, size_t data_bytes,
                       int64_t header_len = -1) {
    std::string bytes(8, '\0');
    uint64_t len = header_len >= 0 ? static_cast<uint64_t>(header_len) : header.size();
    std::memcpy(bytes.data(), &len, 8);
    bytes += header;
    bytes.append(data_bytes, '\x01');
    std::string path = Path(name);
    WriteFileAtomic(path, bytes);
    return path;
  }

  // Expects opening `path` to fail with a message containing every one of `parts`.
  void ExpectOpenError(const std::string& path, const std::vector<std::string>& parts) {
    try {
      SafetensorsFile::Open(path);
      ADD_FAILURE() << "opened " << path;
    } catch (const Error& e) {
      std::string message = e.what();
      std::printf("error: %s\n", message.c_str());
      EXPECT_NE(message.find(path), std::string::npos) << message;
      for (const auto& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
    }
  }

  fs::path dir_;
};

Tensor Arange(std::vector<int64_t> shape, float scale) {
  Tensor t = Tensor::Zeros(std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = scale * static_cast<float>(i) - 1.0f;
  return t;
}

TEST_F(SafetensorsTest, F32RoundTripIsZeroCopyAndAligned) {
  Tensor a = Arange({3, 5}, 0.1f), b = Arange({7}, -2.0f), scalar = Tensor::Zeros({});
  scalar[0] = 42.0f;
  std::string path = Path("a.safetensors");
  WriteSafetensors(path, {{"w.a", a}, {"w.b", b}, {"s", scalar}, {"empty", Tensor::Zeros({0, 4})}},
                   SafetensorsDtype::kF32, {{"format", "pt"}, {"note", "x"}});
  std::string raw = ReadFile(path);
  uint64_t header_len;
  std::memcpy(&header_len, raw.data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u) << "header must be padded to 8 bytes";

  SafetensorsFile file = SafetensorsFile::Open(path);
  EXPECT_EQ(file.names(), (std::vector<std::string>{"empty", "s", "w.a", "w.b"}));
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.Info("w.a").dtype, SafetensorsDtype::kF32);
  EXPECT_EQ(file.Info("w.a").shape, (std::vector<int64_t>{3, 5}));
  Tensor la = file.Load("w.a");
  EXPECT_EQ(la.shape(), a.shape());
  EXPECT_EQ(test::MaxDiff(la.data(), a.data(), a.numel(), "F32 round trip"), 0.0);
  EXPECT_EQ(file.Load("w.b")[6], b[6]);
  EXPECT_EQ(file.Load("s").rank(), 0);
  EXPECT_EQ(file.Load("s")[0], 42.0f);
  EXPECT_EQ(file.Load("empty").numel(), 0);
  // Zero-copy: the tensor points into the mapped file, at the tensor's raw bytes.
  EXPECT_EQ(static_cast<const void*>(la.data()), static_cast<const void*>(file.RawData("w.a")));
}

TEST_F(SafetensorsTest, F16AndBF16ConvertAtLoad) {
  // Values exactly representable in both 16-bit formats survive unchanged.
  Tensor t = Tensor::Zeros({2, 3});
  const float values[] = {1.0f, -2.5f, 0.125f, 1024.0f, -0.0f, 3.0f};
  for (int i = 0; i < 6; ++i) t[i] = values[i];
  for (auto dtype : {SafetensorsDtype::kF16, SafetensorsDtype::kBF16}) {
    std::string path = Path(std::string(SafetensorsDtypeName(dtype)) + ".safetensors");
    WriteSafetensors(path, {{"t", t}}, dtype);
    SafetensorsFile file = SafetensorsFile::Open(path);
    EXPECT_EQ(file.Info("t").dtype, dtype);
    EXPECT_EQ(file.Info("t").end - file.Info("t").begin, 12u);
    Tensor back = file.Load("t");
    EXPECT_EQ(back.shape(), t.shape());
    EXPECT_EQ(test::MaxDiff(back.data(), t.data(), 6, SafetensorsDtypeName(dtype)), 0.0);
  }
  // A value that must round: 1 + 2^-11 is halfway between two binary16 values; ties to even (1.0).
  Tensor r = Tensor::Zeros({1});
  r[0] = 1.0f + 1.0f / 2048;
  WriteSafetensors(Path("r.safetensors"), {{"r", r}}, SafetensorsDtype::kF16);
  EXPECT_EQ(SafetensorsFile::Open(Path("r.safetensors")).Load("r")[0], 1.0f);
}

// A converted (BF16) tensor's pages are released from the mapping after the load
// (ReleaseMappedPages); loading it again reads the same values back from the file, and a buffer
// given to FromBytes is never released (its bytes would be lost).
TEST_F(SafetensorsTest, ConvertedTensorsLoadAgainAfterTheirPagesAreReleased) {
  Tensor t = Tensor::Zeros({3, 4096});  // several pages of bf16
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = static_cast<float>(i % 251) - 125.0f;
  WriteSafetensors(Path("big.safetensors"), {{"a", t}, {"b", t}}, SafetensorsDtype::kBF16);
  SafetensorsFile file = SafetensorsFile::Open(Path("big.safetensors"));
  auto bytes = std::make_shared<const std::string>(ReadFile(Path("big.safetensors")));
  SafetensorsFile memory = SafetensorsFile::FromBytes(bytes, "memory");
  for (int pass = 0; pass < 2; ++pass)
    for (const SafetensorsFile* f : {&file, &memory})
      for (const char* name : {"a", "b"}) {
        const Tensor back = f->Load(name);
        EXPECT_EQ(test::MaxDiff(back.data(), t.data(), t.numel(), "bf16 reload"), 0.0)
            << name << " pass " << pass;
      }
}

TEST_F(SafetensorsTest, FromBytesMatchesOpen) {
  WriteSafetensors(Path("m.safetensors"), {{"x", Arange({4}, 1.0f)}});
  auto bytes = std::make_shared<const std::string>(ReadFile(Path("m.safetensors")));
  SafetensorsFile file = SafetensorsFile::FromBytes(bytes, "memory");
  EXPECT_EQ(file.Load("x")[3], 2.0f);
}

TEST_F(SafetensorsTest, ShardedIndexAndDirectory) {
  fs::create_directories(dir_ / "sharded");
  WriteSafetensors(Path("sharded/model-00001-of-00002.safetensors"),
                   {{"embed", Arange({4, 2}, 1.0f)}, {"layer0", Arange({2}, 2.0f)}});
  WriteSafetensors(Path("sharded/model-00002-of-00002.safetensors"),
                   {{"layer1", Arange({3}, 3.0f)}}, SafetensorsDtype::kBF16);
  WriteFileAtomic(Path("sharded/model.safetensors.index.json"), R"({
    "metadata": {"total_size": 52},
    "weight_map": {"embed": "model-00001-of-00002.safetensors",
                   "layer0": "model-00001-of-00002.safetensors",
                   "layer1": "model-00002-of-00002.safetensors"}})");
  for (const std::string& path : {Path("sharded"), Path("sharded/model.safetensors.index.json")}) {
    SafetensorsDir dir = SafetensorsDir::Open(path);
    EXPECT_EQ(dir.shard_count(), 2u);
    EXPECT_EQ(dir.names(), (std::vector<std::string>{"embed", "layer0", "layer1"}));
    EXPECT_EQ(dir.Load("layer1")[2], 5.0f);
    EXPECT_EQ(dir.Load("embed").shape(), (std::vector<int64_t>{4, 2}));
    EXPECT_NE(dir.FileOf("layer1").find("model-00002-of-00002"), std::string::npos);
  }
  // A directory with a single model.safetensors, and a plain file path.
  fs::create_directories(dir_ / "single");
  WriteSafetensors(Path("single/model.safetensors"), {{"w", Arange({2}, 1.0f)}});
  EXPECT_EQ(SafetensorsDir::Open(Path("single")).Load("w")[1], 0.0f);
  EXPECT_EQ(SafetensorsDir::Open(Path("single/model.safetensors")).names().size(), 1u);
}

TEST_F(SafetensorsTest, ShardedErrorsNameIndexAndTensor) {
  WriteSafetensors(Path("shard.safetensors"), {{"a", Arange({2}, 1.0f)}});
  WriteFileAtomic(Path("missing.index.json"),
                  R"({"weight_map": {"a": "shard.safetensors", "ghost": "shard.safetensors"}})");
  try {
    SafetensorsDir::Open(Path("missing.index.json"));
    FAIL();
  } catch (const Error& e) {
    std::printf("error: %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("missing.index.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("'ghost'"), std::string::npos);
  }
  WriteFileAtomic(Path("escape.index.json"), R"({"weight_map": {"a": "../shard.safetensors"}})");
  EXPECT_THROW(SafetensorsDir::Open(Path("escape.index.json")), Error);
  WriteFileAtomic(Path("noweights.index.json"), R"({"metadata": {}})");
  EXPECT_THROW(SafetensorsDir::Open(Path("noweights.index.json")), Error);
  fs::create_directories(dir_ / "empty");
  EXPECT_THROW(SafetensorsDir::Open(Path("empty")), Error);
}

TEST_F(SafetensorsTest, TooShort) {
  std::string path = Path("short.safetensors");
  WriteFileAtomic(path, std::string("abc"));
  ExpectOpenError(path, {"too short"});
}

TEST_F(SafetensorsTest, HeaderLengthBeyondFile) {
  std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  ExpectOpenError(MakeFile("long.safetensors", header, 4, 1000), {"1000", "past the end"});
  ExpectOpenError(MakeFile("huge.safetensors", header, 4, int64_t{1} << 40), {"100 MiB"});
}

TEST_F(SafetensorsTest, MalformedJson) {
  ExpectOpenError(MakeFile("bad.safetensors", R"({"w": {"dtype": "F32", )", 0), {"malformed"});
  ExpectOpenError(MakeFile("array.safetensors", "[1, 2]", 0), {"'{'"});
  ExpectOpenError(MakeFile("field.safetensors", R"({"w": {"dtype": "F32", "shape": [1]}})", 4),
                  {"'w'", "data_offsets"});
  ExpectOpenError(MakeFile("meta.safetensors", R"({"__metadata__": {"a": 1}})", 0),
                  {"__metadata__"});
}

TEST_F(SafetensorsTest, OffsetsOutOfRange) {
  ExpectOpenError(MakeFile("range.safetensors",
                           R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
                  {"'w'", "out of range", "8 bytes"});
}

TEST_F(SafetensorsTest, OffsetsOverlap) {
  ExpectOpenError(MakeFile("overlap.safetensors",
                           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           12),
                  {"'b'", "'a'", "overlap"});
}

TEST_F(SafetensorsTest, HoleAndTrailingBytes) {
  ExpectOpenError(MakeFile("hole.safetensors",
                           R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                           12),
                  {"'b'", "hole"});
  ExpectOpenError(MakeFile("trail.safetensors",
                           R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 10),
                  {"6 trailing bytes"});
}

TEST_F(SafetensorsTest, SizeMismatch) {
  ExpectOpenError(MakeFile("size.safetensors",
                           R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20),
                  {"'w'", "[2, 3]", "24 bytes", "span 20"});
  ExpectOpenError(MakeFile("negative.safetensors",
                           R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
                  {"'w'", "non-negative"});
  // A product of dims that overflows 64 bits must not wrap around to a small size.
  ExpectOpenError(MakeFile("overflow.safetensors",
                           R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],)"
                           R"("data_offsets":[0,0]}})",
                           0),
                  {"'w'"});
}

TEST_F(SafetensorsTest, UnknownAndUnsupportedDtype) {
  ExpectOpenError(MakeFile("unknown.safetensors",
                           R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4),
                  {"'w'", "'F33'"});
  // I64 is a valid safetensors dtype: the file opens, loading it as float32 fails by name.
  std::string path = MakeFile("i64.safetensors",
                              R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", 16);
  SafetensorsFile file = SafetensorsFile::Open(path);
  try {
    file.Load("ids");
    FAIL();
  } catch (const Error& e) {
    std::printf("error: %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("'ids'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("I64"), std::string::npos);
  }
  try {
    file.Load("nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
}

TEST_F(SafetensorsTest, DuplicateNames) {
  ExpectOpenError(MakeFile("dup.safetensors",
                           R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           8),
                  {"duplicate key 'w'"});
}

TEST_F(SafetensorsTest, MisalignedF32IsCopied) {
  // A header of odd length (no padding) leaves F32 data misaligned; Load must still work.
  std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  if ((8 + header.size()) % 4 == 0) header += " ";
  std::string bytes(8, '\0');
  uint64_t len = header.size();
  std::memcpy(bytes.data(), &len, 8);
  bytes += header;
  float values[2] = {1.5f, -2.0f};
  bytes.append(reinterpret_cast<const char*>(values), 8);
  WriteFileAtomic(Path("odd.safetensors"), bytes);
  Tensor t = SafetensorsFile::Open(Path("odd.safetensors")).Load("w");
  EXPECT_EQ(t[0], 1.5f);
  EXPECT_EQ(t[1], -2.0f);
}

TEST_F(SafetensorsTest, WriterRejectsBadInput) {
  std::string path = Path("w.safetensors");
  EXPECT_THROW(WriteSafetensors(path, {{"a", Arange({1}, 1)}, {"a", Arange({1}, 1)}}), Error);
  EXPECT_THROW(WriteSafetensors(path, {{"__metadata__", Arange({1}, 1)}}), Error);
  EXPECT_THROW(WriteSafetensors(path, {{"a", Arange({1}, 1)}}, SafetensorsDtype::kI64), Error);
  EXPECT_THROW(WriteSafetensors(path, {{"a", Tensor()}}), Error);
  EXPECT_FALSE(FileExists(path));
}

}  // namespace
}  // namespace ss
