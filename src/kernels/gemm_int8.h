// Products with x rounded to int8 (kernels/gemm_ggml.h's GgmlActivations::kInt8): the integer dot
// products llama.cpp and llama2.c's runq.c use for quantised weights, as an explicit choice per
// weight type. Internal to the kernels.
//
// x: each 32-value block of a row rounded to int8 against its own scale, dx = max |x| / 127,
// q_i = x_i * (127 / max |x|) rounded to the nearest integer, ties to even (an all-zero block: all
// 0, dx = 0), as ggml's quantize_row_q8_0 does (with the scale kept in f32 rather than f16).
// W: each block's integer codes c (Q4_0: n - 8; MXFP4: ggml's doubled E2M1 values, with half the
// E8M0 scale; Q4_K: the 4-bit q, with d sc and the offset dmin m; Q6_K: the six-bit q - 32 with d
// and its 16-value sub-blocks' int8 scales sc; Q8_0: the int8 code with d), held as unsigned bytes
// u = c + o (o = 8, 12, 0, 32, 128).
//
// Every output is formed the same way whatever T, the thread count or the SIMD level:
//   for each pair of 32-value blocks (2p, 2p + 1), in order, and each of the 16 lanes l (lanes
//   0-7: block 2p's values 4l .. 4l + 3; lanes 8-15: block 2p + 1's, likewise):
//     s_l = sum of the 4 products u q (exact in int32) - o (sum of the 4 q)   (= sum of c q)
//     acc_l = fma(float(s_l), w_scale_l * dx_l, acc_l)
//   (Q4_K then acc_l = fma(-float(sum of the 4 q), dmin m_j * dx_l, acc_l) for its offset), a
//   row's last pair with one block counting zeros for the other, then Reduce16 (kernels/simd.h)
//   and the bias. AVX-512 (with VNNI and BW) keeps the 16 lanes in one zmm register (VPDPBUSD),
//   AVX2 in two ymm (VPMADDUBSW then VPMADDWD: the same exact sums; the codes are at most 63, so
//   no pair of products saturates 16 bits): the same bits. No portable form: without AVX2 the
//   products keep x in f32.
//
// The packed rows (PackForInt8, kernels/gemm_ggml.h; Q4_0, MXFP4, Q4_K, Q6_K, Q8_0): W's rows in
// groups of 16, each group its blocks in order, each block kPackedBlockBytes (Q4_0) or
// kPackedMxBlockBytes (MXFP4): 256 bytes of codes, then the 16 rows' scales (Q4_0: its f16 d;
// MXFP4: its E8M0 byte e less 128, as int8 s; half the scale, what the doubled codes u need, is
// 2^s: the bytes of the file, so decode reads 4.25 bits a weight as the file stores them). Code
// byte 64 m + 4 r + j holds row r's code 8 m + j in its low nibble and code 8 m + 4 + j in its
// high one (Q4_0: n; MXFP4: the E2M1 code). A group is one stream, and one VPDPBUSD multiplies 4
// codes of each of its 16 rows with the same 4 values of x (a broadcast load), so each output is
// summed in a lane of its own:
//   for each block b, in order: s = sum over its 32 values of u q (exact in int32) - o (sum of q)
//                               acc = fma(float(s), w_scale * dx, acc)
//                               (Q4_K: w_scale = d sc_j, then
//                                acc = fnmadd(float(sum of q), dmin m_j * dx, acc))
//   then acc (+ bias): no reduction across lanes, the same bits on AVX-512 (16 rows in a zmm)
//   and AVX2 (two halves of 8) and for every T. Q4_K's super-blocks keep their 8 sub-blocks'
//   codes in that form one after the other, then the scales unpacked (kPackedQ4KBytes below).
//   Q6_K's keep each block's low nibbles so, with their high bits beside them (kPackedQ6KBytes):
//   for each block b, in order: s_A, s_B = sum of u q - 32 (sum of q) over its first and its
//                               second 16 values (exact in int32)
//                               S = sc_A s_A + sc_B s_B (exact: |S| < 2^24)
//                               acc = fma(float(S), d dx, acc)
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/gemm_ggml.h"

