#include "io/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "common/error.h"

namespace ss {
namespace {

// Block sizes and bytes per block from ggml's type traits (ggml-common.h block structs):
// e.g. Q4_0 = half d + 16 bytes of nibbles = 18 bytes per 32 values; the K-quants use
// 256-value super-blocks; MXFP4 (39) = an E8M0 byte + 16 bytes of nibbles per 32 values. Ids 4, 5,
// 31..33 and 36..38 were removed from ggml and stay unknown here.
constexpr GgmlTypeInfo kGgmlTypes[] = {
    {"F32", 1, 4},        {"F16", 1, 2},       {"Q4_0", 32, 18},     {"Q4_1", 32, 20},
    {nullptr, 0, 0},      {nullptr, 0, 0},     {"Q5_0", 32, 22},     {"Q5_1", 32, 24},
    {"Q8_0", 32, 34},     {"Q8_1", 32, 36},    {"Q2_K", 256, 84},    {"Q3_K", 256, 110},
    {"Q4_K", 256, 144},   {"Q5_K", 256, 176},  {"Q6_K", 256, 210},   {"Q8_K", 256, 292},
    {"IQ2_XXS", 256, 66}, {"IQ2_XS", 256, 74}, {"IQ3_XXS", 256, 98}, {"IQ1_S", 256, 50},
    {"IQ4_NL", 32, 18},   {"IQ3_S", 256, 110}, {"IQ2_S", 256, 82},   {"IQ4_XS", 256, 136},
    {"I8", 1, 1},         {"I16", 1, 2},       {"I32", 1, 4},        {"I64", 1, 8},
    {"F64", 1, 8},        {"IQ1_M", 256, 56},  {"BF16", 1, 2},       {nullptr, 0, 0},
    {nullptr, 0, 0},      {nullptr, 0, 0},     {"TQ1_0", 256, 54},   {"TQ2_0", 256, 66},
    {nullptr, 0, 0},      {nullptr, 0, 0},     {nullptr, 0, 0},      {"MXFP4", 32, 17},
};

constexpr uint32_t kMaxDims = 4;   // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;  // nested arrays: bound the recursion
constexpr uint32_t kMaxAlignment = 1u << 24;

// Smallest encoded size of one element of `type`, used to bound counts before allocating.
uint64_t MinEncodedSize(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
      return 8;  // the length
    case GgufType::kArray:
      return 12;  // element type + count
  }
  return 1;
}

bool IsKnownType(uint32_t type) { return type <= static_cast<uint32_t>(GgufType::kFloat64); }

// Bounds-checked little-endian cursor over the mapped bytes. Every read names the file, the
// offset and what was being read when it runs past the end.
class Reader {
 public:
  Reader(const std::string& path, const uint8_t* data, size_t size)
      : path_(path), data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  void Need(uint64_t n, const char* what) const {
    if (n > remaining())
      Fail("{}: truncated: {} needs {} bytes at offset {} but the file has {} bytes", path_, what,
           n, pos_, size_);
  }
  template <typename T>
  T Read(const char* what) {
    Need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));  // files are little-endian, as is every target
    pos_ += sizeof(T);
    return v;
  }
  std::string ReadString(const char* what) {
    uint64_t start = pos_;
    uint64_t n = Read<uint64_t>(what);
    if (n > remaining())
      Fail("{}: {} at offset {} has length {} but only {} bytes remain in the file", path_, what,
           start, n, remaining());
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  // Checks that `count` elements of at least `min_size` bytes each can fit in the rest of the
  // file, so that no allocation is sized by an unchecked count.
  void CheckCount(uint64_t count, uint64_t min_size, const std::string& what) const {
    if (min_size > 0 && count > remaining() / min_size)
      Fail("{}: {} count {} at offset {} is impossible: only {} bytes remain", path_, what, count,
           pos_, remaining());
  }

 private:
  const std::string& path_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

GgufValue ReadValue(Reader& reader, const std::string& path, const std::string& key,
                    uint32_t raw_type, int depth);

template <typename T>
void ReadIntArray(Reader& r, uint64_t n, std::vector<int64_t>& out) {
  out.reserve(n);
  for (uint64_t i = 0; i < n; ++i) out.push_back(static_cast<int64_t>(r.Read<T>("array element")));
}

GgufValue ReadArray(Reader& r, const std::string& path, const std::string& key, int depth) {
  GgufValue v;
  v.type = GgufType::kArray;
  uint32_t elem = r.Read<uint32_t>("array element type");
  if (!IsKnownType(elem))
    Fail("{}: key '{}': unknown array element type {} (expected 0..12)", path, key, elem);
  v.array_type = static_cast<GgufType>(elem);
  uint64_t n = r.Read<uint64_t>("array count");
  r.CheckCount(n, MinEncodedSize(v.array_type), fmt::format("key '{}': array", key));
  v.array_count = n;
  switch (v.array_type) {
    case GgufType::kUint8: {
      std::vector<int64_t> a;
      ReadIntArray<uint8_t>(r, n, a);
      v.value = std::move(a);
      break;
    }
    case GgufType::kInt8: {
      std::vector<int64_t> a;
      ReadIntArray<int8_t>(r, n, a);
      v.value = std::move(a);
      break;
    }
    case GgufType::kUint16: {
      std::vector<int64_t> a;
      ReadIntArray<uint16_t>(r, n, a);
      v.value = std::move(a);
      break;
    }
    case GgufType::kInt16: {
      std::vector<int64_t> a;
      ReadIntArray<int16_t>(r, n, a);
      v.value = std::move(a);
      break;
    }
    case GgufType::kUint32: {
      std::vector<int64_t> a;
      ReadIntArray<uint32_t>(r, n, a);
      v.value = std::move(a);
      break;
    }
    case GgufType::kInt32: {
      std::vector<int64_t> a;
      ReadIntArray<int32_t>(r, n, a);
      v.value = std::move(a);
      break;
    }
    case GgufType::kInt64: {
      std::vector<int64_t> a;
      ReadIntArray<int64_t>(r, n, a);
      v.value = std::move(a);
      break;
    }
    case GgufType::kBool: {
      std::vector<int64_t> a;
      a.reserve(n);
      for (uint64_t i = 0; i < n; ++i) a.push_back(r.Read<uint8_t>("array element") != 0);
      v.value = std::move(a);
      break;
    }
    case GgufType::kUint64: {
      std::vector<int64_t> a;
      a.reserve(n);
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t x = r.Read<uint64_t>("array element");
        if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          Fail("{}: key '{}': uint64 array element {} = {} does not fit in int64", path, key, i, x);
        a.push_back(static_cast<int64_t>(x));
      }
      v.value = std::move(a);
      break;
    }
    case GgufType::kFloat32:
    case GgufType::kFloat64: {
      std::vector<double> a;
      a.reserve(n);
      for (uint64_t i = 0; i < n; ++i)
        a.push_back(v.array_type == GgufType::kFloat32 ? r.Read<float>("array element")
                                                       : r.Read<double>("array element"));
      v.value = std::move(a);
      break;
    }
    case GgufType::kString: {
      std::vector<std::string> a;
      a.reserve(n);
      for (uint64_t i = 0; i < n; ++i) a.push_back(r.ReadString("array string"));
      v.value = std::move(a);
      break;
    }
    case GgufType::kArray:
      if (depth >= kMaxArrayDepth)
        Fail("{}: key '{}': arrays nested deeper than {} levels", path, key, kMaxArrayDepth);
      // Nested arrays are validated and skipped; only their count is kept.
      for (uint64_t i = 0; i < n; ++i) ReadArray(r, path, key, depth + 1);
      break;
  }
  return v;
}

