#include "kernels/vecmath.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/simd.h"

namespace ss {

namespace {

// Cephes expf (S. Moshier, Cephes Math Library, expf.c): exp(x) = 2^n exp(r), n = round(x / ln 2),
// r = x - n ln 2 with ln 2 split in two for exactness, exp(r) by a degree-5 polynomial.
constexpr float kExpHi = 88.3762626647949f, kExpLo = -87.3365447504019f;  // 2^127.5, 2^-126
constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500E-4f, kP1 = 1.3981999507E-3f, kP2 = 8.3334519073E-3f,
                kP3 = 4.1665795894E-2f, kP4 = 1.6666665459E-1f, kP5 = 5.0000001201E-1f;
// erf: Abramowitz and Stegun 7.1.26, |error| <= 1.5e-7.
constexpr float kErfP = 0.3275911f, kErfA1 = 0.254829592f, kErfA2 = -0.284496736f,
                kErfA3 = 1.421413741f, kErfA4 = -1.453152027f, kErfA5 = 1.061405429f;
constexpr float kSqrt2Inv = 0.70710678118654752f, kGeluC = 0.7978845608028654f, kGeluK = 0.044715f;

// ---- AVX-512
// -------------------------------------------------------------------------------------

__attribute__((target("avx512f"))) inline __m512 Exp512(__m512 x) {
  const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpLo), _CMP_LT_OQ);
  x = _mm512_min_ps(x, _mm512_set1_ps(kExpHi));
  x = _mm512_max_ps(x, _mm512_set1_ps(kExpLo));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 y = _mm512_set1_ps(kP0);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP1));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP2));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP3));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP4));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP5));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  // Scale by 2^n: n is in [-126, 127], so the biased exponent n + 127 is a valid normal exponent.
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  y = _mm512_mul_ps(y, _mm512_castsi512_ps(e));
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~under), y);  // below 2^-126: 0
}

__attribute__((target("avx512f"))) inline __m512 Tanh512(__m512 u) {
  // tanh(u) = 1 - 2 / (exp(2u) + 1): saturates to +-1 through the clamps in Exp512.
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = Exp512(_mm512_add_ps(u, u));
  return _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
}

__attribute__((target("avx512f"))) inline __m512 Erf512(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 ax = _mm512_abs_ps(x);
  const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(kErfP), ax, one));
  __m512 y = _mm512_set1_ps(kErfA5);
  y = _mm512_fmadd_ps(y, t, _mm512_set1_ps(kErfA4));
  y = _mm512_fmadd_ps(y, t, _mm512_set1_ps(kErfA3));
  y = _mm512_fmadd_ps(y, t, _mm512_set1_ps(kErfA2));
  y = _mm512_fmadd_ps(y, t, _mm512_set1_ps(kErfA1));
  y = _mm512_mul_ps(y, t);
  const __m512 e = Exp512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(ax, ax)));
  const __m512 r = _mm512_fnmadd_ps(y, e, one);  // erf(|x|)
  // Copy the sign of x.
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign));
}

template <typename Op>
__attribute__((target("avx512f"))) inline void Map512(float* x, int64_t n, Op op) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, op(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(x + i, m, op(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

__attribute__((target("avx512f"))) float MaxOf512(const float* x, int64_t n) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(x + i));
  float r = _mm512_reduce_max_ps(m);
  for (; i < n; ++i) r = std::max(r, x[i]);
  return r;
}

__attribute__((target("avx512f"))) float ExpShiftSum512(float* x, int64_t n, float shift,
                                                        float* sum_sq) {
  const __m512 s = _mm512_set1_ps(shift);
  __m512 acc = _mm512_setzero_ps(), acc2 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = Exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
    _mm512_storeu_ps(x + i, e);
    acc = _mm512_add_ps(acc, e);
    acc2 = _mm512_fmadd_ps(e, e, acc2);
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 e =
        _mm512_maskz_mov_ps(m, Exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), s)));
    _mm512_mask_storeu_ps(x + i, m, e);
    acc = _mm512_add_ps(acc, e);
    acc2 = _mm512_fmadd_ps(e, e, acc2);
  }
  if (sum_sq) *sum_sq = _mm512_reduce_add_ps(acc2);
  return _mm512_reduce_add_ps(acc);
}