namespace ss {

// Q4_K's eight 6-bit scales sc_0-7 (bytes 0-7) and mins m_0-7 (bytes 8-15) of the super-block at w
// (its twelve packed bytes at w + 4, kernels/dequant.h). As three words a, b, c: sc_0-3 = a & 63
// and m_0-3 = b & 63 byte by byte; sc_4-7 = c's low nibbles with a's top two bits above them,
// m_4-7 = c's high nibbles with b's top two bits above them.
__attribute__((target("sse2"))) inline __m128i Q4KScaleBytes(const uint8_t* w) {
  uint32_t a, b, c;
  std::memcpy(&a, w + 4, 4);
  std::memcpy(&b, w + 8, 4);
  std::memcpy(&c, w + 12, 4);
  const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
  const uint32_t sc_lo = a & low6, m_lo = b & low6;
  const uint32_t sc_hi = (c & low4) | (((a >> 6) & low2) << 4);
  const uint32_t m_hi = ((c >> 4) & low4) | (((b >> 6) & low2) << 4);
  return _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi), static_cast<int>(m_lo),
                        static_cast<int>(m_hi));
}

// The one-row kernels (kernels/gemm_ggml.cpp, gemm_int8.cpp) read up to kRowStreams rows side by
// side, rows first, first + step, ...: ForRowStreams runs a thread's range of rows [lo, hi) as
// kRowStreams streams spaced evenly through it (rows lo + i + s q, q = (hi - lo) / kRowStreams,
// for i < q), then the rows left over one at a time, each stream reading row after row. A kernel
// asks for the bytes kRowAheadBytes further on in its stream: in the same row while it lasts, then
// in the rows the stream reads next (so rows shorter than the distance, a 768-wide model's 1.5 KiB
// of BF16, are asked for early too; where W's rows are a stride apart, the stride is skipped). A
// row's arithmetic does not depend on the rows beside it, so the order gives the same bits. As for
// the f32 MatVec (kernels/ops.cpp), two spaced streams a thread read faster than groups of four
// adjacent rows on the 2-core Zen 5 EPYC: the 0.9B Llama shape's native Q8_0 decode 20.2-20.5 ->
// 22.4-22.9 tokens/s on one thread, 32.3-34.1 -> 38.4-38.6 on two; BF16 and Q4_K within the noise.
// The distance, 4 KiB as the packed int8 stream's (gemm_int8.cpp), against 1 KiB before: the same
// 0.9B shape's decode from memory on the Zen 5 EPYC (GB/s of weights, 2 alternating runs each,
// 1 / 2 threads; read bandwidth 27.0 / 45.9): native BF16 21.1-22.4 -> 27.3-27.7 and 38.5-41.4 ->
// 49.2-49.4, F16 21.7-23.3 -> 28.9-29.5 and 41.7 -> 55.2-55.7, Q8_0 19.8-20.0 -> 19.7-22.1 and
// 34.3-36.7 -> 37.8-39.3; AVX2 alike for BF16 and F16; the 4-bit types (bound by their
// arithmetic with f32 x) unchanged; 2 KiB and 8 KiB no better than 4.
inline constexpr size_t kRowAheadBytes = 4096;
inline constexpr int kRowStreams = 2;
inline const char* RowAhead(const uint8_t* row, size_t offset, size_t row_bytes,
                            size_t row_stride) {
  const size_t at = offset + kRowAheadBytes;
  const uintptr_t base =
      reinterpret_cast<uintptr_t>(row);  // may point past W's end: a prefetch does not fault
  if (at < row_bytes || row_stride == row_bytes) return reinterpret_cast<const char*>(base + at);
  return reinterpret_cast<const char*>(base + at / row_bytes * row_stride + at % row_bytes);
}
// Where each of a kernel's G streams starts: rows r0, r0 + step, ... (ForRowStreams' first and
// step), their bytes and, for the split MXFP4 form, their scales (else null).
template <int G>
struct RowStreamStarts {
  const uint8_t* row[G];
  const uint8_t* sc[G];
  RowStreamStarts(const GgmlMatrix& w, int r0, int step) {
    for (int g = 0; g < G; ++g) {
      row[g] = w.row(r0 + g * step);
      sc[g] = w.scales ? w.row_scales(r0 + g * step) : nullptr;
    }
  }
};
// Calls rows(streams, first, step) for rows [lo, hi) as above, `streams` streams (kRowStreams
// unless a kernel asks for more).
template <class F>
inline void ForRowStreams(int lo, int hi, F&& rows, int streams = kRowStreams) {
  const int q = (hi - lo) / streams;
  for (int i = 0; i < q; ++i) rows(streams, lo + i, q);
  for (int r = lo + q * streams; r < hi; ++r) rows(1, r, 1);
}

