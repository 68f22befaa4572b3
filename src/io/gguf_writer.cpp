#include "io/gguf_writer.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "common/file_util.h"
#include "io/gguf.h"
#include "kernels/dequant.h"
#include "tensor/half.h"

namespace ss {
namespace {

constexpr uint32_t kAlignment = 32;

template <typename T>
void Put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void PutString(std::string& out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out += s;
}

}  // namespace

void GgufWriter::Key(const std::string& key, uint32_t type) {
  if (std::find(keys_.begin(), keys_.end(), key) != keys_.end())
    Fail("GGUF writer: key '{}' set twice", key);
  keys_.push_back(key);
  PutString(kv_, key);
  Put(kv_, type);
  ++n_kv_;
}

void GgufWriter::SetString(const std::string& key, const std::string& value) {
  Key(key, static_cast<uint32_t>(GgufType::kString));
  PutString(kv_, value);
}
void GgufWriter::SetU32(const std::string& key, uint32_t value) {
  Key(key, static_cast<uint32_t>(GgufType::kUint32));
  Put(kv_, value);
}
void GgufWriter::SetI32(const std::string& key, int32_t value) {
  Key(key, static_cast<uint32_t>(GgufType::kInt32));
  Put(kv_, value);
}
void GgufWriter::SetF32(const std::string& key, float value) {
  Key(key, static_cast<uint32_t>(GgufType::kFloat32));
  Put(kv_, value);
}
void GgufWriter::SetBool(const std::string& key, bool value) {
  Key(key, static_cast<uint32_t>(GgufType::kBool));
  Put<uint8_t>(kv_, value ? 1 : 0);
}
void GgufWriter::SetStringArray(const std::string& key, const std::vector<std::string>& values) {
  Key(key, static_cast<uint32_t>(GgufType::kArray));
  Put(kv_, static_cast<uint32_t>(GgufType::kString));
  Put<uint64_t>(kv_, values.size());
  for (const auto& s : values) PutString(kv_, s);
}
void GgufWriter::SetF32Array(const std::string& key, const std::vector<float>& values) {
  Key(key, static_cast<uint32_t>(GgufType::kArray));
  Put(kv_, static_cast<uint32_t>(GgufType::kFloat32));
  Put<uint64_t>(kv_, values.size());
  for (float v : values) Put(kv_, v);
}
void GgufWriter::SetI32Array(const std::string& key, const std::vector<int32_t>& values) {
  Key(key, static_cast<uint32_t>(GgufType::kArray));
  Put(kv_, static_cast<uint32_t>(GgufType::kInt32));
  Put<uint64_t>(kv_, values.size());
  for (int32_t v : values) Put(kv_, v);
}

void GgufWriter::SetBoolArray(const std::string& key, const std::vector<bool>& values) {
  Key(key, static_cast<uint32_t>(GgufType::kArray));
  Put(kv_, static_cast<uint32_t>(GgufType::kBool));
  Put<uint64_t>(kv_, values.size());
  for (bool v : values) Put<uint8_t>(kv_, v ? 1 : 0);
}

void GgufWriter::AddTensor(const std::string& name, const Tensor& tensor, uint32_t ggml_type) {
  for (const auto& t : tensors_)
    if (t.name == name) Fail("GGUF writer: tensor '{}' added twice", name);
  if (tensor.empty()) Fail("GGUF writer: tensor '{}' is empty", name);
  PendingTensor t;
  t.name = name;
  t.type = ggml_type;
  t.ne.assign(tensor.shape().rbegin(), tensor.shape().rend());
  const int64_t n = tensor.numel();
  const float* src = tensor.data();
  switch (ggml_type) {
    case kGgmlTypeF32:
      t.bytes.assign(reinterpret_cast<const char*>(src), sizeof(float) * n);
      break;
    case kGgmlTypeF16:
      t.bytes.resize(2 * n);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h = F32ToF16(src[i]);
        std::memcpy(&t.bytes[2 * i], &h, 2);
      }
      break;
    case kGgmlTypeBF16:  // ggml's GGML_TYPE_BF16: the upper half of the f32, rounded to nearest
                         // even
      t.bytes.resize(2 * n);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b = F32ToBF16(src[i]);
        std::memcpy(&t.bytes[2 * i], &b, 2);
      }
      break;
    case kGgmlTypeQ8_0:
    case kGgmlTypeQ4_0:
    case kGgmlTypeQ4_K:
    case kGgmlTypeQ6_K:
    case kGgmlTypeMXFP4: {
      // ggml quantises row by row: each row (ne[0] values) must be whole blocks.
      const int64_t block = GgmlBlockValues(ggml_type);
      if (t.ne[0] % block != 0)
        Fail("GGUF writer: tensor '{}' has rows of {} values, not a multiple of {}'s {}", name,
             t.ne[0], GgmlTypeName(ggml_type), block);
      t.bytes.resize(GgmlBytes(ggml_type, n));
      uint8_t* dst = reinterpret_cast<uint8_t*>(t.bytes.data());
      if (ggml_type == kGgmlTypeQ8_0)
        QuantizeQ8_0(src, dst, n);
      else if (ggml_type == kGgmlTypeQ4_0)
        QuantizeQ4_0(src, dst, n);
      else if (ggml_type == kGgmlTypeQ4_K)
        QuantizeQ4_K(src, dst, n);
      else if (ggml_type == kGgmlTypeMXFP4)
        QuantizeMXFP4(src, dst, n);
      else
        QuantizeQ6_K(src, dst, n);
      break;
    }
    default:
      Fail(
          "GGUF writer: tensor '{}': writing type {} is not supported (F32, F16, BF16, Q8_0, "
          "Q4_0, Q4_K, Q6_K, MXFP4)",
          name, GgmlTypeName(ggml_type));
  }
  tensors_.push_back(std::move(t));
}

std::string GgufWriter::Build() const {
  std::string out = "GGUF";
  Put<uint32_t>(out, 3);
  Put<uint64_t>(out, tensors_.size());
  Put<uint64_t>(out, n_kv_);
  out += kv_;
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const auto& t : tensors_) {
    PutString(out, t.name);
    Put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) Put<uint64_t>(out, static_cast<uint64_t>(d));
    Put<uint32_t>(out, t.type);
    Put<uint64_t>(out, offset);
    offsets.push_back(offset);
    offset += (t.bytes.size() + kAlignment - 1) / kAlignment * kAlignment;
  }
  auto pad = [&] { out.append((kAlignment - out.size() % kAlignment) % kAlignment, '\0'); };
  pad();
  for (const auto& t : tensors_) {
    out += t.bytes;
    pad();
  }
  return out;
}

void GgufWriter::Write(const std::string& path) const { WriteFileAtomic(path, Build()); }

std::vector<std::pair<std::string, uint32_t>> GgufWriter::TensorTypes() const {
  std::vector<std::pair<std::string, uint32_t>> types;
  for (const auto& t : tensors_) types.emplace_back(t.name, t.type);
  return types;
}

}  // namespace ss