GgufValue ReadValue(Reader& r, const std::string& path, const std::string& key, uint32_t raw_type,
                    int depth) {
  if (!IsKnownType(raw_type))
    Fail("{}: key '{}': unknown value type {} (expected 0..12)", path, key, raw_type);
  GgufValue v;
  v.type = static_cast<GgufType>(raw_type);
  switch (v.type) {
    case GgufType::kUint8:
      v.value = uint64_t{r.Read<uint8_t>("uint8 value")};
      break;
    case GgufType::kUint16:
      v.value = uint64_t{r.Read<uint16_t>("uint16 value")};
      break;
    case GgufType::kUint32:
      v.value = uint64_t{r.Read<uint32_t>("uint32 value")};
      break;
    case GgufType::kUint64:
      v.value = r.Read<uint64_t>("uint64 value");
      break;
    case GgufType::kInt8:
      v.value = int64_t{r.Read<int8_t>("int8 value")};
      break;
    case GgufType::kInt16:
      v.value = int64_t{r.Read<int16_t>("int16 value")};
      break;
    case GgufType::kInt32:
      v.value = int64_t{r.Read<int32_t>("int32 value")};
      break;
    case GgufType::kInt64:
      v.value = r.Read<int64_t>("int64 value");
      break;
    case GgufType::kFloat32:
      v.value = double{r.Read<float>("float32 value")};
      break;
    case GgufType::kFloat64:
      v.value = r.Read<double>("float64 value");
      break;
    case GgufType::kBool: {
      uint8_t b = r.Read<uint8_t>("bool value");
      if (b > 1) Fail("{}: key '{}': bool value is {}, expected 0 or 1", path, key, b);
      v.value = b != 0;
      break;
    }
    case GgufType::kString:
      v.value = r.ReadString("string value");
      break;
    case GgufType::kArray:
      v = ReadArray(r, path, key, depth);
      break;
  }
  return v;
}

