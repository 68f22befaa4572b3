#include "train/linear_bf16.h"

#include <cstdint>

namespace ss::train {

void Bf16Linear::Forward(const float* x, const float* w, float* y, int N, int in, int out) {
  PackBf16Rows(w, out, in, in, &pack_);
  MatMulBf16(x, pack_, nullptr, y, N);
}

void Bf16Linear::BackwardInput(const float* dy, const float* w, float* dx, int N, int in, int out,
                               bool accumulate) {
  // dy W = dy (W^T)^T: W^T (in, out) packed from W's columns.
  PackBf16Columns(w, in, out, in, &pack_);
  if (!accumulate) {
    MatMulBf16(dy, pack_, nullptr, dx, N);
    return;
  }
  const int64_t n = static_cast<int64_t>(N) * in;
  sum_.resize(static_cast<size_t>(n));
  MatMulBf16(dy, pack_, nullptr, sum_.data(), N);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) dx[i] += sum_[i];
}

}  // namespace ss::train
