#include "kernels/gemm_dot.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/error.h"
#include "kernels/simd.h"
#include "kernels/vecmath.h"
#include "kernels/workspace.h"

namespace ss {

namespace {

#define SS_AVX512 __attribute__((target("avx512f,avx2,fma")))
#define SS_AVX2 __attribute__((target("avx2,fma")))

// Multiply-adds from which the product uses every thread (as the other kernels' matrix-vector
// products: memory-bound, helper threads spinning between back-to-back products).
constexpr int64_t kParallelMacs = int64_t{1} << 16;

// One register tile: rows [0, R) of x by rows [0, C) of W, over `chunks` chunks. Operands packed:
// chunk k of the tile's x row r at x + k * xs + r * 16, of its W row c at w + k * ws + c * 16. The
// accumulators come from p (x row r, W row c at p + (r * kMaxC + c) * 16, kMaxC the level's widest
// tile; the portable tiles use the AVX-512 tile's layout) unless `first` (then zero), and go back
// there unless `last`, when they are reduced into y (x row r, W row c at y + r * ldy + c), plus
// bias[c] where there is a bias.
struct TileArgs {
  const float* x;
  int64_t xs;
  const float* w;
  int64_t ws;
  int chunks;
  float* p;
  bool first, last;
  float* y;
  int64_t ldy;
  const float* bias;
};

constexpr int kRows512 = 4, kCols512 = 6;  // AVX-512: 24 zmm accumulators, 6 of W, 1 of x
constexpr int kRows256 = 2, kCols256 = 3;  // AVX2: 12 ymm accumulators, 3 of W, 1 of x

template <int R, int C>
SS_AVX512 void Tile512(const TileArgs& a) {
  __m512 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 6
    for (int c = 0; c < C; ++c)
      acc[r][c] = a.first ? _mm512_setzero_ps() : _mm512_load_ps(a.p + (r * kCols512 + c) * 16);
  const float* x = a.x;
  const float* w = a.w;
  for (int k = 0; k < a.chunks; ++k, x += a.xs, w += a.ws) {
    __m512 wv[C];
#pragma GCC unroll 6
    for (int c = 0; c < C; ++c) wv[c] = _mm512_load_ps(w + c * 16);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_loadu_ps(x + r * 16);  // a caller's row when T = 1
#pragma GCC unroll 6
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(wv[c], xv, acc[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 6
    for (int c = 0; c < C; ++c) {
      if (a.last) {
        const float s = Reduce16(acc[r][c]);
        a.y[r * a.ldy + c] = a.bias ? s + a.bias[c] : s;
      } else {
        _mm512_store_ps(a.p + (r * kCols512 + c) * 16, acc[r][c]);
      }
    }
}

// The same tile in ymm registers, lanes 0-7 and 8-15 of each accumulator in two of them: the same
// operations on the same lanes, so the same bits as Tile512.
template <int R, int C>
SS_AVX2 void Tile256(const TileArgs& a) {
  __m256 acc[R][C][2];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
    for (int c = 0; c < C; ++c)
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h)
        acc[r][c][h] =
            a.first ? _mm256_setzero_ps() : _mm256_load_ps(a.p + (r * kCols256 + c) * 16 + 8 * h);
  const float* x = a.x;
  const float* w = a.w;
  for (int k = 0; k < a.chunks; ++k, x += a.xs, w += a.ws) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256 wv[C];
#pragma GCC unroll 3
      for (int c = 0; c < C; ++c) wv[c] = _mm256_load_ps(w + c * 16 + 8 * h);
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        const __m256 xv = _mm256_loadu_ps(x + r * 16 + 8 * h);
#pragma GCC unroll 3
        for (int c = 0; c < C; ++c) acc[r][c][h] = _mm256_fmadd_ps(wv[c], xv, acc[r][c][h]);
      }
    }
  }
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
    for (int c = 0; c < C; ++c) {
      if (a.last) {
        const float s = Reduce16(acc[r][c][0], acc[r][c][1]);
        a.y[r * a.ldy + c] = a.bias ? s + a.bias[c] : s;
      } else {
        for (int h = 0; h < 2; ++h)
          _mm256_store_ps(a.p + (r * kCols256 + c) * 16 + 8 * h, acc[r][c][h]);
      }
    }
}

// Plain loops: the same lanes and order, each step a rounded multiply and a rounded add (no FMA
// at the baseline's flags). Any R, C up to the AVX-512 tile's.
void TilePortable(const TileArgs& a, int R, int C) {
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float acc[16];
      float* p = a.p + (r * kCols512 + c) * 16;
      for (int l = 0; l < 16; ++l) acc[l] = a.first ? 0.0f : p[l];
      for (int k = 0; k < a.chunks; ++k) {
        const float* x = a.x + k * a.xs + r * 16;
        const float* w = a.w + k * a.ws + c * 16;
        for (int l = 0; l < 16; ++l) acc[l] += w[l] * x[l];
      }
      if (a.last) {
        float s[8];
        for (int l = 0; l < 8; ++l) s[l] = acc[l] + acc[l + 8];
        const float total = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
        a.y[r * a.ldy + c] = a.bias ? total + a.bias[c] : total;
      } else {
        std::copy(acc, acc + 16, p);
      }
    }
}

