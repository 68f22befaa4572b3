#include "kernels/gemm_q8.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "common/error.h"
#include "kernels/dequant.h"
#include "kernels/gemm_dot.h"
#include "kernels/gemm_int8.h"
#include "kernels/simd.h"
#include "kernels/vecmath.h"
#include "kernels/workspace.h"
#include "tensor/half.h"

namespace ss {

namespace {

#define SS_AVX2 __attribute__((target("avx2,fma")))

#define SS_AVX512 __attribute__((target("avx512f,avx2,fma")))

constexpr int kQ8BlockBytes = 2 + kQ8Block;  // ggml's block_q8_0

SS_AVX2 inline __m256 Widen8(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Row `row`'s block b: its 32 int8 codes and, in *d, its scale. The f32 layout holds them as they
// are (qs); the int8 layout's are gathered into buf from the block's 8 steps (kernels/gemm_int8.h:
// byte 64 m + 4 r + i holds code 4 m + i of row r plus 128), its d an f16 after them.
__attribute__((always_inline)) inline const int8_t* BlockAt(const PackedQ8& w, int row, int b,
                                                            int8_t* buf, float* d) {
  if (!w.int8_layout()) {
    *d = w.scales[w.scale_at(row, b)];
    return w.qs.data() + w.q_at(row, b);
  }
  const int r = row % kPackedRows;
  const uint8_t* p = w.int8_rows.int8 +
                     static_cast<size_t>(row / kPackedRows) * w.int8_rows.int8_group_bytes +
                     static_cast<size_t>(b) * kPackedQ80Bytes;
  for (int m = 0; m < 8; ++m)
    for (int i = 0; i < 4; ++i) buf[4 * m + i] = static_cast<int8_t>(p[64 * m + 4 * r + i] ^ 0x80);
  uint16_t bits;
  std::memcpy(&bits, p + 8 * 64 + 2 * r, 2);
  *d = F16ToF32(bits);
  return buf;
}

// Row `row`'s block b into out (that block's n <= 32 values), one value at a time.
__attribute__((always_inline)) inline void DequantizeBlock(const PackedQ8& w, int row, int b,
                                                           float* out) {
  int8_t buf[kQ8Block];
  float d;
  const int8_t* q = BlockAt(w, row, b, buf, &d);
  const int n = std::min(kQ8Block, w.in - b * kQ8Block);
  for (int i = 0; i < n; ++i) out[b * kQ8Block + i] = d * static_cast<float>(q[i]);
}
void DequantizeBody(const PackedQ8& w, int row0, int rows, float* dst) {
  for (int r = 0; r < rows; ++r)
    for (int b = 0; b < w.blocks; ++b)
      DequantizeBlock(w, row0 + r, b, dst + static_cast<int64_t>(r) * w.in);
}
// The same values, 8 at a time (the compiler leaves DequantizeBody's short variable-length loop
// scalar): whole blocks by VPMOVSXBD and one multiply, the last partial block by DequantizeBlock.
SS_AVX2 void DequantizeAvx2(const PackedQ8& w, int row0, int rows, float* dst) {
  const int whole = w.in / kQ8Block;
  for (int r = 0; r < rows; ++r) {
    float* out = dst + static_cast<int64_t>(r) * w.in;
    for (int b = 0; b < whole; ++b) {
      int8_t buf[kQ8Block];
      float scale;
      const int8_t* q = BlockAt(w, row0 + r, b, buf, &scale);
      const __m256 d = _mm256_set1_ps(scale);
      for (int i = 0; i < kQ8Block; i += 8)
        _mm256_storeu_ps(out + b * kQ8Block + i, _mm256_mul_ps(d, Widen8(q + i)));
    }
    for (int b = whole; b < w.blocks; ++b) DequantizeBlock(w, row0 + r, b, out);
  }
}

// 32 int8 values times d into two 16-value chunks (first, second): the same products as
// DequantizeBlock.
SS_AVX512 inline void ScaleBlock512(const int8_t* q, float d, float* first, float* second) {
  const __m512 s = _mm512_set1_ps(d);
  for (int h = 0; h < 2; ++h)
    _mm512_storeu_ps(h ? second : first,
                     _mm512_mul_ps(s, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                          reinterpret_cast<const __m128i*>(q + 16 * h))))));
}
SS_AVX2 inline void ScaleBlock256(const int8_t* q, float d, float* first, float* second) {
  const __m256 s = _mm256_set1_ps(d);
  for (int i = 0; i < kQ8Block; i += 8)
    _mm256_storeu_ps((i < 16 ? first : second) + i % 16, _mm256_mul_ps(s, Widen8(q + i)));
}
inline void ScaleBlockPortable(const int8_t* q, float d, float* first, float* second) {
  for (int i = 0; i < kQ8Block; ++i)
    (i < 16 ? first : second)[i % 16] = d * static_cast<float>(q[i]);
}

