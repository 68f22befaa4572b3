// Dequantisation of ggml block formats (the tensor encodings inside GGUF files) to float32.
//
// Byte layouts, from ggml's ggml-common.h (block_* structs) and ggml-quants.c (dequantize_row_*),
// github.com/ggml-org/ggml. All multi-byte fields are little-endian; "f16" is IEEE binary16.
//
//   F16   2 bytes per value.                    BF16  2 bytes per value (top half of a float32).
//   Q8_0  32 values in 34 bytes:  f16 d | int8 qs[32]            x[i] = d * qs[i]
//   Q4_0  32 values in 18 bytes:  f16 d | uint8 qs[16]           x[i] = d * (nibble_i - 8),
//         nibble_i = qs[i] & 0xF for i < 16 (low nibbles), qs[i - 16] >> 4 for i >= 16.
//   Q4_K  256 values in 144 bytes: f16 d | f16 dmin | uint8 scales[12] | uint8 qs[128]
//         Eight sub-blocks of 32 values, each with a 6-bit scale sc_j and a 6-bit min m_j packed
//         into `scales`: for j < 4, sc_j = scales[j] & 63 and m_j = scales[j + 4] & 63; for j >= 4,
//         sc_j = (scales[j + 4] & 0xF) | (scales[j - 4] >> 6) << 4 and
//         m_j  = (scales[j + 4] >> 4)  | (scales[j] >> 6) << 4.
//         Values come in 4 groups of 64 (g = 0..3), each reading 32 bytes qs[32g .. 32g + 31]:
//         x[64g + l]      = d * sc_{2g}     * (qs[32g + l] & 0xF) - dmin * m_{2g}
//         x[64g + 32 + l] = d * sc_{2g + 1} * (qs[32g + l] >> 4)  - dmin * m_{2g + 1}, l = 0..31.
//   Q6_K  256 values in 210 bytes: uint8 ql[128] | uint8 qh[64] | int8 scales[16] | f16 d
//         Two halves of 128 values (h = 0, 1) read ql[64h ..], qh[32h ..], scales[8h ..]. For
//         l = 0..31 (s = l / 16), with ql' = ql + 64h, qh' = qh + 32h, sc' = scales + 8h:
//         x[128h + l]      = d * sc'[s]     * ((ql'[l]      & 0xF | ((qh'[l] >> 0) & 3) << 4) - 32)
//         x[128h + l + 32] = d * sc'[s + 2] * ((ql'[l + 32] & 0xF | ((qh'[l] >> 2) & 3) << 4) - 32)
//         x[128h + l + 64] = d * sc'[s + 4] * ((ql'[l]      >> 4  | ((qh'[l] >> 4) & 3) << 4) - 32)
//         x[128h + l + 96] = d * sc'[s + 6] * ((ql'[l + 32] >> 4  | ((qh'[l] >> 6) & 3) << 4) - 32)
//   MXFP4 32 values in 17 bytes:  uint8 e | uint8 qs[16]         (ggml's block_mxfp4, type 39)
//         x[i] = E2M1(qs[i] & 0xF) * 2^(e - 127) for i < 16 (low nibbles),
//         x[i] = E2M1(qs[i - 16] >> 4) * 2^(e - 127) for i >= 16 (high nibbles), as Q4_0.
//         ggml's dequantize_row_mxfp4 writes the same numbers as kvalues_mxfp4[n] * 2^(e - 128):
//         its E2M1 table is doubled ({0, 1, 2, 3, 4, 6, 8, 12, 0, -1, ...}) and its scale
//         (GGML_E8M0_TO_FP32_HALF) halved. ggml decodes e = 0xFF as 2^127; the format says NaN.
//
// MXFP4 itself is the OCP Microscaling Formats (MX) Specification v1.0's: blocks of 32 FP4 E2M1
// elements sharing one E8M0 scale. E2M1 is 1 sign, 2 exponent (bias 1) and 1 mantissa bit, no
// infinity or NaN: magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 for codes 0-7, codes 8-15 the same
// negated (code 8 is -0). E8M0 is an unsigned power of two, 2^(e - 127) for e = 0..254 (2^-127 to
// 2^127; there is no zero), and e = 0xFF is NaN.
//
// MXFP4 as the published gpt-oss safetensors store it (transformers' integrations/mxfp4.py,
// convert_moe_packed_tensors): not a ggml type, so it has an id of sinkscope's own,
// kTypeMxfp4Split. The nibbles and the scales are two U8 tensors, `<name>_blocks` (..., G, 16)
// and `<name>_scales` (..., G): row r's block g is the 16 bytes blocks[r, g] with the scale
// scales[r, g], and byte j holds value 2j in its low nibble and value 2j + 1 in its high one:
//         x[32g + 2j] = E2M1(blocks[r, g, j] & 0xF) * 2^(scales[r, g] - 127),
//         x[32g + 2j + 1] = E2M1(blocks[r, g, j] >> 4) * 2^(scales[r, g] - 127)
// (transformers: lut[blk & 0x0F] at even, lut[blk >> 4] at odd positions, then
// ldexp(., scales - 127)). llama.cpp's converter repacks these bytes into block_mxfp4 (the nibble
// order changed, the scale bytes copied), so both forms hold the same numbers.
//
// Type ids are ggml.h's `enum ggml_type`, as stored in GGUF tensor infos.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ss {

