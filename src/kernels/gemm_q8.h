// Matrix products with Q8_0 weights kept quantised: y (T, out) = x (T, in) · W^T (+ bias), where W
// is held in ggml's Q8_0 encoding (kernels/dequant.h: blocks of 32 int8 values sharing one f16
// scale d, W[o][i] = d * q) and x stays f32. The weights take 1.125 bytes a value here (int8 plus
// an f32 scale per block) against 2 for bf16 and 4 for f32, which is what decode, bound by reading
// the weights once per token, is paid in.
//
// Every product runs MatMulDot (kernels/gemm_dot.h), as the native kernels do: blocks of rows of W
// dequantised to f32 (d * q, exact) and multiplied with x in register tiles, each output one
// 16-lane FMA chain over its row in order, so a row of x gives the same bits whatever T, the thread
// count or the SIMD level (AVX-512 or AVX2). The result is x times the dequantised W, up to the
// order of f32 additions: tests/test_gemm_q8.cpp holds each path to a double-precision product and
// prints the largest difference.
//
// With x in int8 (GgmlActivations::kInt8 for Q8_0, generate's default; kernels/gemm_ggml.h),
// PackQ8_0 lays the blocks out as the int8 products' packed Q8_0 rows instead (kernels/gemm_int8.h:
// 16 rows a group, the f16 d kept, 1.0625 bytes a weight) and keeps no other copy: decode reads
// them with VPDPBUSD as it reads a Q8_0 GGUF file's rows at native precision, the same bits. The
// f32 products and the dequantisers read that layout too, the same values, so a row of either
// layout gives the same bits with f32 x.
//
// Quantisation (PackQ8_0) is ggml's Q8_0 as kernels/dequant.h's QuantizeQ8_0 encodes it (the
// largest magnitude of a block maps to 127, against the f16-rounded scale that is stored), so a
// tensor read from a Q8_0 GGUF file and dequantised re-quantises to the blocks the file holds
// (tested). Rows whose length is not a multiple of 32 are padded with zeros to whole blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/gemm_bf16.h"  // CacheLineAllocator
#include "kernels/gemm_ggml.h"  // GgmlMatrix

namespace ss {

inline constexpr int kQ8Block = 32;
// Rows of W stored side by side, block by block: a matrix-vector product then reads W as one
// sequential stream (rows of a few hundred bytes read side by side as separate streams end before
// the hardware prefetcher has ramped up: measured 40 % slower on a 768-wide model).
inline constexpr int kQ8GroupRows = 4;

// Layout: rows in groups of kQ8GroupRows (the last padded with zero rows); group g stores, for
// each block b in order, its rows' 32 int8 values one row after the other:
//   qs[((g * blocks + b) * kQ8GroupRows + r) * 32 + i] = q(row 4g + r, value 32b + i)
//   scales[(g * blocks + b) * kQ8GroupRows + r]          = d(row 4g + r, block b)
// Or (Q8Layout::kInt8) qs and scales empty and the blocks in int8_rows, a Q8_0 GgmlMatrix whose
// packed rows (`int8`) are its only bytes (`data` null).
struct PackedQ8 {
  int out = 0, in = 0;                                   // the logical shape of W
  int blocks = 0;                                        // per row: ceil(in / 32)
  int groups = 0;                                        // ceil(out / kQ8GroupRows)
  std::vector<int8_t, CacheLineAllocator<int8_t>> qs;    // zero past `in` and `out`
  std::vector<float, CacheLineAllocator<float>> scales;  // the f16 scales, exact in f32
  GgmlMatrix int8_rows;                                  // Q8Layout::kInt8 only
  bool empty() const { return qs.empty() && int8_rows.int8 == nullptr; }
  bool int8_layout() const { return int8_rows.int8 != nullptr; }
  size_t bytes() const {
    return int8_layout() ? static_cast<size_t>(groups) * int8_rows.int8_group_bytes
                         : qs.size() + scales.size() * sizeof(float);
  }
  // Offsets of (row, block b) in qs (its 32 values) and in scales (the f32 layout).
  int64_t q_at(int row, int b) const { return scale_at(row, b) * kQ8Block; }
  int64_t scale_at(int row, int b) const {
    return (static_cast<int64_t>(row / kQ8GroupRows) * blocks + b) * kQ8GroupRows +
           row % kQ8GroupRows;
  }
};

// How PackQ8_0 lays the blocks out: for f32 x (groups of kQ8GroupRows rows, above), or for x in
// int8 (the int8 products' packed rows; `groups` then counts their groups of 16 rows). kInt8 takes
// rows of whole blocks on a CPU where the int8 products run (Int8Supported, kernels/gemm_int8.h),
// and falls back to kF32 otherwise.
enum class Q8Layout { kF32, kInt8 };

// Whether MatMulQ8 rounds x to int8 for w now: its int8 layout, with int8 chosen for Q8_0.
bool Q8TakesInt8X(const PackedQ8& w);

// Quantises W (out, in) from f32 to Q8_0, row by row.
PackedQ8 PackQ8_0(const float* w, int out, int in, Q8Layout layout = Q8Layout::kF32);
// W[row0 .. row0 + rows) dequantised into dst (rows, in), row-major.
void DequantizeQ8Rows(const PackedQ8& w, int row0, int rows, float* dst);
// The stored blocks of one row in ggml's byte layout (f16 d | int8 qs[32], 34 bytes a block).
std::vector<uint8_t> Q8RowBlocks(const PackedQ8& w, int row);

// The SIMD level MatMulQ8's tiles run at now: "avx512", "avx2" or "portable".
const char* Q8KernelName();

// y (T, out) = x (T, in) · dequant(W)^T (+ bias (out) if not null). Any T >= 0. Runs one OpenMP
// parallel region over the process's threads when the product is large enough (the caller must
// not be inside one); the result does not depend on the thread count. On the int8 layout x is
// rounded to int8 where GgmlActivationsFor(Q8_0) says so (kernels/gemm_int8.h), and stays f32
// otherwise.
void MatMulQ8(const float* x, const PackedQ8& w, const float* bias, float* y, int T);

}  // namespace ss