bool IsIntegerType(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

}  // namespace

const char* GgufTypeName(GgufType type) {
  static const char* kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                 "int32",  "float32", "bool",   "string", "array",
                                 "uint64", "int64",   "float64"};
  auto i = static_cast<uint32_t>(type);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

const GgmlTypeInfo* FindGgmlType(uint32_t type) {
  if (type >= std::size(kGgmlTypes) || kGgmlTypes[type].name == nullptr) return nullptr;
  return &kGgmlTypes[type];
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

GgufFile GgufFile::Open(const std::string& path) {
  std::shared_ptr<MappedFile> mapped = MapFile(path);
  const uint8_t* data = mapped->data;
  size_t size = mapped->size;
  GgufFile f = Parse(path, data, size, std::move(mapped));
  f.mapped_ = true;
  return f;
}

GgufFile GgufFile::Parse(const std::string& path, const uint8_t* data, size_t size,
                         std::shared_ptr<void> keep_alive) {
  GgufFile f;
  f.path_ = path;
  f.keep_alive_ = std::move(keep_alive);
  Reader r(path, data, size);

  if (size < 4 || std::memcmp(data, "GGUF", 4) != 0) {
    const std::string_view found(reinterpret_cast<const char*>(data), std::min<size_t>(size, 4));
    Fail("{}: not a GGUF file: expected magic \"GGUF\", found \"{}\"", path, Printable(found));
  }
  r.Read<uint32_t>("magic");
  f.version_ = r.Read<uint32_t>("version");
  if (f.version_ == 1)
    Fail("{}: GGUF version 1 (32-bit counts) is not supported; re-convert the model to GGUF v3",
         path);
  if (f.version_ == 0x02000000u || f.version_ == 0x03000000u)
    Fail("{}: big-endian GGUF files are not supported (version field reads {:#x})", path,
         f.version_);
  if (f.version_ != 2 && f.version_ != 3)
    Fail("{}: unsupported GGUF version {} (expected 2 or 3)", path, f.version_);
  uint64_t n_tensors = r.Read<uint64_t>("tensor count");
  uint64_t n_kv = r.Read<uint64_t>("metadata count");
  // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least
  // 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset).
  r.CheckCount(n_kv, 13, "metadata");
  r.CheckCount(n_tensors, 24, "tensor");

  f.keys_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.ReadString("metadata key");
    uint32_t type = r.Read<uint32_t>("metadata value type");
    GgufValue v = ReadValue(r, path, key, type, 0);
    if (f.values_.count(key)) Fail("{}: duplicate metadata key '{}'", path, key);
    f.keys_.push_back(key);
    f.values_.emplace(std::move(key), std::move(v));
  }

  if (const GgufValue* a = f.Find("general.alignment")) {
    if (a->type != GgufType::kUint32)
      Fail("{}: general.alignment must be uint32, found {}", path, GgufTypeName(a->type));
    uint64_t align = std::get<uint64_t>(a->value);
    if (align == 0 || (align & (align - 1)) != 0 || align > kMaxAlignment)
      Fail("{}: general.alignment is {}, expected a power of two up to {}", path, align,
           kMaxAlignment);
    f.alignment_ = static_cast<uint32_t>(align);
  }

  f.tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = r.ReadString("tensor name");
    uint32_t n_dims = r.Read<uint32_t>("tensor n_dims");
    if (n_dims > kMaxDims)
      Fail("{}: tensor '{}' has {} dimensions, at most {} are allowed", path, t.name, n_dims,
           kMaxDims);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = r.Read<uint64_t>("tensor dimension");
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (dim != 0 && numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim))
        Fail("{}: tensor '{}': dimensions overflow 64-bit element count (dim {} = {})", path,
             t.name, d, dim);
      numel *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    t.type = r.Read<uint32_t>("tensor type");
    const GgmlTypeInfo* info = FindGgmlType(t.type);
    if (!info) Fail("{}: tensor '{}' has unknown ggml type {}", path, t.name, t.type);
    int64_t ne0 = t.shape.empty() ? 1 : t.shape[0];
    if (ne0 % info->block_size != 0)
      Fail("{}: tensor '{}' of type {}: first dimension {} is not a multiple of the block size {}",
           path, t.name, info->name, ne0, info->block_size);
    uint64_t blocks = numel / static_cast<uint64_t>(info->block_size);
    if (blocks > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(info->block_bytes))
      Fail("{}: tensor '{}': byte size overflows", path, t.name);
    t.n_bytes = blocks * static_cast<uint64_t>(info->block_bytes);
    t.offset = r.Read<uint64_t>("tensor offset");
    if (t.offset % f.alignment_ != 0)
      Fail("{}: tensor '{}': data offset {} is not a multiple of the alignment {}", path, t.name,
           t.offset, f.alignment_);
    if (f.tensor_index_.count(t.name)) Fail("{}: duplicate tensor name '{}'", path, t.name);
    f.tensor_index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }

  uint64_t header_end = r.pos();
  f.data_offset_ = (header_end + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  // A vocabulary-only file may end right after the header, without padding.
  if (!f.tensors_.empty() && f.data_offset_ > size)
    Fail("{}: truncated: tensor data should start at offset {} but the file has {} bytes", path,
         f.data_offset_, size);
  uint64_t data_size = f.tensors_.empty() ? 0 : size - f.data_offset_;

  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(f.tensors_.size());
  for (GgufTensorInfo& t : f.tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset)
      Fail(
          "{}: tensor '{}' ({} bytes at data offset {}) extends beyond the end of the file "
          "({} bytes of tensor data)",
          path, t.name, t.n_bytes, t.offset, data_size);
    t.data = data + f.data_offset_ + t.offset;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo* a = by_offset[i - 1];
    const GgufTensorInfo* b = by_offset[i];
    if (a->offset + a->n_bytes > b->offset && a->n_bytes > 0 && b->n_bytes > 0)
      Fail("{}: tensors '{}' (bytes {}..{}) and '{}' (from {}) overlap", path, a->name, a->offset,
           a->offset + a->n_bytes, b->name, b->offset);
  }
  return f;
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

