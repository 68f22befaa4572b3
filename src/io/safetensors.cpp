#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "common/error.h"
#include "common/file_util.h"
#include "io/json_util.h"
#include "tensor/half.h"

namespace ss {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this reader assumes a little-endian host");

namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation's limit

struct DtypeEntry {
  SafetensorsDtype dtype;
  const char* name;
  size_t bytes;
};
constexpr DtypeEntry kDtypes[] = {
    {SafetensorsDtype::kBool, "BOOL", 1},      {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kI8, "I8", 1},          {SafetensorsDtype::kF8E5M2, "F8_E5M2", 1},
    {SafetensorsDtype::kF8E4M3, "F8_E4M3", 1}, {SafetensorsDtype::kI16, "I16", 2},
    {SafetensorsDtype::kU16, "U16", 2},        {SafetensorsDtype::kF16, "F16", 2},
    {SafetensorsDtype::kBF16, "BF16", 2},      {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kU32, "U32", 4},        {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kF64, "F64", 8},        {SafetensorsDtype::kI64, "I64", 8},
    {SafetensorsDtype::kU64, "U64", 8},
};

const DtypeEntry& EntryOf(SafetensorsDtype dtype) {
  for (const auto& e : kDtypes)
    if (e.dtype == dtype) return e;
  SS_ASSERT(false);
  return kDtypes[0];
}

SafetensorsTensorInfo ParseTensorEntry(const std::string& source, const std::string& name,
                                       const json& entry, uint64_t data_size) {
  if (!entry.is_object())
    Fail("{}: tensor '{}': expected an object with dtype, shape and data_offsets, found {}", source,
         name, entry.type_name());
  SafetensorsTensorInfo info;
  info.name = name;

  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string())
    Fail("{}: tensor '{}': missing string field 'dtype'", source, name);
  const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
  const DtypeEntry* found = nullptr;
  for (const auto& e : kDtypes)
    if (dtype_name == e.name) found = &e;
  if (!found)
    Fail(
        "{}: tensor '{}': unknown dtype '{}' (expected one of BOOL, U8, I8, F8_E5M2, F8_E4M3, "
        "I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64)",
        source, name, dtype_name);
  info.dtype = found->dtype;

  auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array())
    Fail("{}: tensor '{}': missing array field 'shape'", source, name);
  uint64_t numel = 1;
  for (const json& d : *shape_it) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      Fail("{}: tensor '{}': shape entries must be non-negative integers, found {}", source, name,
           d.dump());
    uint64_t dim = d.get<uint64_t>();
    if (__builtin_mul_overflow(numel, dim, &numel) || numel > static_cast<uint64_t>(INT64_MAX))
      Fail("{}: tensor '{}': shape {} has too many elements", source, name, shape_it->dump());
    info.shape.push_back(static_cast<int64_t>(dim));
  }

  auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned())
    Fail("{}: tensor '{}': 'data_offsets' must be [begin, end] with non-negative integers", source,
         name);
  info.begin = (*offsets_it)[0].get<uint64_t>();
  info.end = (*offsets_it)[1].get<uint64_t>();
  if (info.begin > info.end || info.end > data_size)
    Fail("{}: tensor '{}': data_offsets [{}, {}) out of range: the data section is {} bytes",
         source, name, info.begin, info.end, data_size);
  uint64_t expected_bytes;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(found->bytes), &expected_bytes) ||
      expected_bytes != info.end - info.begin)
    Fail("{}: tensor '{}': shape {} of {} needs {} bytes but data_offsets [{}, {}) span {}", source,
         name, ShapeString(info.shape), found->name, numel * found->bytes, info.begin, info.end,
         info.end - info.begin);
  return info;
}

}  // namespace

const char* SafetensorsDtypeName(SafetensorsDtype dtype) { return EntryOf(dtype).name; }
size_t SafetensorsDtypeBytes(SafetensorsDtype dtype) { return EntryOf(dtype).bytes; }