inline constexpr uint32_t kGgmlTypeF32 = 0;
inline constexpr uint32_t kGgmlTypeF16 = 1;
inline constexpr uint32_t kGgmlTypeQ4_0 = 2;
inline constexpr uint32_t kGgmlTypeQ8_0 = 8;
inline constexpr uint32_t kGgmlTypeQ4_K = 12;
inline constexpr uint32_t kGgmlTypeQ6_K = 14;
inline constexpr uint32_t kGgmlTypeBF16 = 30;
inline constexpr uint32_t kGgmlTypeMXFP4 = 39;
// MXFP4 with the nibbles and the scales in separate arrays, the nibbles in pairs (the layout
// above). Not a ggml type (ggml's ids stay far below): GgmlMatrix and the kernels know it;
// Dequantize and the GGUF files do not.
inline constexpr uint32_t kTypeMxfp4Split = 0x10000 + 39;

// Values per MXFP4 block, and bytes of its nibbles.
inline constexpr int kMxfp4Block = 32;
inline constexpr int kMxfp4NibbleBytes = 16;

// An E2M1 code (0..15) as a float, sign of zero kept (code 8 is -0).
float E2M1ToFloat(int code);
// An E8M0 scale as a float: 2^(e - 127), NaN for 0xFF. (2^-127, e = 0, is an f32 subnormal.)
float E8M0ToFloat(uint8_t e);

// Lookup tables the vector kernels read a block's scale from, so that it reaches a vector as one
// broadcast load (converting it in registers takes the shuffle port the codes also need):
// kF16AsF32.v[h] is F16ToF32(h) for every f16 bit pattern (exact; 256 KiB); kE8M0Half.v[e] is
// E8M0ToFloat(e) / 2, 2^(e - 128) (0xFF: NaN), the factor of ggml's doubled E2M1 values (2 x: 0, 1,
// 2, 3, 4, 6, 8, 12, exact integers) that gives the value times 2^(e - 127) exactly. Filled at
// start-up; read only after main begins.
struct F16AsF32Table {
  float v[65536];
  F16AsF32Table();
};
extern const F16AsF32Table kF16AsF32;
struct E8M0HalfTable {
  float v[256];
  E8M0HalfTable();
};
extern const E8M0HalfTable kE8M0Half;
// Why an MXFP4 block's values are not all finite f32 numbers: its scale is 0xFF (NaN), or
// 2^(e - 127) times an element's magnitude exceeds f32's largest value (e = 254 and |x| >= 2, or
// e = 253 and |x| >= 4). Returns nullptr for a good block. `nibbles` are its 16 bytes.
const char* Mxfp4BlockFault(uint8_t e, const uint8_t* nibbles);
// The first of `blocks` MXFP4 blocks that Mxfp4BlockFault refuses, or -1: block b's scale at
// scales + b * scale_stride, its nibbles at nibbles + b * nibble_stride (ggml: both 17 apart;
// the split form: 1 and 16).
int64_t Mxfp4FirstFault(const uint8_t* scales, size_t scale_stride, const uint8_t* nibbles,
                        size_t nibble_stride, int64_t blocks);
