// Builds small GGUF files in memory for tests (valid ones and deliberately broken ones).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace ss::test {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3) : version_(version) {}

  template <typename T>
  static void Put(std::string& out, T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.append(b, sizeof(T));
  }
  static void PutString(std::string& out, const std::string& s) {
    Put<uint64_t>(out, s.size());
    out += s;
  }

  void KeyU32(const std::string& key, uint32_t v) {
    Key(key, 4);
    Put(kv_, v);
  }
  void KeyI32(const std::string& key, int32_t v) {
    Key(key, 5);
    Put(kv_, v);
  }
  void KeyF32(const std::string& key, float v) {
    Key(key, 6);
    Put(kv_, v);
  }
  void KeyBool(const std::string& key, bool v) {
    Key(key, 7);
    Put<uint8_t>(kv_, v);
  }
  void KeyString(const std::string& key, const std::string& v) {
    Key(key, 8);
    PutString(kv_, v);
  }
  void KeyU64(const std::string& key, uint64_t v) {
    Key(key, 10);
    Put(kv_, v);
  }
  void KeyF64(const std::string& key, double v) {
    Key(key, 12);
    Put(kv_, v);
  }
  void KeyStrings(const std::string& key, const std::vector<std::string>& v) {
    Key(key, 9);
    Put<uint32_t>(kv_, 8);
    Put<uint64_t>(kv_, v.size());
    for (const auto& s : v) PutString(kv_, s);
  }
  void KeyF32s(const std::string& key, const std::vector<float>& v) {
    Key(key, 9);
    Put<uint32_t>(kv_, 6);
    Put<uint64_t>(kv_, v.size());
    for (float f : v) Put(kv_, f);
  }
  void KeyI32s(const std::string& key, const std::vector<int32_t>& v) {
    Key(key, 9);
    Put<uint32_t>(kv_, 5);
    Put<uint64_t>(kv_, v.size());
    for (int32_t x : v) Put(kv_, x);
  }
  // Raw escape hatch: key then arbitrary value bytes with an arbitrary type id.
  void KeyRaw(const std::string& key, uint32_t type, const std::string& value_bytes) {
    Key(key, type);
    kv_ += value_bytes;
  }

  // A tensor with `shape` (ne[0] first) whose data starts at `offset` into the data section.
  void Tensor(const std::string& name, const std::vector<uint64_t>& shape, uint32_t type,
              uint64_t offset) {
    PutString(tensors_, name);
    Put<uint32_t>(tensors_, shape.size());
    for (uint64_t d : shape) Put(tensors_, d);
    Put(tensors_, type);
    Put(tensors_, offset);
    ++n_tensors_;
  }

  // The whole file; `data` follows the header padded to `alignment`.
  std::string Build(const std::string& data = "", uint32_t alignment = 32) const {
    std::string out = "GGUF";
    Put(out, version_);
    Put<uint64_t>(out, n_tensors_);
    Put<uint64_t>(out, n_kv_);
    out += kv_;
    out += tensors_;
    if (n_tensors_ > 0 || !data.empty()) {
      while (out.size() % alignment != 0) out += '\0';
      out += data;
    }
    return out;
  }

 private:
  void Key(const std::string& key, uint32_t type) {
    PutString(kv_, key);
    Put(kv_, type);
    ++n_kv_;
  }
  uint32_t version_;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  std::string kv_;
  std::string tensors_;
};

}  // namespace ss::test
