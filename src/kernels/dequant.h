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

// "Q4_K", "F16", ...; "type <id>" for ids this file does not know.
const char* GgmlTypeName(uint32_t ggml_type);
// True for the types Dequantize() handles (the constants above).
bool IsDequantizable(uint32_t ggml_type);
// Values per block (1 for F32/F16/BF16) and bytes per block. Throw ss::Error for unsupported types.
int64_t GgmlBlockValues(uint32_t ggml_type);
size_t GgmlBlockBytes(uint32_t ggml_type);
// Bytes that `n` values of `ggml_type` occupy; throws ss::Error if n is not a whole number of blocks.
size_t GgmlBytes(uint32_t ggml_type, int64_t n);

// Decodes `n` values (a multiple of the block size) from `src` (GgmlBytes(type, n) bytes, any
// alignment) into `dst`. Throws ss::Error naming the type if it is unsupported or n is not a whole
// number of blocks.
void Dequantize(uint32_t ggml_type, const uint8_t* src, float* dst, int64_t n);

// Encoders for writers and tests. `n` must be a multiple of 32; `dst` gets GgmlBytes(type, n) bytes.
// Both quantise against the f16-rounded block scale that is actually stored, so Q8_0's error is
// at most d/2 per value (d the stored scale). Q4_0 maps the largest-magnitude value m to nibble 0
// (d = -m / 8), so values near -m would need nibble 16 and clip to 15: its error is at most |d|/2
// elsewhere and |d| there.
void QuantizeQ8_0(const float* src, uint8_t* dst, int64_t n);
void QuantizeQ4_0(const float* src, uint8_t* dst, int64_t n);

}  // namespace ss
