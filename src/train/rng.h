// A small deterministic random generator whose whole state is four words, so checkpoints can save
// and restore it exactly: xoshiro256** (Blackman & Vigna 2018), seeded through SplitMix64 as its
// authors recommend. std::mt19937 would do, but its distributions are not specified bit-exactly
// across standard libraries; these helpers are.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace ss::train {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { Seed(seed); }
  void Seed(uint64_t seed) {
    uint64_t x = seed;
    for (auto& w : s_) {
      x += 0x9E3779B97F4A7C15ull;  // SplitMix64
      uint64_t z = x;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      w = z ^ (z >> 31);
    }
  }
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n) (n > 0); the modulo bias is below 2^-40 for n < 2^24.
  int Below(int n) { return static_cast<int>(Next() % static_cast<uint64_t>(n)); }
  // Standard normal (Box-Muller, one value per call; no cached spare so the state is just s_).
  double Normal() {
    const double u1 = 1.0 - Uniform();  // (0, 1]
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  const std::array<uint64_t, 4>& state() const { return s_; }
  void set_state(const std::array<uint64_t, 4>& s) { s_ = s; }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::array<uint64_t, 4> s_{};
};

}  // namespace ss::train
