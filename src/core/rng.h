// Deterministic random numbers: SplitMix64 seeding a xoshiro256** generator. The state is four 64-bit words, so
// it can be saved in a checkpoint and restored exactly.
#pragma once
#include <cmath>
#include <cstdint>

namespace aah {

inline uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct Rng {
  uint64_t s[4];
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed) {
    uint64_t x = seed;
    for (auto& w : s) w = splitmix64(x);
  }
  uint64_t next_u64() {
    auto rotl = [](uint64_t v, int k) { return (v << k) | (v >> (64 - k)); };
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return (next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return n ? next_u64() % n : 0; }
  // Standard normal (Box-Muller; one value per call keeps the stream simple to reason about).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

}  // namespace aah