__attribute__((target("avx512f"))) void Scale512(float* x, int64_t n, float s) {
  const __m512 v = _mm512_set1_ps(s);
  Map512(
      x, n, [&](__m512 a) __attribute__((target("avx512f"))) { return _mm512_mul_ps(a, v); });
}

__attribute__((target("avx512f"))) void Silu512(float* x, int64_t n) {
  Map512(
      x, n, [](__m512 a) __attribute__((target("avx512f"))) {
        const __m512 e = Exp512(_mm512_sub_ps(_mm512_setzero_ps(), a));
        return _mm512_div_ps(a, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
      });
}

__attribute__((target("avx512f"))) void GeluTanh512(float* x, int64_t n) {
  Map512(
      x, n, [](__m512 a) __attribute__((target("avx512f"))) {
        const __m512 a3 = _mm512_mul_ps(_mm512_mul_ps(a, a), a);
        const __m512 u =
            _mm512_mul_ps(_mm512_set1_ps(kGeluC), _mm512_fmadd_ps(_mm512_set1_ps(kGeluK), a3, a));
        const __m512 half_a = _mm512_mul_ps(_mm512_set1_ps(0.5f), a);
        return _mm512_fmadd_ps(half_a, Tanh512(u), half_a);
      });
}

__attribute__((target("avx512f"))) void GeluErf512(float* x, int64_t n) {
  Map512(
      x, n, [](__m512 a) __attribute__((target("avx512f"))) {
        const __m512 half_a = _mm512_mul_ps(_mm512_set1_ps(0.5f), a);
        return _mm512_fmadd_ps(half_a, Erf512(_mm512_mul_ps(a, _mm512_set1_ps(kSqrt2Inv))), half_a);
      });
}

__attribute__((target("avx512f"))) void SiluMul512(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  auto silu = [](__m512 a) __attribute__((target("avx512f"))) {
    const __m512 e = Exp512(_mm512_sub_ps(_mm512_setzero_ps(), a));
    return _mm512_div_ps(a, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
  };
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(gate + i,
                     _mm512_mul_ps(silu(_mm512_loadu_ps(gate + i)), _mm512_loadu_ps(up + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 g = silu(_mm512_maskz_loadu_ps(m, gate + i));
    _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(g, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

__attribute__((target("avx512f"))) void Sigmoid512(const float* x, float* out, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  auto sig = [&](__m512 a) __attribute__((target("avx512f"))) {
    return _mm512_div_ps(one, _mm512_add_ps(one, Exp512(_mm512_sub_ps(_mm512_setzero_ps(), a))));
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, sig(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(out + i, m, sig(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

// ---- AVX2 + FMA
// ----------------------------------------------------------------------------------

#define SS_AVX2 __attribute__((target("avx2,fma")))

SS_AVX2 inline __m256 Exp256(__m256 x) {
  const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(kExpLo), _CMP_LT_OQ);
  x = _mm256_min_ps(x, _mm256_set1_ps(kExpHi));
  x = _mm256_max_ps(x, _mm256_set1_ps(kExpLo));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 y = _mm256_set1_ps(kP0);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kP1));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kP2));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kP3));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kP4));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(kP5));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(under, y);
}

SS_AVX2 inline __m256 Tanh256(__m256 u) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = Exp256(_mm256_add_ps(u, u));
  return _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
}

SS_AVX2 inline __m256 Erf256(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256 ax = _mm256_andnot_ps(sign_mask, x);
  const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(kErfP), ax, one));
  __m256 y = _mm256_set1_ps(kErfA5);
  y = _mm256_fmadd_ps(y, t, _mm256_set1_ps(kErfA4));
  y = _mm256_fmadd_ps(y, t, _mm256_set1_ps(kErfA3));
  y = _mm256_fmadd_ps(y, t, _mm256_set1_ps(kErfA2));
  y = _mm256_fmadd_ps(y, t, _mm256_set1_ps(kErfA1));
  y = _mm256_mul_ps(y, t);
  const __m256 e = Exp256(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(ax, ax)));
  const __m256 r = _mm256_fnmadd_ps(y, e, one);
  return _mm256_or_ps(r, _mm256_and_ps(sign_mask, x));
}