// Rows [row0, row0 + rows), values [v0, v0 + n) of W for MatMulDot (v0 a multiple of 32): row r at
// dst + r * rs, each 16-value chunk cs floats after the previous one. The last block of a row may
// be cut short at `in` (the pack's padding is zeros; MatMulDot zeroes what lies past `in` anyway).
template <void (*kScale)(const int8_t*, float, float*, float*)>
void DecodeForDot(const void* ctx, int row0, int rows, int v0, int n, float* dst, int64_t rs,
                  int cs) {
  const PackedQ8& w = *static_cast<const PackedQ8*>(ctx);
  // The next value block of these rows' groups (each group's blocks lie together, its rows side
  // by side), asked for into L1 a line at a time: the stream one value block ahead.
  // (The int8 layout's rows are read through PrefetchForDot's slices alone.)
  const int b_next = (v0 + n) / kQ8Block,
            b_end = std::min(w.blocks, b_next + kDotKBlockOnePass / kQ8Block);
  for (int g = row0 / kQ8GroupRows;
       !w.int8_layout() && b_next < b_end && g <= (row0 + rows - 1) / kQ8GroupRows; ++g) {
    const char* begin =
        reinterpret_cast<const char*>(w.qs.data() + w.q_at(g * kQ8GroupRows, b_next));
    for (int64_t o = 0; o < static_cast<int64_t>(b_end - b_next) * kQ8GroupRows * kQ8Block; o += 64)
      _mm_prefetch(begin + o, _MM_HINT_T0);
  }
  alignas(64) float last[kQ8Block];
  for (int r = 0; r < rows; ++r) {
    float* out = dst + r * rs;
    for (int i = 0; i < n; i += kQ8Block) {
      const int b = (v0 + i) / kQ8Block;
      int8_t buf[kQ8Block];
      float d;
      const int8_t* q = BlockAt(w, row0 + r, b, buf, &d);
      float* first = out + (i / 16) * cs;
      if (n - i >= kQ8Block) {
        kScale(q, d, first, first + cs);
      } else {
        kScale(q, d, last, last + 16);
        for (int v = 0; v < n - i; ++v) first[(v / 16) * cs + v % 16] = last[v];
      }
    }
  }
}

// Slice `part` of `parts` of the bytes of the row groups holding rows [row0, row0 + rows), in
// memory order, into L2.
void PrefetchForDot(const void* ctx, int row0, int rows, int part, int parts) {
  const PackedQ8& w = *static_cast<const PackedQ8*>(ctx);
  const int group_rows = w.int8_layout() ? kPackedRows : kQ8GroupRows;
  const int g0 = row0 / group_rows, g1 = (row0 + rows - 1) / group_rows + 1;
  const char* begin =
      w.int8_layout()
          ? reinterpret_cast<const char*>(w.int8_rows.int8 + g0 * w.int8_rows.int8_group_bytes)
          : reinterpret_cast<const char*>(w.qs.data() + w.q_at(g0 * kQ8GroupRows, 0));
  const int64_t total = w.int8_layout()
                            ? static_cast<int64_t>(g1 - g0) * w.int8_rows.int8_group_bytes
                            : static_cast<int64_t>(g1 - g0) * w.blocks * kQ8GroupRows * kQ8Block;
  for (int64_t o = total * part / parts / 64 * 64; o < total * (part + 1) / parts; o += 64)
    _mm_prefetch(begin + o, _MM_HINT_T1);
}

}  // namespace

