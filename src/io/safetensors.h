// Reader and writer for safetensors checkpoints (github.com/huggingface/safetensors, README
// "Format"), single files and sharded directories.
//
// File layout:
//   bytes [0, 8)        N: uint64, little-endian, the length of the JSON header
//   bytes [8, 8 + N)    UTF-8 JSON object, starting with '{' and possibly padded with trailing
//                       spaces (0x20). Each key is a tensor name mapping to
//                         {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
//                       where [begin, end) are byte offsets relative to the start of the data
//                       section. The optional key "__metadata__" maps to a string->string object.
//   bytes [8 + N, EOF)  the data section: tensors row-major (C order), little-endian. The spec
//                       requires the offsets to tile it with no holes and no overlaps, which
//                       makes polyglot files impossible; we check exactly that.
// The reference implementation rejects headers above 100 MiB; so do we.
//
// Sharded checkpoints (as written by transformers' save_pretrained) are a directory with
// model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor name: shard file name}}.
//
// Loading gives float32 Tensors. F32 tensors are zero-copy views into the read-only memory map:
// never write through them (the pages are mapped read-only; a write crashes). F16 and BF16 are
// converted to new float32 storage at load, an explicit conversion named by the dtype.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace ss {

// Every dtype the safetensors format defines (the README's list). Only kF32, kF16 and kBF16 load
// as float32; the rest are parsed and validated so that a checkpoint carrying, say, an I64 buffer
// still opens, and fail only when loaded.
enum class SafetensorsDtype {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64
};
const char* SafetensorsDtypeName(SafetensorsDtype dtype);  // the format's spelling: "BF16"
size_t SafetensorsDtypeBytes(SafetensorsDtype dtype);

struct SafetensorsTensorInfo {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section, [begin, end)
  uint64_t end = 0;
  int64_t numel() const;
};

struct SafetensorsHeader {
  std::vector<SafetensorsTensorInfo> tensors;  // in the order of their data offsets
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // file offset of the data section: 8 + N
};

// Parses and validates the header of a whole safetensors file held in memory (`size` bytes).
// `source` names the file in error messages. Throws ss::Error naming the file, and the tensor when
// one is at fault, for: a file shorter than 8 bytes, a header length beyond the file or over
// 100 MiB, malformed JSON, a header that is not an object or lacks/mistypes a field, an unknown
// dtype, duplicate names, offsets out of range, overlapping or leaving holes, and a byte range
// that does not match shape x dtype size.
SafetensorsHeader ParseSafetensorsHeader(const uint8_t* data, size_t size,
                                         const std::string& source);

class SafetensorsFile {
 public:
  // Memory-maps `path` and validates its header.
  static SafetensorsFile Open(const std::string& path);
  // Uses bytes already in memory (a whole file); `source` names it in errors. Tensors loaded from
  // it keep `bytes` alive.
  static SafetensorsFile FromBytes(std::shared_ptr<const std::string> bytes, std::string source);

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool Has(const std::string& name) const { return index_.count(name) > 0; }
  // Throws ss::Error naming the file and tensor if there is no such tensor.
  const SafetensorsTensorInfo& Info(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  // The tensor as float32: a view of the map for F32 (copied instead if the data is not 4-byte
  // aligned in memory, which only happens when a writer skipped the header padding), converted
  // to new storage for F16/BF16. Throws ss::Error naming the tensor and its dtype otherwise.
  Tensor Load(const std::string& name) const;
  // The tensor's raw bytes, whatever its dtype. Valid while this object (or a copy) lives, or
  // while `owner()` does.
  const uint8_t* RawData(const std::string& name) const;
  const std::shared_ptr<const void>& owner() const { return owner_; }
  bool mapped() const { return mapped_; }  // owner() is a file mapping

 private:
  std::string path_;
  std::shared_ptr<const void> owner_;  // the map or the buffer
  bool mapped_ = false;                // owner_ is a file mapping (converted tensors release pages)
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;  // name -> position in header_.tensors
};

// One view over a checkpoint that may be a single file or sharded.
class SafetensorsDir {
 public:
  // `path` may be: a .safetensors file; a directory holding model.safetensors.index.json (sharded)
  // or model.safetensors; or the index .json file itself. Every shard is opened and validated, and
  // every tensor the index names must be in the shard it names.
  static SafetensorsDir Open(const std::string& path);

  std::vector<std::string> names() const;  // sorted
  bool Has(const std::string& name) const { return shard_of_.count(name) > 0; }
  const SafetensorsTensorInfo& Info(const std::string& name) const;
  Tensor Load(const std::string& name) const;
  // The raw bytes of `name` in its shard, and (if owner is not null) what keeps them alive.
  const uint8_t* RawData(const std::string& name,
                         std::shared_ptr<const void>* owner = nullptr) const;
  // The shard file holding `name`.
  const std::string& FileOf(const std::string& name) const;
  bool Mapped(const std::string& name) const;  // its shard is a file mapping
  const std::string& path() const { return path_; }
  size_t shard_count() const { return shards_.size(); }

 private:
  const SafetensorsFile& ShardOf(const std::string& name) const;
  std::string path_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, size_t> shard_of_;
};

// Writes `tensors` (in the given order) to `path` atomically (ss::WriteFileAtomic), stored as
// `dtype`, which must be kF32, kF16 or kBF16 (F16/BF16 round to nearest even). The header is padded
// with spaces to a multiple of 8 bytes so every tensor stays aligned. Throws ss::Error for a
// duplicate or reserved name ("__metadata__"), an empty tensor handle, or another dtype.
void WriteSafetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      SafetensorsDtype dtype = SafetensorsDtype::kF32,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace ss
