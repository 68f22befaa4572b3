// Tensor: a float32 array with a shape, owning its storage or viewing someone else's
// (a memory-mapped file, another tensor). Row-major, contiguous.
//
// Dimension legend used in shape comments across the project:
//   T  tokens in the current call        S  key/cache positions        V  vocabulary
//   D  model width (dim)                 F  MLP hidden width           L  layers
//   H  query heads   Hkv  key/value heads  Dh  head size               E  experts
//   K  first key positions tracked by the fused attention statistics
//
// Costs are explicit, so that no copy of a large tensor happens unseen: copying a Tensor copies the
// handle, never the data;
// Copy() is the deep copy.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"

namespace ss {

class Tensor {
 public:
  Tensor() = default;

  // A new zero-filled tensor owning its storage.
  static Tensor Zeros(std::vector<int64_t> shape);
  // A view of external memory; `owner` keeps that memory alive (may be null for static data).
  static Tensor View(float* data, std::vector<int64_t> shape, std::shared_ptr<void> owner);

  Tensor Copy() const;  // deep copy into new storage
  // A view of `count` rows starting at `row` along dimension 0.
  Tensor Rows(int64_t row, int64_t count) const;
  // The same data with another shape of equal element count.
  Tensor Reshaped(std::vector<int64_t> shape) const;

  bool empty() const { return data_ == nullptr; }
  float* data() { return data_; }
  const float* data() const { return data_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i < 0 ? shape_.size() + i : i]; }
  int64_t numel() const;
  std::string ShapeString() const;  // "[3, 4]"

  float& operator[](int64_t i) { return data_[i]; }
  float operator[](int64_t i) const { return data_[i]; }
  float* row(int64_t i) { return data_ + i * RowStride(); }
  const float* row(int64_t i) const { return data_ + i * RowStride(); }

  void Fill(float value);

 private:
  int64_t RowStride() const;
  float* data_ = nullptr;
  std::vector<int64_t> shape_;
  std::shared_ptr<void> owner_;
};

std::string ShapeString(const std::vector<int64_t>& shape);

// Index of the first NaN or Inf among p[0..n), or -1 when all are finite. One vectorised pass
// (about memory bandwidth): used on weights at load and on a forward pass's output.
int64_t FirstNonFinite(const float* p, int64_t n);

}  // namespace ss