// Decodes `n` values (whole blocks) of the split form: nibbles (n / 2 bytes) and scales (n / 32).
void DequantizeMxfp4Split(const uint8_t* nibbles, const uint8_t* scales, float* dst, int64_t n);

// Q4_K's 6-bit scale and min of sub-block j (0..7) from the 12 packed `scales` bytes (above).
inline void Q4KScaleMin(int j, const uint8_t* scales, int* scale, int* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
    *min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

// "Q4_K", "F16", ...; "type <id>" for ids this file does not know.
const char* GgmlTypeName(uint32_t ggml_type);
// True for the types Dequantize() handles (the constants above).
bool IsDequantizable(uint32_t ggml_type);
// Values per block (1 for F32/F16/BF16) and bytes per block. Throw ss::Error for unsupported types.
int64_t GgmlBlockValues(uint32_t ggml_type);
size_t GgmlBlockBytes(uint32_t ggml_type);
// Bytes that `n` values of `ggml_type` occupy; throws ss::Error if n is not a whole number of
// blocks.
size_t GgmlBytes(uint32_t ggml_type, int64_t n);

// Decodes `n` values (a multiple of the block size) from `src` (GgmlBytes(type, n) bytes, any
// alignment) into `dst`. Throws ss::Error naming the type if it is unsupported or n is not a whole
// number of blocks.
void Dequantize(uint32_t ggml_type, const uint8_t* src, float* dst, int64_t n);

// Encoders for writers and tests. `n` must be a multiple of the block (32 for Q8_0 / Q4_0, 256 for
// Q4_K / Q6_K; ss::Error otherwise); `dst` gets GgmlBytes(type, n) bytes. All quantise against the
// f16 scales that are actually stored, so rounding a scale to f16 does not add to the error.
// Q8_0's error is at most d/2 per value (d the stored scale). Q4_0 maps the largest-magnitude
// value m to nibble 0 (d = -m / 8), so values near -m would need nibble 16 and clip to 15: its
// error is at most |d|/2 elsewhere and |d| there.
// Q4_K, per 32-value sub-block j with lo = min(0, min x) (ggml-quants.c's make_qkx2_quants clamps
// the minimum the same way, so the offset m_j >= 0) and hi = max x: the 6-bit m_j and sc_j and the
// f16 dmin and d are all rounded up, so the grid -dmin m_j + q d sc_j (q = 0..15) covers [lo, hi]
// and no value clips. The error is at most half a step, d sc_j / 2, with d sc_j <= (hi - lo) / 15 +
// d + dmin / 15: the ideal step (hi - lo) / 15 plus what the 6-bit scales add. Q6_K, per 16-value
// sub-block j: the int8 scale's sign maps the largest-magnitude value to q = -32 and its magnitude,
// rounded up against the f16 d (also rounded up), keeps the other side within q <= 31.5, so no
// value clips: the error is at most d |sc_j| / 2, with d |sc_j| <= max |x_j| / 31.5 + d.
void QuantizeQ8_0(const float* src, uint8_t* dst, int64_t n);
void QuantizeQ4_0(const float* src, uint8_t* dst, int64_t n);
void QuantizeQ4_K(const float* src, uint8_t* dst, int64_t n);
void QuantizeQ6_K(const float* src, uint8_t* dst, int64_t n);
// MXFP4 (ggml's block_mxfp4), as the OCP MX v1.0 conversion (its section 6.3) does it: the shared
// exponent is floor(log2(max |x|)) - 2 (2 being E2M1's largest exponent), clamped to E8M0's
// [-127, 127]; each x / 2^exponent is rounded to the nearest E2M1 value (ties to the even
// mantissa), magnitudes beyond 6 saturating to 6; -0 stays -0. An all-zero block gets e = 0.
// Values that are MXFP4 numbers already (a decoded MXFP4 tensor) come back exactly, though a
// block's bytes may differ: one whose largest magnitude is below 4 times its scale gets a smaller
// scale and larger codes for the same values.
void QuantizeMXFP4(const float* src, uint8_t* dst, int64_t n);

}  // namespace ss