using TileFn = void (*)(const TileArgs&);

// A level's register tiles: fn[R][C] for R <= rows, C <= cols.
struct Tiles {
  int rows, cols;
  TileFn fn[kRows512 + 1][kCols512 + 1];
};

template <int R, int... C>
constexpr void Fill512(TileFn (&row)[kCols512 + 1], std::integer_sequence<int, C...>) {
  ((row[C + 1] = Tile512<R, C + 1>), ...);
}
template <int R, int... C>
constexpr void Fill256(TileFn (&row)[kCols512 + 1], std::integer_sequence<int, C...>) {
  ((row[C + 1] = Tile256<R, C + 1>), ...);
}
constexpr Tiles MakeTiles512() {
  Tiles t{kRows512, kCols512, {}};
  Fill512<1>(t.fn[1], std::make_integer_sequence<int, kCols512>());
  Fill512<2>(t.fn[2], std::make_integer_sequence<int, kCols512>());
  Fill512<3>(t.fn[3], std::make_integer_sequence<int, kCols512>());
  Fill512<4>(t.fn[4], std::make_integer_sequence<int, kCols512>());
  return t;
}
constexpr Tiles MakeTiles256() {
  Tiles t{kRows256, kCols256, {}};
  Fill256<1>(t.fn[1], std::make_integer_sequence<int, kCols256>());
  Fill256<2>(t.fn[2], std::make_integer_sequence<int, kCols256>());
  return t;
}
constexpr Tiles kTiles512 = MakeTiles512();
constexpr Tiles kTiles256 = MakeTiles256();
// The portable path's shapes (TilePortable takes any): the AVX-512 tile's, for its buffers' layout.
constexpr Tiles kTilesPortable{kRows512, kCols512, {}};

// How one call lays out its operands.
struct Layout {
  const Tiles* tiles;
  bool portable;
  int R, C;          // the level's tile: rows of x, rows of W
  int group;         // rows of x packed side by side: min(R, T)
  int64_t x_chunks;  // chunks of a packed x row: in_pad / 16
  int tiles_per_block;
};