// Full vectors, then the tail through a zero-padded buffer.
template <typename Op>
SS_AVX2 inline void Map256(float* x, int64_t n, Op op) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, op(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(buf, x + i, sizeof(float) * (n - i));
    _mm256_store_ps(buf, op(_mm256_load_ps(buf)));
    std::memcpy(x + i, buf, sizeof(float) * (n - i));
  }
}

SS_AVX2 float MaxOf256(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float r = lanes[0];
  for (int k = 1; k < 8; ++k) r = std::max(r, lanes[k]);
  for (; i < n; ++i) r = std::max(r, x[i]);
  return r;
}

SS_AVX2 float ExpShiftSum256(float* x, int64_t n, float shift, float* sum_sq) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = Exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
    acc2 = _mm256_fmadd_ps(e, e, acc2);
  }
  float sum = HorizontalSum(acc), sq = HorizontalSum(acc2);
  if (i < n) {
    alignas(32) float buf[8];
    for (int k = 0; k < 8; ++k) buf[k] = i + k < n ? x[i + k] - shift : -INFINITY;
    _mm256_store_ps(buf, Exp256(_mm256_load_ps(buf)));
    for (int64_t k = 0; i + k < n; ++k) {
      x[i + k] = buf[k];
      sum += buf[k];
      sq += buf[k] * buf[k];
    }
  }
  if (sum_sq) *sum_sq = sq;
  return sum;
}

SS_AVX2 void Scale256(float* x, int64_t n, float s) {
  const __m256 v = _mm256_set1_ps(s);
  Map256(x, n, [&](__m256 a) SS_AVX2 { return _mm256_mul_ps(a, v); });
}

