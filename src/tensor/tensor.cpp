#include "tensor/tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

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
  // An IEEE float is NaN or Inf exactly when its exponent bits are all ones. Whether a block has
  // one is an OR of equality tests, which vectorises at the baseline flags (SSE2 has no unsigned
  // 32-bit max: a max over the bits ran one value at a time, 1.3 ns a value, 9 s for a 7B model's
  // weights at load).
  constexpr int64_t kBlock = 4096;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    uint32_t lanes[8] = {};  // 8 lanes side by side, so that the loop vectorises at -O2
    int64_t i = start;
    for (; i + 8 <= end; i += 8)
      for (int k = 0; k < 8; ++k) {
        uint32_t bits;
        std::memcpy(&bits, p + i + k, sizeof(bits));
        lanes[k] |= (bits & 0x7f800000u) == 0x7f800000u ? 1u : 0u;
      }
    for (; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, p + i, sizeof(bits));
      lanes[0] |= (bits & 0x7f800000u) == 0x7f800000u ? 1u : 0u;
    }
    if (!(lanes[0] | lanes[1] | lanes[2] | lanes[3] | lanes[4] | lanes[5] | lanes[6] | lanes[7]))
      continue;
    for (int64_t i = start; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, p + i, sizeof(bits));
      if ((bits & 0x7fffffffu) >= 0x7f800000u) return i;
    }
  }
  return -1;
}

}  // namespace ss
