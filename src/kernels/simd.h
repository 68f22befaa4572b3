// Small pieces the kernels share (ops.cpp, vecmath.cpp, gemm_q8.cpp, gemm_ggml.cpp, gemm_dot.cpp).
// The vector helper carries its own target attribute, so it inlines into any AVX2 / AVX-512
// function and is only ever reached from code that checked the CPU first.
#pragma once

#include <immintrin.h>

namespace ss {

// The sum of v's 8 lanes, in the order ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)).
__attribute__((target("avx"))) inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The sum of a 16-lane accumulator (kernels/gemm_dot.h): lanes l + 8 added onto lanes l < 8, then
// HorizontalSum. AVX2 holds the lanes in two halves, AVX-512 in one register: the same sum.
__attribute__((target("avx"))) inline float Reduce16(__m256 lo, __m256 hi) {
  return HorizontalSum(_mm256_add_ps(lo, hi));
}
__attribute__((target("avx512f"))) inline float Reduce16(__m512 v) {
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return Reduce16(_mm512_castps512_ps256(v), hi);
}

// sum_i w[i] * x[i] over n values (w float or int8) with 8 partial sums combined pairwise, then
// the n % 8 values left over: the portable paths' dot product, in a shape compilers vectorise.
template <typename W>
inline float DotPartial8(const W* w, const float* x, int n) {
  float acc[8] = {};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += static_cast<float>(w[i + k]) * x[i + k];
  float total = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) total += static_cast<float>(w[i]) * x[i];
  return total;
}

}  // namespace ss
