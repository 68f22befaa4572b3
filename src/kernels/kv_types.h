// The storage types of a streaming KV cache's entries (--kv-type; docs/STREAMING.md, "Quantised
// cache"). A row is one entry of one layer: kv_dim = Hkv * Dh values (keys or values), stored as
//   f32    4 bytes a value (the reference)
//   bf16   2 bytes (the top half of the f32: 8 significant bits, round to nearest even)
//   f16    2 bytes (IEEE binary16, round to nearest even)
//   q8_0   ggml's Q8_0 blocks of 32 values in 34 bytes (f16 scale d, int8 q; x = d q)
//   q4_0   ggml's Q4_0 blocks of 32 values in 18 bytes (f16 d, 4-bit q; x = d (q - 8))
// (kernels/dequant.h has the block layouts). The blocks run along the row, so q8_0 and q4_0 need
// kv_dim to be a multiple of 32; a head narrower than 32 shares its blocks' scales with its
// neighbours. Attention reads a head's slice of each row decoded to f32 and sums in f32: the result
// is attention on the dequantised cache.
//
// A streaming cache stores a layer's rows head-major (KvPanelValues): the row is cut into panels of
// whole heads, and each panel's rows are contiguous, so one head's keys over the whole cache are
// one run of bytes (a 32K-entry q8_0 cache of 128-wide heads: 4.4 MB per head) that the attention
// reads front to back. Each panel row is itself an encoded row of the panel's values, so the
// blocks, and the values they decode to, are those of the whole row.
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
// q8_0 / q4_0 take a vector path (AVX2); any other range decodes value by value, to the same
// floats.
void KvDecodeSlice(KvType type, const uint8_t* row, int first, int count, float* out);

// Values per panel of a head-major row of n_kv_heads heads of head_dim: one head, or for q8_0 and
// q4_0 with a head that is not whole blocks of 32 (stories260K's 8), the fewest heads that are
// (lcm(head_dim, 32) values: 4 heads of 8), so that no block spans two panels. Divides
// n_kv_heads * head_dim whenever KvRowBytes accepts that.
int KvPanelValues(KvType type, int head_dim);

// One kv head's slice of a run of encoded rows, as the streaming attention reads it: `count` rows
// `stride` bytes apart, values [first, first + n) of each.
struct KvSlices {
  KvType type;
  const uint8_t* rows;
  size_t stride;
  int first, n, count;
};
// The attention's two products over such a run, decoding in registers (AVX-512 or AVX2):
//   KvRowDots          y[r] = x · row r                                  (x: n floats)
//   KvAddWeightedRows  acc += sum over r of p[r] row r, rows with p[r] = 0 skipped   (acc: n)
// with the f32 kernels' arithmetic exactly (kernels/ops.cpp: a row's dot product in two 8-lane
// chains of fused multiply-adds, 16 values a step, summed by HorizontalSum; one fused
// multiply-add per value and row, in row order), so the results equal the f32 kernels' on the
// decoded floats bit for bit. Return false, doing nothing, where no fused path applies: the
// portable level, n not a multiple of 8, a q8_0 / q4_0 slice that is not whole blocks, a CPU
// without F16C. The caller then decodes the rows (KvDecodeSlice) and runs the f32 kernels.
bool KvRowDots(const KvSlices& s, const float* x, float* y);
bool KvAddWeightedRows(const KvSlices& s, const float* p, float* acc);

}  // namespace ss