int64_t SafetensorsTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsHeader ParseSafetensorsHeader(const uint8_t* data, size_t size,
                                         const std::string& source) {
  if (size < 8)
    Fail("{}: file is {} bytes, too short for the 8-byte safetensors header length", source, size);
  uint64_t header_len;
  std::memcpy(&header_len, data, 8);
  if (header_len > kMaxHeaderBytes)
    Fail("{}: header length {} exceeds the 100 MiB limit (not a safetensors file?)", source,
         header_len);
  if (header_len > size - 8)
    Fail("{}: header length {} runs past the end of the file ({} bytes after the length field)",
         source, header_len, size - 8);
  std::string_view text(reinterpret_cast<const char*>(data + 8), header_len);
  if (text.empty() || text[0] != '{')
    Fail("{}: header must be a JSON object starting with '{{', found {}", source,
         text.empty() ? std::string("an empty header")
                      : fmt::format("byte 0x{:02x}", uint8_t(text[0])));
  json header = ParseJsonStrict(text, source, "safetensors JSON header");
  if (!header.is_object())
    Fail("{}: header must be a JSON object, found {}", source, header.type_name());

  SafetensorsHeader result;
  result.data_start = 8 + header_len;
  uint64_t data_size = size - result.data_start;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object())
        Fail("{}: __metadata__ must be an object of strings, found {}", source, entry.type_name());
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          Fail("{}: __metadata__ '{}' must be a string, found {}", source, key, value.type_name());
        result.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    result.tensors.push_back(ParseTensorEntry(source, name, entry, data_size));
  }

  // The offsets must tile [0, data_size) exactly (README: "the byte buffer needs to be entirely
  // indexed, and cannot contain holes").
  std::sort(result.tensors.begin(), result.tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const SafetensorsTensorInfo* previous = nullptr;
  for (const auto& t : result.tensors) {
    if (t.begin < covered)
      Fail("{}: tensor '{}' data_offsets [{}, {}) overlap tensor '{}' [{}, {})", source, t.name,
           t.begin, t.end, previous->name, previous->begin, previous->end);
    if (t.begin > covered)
      Fail(
          "{}: tensor '{}' starts at data offset {} but the previous tensor ends at {}: the data "
          "section has a hole",
          source, t.name, t.begin, covered);
    if (t.end > covered) {
      covered = t.end;
      previous = &t;
    }
  }
  if (covered != data_size)
    Fail("{}: data section is {} bytes but the tensors cover only {}: {} trailing bytes", source,
         data_size, covered, data_size - covered);
  return result;
}

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

SafetensorsFile SafetensorsFile::Open(const std::string& path) {
  std::shared_ptr<MappedFile> map = MapFile(path);
  SafetensorsFile file;
  file.path_ = path;
  file.data_ = map->data;
  file.size_ = map->size;
  file.owner_ = map;
  file.mapped_ = true;
  file.header_ = ParseSafetensorsHeader(file.data_, file.size_, path);
  for (size_t i = 0; i < file.header_.tensors.size(); ++i)
    file.index_[file.header_.tensors[i].name] = i;
  return file;
}

SafetensorsFile SafetensorsFile::FromBytes(std::shared_ptr<const std::string> bytes,
                                           std::string source) {
  SafetensorsFile file;
  file.path_ = std::move(source);
  file.data_ = reinterpret_cast<const uint8_t*>(bytes->data());
  file.size_ = bytes->size();
  file.owner_ = bytes;
  file.header_ = ParseSafetensorsHeader(file.data_, file.size_, file.path_);
  for (size_t i = 0; i < file.header_.tensors.size(); ++i)
    file.index_[file.header_.tensors[i].name] = i;
  return file;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, i] : index_) out.push_back(name);
  return out;
}

const SafetensorsTensorInfo& SafetensorsFile::Info(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) Fail("{}: no tensor named '{}'", path_, name);
  return header_.tensors[it->second];
}

