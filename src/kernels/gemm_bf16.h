// Matrix product with bf16 operands and f32 accumulation, for the compute-bound products (prefill,
// analysis, training): y (T, out) = bf16(x) (T, in) · bf16(W)^T (+ bias).
//
// On CPUs with AMX-BF16 (Sapphire Rapids and later Xeons), products of 16 rows of x and more run on
// the tile unit (TDPBF16PS: 16 x 16 outputs over 32 products each per instruction; 4.5x sgemm's
// rate on 2 cores there); fewer rows, and tiles' edges, run the AVX-512 micro-kernel. On AMD CPUs
// with AVX-512 BF16 (Zen 4) the micro-kernel uses VDPBF16PS, which does 32 multiply-adds per zmm
// instruction where an f32 FMA does 16: about twice sgemm's ceiling there. Intel's cores issue
// VDPBF16PS at a quarter of their FMA rate (half the multiply-adds: bench_gemm's peak loops), so
// there, and on CPUs with AVX-512 but no BF16, the AVX-512 path widens W to f32 (a bf16 is the
// upper half of an f32) and multiplies with FMA (`avx512_fma`; Bf16Dot chooses). Each product of
// two bf16 values is exact in f32, so the result differs from a double-precision product of the
// bf16-rounded operands only by the order of the f32 additions; it differs from the f32 product
// by the rounding of x and W to bf16 (8 significant bits: each operand within 2^-9 relative, so
// each product within about 2^-8; tests/test_gemm_bf16.cpp prints what it comes to). On CPUs with
// AVX2 + FMA but no AVX-512 the same FMA arithmetic runs in ymm registers (avx2; the same bits as
// avx512_fma). Elsewhere a portable path computes the same thing in plain loops. The path is chosen
// at run time from the CPU and the SIMD level (kernels/vecmath.h, SINKSCOPE_SIMD=portable|avx2|
// avx512, ForceSimdLevel). As VDPBF16PS does, denormal operands (below 1.2e-38 in magnitude) count
// as zero on every path; on the VDPBF16PS path a denormal result is also flushed to zero.
//
// Every path but AMX forms each output the same way whatever T: a column's sum runs over the
// pairs (VDPBF16PS) or the values (FMA) in order from zero, then adds the bias, in the
// matrix-vector product (decode) and in every tile, so a row of x gives the same bits alone as
// inside a prompt (tests/test_gemm_bf16.cpp). The AMX tiles sum inside the tile unit in their own
// order.
//
// Packed layout of W (out, in): the output columns are cut into panels of kBf16PanelWidth (padded
// with zero columns); the `in` dimension into pairs (padded with a zero when odd). Panel p stores,
// for each pair k in order, the kBf16PanelWidth columns' pairs as two bf16 (lower half: element 2k,
// upper half: 2k + 1), which is the operand layout of VDPBF16PS:
//   data[((p * pairs + k) * kBf16PanelWidth + j) * 2 + h] = bf16(W[p * width + j][2k + h])
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace ss {

// Output columns per packed panel: two zmm vectors of 16 f32 accumulators.
constexpr int kBf16PanelWidth = 32;

// Whether the CPU executes AVX-512 BF16 (VDPBF16PS, VCVTNE2PS2BF16).
bool CpuHasAvx512Bf16();
// Whether AMX-BF16 tile products can run: the CPU has AMX-TILE, AMX-BF16 and AVX-512 BF16, and
// Linux granted the process the tile state (asked once, on the first call).
bool CpuHasAmxBf16();
// Lets MatMulBf16 use AMX where CpuHasAmxBf16() (the default, unless SINKSCOPE_AMX=0), or keeps it
// on the AVX-512 BF16 kernel (tests and comparisons).
void AllowAmx(bool allow);
// Where the CPU has AVX-512 BF16 and no AMX is in use: whether MatMulBf16 multiplies with VDPBF16PS
// (kVdpbf16ps: bf16 pairs, f32 sums) or widens W to f32 and multiplies with FMA (kFma: the AVX2
// path's arithmetic in zmm registers, which CPUs without AVX-512 BF16 run too). kAuto (the
// default; SINKSCOPE_VDPBF16PS=1 or 0 sets the others) takes VDPBF16PS on AMD CPUs, where it does
// twice the multiply-adds of FMA, and FMA on Intel ones, where it does half.
enum class Bf16Dot { kAuto, kVdpbf16ps, kFma };
void ChooseBf16Dot(Bf16Dot dot);
// Whether MatMulBf16 runs a vector path now: AVX-512 BF16, or AVX2 + FMA (W widened to f32 in
// registers for small T, a block at a time for sgemm from kWidenRows rows on), as the CPU and the
// SIMD level (SINKSCOPE_SIMD, ForceSimdLevel) allow. When it does not, the portable path is correct
// but slow (about a quarter of sgemm's speed at x86-64 baseline flags).
bool Bf16KernelActive();
// The path MatMulBf16 runs now: "amx_bf16", "avx512_bf16" (VDPBF16PS), "avx512_fma", "avx2" or
// "portable".
const char* Bf16KernelName();

// Asks the kernel to back [p, p + bytes) with transparent huge pages (madvise MADV_HUGEPAGE; a
// no-op where THP is off). Packed weights are streamed once per token in decode: with 4 KiB pages
// every 4 KiB of a 200 MB matrix is a TLB miss.
void AdviseHugePages(void* p, size_t bytes);

// std::allocator with 64-byte alignment, so each pair of a panel (128 bytes) starts a cache line;
// blocks of 2 MiB and more are aligned to 2 MiB and advised to use huge pages.
template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr size_t kHuge = size_t{1} << 21;
  static size_t Alignment(size_t n) { return n * sizeof(T) >= kHuge ? kHuge : 64; }
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t n) {
    void* p = ::operator new (n * sizeof(T), std::align_val_t{Alignment(n)});
    if (Alignment(n) == kHuge) AdviseHugePages(p, n * sizeof(T));
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) { ::operator delete (p, std::align_val_t{Alignment(n)}); }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
};

