// The storage types of a streaming KV cache's entries (--kv-type; docs/STREAMING.md, "Quantised
// cache"). A row is one entry of one layer: kv_dim = Hkv * Dh values (keys or values), stored as
//   f32    4 bytes a value (the reference)
//   bf16   2 bytes (the top half of the f32: 8 significant bits, round to nearest even)
//   f16    2 bytes (IEEE binary16, round to nearest even)
//   q8_0   ggml's Q8_0 blocks of 32 values in 34 bytes (f16 scale d, int8 q; x = d q)
//   q4_0   ggml's Q4_0 blocks of 32 values in 18 bytes (f16 d, 4-bit q; x = d (q - 8))
// (kernels/dequant.h has the block layouts). The blocks run along the row, so q8_0 and q4_0 need
// kv_dim to be a multiple of 32; a head narrower than 32 shares its blocks' scales with its
// neighbours. Attention reads a head's slice of each row, decoded to f32 (KvDecodeSlice), and sums
// in f32: the result is attention on the dequantised cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ss {

enum class KvType { kF32, kBf16, kF16, kQ8_0, kQ4_0 };

// "f32" | "bf16" | "f16" | "q8_0" | "q4_0"; anything else is an ss::Error naming `flag`.
KvType ParseKvType(const std::string& name, const std::string& flag);
const char* KvTypeName(KvType type);
// Bytes of one row of n values; throws ss::Error (naming the type and n) when the type cannot hold
// n values per row (q8_0 and q4_0: n a multiple of 32).
size_t KvRowBytes(KvType type, int n);
// Encodes n values into KvRowBytes(type, n) bytes.
void KvEncodeRow(KvType type, const float* x, int n, uint8_t* row);
// Decodes values [first, first + count) of a row into out (count floats). Whole aligned blocks of
// q8_0 / q4_0 take a vector path (AVX2); any other range decodes value by value, to the same floats.
void KvDecodeSlice(KvType type, const uint8_t* row, int first, int count, float* out);

}  // namespace ss