PackedQ8 PackQ8_0(const float* w, int out, int in, Q8Layout layout) {
  SS_ASSERT(out >= 1 && in >= 1);
  PackedQ8 p;
  p.out = out;
  p.in = in;
  p.blocks = (in + kQ8Block - 1) / kQ8Block;
  if (layout == Q8Layout::kInt8 && in % kQ8Block == 0 && Int8Supported(kGgmlTypeQ8_0)) {
    // The rows in ggml's layout for a moment (one matrix), packed as a Q8_0 file's rows are.
    const size_t row_bytes = static_cast<size_t>(p.blocks) * kQ8BlockBytes;
    // Every byte is written by QuantizeQ8_0, so not zeroed first.
    const auto rows =
        std::make_unique_for_overwrite<uint8_t[]>(static_cast<size_t>(out) * row_bytes);
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(out) * in >= (1 << 16))
    for (int o = 0; o < out; ++o)
      QuantizeQ8_0(w + static_cast<int64_t>(o) * in, rows.get() + o * row_bytes, in);
    p.int8_rows = GgmlView(kGgmlTypeQ8_0, out, in, rows.get(), nullptr);
    PackForInt8(&p.int8_rows);
    p.int8_rows.data = nullptr;  // `rows` goes: the packed rows are the only copy
    p.groups = (out + kPackedRows - 1) / kPackedRows;
    return p;
  }
  p.groups = (out + kQ8GroupRows - 1) / kQ8GroupRows;
  const int64_t ldq = static_cast<int64_t>(p.blocks) * kQ8Block;
  p.qs.assign(static_cast<size_t>(p.groups) * kQ8GroupRows * ldq, 0);
  p.scales.assign(static_cast<size_t>(p.groups) * kQ8GroupRows * p.blocks, 0.0f);
#pragma omp parallel if (static_cast <int64_t>(out) * in >= (1 << 16))
  {
    std::vector<float> row(ldq, 0.0f);
    std::vector<uint8_t> bytes(static_cast<size_t>(p.blocks) * kQ8BlockBytes);
#pragma omp for schedule(static)
    for (int o = 0; o < out; ++o) {
      std::copy(w + static_cast<int64_t>(o) * in, w + static_cast<int64_t>(o + 1) * in,
                row.begin());
      QuantizeQ8_0(row.data(), bytes.data(), ldq);
      for (int b = 0; b < p.blocks; ++b) {
        const uint8_t* block = bytes.data() + static_cast<size_t>(b) * kQ8BlockBytes;
        uint16_t d_bits;
        std::memcpy(&d_bits, block, 2);
        p.scales[p.scale_at(o, b)] = F16ToF32(d_bits);
        std::memcpy(p.qs.data() + p.q_at(o, b), block + 2, kQ8Block);
      }
    }
  }
  return p;
}

void DequantizeQ8Rows(const PackedQ8& w, int row0, int rows, float* dst) {
  SS_ASSERT(row0 >= 0 && rows >= 0 && row0 + rows <= w.out);
  if (Avx2FmaActive())
    DequantizeAvx2(w, row0, rows, dst);
  else
    DequantizeBody(w, row0, rows, dst);
}

std::vector<uint8_t> Q8RowBlocks(const PackedQ8& w, int row) {
  SS_ASSERT(row >= 0 && row < w.out);
  std::vector<uint8_t> bytes(static_cast<size_t>(w.blocks) * kQ8BlockBytes);
  for (int b = 0; b < w.blocks; ++b) {
    uint8_t* block = bytes.data() + static_cast<size_t>(b) * kQ8BlockBytes;
    int8_t buf[kQ8Block];
    float d;
    const int8_t* q = BlockAt(w, row, b, buf, &d);
    const uint16_t d_bits = F32ToF16(d);
    std::memcpy(block, &d_bits, 2);
    std::memcpy(block + 2, q, kQ8Block);
  }
  return bytes;
}

