// GGUF writer (version 3): metadata key/values and tensors, written atomically. The byte layout is
// the one io/gguf.h documents; tensors are laid out in the order they were added, each at an
// offset that is a multiple of the alignment (32, GGUF's default, so general.alignment is not
// written).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace ss {

class GgufWriter {
 public:
  void SetString(const std::string& key, const std::string& value);
  void SetU32(const std::string& key, uint32_t value);
  void SetI32(const std::string& key, int32_t value);  // bench/gguf_retype copies such keys
  void SetF32(const std::string& key, float value);
  void SetBool(const std::string& key, bool value);
  void SetStringArray(const std::string& key, const std::vector<std::string>& values);
  void SetF32Array(const std::string& key, const std::vector<float>& values);
  void SetI32Array(const std::string& key, const std::vector<int32_t>& values);
  void SetBoolArray(const std::string& key, const std::vector<bool>& values);

  // Adds `tensor` (PyTorch shape order; ggml's ne is the reverse) encoded as `ggml_type`:
  // kGgmlTypeF32, kGgmlTypeF16, kGgmlTypeBF16, or a block type, which needs the last dimension (a
  // row, ggml's ne[0]) to be whole blocks: kGgmlTypeQ8_0 and kGgmlTypeQ4_0 (multiples of 32),
  // kGgmlTypeQ4_K and kGgmlTypeQ6_K (multiples of 256). Throws ss::Error naming the tensor for
  // another type, a duplicate name or a shape that the type cannot hold.
  void AddTensor(const std::string& name, const Tensor& tensor, uint32_t ggml_type);
  // The name and ggml type of each tensor added so far, in order.
  std::vector<std::pair<std::string, uint32_t>> TensorTypes() const;

  // The whole file, and an atomic write of it.
  std::string Build() const;
  void Write(const std::string& path) const;

 private:
  void Key(const std::string& key, uint32_t type);
  struct PendingTensor {
    std::string name;
    std::vector<int64_t> ne;  // ggml order
    uint32_t type;
    std::string bytes;
  };
  uint64_t n_kv_ = 0;
  std::string kv_;
  std::vector<std::string> keys_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace ss