const GgufValue& GgufFile::Require(const std::string& key, const char* wanted) const {
  const GgufValue* v = Find(key);
  if (!v) Fail("{}: missing metadata key '{}' (expected {})", path_, key, wanted);
  return *v;
}

namespace {
[[noreturn]] void WrongType(const std::string& path, const std::string& key, const char* wanted,
                            const GgufValue& v) {
  if (v.type == GgufType::kArray)
    Fail("{}: metadata key '{}': expected {}, found array of {}", path, key, wanted,
         GgufTypeName(v.array_type));
  Fail("{}: metadata key '{}': expected {}, found {}", path, key, wanted, GgufTypeName(v.type));
}
}  // namespace

std::string GgufFile::GetString(const std::string& key) const {
  const GgufValue& v = Require(key, "a string");
  if (v.type != GgufType::kString) WrongType(path_, key, "a string", v);
  return std::get<std::string>(v.value);
}

int64_t GgufFile::GetInt(const std::string& key) const {
  const GgufValue& v = Require(key, "an integer");
  if (!IsIntegerType(v.type)) WrongType(path_, key, "an integer", v);
  if (auto* u = std::get_if<uint64_t>(&v.value)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      Fail("{}: metadata key '{}': value {} does not fit in int64", path_, key, *u);
    return static_cast<int64_t>(*u);
  }
  return std::get<int64_t>(v.value);
}