inline constexpr int kPackedRows = 16, kPackedCodeBytes = 256,
                     kPackedBlockBytes = kPackedCodeBytes + 2 * kPackedRows,
                     kPackedMxBlockBytes = kPackedCodeBytes + kPackedRows;
// Q4_K: per 256-value super-block, its 8 sub-blocks' codes (kPackedCodeBytes each, as above),
// then at kPackedQ4KScales the 16 rows' d (f16), dmin (f16), then sc_j of the 16 rows for
// j = 0..7 (a byte each), then m_j likewise.
inline constexpr int kPackedQ4KScales = 8 * kPackedCodeBytes,
                     kPackedQ4KBytes = kPackedQ4KScales + 4 * kPackedRows + 16 * 2 * 8;
// Q6_K: per 256-value super-block, for each of its 8 32-value blocks the low 4 bits of the codes
// (kPackedCodeBytes, as above) then their high 2 bits (128 bytes: for step m = 0-3, 16 bytes for
// the low nibbles' codes, then 16 for the high nibbles'; byte k holds in bits 2 q and 2 q + 1 the
// high bits of code byte 16 q + k's code); then at kPackedQ6KScales the 16 rows' d (f16), then
// the int8 scale of 16-value sub-block s for the 16 rows (16 bytes) for s = 0..15.
// Q8_0: per 32-value block, 8 steps of 64 bytes: byte 64 m + 4 r + i holds row r's code 4 m + i
// plus 128 (the int8 code c as an unsigned byte u = c + 128, o = 128), then the 16 rows' d (f16).
inline constexpr int kPackedQ80Bytes = 8 * 64 + 2 * kPackedRows;
inline constexpr int kPackedQ6KBlockBytes = kPackedCodeBytes + 128,
                     kPackedQ6KScales = 8 * kPackedQ6KBlockBytes,
                     kPackedQ6KBytes = kPackedQ6KScales + 2 * kPackedRows + 16 * kPackedRows;

// Whether the int8 products run for `type` now (the type has them and the SIMD level is AVX2 or
// AVX-512; the AVX-512 form needs AVX-512 BW and VNNI, else the AVX2 one runs). Q8_0 has them on
// packed rows only (Int8RunsOn).
bool Int8Supported(uint32_t type);
// Whether MatMulGgmlInt8 takes W as it is: packed rows, or rows as stored of a type with kernels
// for those (every type of Int8Supported but Q8_0).
bool Int8RunsOn(const GgmlMatrix& w);
// "avx512_vnni", "avx_vnni" (AVX2 with AVX-VNNI's VPDPBUSD), "avx2" or "none".
const char* Int8KernelName();
// Lets the AVX2 form use AVX-VNNI where the CPU has it (the default), or keeps it on VPMADDUBSW +
// VPMADDWD (tests: the two give the same bits).
void AllowAvxVnniForInt8(bool allow);

// y (T, out) = x (T, in) · W^T (+ bias), x rounded to int8 as above. Int8RunsOn(w); w's `data` may
// be null where its packed rows are set (kernels/gemm_q8.h's int8 layout).
void MatMulGgmlInt8(const float* x, const GgmlMatrix& w, const float* bias, float* y, int T);

}  // namespace ss
