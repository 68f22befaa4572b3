#include "tensor/tensor.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ss {

static int64_t Product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Tensor Tensor::Zeros(std::vector<int64_t> shape) {
  for (int64_t d : shape) SS_ASSERT(d >= 0);
  Tensor t;
  int64_t n = Product(shape);
  auto storage = std::shared_ptr<float[]>(new float[std::max<int64_t>(n, 1)]());
  t.data_ = storage.get();
  t.owner_ = std::shared_ptr<void>(storage, storage.get());
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::View(float* data, std::vector<int64_t> shape, std::shared_ptr<void> owner) {
  Tensor t;
  t.data_ = data;
  t.shape_ = std::move(shape);
  t.owner_ = std::move(owner);
  return t;
}

Tensor Tensor::Copy() const {
  Tensor t = Zeros(shape_);
  if (numel() > 0) std::memcpy(t.data_, data_, sizeof(float) * numel());
  return t;
}

int64_t Tensor::numel() const { return Product(shape_); }

int64_t Tensor::RowStride() const {
  int64_t stride = 1;
  for (size_t i = 1; i < shape_.size(); ++i) stride *= shape_[i];
  return stride;
}

Tensor Tensor::Rows(int64_t row, int64_t count) const {
  SS_ASSERT(rank() >= 1 && row >= 0 && count >= 0 && row + count <= shape_[0]);
  std::vector<int64_t> shape = shape_;
  shape[0] = count;
  return View(data_ + row * RowStride(), std::move(shape), owner_);
}

Tensor Tensor::Reshaped(std::vector<int64_t> shape) const {
  SS_ASSERT(Product(shape) == numel());
  return View(data_, std::move(shape), owner_);
}

void Tensor::Fill(float value) { std::fill(data_, data_ + numel(), value); }

std::string ShapeString(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::string Tensor::ShapeString() const { return ss::ShapeString(shape_); }

int64_t FirstNonFinite(const float* p, int64_t n) {
  // An IEEE float is NaN or Inf exactly when its exponent bits are all ones, i.e. when its bits
  // without the sign are >= 0x7f800000; a max over a block of them vectorises.
  constexpr int64_t kBlock = 4096;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    uint32_t largest = 0;
    for (int64_t i = start; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, p + i, sizeof(bits));
      largest = std::max(largest, bits & 0x7fffffffu);
    }
    if (largest < 0x7f800000u) continue;
    for (int64_t i = start; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, p + i, sizeof(bits));
      if ((bits & 0x7fffffffu) >= 0x7f800000u) return i;
    }
  }
  return -1;
}

}  // namespace ss
