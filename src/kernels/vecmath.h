// Vectorised elementwise math for the hot loops: softmax rows, activations. Each function has an
// AVX-512 and an AVX2 path chosen once at run time (cpuid) and a portable path that calls the
// <cmath> functions. The vector exp is Cephes' expf (range reduction by ln 2, degree-5 polynomial;
// relative error about 2e-7 on [-87, 88]); tests/test_kernels.cpp holds every path to double
// precision and prints the largest difference.
#pragma once

#include <cstdint>
#include <string>

namespace ss {

enum class SimdLevel { kPortable, kAvx2, kAvx512 };
// The level in use: the best the CPU supports, unless SINKSCOPE_SIMD=portable|avx2|avx512 asks for
// a lower one (for tests and comparisons), or ForceSimdLevel was called.
SimdLevel ActiveSimdLevel();
// Overrides the level (tests run every path); a level the CPU lacks is clamped to what it has.
void ForceSimdLevel(SimdLevel level);
// The best level the CPU supports (kAvx2 and above imply AVX2 + FMA).
SimdLevel CpuSimdLevel();
// Whether AVX2 + FMA code may run now (the active level is kAvx2 or above; it never exceeds the
// CPU).
inline bool Avx2FmaActive() { return ActiveSimdLevel() != SimdLevel::kPortable; }
std::string SimdLevelName(SimdLevel level);

// max_i x[i]; n >= 1.
float MaxOf(const float* x, int64_t n);
// x[i] = exp(x[i] - shift); returns the sum of the new values (accumulated in float lanes) and,
// if sum_sq is not null, stores the sum of their squares there.
float ExpShiftSum(float* x, int64_t n, float shift, float* sum_sq = nullptr);
// x[i] *= s.
void Scale(float* x, int64_t n, float s);

// In place: x = silu(x) = x / (1 + exp(-x)); x = gelu_tanh(x); x = gelu(x) (erf form).
void SiluInPlace(float* x, int64_t n);
void GeluTanhInPlace(float* x, int64_t n);
void GeluErfInPlace(float* x, int64_t n);
// gate = silu(gate) * up.
void SiluMul(float* gate, const float* up, int64_t n);
// out = 1 / (1 + exp(-x)); out may alias x.
void Sigmoid(const float* x, float* out, int64_t n);

}  // namespace ss
