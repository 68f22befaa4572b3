// The dot-form matrix product behind the native kernels (gemm_ggml.h) and the Q8_0 pack
// (gemm_q8.h): y (T, out) = x (T, in) · W^T (+ bias), x f32, W decoded to f32 by the weight's own
// decoder (exact values: every stored type's value is a product of small integers and powers of
// two that f32 holds exactly, or Q4_K's one rounded subtraction, the same on every path).
//
// Every output is summed the same way, whatever T, the thread count, the SIMD level (AVX-512 or
// AVX2) or the tile it falls in:
//   acc[0 .. 16) = 0
//   for each 16-value chunk c of the row, in order:  acc[l] = fma(w[16c + l], x[16c + l], acc[l])
//   y = Reduce16(acc) (+ bias)
// with Reduce16 adding lanes l + 8 onto lanes l < 8, then ((s0 + s4) + (s2 + s6)) + ((s1 + s5) +
// (s3 + s7)) (HorizontalSum, kernels/simd.h), and a row's last chunk padded with zeros. So a row of
// x gives the same bits alone (decode) as inside a prompt of any length (the explain verb's
// recomputation of position 0 relies on it), and an AVX2 run the same bits as an AVX-512 one
// (AVX-512 keeps the 16 lanes in one zmm register, AVX2 in two ymm). The portable path (no AVX2)
// sums the same lanes in the same order with a rounded multiply and add, so it differs from the
// vector paths in the last bits but not between values of T.
//
// Blocking: W is decoded kDotRowBlock rows at a time (threads take contiguous ranges of these
// row blocks, so each reads W as one stream) into an f32 buffer packed for the register tiles: a
// tile's rows of W side by side, 16 values each, chunk after chunk; x is copied the same way, a
// tile's rows of x side by side (AVX-512 tiles: 4 rows of x by 6 of W, 24 zmm accumulators; AVX2:
// 2 by 3, two ymm each). A tile walks kDotKBlock values at a time, so that its operands stay in L1,
// and its partial sums wait in a per-thread buffer between value blocks. Up to kDotXBlock rows of
// x, W is decoded one tile's rows and one value block at a time and read once, while the next
// tile's bytes are asked for in memory order (one sequential stream for the memory); beyond, each
// row block of W is decoded whole (into L2), serves every block of kDotXBlock rows of x, and the
// next row block's bytes are asked for while it does.
#pragma once

#include <cstdint>

namespace ss {

inline constexpr int kDotChunk = 16;    // values per lane group: the unit of every row's sum
inline constexpr int kDotKBlock = 512;  // values of a row per pass (a multiple of every block)
inline constexpr int kDotKBlockOnePass = 1024;  // the same when W is read once (T <= kDotXBlock)
inline constexpr int kDotRowBlock = 24;  // rows of W decoded together (a multiple of 6 and 3)
inline constexpr int kDotXBlock = 16;    // rows of x per pass (a multiple of 4 and 2)

// W as the dot-form product reads it: `out` rows of `in` values that `decode` writes in f32.
struct DotWeights {
  int out = 0, in = 0;
  // Writes rows [row0, row0 + rows) x values [v0, v0 + n) of W, decoded, row r at dst + r * rs and
  // each 16 values (a chunk) cs floats after the previous 16: value v of row r at
  // dst + r * rs + (v / 16) * cs + v % 16. v0 is a multiple of kDotKBlock; v0 + n <= in; n is a
  // multiple of the type's block unless v0 + n = in. The engine pads a row's last chunk with zeros.
  void (*decode)(const void* ctx, int row0, int rows, int v0, int n, float* dst, int64_t rs,
                 int cs) = nullptr;
  const void* ctx = nullptr;
  // Asks for slice `part` of `parts` of the bytes of rows [row0, row0 + rows), cut in memory order
  // (row after row), to be brought into the caches ahead of their decoding; may be null.
  void (*prefetch)(const void* ctx, int row0, int rows, int part, int parts) = nullptr;
};

// y (T, out) = x (T, in) · W^T (+ bias (out) if not null), as above. Any T >= 0. Runs one OpenMP
// parallel region when the product has 2^16 multiply-adds or more (the caller must not be inside
// one); the result is the same at any thread count.
void MatMulDot(const float* x, const DotWeights& w, const float* bias, float* y, int T);

// The SIMD level MatMulDot's tiles run at now: "avx512", "avx2" or "portable".
const char* DotKernelName();

}  // namespace ss
