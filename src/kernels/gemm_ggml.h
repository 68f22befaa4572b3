// Matrix products on weights kept in the type the file stores them (--precision native):
// y (T, out) = x (T, in) · dequant(W)^T (+ bias), W in ggml's row layout (kernels/dequant.h: F16,
// BF16, Q8_0, Q4_0, Q4_K, Q6_K, MXFP4; each row whole blocks, rows one after the other or a fixed
// stride apart) or MXFP4 as the gpt-oss safetensors hold it (nibbles and scales apart,
// kTypeMxfp4Split). The same bytes serve a GGUF tensor and a safetensors F16 / BF16 / MXFP4
// tensor, so W is usually a view of the file's mapping and is never expanded to f32 as a whole.
// x and y stay f32.
//
// - Few rows of x (decode, T < kGgmlWidenRows): a fused dequantise-and-dot per row of W, in AVX2
//   registers where the CPU has AVX2 + FMA (+ F16C for F16): each block's integers (or halves) are
//   widened to f32 and multiplied with x by FMA, the block's sum scaled by its scale (in zmm
//   registers, 16 values an instruction, where the CPU has AVX-512). Q4_K's
//   per-sub-block offset enters as dmin * m * (sum of the sub-block's 32 values of x), computed once
//   per row of x. MXFP4's E2M1 codes become ggml's doubled int8 values (2 x, -12..12) by one
//   PSHUFB per 16, and each block's sum is scaled by half its E8M0 scale; the split form's
//   nibble pairs are put in order by one byte unpack. Elsewhere the row is dequantised
//   (kernels/dequant.h) into f32 and dotted.
// - Many rows (prefill, analysis): W is dequantised kWidenBlock rows at a time into f32 and
//   OpenBLAS sgemm multiplies the block (MatMulWidened, shared with the Q8_0 pack).
// Either way the result is x times the dequantised W up to the order of f32 additions; a row's sum
// is computed the same way whatever the thread count, so the result does not depend on it.
// tests/test_gemm_ggml.cpp holds every type and path to a double-precision product of x and the
// dequantised W and prints the largest difference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace ss {

// Rows of x from which MatMulGgml dequantises W into f32 blocks for sgemm.
inline constexpr int kGgmlWidenRows = 16;

struct GgmlMatrix {
  uint32_t type = 0;       // kGgmlType*, or kTypeMxfp4Split (kernels/dequant.h)
  int out = 0, in = 0;     // the logical shape of W (PyTorch order)
  size_t row_bytes = 0;    // GgmlBytes(type, in): one row's bytes (the split form: its nibbles)
  size_t row_stride = 0;   // bytes from one row's start to the next's: row_bytes, or a multiple of
                           // it when W's rows alternate with another matrix's in the file
  const uint8_t* data = nullptr;        // row r at data + r * row_stride; any alignment
  // kTypeMxfp4Split only: row r's in / 32 E8M0 scales at scales + r * scale_stride.
  const uint8_t* scales = nullptr;
  size_t scale_stride = 0;
  std::shared_ptr<const void> owner;    // keeps `data` alive: the file's mapping or a buffer
  bool empty() const { return data == nullptr; }
  size_t bytes() const { return static_cast<size_t>(out) * row_bytes; }  // the rows' (the nibbles')
  const uint8_t* row(int r) const { return data + static_cast<size_t>(r) * row_stride; }
  const uint8_t* row_scales(int r) const { return scales + static_cast<size_t>(r) * scale_stride; }
  // Rows [first, first + count) of W as a matrix of their own (an expert of a stacked tensor).
  // Holds no owner: valid while this matrix, or its owner, lives.
  GgmlMatrix Rows(int first, int count) const;
};

// Whether MatMulGgml multiplies weights of this type: F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, MXFP4 and
// the split MXFP4.
bool GgmlMatMulSupports(uint32_t type);
// W of `type` (out, in) over `data` (viewed, kept alive by `owner`): its rows are every
// `row_step`-th row of the stored ones, the first at `data` (gpt-oss's gate rows are the even
// rows of gate_up_proj, its up rows the odd ones). The split MXFP4 form takes its scales too, a
// stored row's in / 32 bytes after the previous one's. Throws ss::Error when the type is not
// supported or `in` is not a whole number of its blocks.
GgmlMatrix GgmlView(uint32_t type, int out, int in, const uint8_t* data,
                    std::shared_ptr<const void> owner, int row_step = 1,
                    const uint8_t* scales = nullptr);

// The path MatMulGgml's fused product takes for `type` now: "avx512", "avx2" or "portable".
const char* GgmlKernelName(uint32_t type);

// y (T, out) = x (T, in) · dequant(W)^T (+ bias (out) if not null). Any T >= 0. Runs one OpenMP
// parallel region when the product is large enough (the caller must not be inside one).
void MatMulGgml(const float* x, const GgmlMatrix& w, const float* bias, float* y, int T);

// The index (row * in + column) of the first value of W that decodes to a NaN or an infinity, or
// -1. An f16 or bf16 field with an all-ones exponent does: a value itself (F16, BF16) or a block's
// scale (the integer types, whose integers times a finite f16 scale stay finite in f32). MXFP4: a
// block whose E8M0 scale is NaN (0xFF) or whose scale times an element overflows f32
// (Mxfp4BlockFault; the index is the block's first value). A pass over the scales, not a
// dequantisation.
int64_t GgmlFirstNonFinite(const GgmlMatrix& w);
// What is wrong at `element` (from GgmlFirstNonFinite), for an error message ("holds ...").
std::string GgmlFaultReason(const GgmlMatrix& w, int64_t element);

// W[row0 .. row0 + rows) dequantised into dst (rows, in), row-major.
void DequantizeGgmlRows(const GgmlMatrix& w, int row0, int rows, float* dst);

// y (T, out) = x (T, in) · W^T (+ bias), where W is available only a block of rows at a time:
// dequantise(row0, rows, dst) writes rows [row0, row0 + rows) of W into dst (rows, in). Blocks of
// kWidenBlock rows go to OpenBLAS sgemm, one block per thread. For T large enough that sgemm pays
// for the dequantisation (the packed Q8_0 and the native types, from 16 rows of x on).
void MatMulWidened(const float* x, int in, int out, const float* bias, float* y, int T,
                   const std::function<void(int row0, int rows, float* dst)>& dequantise);

}  // namespace ss
