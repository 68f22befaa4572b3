// A per-calling-thread scratch buffer, kept between calls so that a model's many products do not
// allocate (and page-fault) each time. Buffers are told apart by element type and kTag: two that
// are live at once in one call need different tags (kernels/gemm_bf16.cpp uses 0-3,
// kernels/gemm_q8.cpp 4, kernels/gemm_ggml.cpp 6 and 24 (MatMulGgmlPair, around the products that
// use the others), kernels/gemm_dot.cpp 8, 9 and 11, the attention kernels in kernels/ops.cpp
// 10-16, kernels/gemm_int8.cpp 20-23).
#pragma once

#include <cstddef>
#include <vector>

#include "kernels/gemm_bf16.h"  // CacheLineAllocator

namespace ss {

template <typename T, int kTag>
T* Workspace(size_t n) {
  thread_local std::vector<T, CacheLineAllocator<T>> buffer;
  if (buffer.size() < n) {
    buffer.clear();
    buffer.shrink_to_fit();
    buffer.resize(n);
  }
  return buffer.data();
}

}  // namespace ss