const uint8_t* SafetensorsFile::RawData(const std::string& name) const {
  return data_ + header_.data_start + Info(name).begin;
}

Tensor SafetensorsFile::Load(const std::string& name) const {
  const SafetensorsTensorInfo& info = Info(name);
  const uint8_t* bytes = data_ + header_.data_start + info.begin;
  int64_t n = info.numel();
  switch (info.dtype) {
    case SafetensorsDtype::kF32: {
      if (reinterpret_cast<uintptr_t>(bytes) % alignof(float) == 0) {
        // Zero-copy. Tensor's API is mutable; the pages are read-only (see the header comment).
        float* values = reinterpret_cast<float*>(const_cast<uint8_t*>(bytes));
        return Tensor::View(values, info.shape, std::const_pointer_cast<void>(owner_));
      }
      Tensor t = Tensor::Zeros(info.shape);
      if (n > 0) std::memcpy(t.data(), bytes, static_cast<size_t>(n) * 4);
      return t;
    }
    case SafetensorsDtype::kF16: {
      Tensor t = Tensor::Zeros(info.shape);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        t[i] = F16ToF32(h);
      }
      if (mapped_) ReleaseMappedPages(bytes, static_cast<size_t>(n) * 2);
      return t;
    }
    case SafetensorsDtype::kBF16: {
      Tensor t = Tensor::Zeros(info.shape);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, bytes + 2 * i, 2);
        t[i] = BF16ToF32(b);
      }
      if (mapped_) ReleaseMappedPages(bytes, static_cast<size_t>(n) * 2);
      return t;
    }
    default:
      Fail("{}: tensor '{}' has dtype {}; only F32, F16 and BF16 load as float32", path_, name,
           SafetensorsDtypeName(info.dtype));
  }
}

// ---------------------------------------------------------------------------------------------
// SafetensorsDir

namespace {
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";
}  // namespace

SafetensorsDir SafetensorsDir::Open(const std::string& path) {
  namespace fs = std::filesystem;
  SafetensorsDir dir;
  dir.path_ = path;
  std::string index_path;
  if (IsDirectory(path)) {
    std::string index = (fs::path(path) / kIndexName).string();
    std::string single = (fs::path(path) / kSingleName).string();
    if (FileExists(index)) {
      index_path = index;
    } else if (FileExists(single)) {
      dir.shards_.push_back(SafetensorsFile::Open(single));
    } else {
      Fail("{}: directory has neither {} nor {}", path, kIndexName, kSingleName);
    }
  } else if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    index_path = path;
  } else {
    dir.shards_.push_back(SafetensorsFile::Open(path));
  }

  if (index_path.empty()) {
    for (const std::string& name : dir.shards_[0].names()) dir.shard_of_[name] = 0;
    return dir;
  }

  json index = ParseJsonStrict(ReadFile(index_path), index_path, "safetensors index");
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    Fail("{}: expected an object with a 'weight_map' object (tensor name -> shard file)",
         index_path);
  fs::path base = fs::path(index_path).parent_path();
  std::map<std::string, size_t> shard_index;  // file name -> position in shards_
  for (const auto& [tensor, file_json] : index["weight_map"].items()) {
    if (!file_json.is_string())
      Fail("{}: weight_map['{}'] must be a file name string, found {}", index_path, tensor,
           file_json.type_name());
    const std::string& file = file_json.get_ref<const std::string&>();
    // Shards live beside the index; refusing paths keeps a hostile index inside the directory.
    // A NUL would cut the name where the operating system reads it: another file than the
    // index names.
    if (file.empty() || file.find('/') != std::string::npos ||
        file.find('\0') != std::string::npos || file == "." || file == "..")
      Fail("{}: weight_map['{}'] = '{}': expected a plain file name in the index's directory",
           index_path, tensor, file);
    auto [it, inserted] = shard_index.try_emplace(file, dir.shards_.size());
    if (inserted) dir.shards_.push_back(SafetensorsFile::Open((base / file).string()));
    const SafetensorsFile& shard = dir.shards_[it->second];
    if (!shard.Has(tensor))
      Fail("{}: weight_map puts tensor '{}' in {}, but that file has no such tensor", index_path,
           tensor, shard.path());
    dir.shard_of_[tensor] = it->second;
  }
  return dir;
}

