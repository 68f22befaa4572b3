// Matrix products on weights kept in the type the file stores them (--precision native):
// y (T, out) = x (T, in) · dequant(W)^T (+ bias), W in ggml's row layout (kernels/dequant.h: F16,
// BF16, Q8_0, Q4_0, Q4_K, Q6_K, MXFP4; each row whole blocks, rows one after the other or a fixed
// stride apart) or MXFP4 as the gpt-oss safetensors hold it (nibbles and scales apart,
// kTypeMxfp4Split). The same bytes serve a GGUF tensor and a safetensors F16 / BF16 / MXFP4
// tensor, so W is usually a view of the file's mapping and is never expanded to f32 as a whole.
// x and y stay f32.
//
// Every product runs MatMulDot (kernels/gemm_dot.h): rows of W decoded to f32 a block at a time by
// the type's decoder (AVX-512: 16 values an instruction, the 4-bit codes looked up in a table of
// the block's 16 values by VPERMPS; AVX2: the ymm dequantisers; elsewhere the scalar decoders of
// kernels/dequant.h, which every vector decoder matches bit for bit), then multiplied with x in
// register tiles, each output one 16-lane FMA chain over its row in order. So a row of x gives the
// same bits whatever T (decode, a prompt, a batch of interventions), the thread count or the SIMD
// level (AVX-512 or AVX2), and the result is x times the dequantised W up to the order of f32
// additions. tests/test_gemm_ggml.cpp holds every type and path to a double-precision product of x
// and the dequantised W, prints the largest difference, and checks the row independence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ss {