SS_AVX2 inline __m256 SiluV256(__m256 a) {
  const __m256 e = Exp256(_mm256_sub_ps(_mm256_setzero_ps(), a));
  return _mm256_div_ps(a, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

SS_AVX2 void Silu256(float* x, int64_t n) {
  Map256(x, n, [](__m256 a) SS_AVX2 { return SiluV256(a); });
}

SS_AVX2 void GeluTanh256(float* x, int64_t n) {
  Map256(x, n, [](__m256 a) SS_AVX2 {
    const __m256 a3 = _mm256_mul_ps(_mm256_mul_ps(a, a), a);
    const __m256 u =
        _mm256_mul_ps(_mm256_set1_ps(kGeluC), _mm256_fmadd_ps(_mm256_set1_ps(kGeluK), a3, a));
    const __m256 half_a = _mm256_mul_ps(_mm256_set1_ps(0.5f), a);
    return _mm256_fmadd_ps(half_a, Tanh256(u), half_a);
  });
}

SS_AVX2 void GeluErf256(float* x, int64_t n) {
  Map256(x, n, [](__m256 a) SS_AVX2 {
    const __m256 half_a = _mm256_mul_ps(_mm256_set1_ps(0.5f), a);
    return _mm256_fmadd_ps(half_a, Erf256(_mm256_mul_ps(a, _mm256_set1_ps(kSqrt2Inv))), half_a);
  });
}

SS_AVX2 void SiluMul256(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(gate + i,
                     _mm256_mul_ps(SiluV256(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

SS_AVX2 void Sigmoid256(const float* x, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(
        out + i,
        _mm256_div_ps(one, _mm256_add_ps(one, Exp256(_mm256_sub_ps(_mm256_setzero_ps(),
                                                                   _mm256_loadu_ps(x + i))))));
  for (; i < n; ++i) out[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

#undef SS_AVX2

// ---- Dispatch
// ------------------------------------------------------------------------------------

SimdLevel CpuLevel() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
    return SimdLevel::kPortable;
  return __builtin_cpu_supports("avx512f") ? SimdLevel::kAvx512 : SimdLevel::kAvx2;
}

SimdLevel InitialLevel() {
  SimdLevel level = CpuLevel();
  if (const char* env = std::getenv("SINKSCOPE_SIMD")) {
    SimdLevel want = level;
    if (!std::strcmp(env, "portable"))
      want = SimdLevel::kPortable;
    else if (!std::strcmp(env, "avx2"))
      want = SimdLevel::kAvx2;
    else if (!std::strcmp(env, "avx512"))
      want = SimdLevel::kAvx512;
    level = std::min(level, want);
  }
  return level;
}

std::atomic<SimdLevel>& Level() {
  static std::atomic<SimdLevel> level{InitialLevel()};
  return level;
}

}  // namespace

SimdLevel ActiveSimdLevel() { return Level().load(std::memory_order_relaxed); }
void ForceSimdLevel(SimdLevel level) { Level().store(std::min(level, CpuLevel())); }
SimdLevel CpuSimdLevel() { return CpuLevel(); }

std::string SimdLevelName(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512:
      return "avx512";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kPortable:
      return "portable";
  }
  return "?";
}

float MaxOf(const float* x, int64_t n) {
  switch (ActiveSimdLevel()) {
    case SimdLevel::kAvx512:
      return MaxOf512(x, n);
    case SimdLevel::kAvx2:
      return MaxOf256(x, n);
    case SimdLevel::kPortable:
      break;
  }
  float r = x[0];
  for (int64_t i = 1; i < n; ++i) r = std::max(r, x[i]);
  return r;
}

float ExpShiftSum(float* x, int64_t n, float shift, float* sum_sq) {
  switch (ActiveSimdLevel()) {
    case SimdLevel::kAvx512:
      return ExpShiftSum512(x, n, shift, sum_sq);
    case SimdLevel::kAvx2:
      return ExpShiftSum256(x, n, shift, sum_sq);
    case SimdLevel::kPortable:
      break;
  }
  float sum = 0.0f, sq = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
    sq += x[i] * x[i];
  }
  if (sum_sq) *sum_sq = sq;
  return sum;
}

void Scale(float* x, int64_t n, float s) {
  switch (ActiveSimdLevel()) {
    case SimdLevel::kAvx512:
      return Scale512(x, n, s);
    case SimdLevel::kAvx2:
      return Scale256(x, n, s);
    case SimdLevel::kPortable:
      break;
  }
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void SiluInPlace(float* x, int64_t n) {
  switch (ActiveSimdLevel()) {
    case SimdLevel::kAvx512:
      return Silu512(x, n);
    case SimdLevel::kAvx2:
      return Silu256(x, n);
    case SimdLevel::kPortable:
      break;
  }
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void GeluTanhInPlace(float* x, int64_t n) {
  switch (ActiveSimdLevel()) {
    case SimdLevel::kAvx512:
      return GeluTanh512(x, n);
    case SimdLevel::kAvx2:
      return GeluTanh256(x, n);
    case SimdLevel::kPortable:
      break;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float a = x[i];
    x[i] = 0.5f * a * (1.0f + std::tanh(kGeluC * (a + kGeluK * a * a * a)));
  }
}

void GeluErfInPlace(float* x, int64_t n) {
  switch (ActiveSimdLevel()) {
    case SimdLevel::kAvx512:
      return GeluErf512(x, n);
    case SimdLevel::kAvx2:
      return GeluErf256(x, n);
    case SimdLevel::kPortable:
      break;
  }
  for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kSqrt2Inv));
}

void SiluMul(float* gate, const float* up, int64_t n) {
  switch (ActiveSimdLevel()) {
    case SimdLevel::kAvx512:
      return SiluMul512(gate, up, n);
    case SimdLevel::kAvx2:
      return SiluMul256(gate, up, n);
    case SimdLevel::kPortable:
      break;
  }
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void Sigmoid(const float* x, float* out, int64_t n) {
  switch (ActiveSimdLevel()) {
    case SimdLevel::kAvx512:
      return Sigmoid512(x, out, n);
    case SimdLevel::kAvx2:
      return Sigmoid256(x, out, n);
    case SimdLevel::kPortable:
      break;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

}  // namespace ss