// The tiles over x rows [t0, t1) (whole groups, t0 a multiple of kDotXBlock) and W tiles [j0, j1)
// of a row block (`rows` rows from o0), chunks [k0, k0 + chunks) of x; W tile j's chunk k0 at
// wb + (j * w_chunks + wk0) * C * 16. Tile j's accumulators of group g at slot g * slots + j of p.
void RunTiles(const Layout& L, const float* xp, int t0, int t1, const float* wb, int64_t w_chunks,
              int64_t wk0, int j0, int j1, int rows, int64_t k0, int chunks, float* p, int slots,
              bool first, bool last, float* y, int out, int o0, const float* bias) {
  const int64_t xs = static_cast<int64_t>(L.group) * 16, ws = static_cast<int64_t>(L.C) * 16;
  for (int j = j0; j < j1; ++j) {
    const int c0 = j * L.C, nc = std::min(L.C, rows - c0);
    const float* w = wb + (j * w_chunks + wk0) * ws;
    for (int r0 = t0; r0 < t1; r0 += L.group) {
      const int nr = std::min(L.group, t1 - r0);
      const int g = (r0 - t0) / L.group;
      const TileArgs a{xp + (static_cast<int64_t>(r0 / L.group) * L.x_chunks + k0) * xs,
                       xs,
                       w,
                       ws,
                       chunks,
                       p + (static_cast<int64_t>(g) * slots + j) * L.R * L.C * 16,
                       first,
                       last,
                       y + static_cast<int64_t>(r0) * out + o0 + c0,
                       out,
                       bias ? bias + o0 + c0 : nullptr};
      if (L.portable)
        TilePortable(a, nr, nc);
      else
        L.tiles->fn[nr][nc](a);
    }
  }
}

// Rows [row0, row0 + rows), values [v0, v0 + n) of W decoded into tiles of C rows (from tile j0 of
// the buffer): tile j's chunk k (counted from v0) at dst + (j * chunks + k) * C * 16, where
// `chunks` is the buffer's chunks per tile; the values from `in` on (a row's last chunk) zero.
void Decode(const DotWeights& w, const Layout& L, int row0, int rows, int v0, int n, float* dst,
            int64_t chunks) {
  const int valid = std::min(n, w.in - v0);
  const int cs = L.C * 16;
  for (int j = 0; j * L.C < rows; ++j) {
    const int c0 = j * L.C, nc = std::min(L.C, rows - c0);
    float* tile = dst + j * chunks * cs;
    w.decode(w.ctx, row0 + c0, nc, v0, valid, tile, 16, cs);
    for (int v = valid; v < n; ++v)
      for (int c = 0; c < nc; ++c) tile[(v / 16) * cs + c * 16 + v % 16] = 0.0f;
  }
}

}  // namespace

const char* DotKernelName() {
  switch (ActiveSimdLevel()) {
    case SimdLevel::kAvx512:
      return "avx512";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kPortable:
      break;
  }
  return "portable";
}