double GgufFile::GetFloat(const std::string& key) const {
  const GgufValue& v = Require(key, "a number");
  if (v.type == GgufType::kFloat32 || v.type == GgufType::kFloat64)
    return std::get<double>(v.value);
  if (IsIntegerType(v.type)) return static_cast<double>(GetInt(key));
  WrongType(path_, key, "a number", v);
}

bool GgufFile::GetBool(const std::string& key) const {
  const GgufValue& v = Require(key, "a bool");
  if (v.type != GgufType::kBool) WrongType(path_, key, "a bool", v);
  return std::get<bool>(v.value);
}

std::vector<std::string> GgufFile::GetStringArray(const std::string& key) const {
  const GgufValue& v = Require(key, "an array of strings");
  if (v.type != GgufType::kArray || v.array_type != GgufType::kString)
    WrongType(path_, key, "an array of strings", v);
  return std::get<std::vector<std::string>>(v.value);
}

std::vector<double> GgufFile::GetFloatArray(const std::string& key) const {
  const GgufValue& v = Require(key, "an array of numbers");
  if (v.type == GgufType::kArray) {
    if (auto* d = std::get_if<std::vector<double>>(&v.value)) return *d;
    if (auto* i = std::get_if<std::vector<int64_t>>(&v.value))
      return std::vector<double>(i->begin(), i->end());
  }
  WrongType(path_, key, "an array of numbers", v);
}

std::vector<int64_t> GgufFile::GetIntArray(const std::string& key) const {
  const GgufValue& v = Require(key, "an array of integers");
  if (v.type == GgufType::kArray &&
      (IsIntegerType(v.array_type) || v.array_type == GgufType::kBool))
    return std::get<std::vector<int64_t>>(v.value);
  WrongType(path_, key, "an array of integers", v);
}

std::string GgufFile::GetString(const std::string& key, const std::string& fallback) const {
  return Find(key) ? GetString(key) : fallback;
}
int64_t GgufFile::GetInt(const std::string& key, int64_t fallback) const {
  return Find(key) ? GetInt(key) : fallback;
}
bool GgufFile::GetBool(const std::string& key, bool fallback) const {
  return Find(key) ? GetBool(key) : fallback;
}

const GgufTensorInfo* GgufFile::FindTensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace ss