namespace {

// ---- One row of x (decode): a group's four rows (their blocks side by side: one stream) decoded a
// block at a time in registers and multiplied at once, with MatMulDot's arithmetic (a 16-lane FMA
// chain per row over the chunks in order, the chunks past `in` left out, Reduce16, then the bias),
// so a row gives the same bits as inside any T. x padded with zeros to whole blocks.
//
// Each thread reads its range of groups as two streams spaced through it (groups lo + i and
// lo + q + i side by side, q half the range), as the native kernels read their rows
// (kernels/gemm_int8.h, ForRowStreams), and asks for each stream's bytes kQ8Ahead further on (the
// scales' stream kQ8Ahead / 8: 16 bytes of scales a group's 128 bytes of codes). Against one
// stream a thread 1 KiB ahead, the 0.9B Llama shape's decode at --precision q8_0 on the Zen 5
// EPYC (GB/s of weights, alternating; read bandwidth about 25 / 43 GB/s on 1 / 2 threads): one
// stream 12-15 / 24-30, one stream 4 KiB ahead 16-20 / 29-34, two streams 23-24 / 46-50.
constexpr int kQ8Ahead = 4096;

// Where GroupsTimesX's G groups (g, g + step) read: block b's codes and scales of group k, the
// chunks of block b inside the row (2 but in the last block of a row that ends inside it).
template <int G>
struct GroupStreams {
  const PackedQ8& w;
  const int g, step;
  const int whole;  // blocks with both chunks inside the row
  GroupStreams(const PackedQ8& m, int first, int s)
      : w(m), g(first), step(s), whole(m.in / kQ8Block) {}
  const int8_t* q(int k, int b) const {
    return w.qs.data() + w.q_at((g + k * step) * kQ8GroupRows, b);
  }
  const float* d(int k, int b) const {
    return w.scales.data() + w.scale_at((g + k * step) * kQ8GroupRows, b);
  }
  int chunks(int b) const { return b < whole ? 2 : std::min(2, (w.in - b * kQ8Block + 15) / 16); }
  void Store(int k, int r, float s, float* y, const float* bias) const {
    const int row = (g + k * step) * kQ8GroupRows + r;
    y[row] = bias ? s + bias[row] : s;
  }
};

// A block's chunks [0, chunks) for the R rows of a group, q and d at the block's first row's.
template <int R>
SS_AVX512 __attribute__((always_inline)) inline void BlockTimesX512(const int8_t* q, const float* d,
                                                                    const float* x, int chunks,
                                                                    __m512* acc) {
  _mm_prefetch(reinterpret_cast<const char*>(q) + kQ8Ahead, _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(q) + kQ8Ahead + 64, _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(d) + kQ8Ahead / 8, _MM_HINT_T0);
#pragma GCC unroll 2
  for (int c = 0; c < chunks; ++c) {
    const __m512 xv = _mm512_loadu_ps(x + 16 * c);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 v = _mm512_mul_ps(
          _mm512_set1_ps(d[r]), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                    reinterpret_cast<const __m128i*>(q + r * kQ8Block + 16 * c)))));
      acc[r] = _mm512_fmadd_ps(v, xv, acc[r]);
    }
  }
}

// The same in ymm registers, lanes 0-7 and 8-15 of each accumulator in two of them.
template <int R>
SS_AVX2 __attribute__((always_inline)) inline void BlockTimesX256(const int8_t* q, const float* d,
                                                                  const float* x, int chunks,
                                                                  __m256 (*acc)[2]) {
  _mm_prefetch(reinterpret_cast<const char*>(q) + kQ8Ahead, _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(q) + kQ8Ahead + 64, _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(d) + kQ8Ahead / 8, _MM_HINT_T0);
#pragma GCC unroll 2
  for (int c = 0; c < chunks; ++c) {
    const __m256 x0 = _mm256_loadu_ps(x + 16 * c), x1 = _mm256_loadu_ps(x + 16 * c + 8);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 s = _mm256_set1_ps(d[r]);
      const int8_t* qc = q + r * kQ8Block + 16 * c;
      acc[r][0] = _mm256_fmadd_ps(_mm256_mul_ps(s, Widen8(qc)), x0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(_mm256_mul_ps(s, Widen8(qc + 8)), x1, acc[r][1]);
    }
  }
}

// Groups g and g + step (G = 2) or g alone (G = 1), R rows each, into y[row] (+ bias[row]).
// The AVX2 form keeps lanes 0-7 and 8-15 of each accumulator in two ymm registers: the same
// operations on the same lanes, so the same bits.
template <int R, int G>
SS_AVX512 void GroupsTimesX512(const PackedQ8& w, int g, int step, const float* x, float* y,
                               const float* bias) {
  __m512 acc[G][R];
  for (int k = 0; k < G; ++k)
    for (int r = 0; r < R; ++r) acc[k][r] = _mm512_setzero_ps();
  const GroupStreams<G> in(w, g, step);
  for (int b = 0; b < w.blocks; ++b)
#pragma GCC unroll 2
    for (int k = 0; k < G; ++k)
      BlockTimesX512<R>(in.q(k, b), in.d(k, b), x + b * kQ8Block, in.chunks(b), acc[k]);
  for (int k = 0; k < G; ++k)
    for (int r = 0; r < R; ++r) in.Store(k, r, Reduce16(acc[k][r]), y, bias);
}

