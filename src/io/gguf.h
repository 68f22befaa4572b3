// GGUF reader (versions 2 and 3, little-endian), memory-mapped.
//
// Byte layout (GGUF spec, github.com/ggml-org/ggml docs/gguf.md); all integers little-endian:
//   char[4]  magic "GGUF"
//   uint32   version                      2 or 3 (version 1 used 32-bit counts: rejected)
//   uint64   tensor_count
//   uint64   metadata_kv_count
//   metadata_kv_count x {
//     string key                          string = uint64 length, then that many bytes (no NUL)
//     uint32 value_type                   0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool,
//                                         8 string, 9 array, 10 u64, 11 i64, 12 f64
//     value                               array = uint32 element type, uint64 count, elements
//   }
//   tensor_count x {
//     string name
//     uint32 n_dims                       at most 4 in ggml
//     uint64 dims[n_dims]                 ggml order: ne[0] (the contiguous dimension) first
//     uint32 ggml_type                    see GgmlTypeInfo
//     uint64 offset                       from the start of the tensor data, multiple of alignment
//   }
//   padding to `general.alignment` (uint32 key, default 32)
//   tensor data
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "common/file_util.h"

namespace ss {

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* GgufTypeName(GgufType type);

// One metadata value. Scalars keep their integer/float/bool/string kind; arrays hold one of the
// typed vectors below (arrays of arrays are stored as a count only: no known key uses them).
struct GgufValue {
  GgufType type = GgufType::kUint8;
  GgufType array_type = GgufType::kUint8;                     // element type when type == kArray
  std::variant<uint64_t, int64_t, double, bool, std::string,  // scalars
               std::vector<int64_t>, std::vector<double>, std::vector<std::string>>
      value;
  uint64_t array_count = 0;  // elements when type == kArray (also for nested arrays)
};

// A ggml tensor type: elements per block and bytes per block.
struct GgmlTypeInfo {
  const char* name;
  int64_t block_size;
  int64_t block_bytes;
};
// Null if `type` is not a known ggml type id.
const GgmlTypeInfo* FindGgmlType(uint32_t type);

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // ggml order: ne[0] (contiguous) first
  uint32_t type = 0;           // ggml type id
  uint64_t offset = 0;         // from the start of the data section
  uint64_t n_bytes = 0;        // computed from shape and type
  const uint8_t* data = nullptr;
  int64_t numel() const;
};

class GgufFile {
 public:
  // Maps and validates the whole header; throws ss::Error naming the file and the problem.
  static GgufFile Open(const std::string& path);
  // Parses an in-memory buffer that `keep_alive` owns (the fuzzer and tests use this).
  static GgufFile Parse(const std::string& name, const uint8_t* data, size_t size,
                        std::shared_ptr<void> keep_alive);

  const std::string& path() const { return path_; }
  // Whether the tensors' bytes are a file mapping (Open), whose pages a loader may release
  // (ReleaseMappedPages) once it has converted a tensor; false for a buffer given to Parse.
  bool mapped() const { return mapped_; }
  // What keeps the tensors' bytes alive (the mapping or the buffer): a view of them may hold it.
  const std::shared_ptr<void>& keep_alive() const { return keep_alive_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }

  const GgufValue* Find(const std::string& key) const;
  const std::vector<std::string>& keys() const { return keys_; }  // in file order

  // Typed getters: throw ss::Error naming the file and key if absent or of another type.
  std::string GetString(const std::string& key) const;
  int64_t GetInt(const std::string& key) const;   // any integer type (u64 must fit in int64)
  double GetFloat(const std::string& key) const;  // f32/f64 (and integers)
  bool GetBool(const std::string& key) const;
  std::vector<std::string> GetStringArray(const std::string& key) const;
  std::vector<double> GetFloatArray(const std::string& key) const;
  std::vector<int64_t> GetIntArray(const std::string& key) const;  // bools read as 0 / 1
  // The same with a default when the key is absent (a wrong type still throws).
  std::string GetString(const std::string& key, const std::string& fallback) const;
  int64_t GetInt(const std::string& key, int64_t fallback) const;
  bool GetBool(const std::string& key, bool fallback) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(const std::string& name) const;

 private:
  const GgufValue& Require(const std::string& key, const char* wanted) const;
  std::string path_;
  std::shared_ptr<void> keep_alive_;
  bool mapped_ = false;  // opened from a file mapping (Open), not parsed from a buffer
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::string> keys_;
  std::unordered_map<std::string, GgufValue> values_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace ss