std::vector<std::string> SafetensorsDir::names() const {
  std::vector<std::string> out;
  for (const auto& [name, shard] : shard_of_) out.push_back(name);
  return out;
}

const SafetensorsFile& SafetensorsDir::ShardOf(const std::string& name) const {
  auto it = shard_of_.find(name);
  if (it == shard_of_.end()) Fail("{}: no tensor named '{}'", path_, name);
  return shards_[it->second];
}

const SafetensorsTensorInfo& SafetensorsDir::Info(const std::string& name) const {
  return ShardOf(name).Info(name);
}
Tensor SafetensorsDir::Load(const std::string& name) const { return ShardOf(name).Load(name); }

const uint8_t* SafetensorsDir::RawData(const std::string& name,
                                       std::shared_ptr<const void>* owner) const {
  const SafetensorsFile& shard = ShardOf(name);
  if (owner) *owner = shard.owner();
  return shard.RawData(name);
}
bool SafetensorsDir::Mapped(const std::string& name) const { return ShardOf(name).mapped(); }
const std::string& SafetensorsDir::FileOf(const std::string& name) const {
  return ShardOf(name).path();
}

// ---------------------------------------------------------------------------------------------
// Writer

void WriteSafetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      SafetensorsDtype dtype, const std::map<std::string, std::string>& metadata) {
  if (dtype != SafetensorsDtype::kF32 && dtype != SafetensorsDtype::kF16 &&
      dtype != SafetensorsDtype::kBF16)
    Fail("{}: cannot write dtype {}; expected F32, F16 or BF16", path, SafetensorsDtypeName(dtype));
  size_t elem = SafetensorsDtypeBytes(dtype);
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__") Fail("{}: '__metadata__' is reserved, not a tensor name", path);
    if (!seen.insert(name).second) Fail("{}: tensor '{}' given twice", path, name);
    if (tensor.empty() && tensor.numel() > 0)
      Fail("{}: tensor '{}' has no data (an empty Tensor handle)", path, name);
    uint64_t bytes = static_cast<uint64_t>(tensor.numel()) * elem;
    header[name] = {{"dtype", SafetensorsDtypeName(dtype)},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  // Pad with spaces so 8 + N is a multiple of 8: every tensor then starts 8-byte aligned
  // when its offset is (the README recommends this; F32 views need 4).
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t header_len = text.size();

  WriteFileAtomic(path, [&](std::FILE* f) {
    auto put = [&](const void* p, size_t n) {
      if (n > 0 && std::fwrite(p, 1, n, f) != n) Fail("{}: short write", path);
    };
    put(&header_len, 8);
    put(text.data(), text.size());
    std::vector<uint16_t> chunk;
    for (const auto& [name, tensor] : tensors) {
      int64_t n = tensor.numel();
      if (n == 0) continue;
      if (dtype == SafetensorsDtype::kF32) {
        put(tensor.data(), static_cast<size_t>(n) * 4);
        continue;
      }
      constexpr int64_t kChunk = 1 << 16;
      for (int64_t start = 0; start < n; start += kChunk) {
        int64_t count = std::min(kChunk, n - start);
        chunk.resize(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i) {
          float v = tensor.data()[start + i];
          chunk[i] = dtype == SafetensorsDtype::kF16 ? F32ToF16(v) : F32ToBF16(v);
        }
        put(chunk.data(), static_cast<size_t>(count) * 2);
      }
    }
  });
}

}  // namespace ss