// W (out, in) in the packed layout above. Pack once per weight; reused by every call.
struct PackedBf16 {
  int out = 0, in = 0;                                       // the logical shape of W
  int pairs = 0;                                             // (in + 1) / 2
  int panels = 0;                                            // ceil(out / kBf16PanelWidth)
  std::vector<uint16_t, CacheLineAllocator<uint16_t>> data;  // (panels, pairs, kBf16PanelWidth, 2)
};

// Packs W (out, in) from f32, rounding to the nearest bf16 (ties to even; as torch's .bfloat16()).
PackedBf16 PackBf16(const float* w, int out, int in);
// Packs W (out, in) from stored bf16 bits (a bf16 checkpoint) as they are (denormals aside).
PackedBf16 PackBf16Bits(const uint16_t* w, int out, int in);

// y (T, out) = bf16(x) (T, in) · bf16(W)^T (+ bias (out) if not null), accumulated in f32; x is
// rounded to the nearest bf16 on the fly. Any T >= 0, in >= 1, out >= 1. Runs one OpenMP parallel
// region over the process's threads (the caller must not be inside one); the result is the same
// bit for bit at any thread count. Keeps a per-calling-thread workspace for x converted (4 bytes
// per pair of `in` per row on the AVX-512 path, 8 on the portable one), grown on demand.
void MatMulBf16(const float* x, const PackedBf16& w, const float* bias, float* y, int T);

// ---- Blocks for kernels that run their own parallel loops (the bf16 tiled attention in ops.cpp):
// one thread each, no allocation, the same rounding and arithmetic as MatMulBf16 on either path.

// Packs W from `out` rows of `in` values, row i at w + i * ld (a head's keys, K (keys, Dh)), into
// *p, reusing its storage.
void PackBf16Rows(const float* w, int out, int in, int64_t ld, PackedBf16* p);
// Packs W = A^T from A's `in` rows of `out` values at stride ld (a head's values V (keys, Dh) as
// W (Dh, keys)), into *p, reusing its storage.
void PackBf16Columns(const float* a, int out, int in, int64_t ld, PackedBf16* p);
// Rounds `rows` rows of `in` floats (row r at x + r * ld_in) to bf16 pairs, row r at xb + r * ldx
// (ldx pairs, zero past `in`; 2 ldx >= in), as MatMulBf16 rounds x.
void ConvertBf16Rows(const float* x, int rows, int in, int64_t ld_in, uint32_t* xb, int64_t ldx);
// y (rows, the columns of w's panels [panel0, panel0 + panels), clipped to w.out) = (or += when
// `accumulate`) xb (rows of `pairs` pairs, row r at xb + r * ldx) · W^T over W's pairs
// [pair0, pair0 + pairs); y's column 0 is panel0's first column, rows at stride ldy.
void MatMulBf16Block(const uint32_t* xb, int64_t ldx, const PackedBf16& w, int panel0, int panels,
                     int pair0, int pairs, float* y, int64_t ldy, int rows, bool accumulate);

}  // namespace ss