void MatMulDot(const float* x, const DotWeights& w, const float* bias, float* y, int T) {
  SS_ASSERT(T >= 0 && w.out >= 1 && w.in >= 1 && w.decode != nullptr);
  if (T == 0) return;
  const int in = w.in, out = w.out;
  const int in_pad = (in + kDotChunk - 1) / kDotChunk * kDotChunk;
  const SimdLevel level = ActiveSimdLevel();
  Layout L;
  L.tiles = level == SimdLevel::kAvx512 ? &kTiles512
            : level == SimdLevel::kAvx2 ? &kTiles256
                                        : &kTilesPortable;
  L.portable = level == SimdLevel::kPortable;
  L.R = L.tiles->rows;
  L.C = L.tiles->cols;
  L.group = std::min(L.R, T);
  L.x_chunks = in_pad / kDotChunk;
  L.tiles_per_block = kDotRowBlock / L.C;
  // x packed for the tiles: groups of `group` rows, each chunk of the group's rows side by side,
  // padded with zeros to whole chunks (the padding of W's last chunk is zero too). One row of whole
  // chunks is its own packing.
  const float* xp = x;
  if (T > 1 || in_pad != in) {
    const int groups = (T + L.group - 1) / L.group;
    float* packed = Workspace<float, 8>(static_cast<size_t>(groups) * L.group * in_pad);
    for (int t = 0; t < T; ++t) {
      float* dst =
          packed + static_cast<int64_t>(t / L.group) * L.group * in_pad + (t % L.group) * kDotChunk;
      const float* src = x + static_cast<int64_t>(t) * in;
      for (int k = 0; k < in_pad; k += kDotChunk) {
        const int n = std::min(kDotChunk, in - k);
        std::copy(src + k, src + k + n, dst);
        std::fill(dst + n, dst + kDotChunk, 0.0f);
        dst += static_cast<int64_t>(L.group) * kDotChunk;
      }
    }
    xp = packed;
  }
  const int blocks = (out + kDotRowBlock - 1) / kDotRowBlock;
  const int slots = kDotRowBlock / L.C;  // tiles of a row block: p's slots per group of x rows
  // Up to kDotXBlock rows of x: one pass, a tile of W (C rows) at a time, a value block at a time
  // (W read once; the next tile's bytes asked for a slice per value block, in memory order, so the
  // memory sees one sequential stream). Beyond: each row block of W decoded whole, then every block
  // of x rows over it, while the next row block's bytes are asked for a slice at a time.
  const bool whole = T > kDotXBlock;
  // Values per pass: where W is read once, longer passes (fewer calls per row for the 4-bit types'
  // few bytes); the pass boundaries do not change a sum (its partials wait in p exactly).
  const int kc_block = whole ? kDotKBlock : kDotKBlockOnePass;
  const int k_blocks = (in_pad + kc_block - 1) / kc_block;
  const int64_t w_chunks = (whole ? in_pad : kc_block) / kDotChunk;  // chunks per tile in wb
#pragma omp parallel if (static_cast <int64_t>(T) * in * out >= kParallelMacs)
  {
    const int threads = omp_get_num_threads(), id = omp_get_thread_num();
    const int b0 = static_cast<int>(static_cast<int64_t>(blocks) * id / threads);
    const int b1 = static_cast<int>(static_cast<int64_t>(blocks) * (id + 1) / threads);
    const int o_end = std::min(out, b1 * kDotRowBlock);  // this thread's rows end here
    float* p = Workspace<float, 9>(static_cast<size_t>(kDotXBlock) * kDotRowBlock * kDotChunk);
    float* wb = Workspace<float, 11>(static_cast<size_t>(whole ? kDotRowBlock : L.C) * w_chunks *
                                     kDotChunk);
    for (int b = b0; b < b1; ++b) {
      const int o0 = b * kDotRowBlock, rows = std::min(kDotRowBlock, out - o0);
      if (!whole) {
        for (int j = 0; j * L.C < rows; ++j) {
          const int c0 = o0 + j * L.C, nc = std::min(L.C, out - c0);
          for (int kb = 0; kb < k_blocks; ++kb) {
            const int k0 = kb * kc_block, kc = std::min(kc_block, in_pad - k0);
            Decode(w, L, c0, nc, k0, kc, wb, w_chunks);
            RunTiles(L, xp, 0, T, wb - j * w_chunks * L.C * kDotChunk, w_chunks, 0, j, j + 1, rows,
                     k0 / kDotChunk, kc / kDotChunk, p, slots, kb == 0, kb + 1 == k_blocks, y, out,
                     o0, bias);
          }
        }
      } else {
        const int next_rows = std::min(kDotRowBlock, o_end - o0 - rows);
        Decode(w, L, o0, rows, 0, in_pad, wb, w_chunks);
        const int tiles = (rows + L.C - 1) / L.C;
        const int passes = (T + kDotXBlock - 1) / kDotXBlock * k_blocks * tiles;
        int pass = 0;
        for (int t0 = 0; t0 < T; t0 += kDotXBlock) {
          const int t1 = std::min(T, t0 + kDotXBlock);
          for (int kb = 0; kb < k_blocks; ++kb) {
            const int k0 = kb * kc_block, kc = std::min(kc_block, in_pad - k0);
            for (int j = 0; j < tiles; ++j, ++pass) {
              if (w.prefetch && next_rows > 0)
                w.prefetch(w.ctx, o0 + rows, next_rows, pass, passes);
              RunTiles(L, xp, t0, t1, wb, w_chunks, k0 / kDotChunk, j, j + 1, rows, k0 / kDotChunk,
                       kc / kDotChunk, p, slots, kb == 0, kb + 1 == k_blocks, y, out, o0, bias);
            }
          }
        }
      }
    }
  }
}

}  // namespace ss