template <int R, int G>
SS_AVX2 void GroupsTimesX256(const PackedQ8& w, int g, int step, const float* x, float* y,
                             const float* bias) {
  __m256 acc[G][R][2];
  for (int k = 0; k < G; ++k)
    for (int r = 0; r < R; ++r) acc[k][r][0] = acc[k][r][1] = _mm256_setzero_ps();
  const GroupStreams<G> in(w, g, step);
  for (int b = 0; b < w.blocks; ++b)
#pragma GCC unroll 2
    for (int k = 0; k < G; ++k)
      BlockTimesX256<R>(in.q(k, b), in.d(k, b), x + b * kQ8Block, in.chunks(b), acc[k]);
  for (int k = 0; k < G; ++k)
    for (int r = 0; r < R; ++r) in.Store(k, r, Reduce16(acc[k][r][0], acc[k][r][1]), y, bias);
}

using GroupsFn = void (*)(const PackedQ8&, int, int, const float*, float*, const float*);
// [rows] for one group of 1-4 rows, [0] for two groups of four.
constexpr GroupsFn kGroups512[] = {GroupsTimesX512<4, 2>, GroupsTimesX512<1, 1>,
                                   GroupsTimesX512<2, 1>, GroupsTimesX512<3, 1>,
                                   GroupsTimesX512<4, 1>};
constexpr GroupsFn kGroups256[] = {GroupsTimesX256<4, 2>, GroupsTimesX256<1, 1>,
                                   GroupsTimesX256<2, 1>, GroupsTimesX256<3, 1>,
                                   GroupsTimesX256<4, 1>};

void MatVecQ8(const float* x, const PackedQ8& w, const float* bias, float* y) {
  const int64_t ldx = static_cast<int64_t>(w.blocks) * kQ8Block;
  float* xp = Workspace<float, 4>(static_cast<size_t>(ldx));
  std::copy(x, x + w.in, xp);
  std::fill(xp + w.in, xp + ldx, 0.0f);
  const GroupsFn* fn = ActiveSimdLevel() == SimdLevel::kAvx512 ? kGroups512 : kGroups256;
  const int full = w.out / kQ8GroupRows;  // groups of four rows (the last may have fewer)
#pragma omp parallel if (static_cast <int64_t>(w.in) * w.out >= (int64_t{1} << 16))
  {
    const int threads = omp_get_num_threads(), id = omp_get_thread_num();
    const int lo = static_cast<int>(static_cast<int64_t>(w.groups) * id / threads);
    const int hi = static_cast<int>(static_cast<int64_t>(w.groups) * (id + 1) / threads);
    const int q = std::max(0, std::min(hi, full) - lo) / 2;
    for (int i = 0; i < q; ++i) fn[0](w, lo + i, q, xp, y, bias);
    for (int g = lo + 2 * q; g < hi; ++g)
      fn[std::min(kQ8GroupRows, w.out - g * kQ8GroupRows)](w, g, 0, xp, y, bias);
  }
}

}  // namespace

const char* Q8KernelName() { return DotKernelName(); }

bool Q8TakesInt8X(const PackedQ8& w) {
  return w.int8_layout() && GgmlActivationsFor(kGgmlTypeQ8_0) == GgmlActivations::kInt8;
}

void MatMulQ8(const float* x, const PackedQ8& w, const float* bias, float* y, int T) {
  SS_ASSERT(T >= 0 && w.out >= 1 && w.in >= 1);
  if (Q8TakesInt8X(w)) {
    MatMulGgmlInt8(x, w.int8_rows, bias, y, T);
    return;
  }
  if (T == 1 && ActiveSimdLevel() != SimdLevel::kPortable && !w.int8_layout()) {
    MatVecQ8(x, w, bias, y);
    return;
  }
  DotWeights dot;
  dot.out = w.out;
  dot.in = w.in;
  switch (ActiveSimdLevel()) {
    case SimdLevel::kAvx512:
      dot.decode = DecodeForDot<ScaleBlock512>;
      break;
    case SimdLevel::kAvx2:
      dot.decode = DecodeForDot<ScaleBlock256>;
      break;
    case SimdLevel::kPortable:
      dot.decode = DecodeForDot<ScaleBlockPortable>;
      break;
  }
  dot.ctx = &w;
  dot.prefetch = PrefetchForDot;
  MatMulDot(x, dot, bias, y, T);
}

}  // namespace ss