struct GgmlMatrix {
  uint32_t type = 0;      // kGgmlType*, or kTypeMxfp4Split (kernels/dequant.h)
  int out = 0, in = 0;    // the logical shape of W (PyTorch order)
  size_t row_bytes = 0;   // GgmlBytes(type, in): one row's bytes (the split form: its nibbles)
  size_t row_stride = 0;  // bytes from one row's start to the next's: row_bytes, or a multiple of
                          // it when W's rows alternate with another matrix's in the file
  const uint8_t* data = nullptr;  // row r at data + r * row_stride; any alignment
  // kTypeMxfp4Split only: row r's in / 32 E8M0 scales at scales + r * scale_stride.
  const uint8_t* scales = nullptr;
  size_t scale_stride = 0;
  std::shared_ptr<const void> owner;  // keeps `data` alive: the file's mapping or a buffer
  // The rows again in the int8 products' packed layout (PackForInt8, kernels/gemm_int8.h), or
  // null: rows [16 g, 16 g + 16) at int8 + g * int8_group_bytes, the last group padded with zero
  // rows. Where set, the int8 products read these bytes instead of `data`, which may then be null:
  // a Q8_0 pack made from f32 weights for int8 x (kernels/gemm_q8.h) holds its rows packed only,
  // and only MatMulGgmlInt8 takes it.
  const uint8_t* int8 = nullptr;
  size_t int8_group_bytes = 0;
  // MXFP4 only: some block's half scale 2^(e - 128) is subnormal (E8M0 0 or 1), which the AVX2
  // kernel then forms from a table (a test a block that the others skip).
  bool int8_subnormal_scales = false;
  std::shared_ptr<const void> int8_owner;  // keeps `int8` alive
  bool empty() const { return data == nullptr; }
  size_t bytes() const { return static_cast<size_t>(out) * row_bytes; }  // the rows' (the nibbles')
  const uint8_t* row(int r) const { return data + static_cast<size_t>(r) * row_stride; }
  const uint8_t* row_scales(int r) const { return scales + static_cast<size_t>(r) * scale_stride; }
  // Rows [first, first + count) of W as a matrix of their own (an expert of a stacked tensor).
  // Holds no owner: valid while this matrix, or its owner, lives. Keeps the int8 packing where
  // `first` starts one of its groups (a multiple of 16).
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

// The decoder MatMulGgml uses for `type` now: "avx512", "avx512_vbmi" (the split MXFP4 form on a
// CPU with AVX-512 VBMI), "avx2" or "portable".
const char* GgmlKernelName(uint32_t type);
// Lets the split MXFP4 form's AVX-512 kernels use VBMI where the CPU has it (the default), or keeps
// them on AVX-512F (tests: the two give the same bits).
void AllowVbmiForMxfp4(bool allow);

// How MatMulGgml takes x for weights of a type. kF32, the default: x stays f32, and the product is
// x times the dequantised W up to the order of f32 sums (the numbers of an f32 forward on the
// stored weights). kInt8: each 32-value block of x rounded to int8 against its own scale and
// multiplied with the weights' integer codes (kernels/gemm_int8.h), as llama.cpp's and llama2.c's
// runq.c quantised kernels do: several times the 4-bit types' f32 throughput, at the cost of that
// rounding (docs/BENCHMARKS.md measures both). Offered for Q4_0, Q4_K, Q6_K, Q8_0 and MXFP4 (both
// forms); where it cannot run (another type, no AVX2, Q8_0 rows not packed) x stays f32. The choice
// holds for every T, so a row still gives the same bits alone as inside any product.
// SINKSCOPE_INT8_ACTIVATIONS at start-up (a comma-separated list of q4_0, q4_k, q6_k, q8_0, mxfp4,
// or "all") sets kInt8 for those types.
enum class GgmlActivations { kF32, kInt8 };
void SetGgmlActivations(uint32_t type, GgmlActivations activations);
// What MatMulGgml does with x for `type` now: kInt8 only where chosen and supported.
GgmlActivations GgmlActivationsFor(uint32_t type);
// "int8 (avx512_vnni)", "int8 (avx2)" or "f32": the activations MatMulGgml uses for `type` now.
std::string GgmlActivationsName(uint32_t type);
// The choice for every type that has int8 products (the CLI's --activations).
void SetGgmlActivationsForAll(GgmlActivations activations);
// The types whose products take x in int8 now ("Q4_0, Q4_K, Q6_K, Q8_0, MXFP4"), or "" for none.
std::string Int8ActivationTypes();
// The int8 products' kernels now: "avx512_vnni", "avx_vnni", "avx2" or "none".
const char* Int8ActivationsKernel();

// Whether PackForInt8 packs weights of this type: Q4_0, Q4_K, Q6_K, Q8_0 and MXFP4 (both forms).
bool Int8PackSupports(uint32_t type);
// Sets w->int8 (above) to a new copy of W's rows in the int8 products' packed layout
// (kernels/gemm_int8.h): 16 rows side by side, so that a thread's share of the product is one
// stream and each VPDPBUSD serves 16 rows. The packed product sums each row in a lane of its own,
// the unpacked one in 16 lanes and then across them, so the two differ in the last bits; each is
// the same for every T, thread count and SIMD level. A no-op for other types. Allocates W's size
// again (2 MiB-aligned, huge pages advised).
void PackForInt8(GgmlMatrix* w);

// y (T, out) = x (T, in) · dequant(W)^T (+ bias (out) if not null). Any T >= 0. Runs one OpenMP
// parallel region when the product is large enough (the caller must not be inside one).
void MatMulGgml(const float* x, const GgmlMatrix& w, const float* bias, float* y, int T);

// ya = x · dequant(A)^T (+ bias_a) and yb = x · dequant(B)^T (+ bias_b) for one row x (T = 1).
// Where A and B are views whose rows alternate in one stored matrix (A's row i the stored row
// 2 i, B's the stored row 2 i + 1, as GgmlView with row_step 2 and the next row's data makes them:
// gpt-oss's gate and up rows in gate_up_proj) and no int8 pack serves them, one product over the
// stored rows, read as one stream, then its results split: two products over every other row each
// read the whole matrix, the prefetchers fetching the rows skipped too (split MXFP4 experts of the
// gpt-oss-20b shape, f32 x: 6.6 against 12.9 GB/s on one thread; docs/BENCHMARKS.md). Otherwise
// two products. The same bits either way: each row's sum does not depend on the rows beside it.
void MatMulGgmlPair(const float* x, const GgmlMatrix& a, const float* bias_a, float* ya,
                    const GgmlMatrix& b, const float* bias_b, float* yb);

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

}  // namespace ss
